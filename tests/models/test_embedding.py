"""CMT and SSE: their parts by hand, and transfer on a generated problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import imagenet_zsl.models.embedding as embedding
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import create
from imagenet_zsl.models.common import FeaturePrep
from imagenet_zsl.models.embedding import class_means, class_transform, project_simplex, simplex_mixture
from imagenet_zsl.models.persistence import load_model, save_model
from tests.models.problems import accuracy


def test_simplex_projection_by_hand():
    # (0.5, 0.5) is on the simplex; (2, 0) projects to (1, 0); (1, 1, -1) to (0.5, 0.5, 0)
    np.testing.assert_allclose(project_simplex(np.array([[0.5, 0.5], [2.0, 0.0]])), [[0.5, 0.5], [1, 0]])
    np.testing.assert_allclose(project_simplex(np.array([[1.0, 1.0, -1.0]])), [[0.5, 0.5, 0.0]])


def test_sse_mixture_recovers_known_proportions():
    """A class whose vector is 0.3 s_0 + 0.7 s_1 of linearly independent seen vectors has exactly
    those proportions (γ = 0); a seen class is its own one-hot mixture."""
    basis = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) + 0.2
    targets = np.vstack([0.3 * basis[0] + 0.7 * basis[1], basis[2]])
    np.testing.assert_allclose(simplex_mixture(targets, basis, 0.0), [[0.3, 0.7, 0], [0, 0, 1]], atol=1e-6)


def test_cmt_ranks_by_euclidean_distance_to_the_class_vector(problem):
    model = create("cmt", epochs=5).fit(problem.seen_data(), problem.semantics)
    features, _ = problem.draw(problem.unseen, images=3)
    scores = model.embed_images(features) @ model.class_prototypes(problem.unseen).T
    vectors = problem.semantics.get(problem.unseen)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    distance = ((model.project(features)[:, None, :] - vectors[None]) ** 2).sum(axis=2)
    # score = -|f(x) - s_c|²/2 + |f(x)|²/2: the differences between classes match exactly
    np.testing.assert_allclose(scores - scores[:, :1], -(distance - distance[:, :1]) / 2, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "params", "floor"),
    [("cmt", {}, 0.6), ("sse", {}, 0.6), ("sse", {"target": "int"}, 0.6), ("sse", {"target": "linear"}, 0.6)],
)
def test_embedding_models_transfer(problem, name, params, floor):
    model = create(name, **params).fit(problem.seen_data(), problem.semantics)
    assert model.fit_info_["loss_last_epoch"] < model.fit_info_["loss_first_epoch"]
    features, labels = problem.draw(problem.unseen)
    assert accuracy(model, features, labels, problem.unseen) >= floor  # chance: 1/3


def test_sse_class_dependent_transforms_by_hand():
    x = np.array([[1.0, -2.0, 3.0]])
    v = np.array([[0.0, 0.0, 5.0], [2.0, -3.0, 1.0]])
    # intersection min(x, v_s); ReLU max(0, x - v_s)
    np.testing.assert_array_equal(class_transform(x, v, "int")[0], [[0.0, -2.0, 3.0], [1.0, -3.0, 1.0]])
    np.testing.assert_array_equal(class_transform(x, v, "relu")[0], [[1.0, 0.0, 0.0], [0.0, 1.0, 2.0]])
    torch_out = class_transform(torch.tensor(x), torch.tensor(v), "int").numpy()
    np.testing.assert_array_equal(torch_out, class_transform(x, v, "int"))


def test_class_means_by_hand():
    features = np.array([[1.0, 2.0], [3.0, 4.0], [10.0, 0.0]], np.float32)
    means = class_means(FeaturePrep("none").fit(features), features, np.array([0, 0, 1]), 2)
    np.testing.assert_allclose(means, [[2.0, 3.0], [10.0, 0.0]])


def _sse_scores_by_hand(model, features, problem, wnids):
    """F(x, c) = Σ_s ψ_s(c) ⟨w, φ_s(x)⟩ with φ_s(x) = max(0, x - v_s), v_s the class means."""
    x = model.prep_(features).astype(np.float64)
    v = model.prototypes_.astype(np.float64)
    proportions = np.array([[model.weight_ @ np.maximum(0.0, row - v_s) for v_s in v] for row in x])
    vectors = problem.semantics.get(wnids)
    seen = problem.semantics.get(problem.seen)
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)  # noqa: E731
    psi = simplex_mixture(unit(vectors), unit(seen), model.params["gamma"])
    return proportions @ psi.T


def test_sse_scores_are_the_papers_formula(problem, monkeypatch, tmp_path):
    data = problem.seen_data()
    model = create("sse", epochs=3).fit(data, problem.semantics)
    x = model.prep_(data.features)
    # v_s: the mean of seen class s's prepared training features
    expected_means = np.array([x[data.labels == s].mean(axis=0) for s in range(len(problem.seen))])
    np.testing.assert_allclose(model.prototypes_, expected_means, rtol=1e-5, atol=1e-6)
    features, _ = problem.draw(problem.unseen, images=7)
    by_hand = _sse_scores_by_hand(model, features, problem, problem.unseen)
    monkeypatch.setattr(embedding, "_SSE_BLOCK_ELEMENTS", 3 * model.prototypes_.size)  # 3-row blocks
    scores = model.embed_images(features) @ model.class_prototypes(problem.unseen).T
    np.testing.assert_allclose(scores, by_hand, rtol=1e-4, atol=1e-5)
    save_model(model, tmp_path / "sse")
    loaded = load_model(tmp_path / "sse")
    np.testing.assert_allclose(loaded.embed_images(features), model.embed_images(features), rtol=1e-6)


def test_sse_first_epoch_loss_is_the_structured_hinge_at_w0(problem):
    """w starts at 1/√D in every dimension (no random draw), so with one batch holding every image
    the first epoch's loss is SJE's hinge max_j max(0, Δ + F(x, j) - F(x, y)) at that w."""
    data = problem.seen_data()
    n = len(data.labels)
    model = create("sse", epochs=1, batch_size=n, margin=1.0).fit(data, problem.semantics)
    d = data.features.shape[1]
    model.weight_ = np.full(d, 1.0 / np.sqrt(d))
    scores = _sse_scores_by_hand(model, data.features, problem, problem.seen)
    true = scores[np.arange(n), data.labels]
    violation = np.maximum(0.0, 1.0 + scores - true[:, None])
    violation[np.arange(n), data.labels] = 0.0
    assert model.fit_info_["loss_first_epoch"] == pytest.approx(violation.max(axis=1).mean(), rel=1e-5)


def test_sse_linear_target_keeps_the_earlier_model_and_fits_repeat(problem):
    data = problem.seen_data()
    linear = create("sse", target="linear", epochs=2).fit(data, problem.semantics)
    assert linear.map_.shape == (12, len(problem.seen)) and getattr(linear, "weight_", None) is None
    first = create("sse", epochs=2, seed=3).fit(data, problem.semantics)
    again = create("sse", epochs=2, seed=3).fit(data, problem.semantics)
    np.testing.assert_array_equal(first.weight_, again.weight_)
    with pytest.raises(UserInputError):
        create("sse", target="sigmoid")


@pytest.mark.parametrize("name", ["cmt", "sse"])
def test_embedding_models_read_their_loss_once_and_record_the_same_history(problem, monkeypatch, name):
    from imagenet_zsl.models import ranking
    from tests.models.test_common import check_losses_read_once

    data = problem.seen_data()

    def fit(epochs: int) -> dict:
        return create(name, epochs=epochs, batch_size=16, seed=2).fit(data, problem.semantics).fit_info_

    check_losses_read_once(monkeypatch, embedding if name == "cmt" else ranking, fit)
