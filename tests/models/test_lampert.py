"""DAP and IAP (Lampert et al.): the dot-product form, planted attribute transfer, save/load."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import MODELS, SeenData
from imagenet_zsl.models.lampert import DAP, IAP
from imagenet_zsl.models.persistence import load_model, save_model
from imagenet_zsl.semantics.class_vectors import ClassVectors

# 6 binary attributes. Unseen classes are three 3-attribute combinations; the seen classes are all
# other combinations of 2 or 3 attributes, so attributes vary independently among seen classes.
UNSEEN_SIGNATURES = ((1, 0, 0, 1, 1, 0), (0, 1, 1, 0, 0, 1), (1, 1, 1, 0, 0, 0))
SEEN_SIGNATURES = [
    combo
    for combo in itertools.product((0, 1), repeat=6)
    if sum(combo) in (2, 3) and combo not in UNSEEN_SIGNATURES
]
SEEN = [f"s{i}" for i in range(len(SEEN_SIGNATURES))]
UNSEEN = ["u0", "u1", "u2"]
SIGNATURES = {
    **dict(zip(SEEN, map(list, SEEN_SIGNATURES), strict=True)),
    **dict(zip(UNSEEN, map(list, UNSEEN_SIGNATURES), strict=True)),
}


def _semantics(scale: float = 1.0) -> ClassVectors:
    names = list(SIGNATURES)
    return ClassVectors(names, np.array([SIGNATURES[n] for n in names], float) * scale)


def _images(classes: list[str], per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features = 2 * (signature - 0.5) + noise: each feature dimension is one attribute."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(classes)), per_class)
    signatures = np.array([SIGNATURES[c] for c in classes], float)
    features = 2 * (signatures[labels] - 0.5) + 0.4 * rng.standard_normal((labels.size, 6))
    return features.astype(np.float32), labels


def _fit(cls, **params):
    features, labels = _images(SEEN, 20, seed=0)
    return cls(**params).fit(SeenData(features, labels, SEEN), _semantics())


@pytest.mark.parametrize("cls", [DAP, IAP])
def test_score_is_lamperts_log_posterior(cls):
    model = _fit(cls, reg=1e-2)
    features, _ = _images(UNSEEN, 3, seed=1)
    p = model.attribute_posteriors(features).astype(np.float64)
    signatures = np.array([SIGNATURES[n] for n in UNSEEN], float)
    prior = np.array([SIGNATURES[n] for n in SEEN], float).mean(axis=0)
    by_hand = np.array(
        [
            [np.sum(s * np.log(pi / pr) + (1 - s) * np.log((1 - pi) / (1 - pr))) for s in signatures]
            for pi, pr in zip(p, [prior] * len(p), strict=True)
        ]
    )
    scores = model.embed_images(features) @ model.class_prototypes(UNSEEN).T
    np.testing.assert_allclose(scores, by_hand, rtol=1e-4, atol=1e-4)
    assert model.class_prototypes(UNSEEN).shape == (3, 12)


def test_dap_transfers_attributes_to_unseen_combinations():
    model = _fit(DAP, reg=1e-3)
    features, labels = _images(UNSEEN, 30, seed=2)
    predicted = (model.embed_images(features) @ model.class_prototypes(UNSEEN).T).argmax(axis=1)
    assert np.mean(predicted == labels) > 0.95
    # the attribute classifiers found the planted attributes
    p = model.attribute_posteriors(features)
    truth = np.array([SIGNATURES[UNSEEN[c]] for c in labels])
    assert np.mean((p > 0.5) == truth) > 0.95


def test_iap_posteriors_are_class_posteriors_through_seen_signatures():
    model = _fit(IAP, reg=1e-3)
    features, labels = _images(UNSEEN, 30, seed=3)
    p = model.attribute_posteriors(features)
    assert p.min() >= 1e-4 and p.max() <= 1 - 1e-4
    logits = ((features - model.mean_) / model.scale_) @ model.weight_ + model.bias_
    softmax = np.exp(logits - logits.max(axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    seen = np.array([SIGNATURES[n] for n in SEEN], float)
    np.testing.assert_allclose(p, np.clip(softmax @ seen, 1e-4, 1 - 1e-4), atol=1e-5)
    predicted = (model.embed_images(features) @ model.class_prototypes(UNSEEN).T).argmax(axis=1)
    assert np.mean(predicted == labels) > 0.9


def test_real_valued_semantics_are_thresholded_at_their_mean():
    """Continuous signatures (values 0.2 / 3.0) binarise at the matrix mean → the 0/1 pattern."""
    names = list(SIGNATURES)
    matrix = np.array([SIGNATURES[n] for n in names], float) * 2.8 + 0.2
    features, labels = _images(SEEN, 20, seed=0)
    model = DAP(reg=1e-2, max_iter=20).fit(SeenData(features, labels, SEEN), ClassVectors(names, matrix))
    expected = np.array([SIGNATURES[n] for n in UNSEEN], np.float32)
    np.testing.assert_array_equal(model.class_prototypes(UNSEEN)[:, :6], expected)
    np.testing.assert_array_equal(model.class_prototypes(UNSEEN)[:, 6:], 1 - expected)


def test_uniform_prior_shifts_every_class_by_its_prior_term():
    """Dropping the empirical prior pi adds sum_a s_a log(pi_a / 0.5) + (1 - s_a) log((1 - pi_a)
    / 0.5) to a class's score — a per-class constant, the same for every image."""
    empirical, uniform = _fit(DAP, reg=1e-2), _fit(DAP, reg=1e-2, prior="uniform")
    features, _ = _images(UNSEEN, 5, seed=4)
    names = list(SIGNATURES)
    a = empirical.embed_images(features) @ empirical.class_prototypes(names).T
    b = uniform.embed_images(features) @ uniform.class_prototypes(names).T
    prior = np.array(SEEN_SIGNATURES, float).mean(axis=0)
    signatures = np.array([SIGNATURES[n] for n in names], float)
    shift = signatures @ np.log(prior / 0.5) + (1 - signatures) @ np.log((1 - prior) / 0.5)
    np.testing.assert_allclose(b - a, np.broadcast_to(shift, a.shape), atol=1e-4)
    assert np.ptp(shift) > 0.01  # the test is not vacuous


def test_bad_input_is_reported():
    with pytest.raises(UserInputError, match="unknown key 'C'"):
        DAP(C=1.0)
    with pytest.raises(
        UserInputError, match=r"params.prior = 'flat'\): Input should be 'empirical' or 'uniform'"
    ):
        IAP(prior="flat")
    model = _fit(DAP, reg=1e-2, max_iter=10)
    with pytest.raises(UserInputError, match="expects"):
        model.embed_images(np.zeros((2, 5), np.float32))
    with pytest.raises(UserInputError, match="no semantic vector"):
        model.class_prototypes(["nope"])
    features, labels = _images(SEEN, 4, seed=0)
    with pytest.raises(UserInputError, match="labels must index"):
        DAP().fit(SeenData(features, labels + 3, SEEN), _semantics())


def test_save_and_load_give_the_same_scores(tmp_path):
    assert MODELS.get("dap") is DAP and MODELS.get("iap") is IAP
    features, _ = _images(UNSEEN, 4, seed=5)
    for cls in (DAP, IAP):
        model = _fit(cls, reg=1e-2, max_iter=20)
        back = load_model(save_model(model, tmp_path / cls.name))
        np.testing.assert_array_equal(back.embed_images(features), model.embed_images(features))
        np.testing.assert_array_equal(back.class_prototypes(UNSEEN), model.class_prototypes(UNSEEN))
