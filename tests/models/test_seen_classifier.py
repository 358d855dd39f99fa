"""The seen-class classifier: exact recovery of a linear head, and a trained softmax classifier."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import SeenData
from imagenet_zsl.models.seen_classifier import SeenClassifier, augment


def test_head_weights_are_recovered_from_features_and_logits():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, 6)).astype(np.float32)
    weights = rng.normal(size=(6, 5))
    bias = rng.normal(size=5)
    logits = features @ weights + bias
    # logit columns in another order and one extra class, as a 1K head over more classes would be
    logit_classes = ["e", "d", "c", "b", "a"]
    data = SeenData(features, np.arange(200) % 3, ["a", "c", "e"], logits=logits, logit_classes=logit_classes)
    classifier = SeenClassifier("auto").fit(data, features, data.labels)
    assert classifier.kind_ == "head" and classifier.head_residual_ < 1e-5
    expected = np.vstack([weights, bias[None]])[:, [4, 2, 0]]
    np.testing.assert_allclose(classifier.weights_, expected, rtol=1e-3, atol=1e-4)
    # given logits are used as they are; without them the recovered head reproduces them
    seen_logits = logits[:4][:, [4, 2, 0]]
    np.testing.assert_allclose(classifier.logits(features[:4], logits[:4]), seen_logits, rtol=1e-6)
    np.testing.assert_allclose(classifier.logits(features[:4]), seen_logits, rtol=1e-3, atol=1e-3)


def test_a_nonlinear_head_needs_its_logits_at_test_time():
    rng = np.random.default_rng(1)
    features = rng.normal(size=(100, 4)).astype(np.float32)
    logits = np.tanh(3 * features[:, :2]) ** 3
    data = SeenData(features, np.arange(100) % 2, ["a", "b"], logits=logits, logit_classes=["a", "b"])
    classifier = SeenClassifier("head").fit(data, features, data.labels)
    with pytest.raises(UserInputError, match="pass the logits"):
        classifier.logits(features)


def test_softmax_classifier_separates_seen_classes():
    rng = np.random.default_rng(2)
    means = rng.normal(size=(4, 5)) * 3
    labels = np.repeat(np.arange(4), 25)
    features = (means[labels] + rng.normal(size=(100, 5))).astype(np.float32)
    data = SeenData(features, labels, list("abcd"))
    classifier = SeenClassifier("softmax", reg=1e-4).fit(data, features, labels)
    assert classifier.kind_ == "softmax"
    assert np.mean(classifier.posterior(features).argmax(axis=1) == labels) > 0.95
    np.testing.assert_allclose(classifier.logits(features), augment(features) @ classifier.weights_)


def test_head_requested_without_logits_is_a_clear_error():
    features = np.zeros((4, 2), np.float32)
    data = SeenData(features, np.array([0, 1, 0, 1]), ["a", "b"])
    with pytest.raises(UserInputError, match="logits"):
        SeenClassifier("head").fit(data, features, data.labels)
    data = SeenData(
        features, np.array([0, 1, 0, 1]), ["a", "b"], logits=np.zeros((4, 1)), logit_classes=["a"]
    )
    with pytest.raises(UserInputError, match="not outputs of the backbone head"):
        SeenClassifier("head").fit(data, features, data.labels)


def test_an_under_determined_head_fit_is_an_error_saying_how_many_images_it_needs():
    # 986 images for 1,281 unknowns was accepted before (issue 23); here 6 images for D + 1 = 8
    rng = np.random.default_rng(3)
    features = rng.normal(size=(6, 7)).astype(np.float32)
    logits = rng.normal(size=(6, 2)).astype(np.float32)
    data = SeenData(features, np.arange(6) % 2, ["a", "b"], logits=logits, logit_classes=["a", "b"])
    for source in ("auto", "head"):
        with pytest.raises(UserInputError, match=r"at least 8 images .*got 6.*head\.npz"):
            SeenClassifier(source).fit(data, features, data.labels)
    # exactly D + 1 images determine it
    features = rng.normal(size=(8, 7)).astype(np.float32)
    weights = rng.normal(size=(7, 2)).astype(np.float32)
    data = SeenData(
        features, np.arange(8) % 2, ["a", "b"], logits=features @ weights, logit_classes=["a", "b"]
    )
    classifier = SeenClassifier("head").fit(data, features, data.labels)
    np.testing.assert_allclose(classifier.weights_[:7], weights, atol=1e-3)
