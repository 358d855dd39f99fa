"""ESZSL, SAE and ridge against their closed forms, computed here independently of the models."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.models.base import SeenData
from imagenet_zsl.models.registry import create
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import accuracy


def _tiny(seed: int = 1, n_per_class: int = 4, classes: int = 3, dim: int = 5, sem_dim: int = 4):
    rng = np.random.default_rng(seed)
    wnids = [f"c{i}" for i in range(classes + 2)]
    semantics = ClassVectors(wnids, rng.normal(size=(len(wnids), sem_dim)))
    labels = np.repeat(np.arange(classes), n_per_class)
    features = rng.normal(size=(len(labels), dim)).astype(np.float32)
    return SeenData(features, labels, wnids[:classes]), semantics


def test_eszsl_matches_the_papers_closed_form():
    data, semantics = _tiny()
    gamma, lam = 0.7, 2.5
    model = create("eszsl", gamma=gamma, lam=lam, features="none", semantic_norm="none")
    model.fit(data, semantics)
    x = data.features.astype(np.float64)  # (m, d): the paper's X is x.T
    s = semantics.get(data.seen_wnids).astype(np.float64)  # (z, a): the paper's S is s.T
    y = -np.ones((len(x), len(s)))
    y[np.arange(len(x)), data.labels] = 1.0
    v = (
        np.linalg.inv(x.T @ x + gamma * np.eye(x.shape[1]))
        @ x.T
        @ y
        @ s
        @ np.linalg.inv(s.T @ s + lam * np.eye(s.shape[1]))
    )
    np.testing.assert_allclose(model.map_, v, rtol=1e-8, atol=1e-10)
    # the score of image i for class c is x_i V s_c
    test_x = np.random.default_rng(5).normal(size=(3, x.shape[1])).astype(np.float32)
    scores = model.embed_images(test_x) @ model.class_prototypes(["c3", "c4"]).T
    expected = test_x @ v @ semantics.get(["c3", "c4"]).T
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_sae_solves_its_objective_exactly():
    """W (E, D) minimises |X - WᵀS|² + λ|WX - S|²: compare with the solution of the vectorised
    normal equations (Kronecker products), then check v2s and s2v scoring."""
    data, semantics = _tiny(seed=3)
    lam = 0.8
    model = create("sae", lam=lam, normalize_w=False, features="none", semantic_norm="none")
    model.fit(data, semantics)
    x = data.features.astype(np.float64).T  # (D, N)
    s = semantics.get(data.seen_wnids).astype(np.float64)[data.labels].T  # (E, N)
    e, d = s.shape[0], x.shape[0]
    # S Sᵀ W + λ W X Xᵀ = (1+λ) S Xᵀ  ⇔  (I_D ⊗ SSᵀ + λ XXᵀ ⊗ I_E) vec(W) = (1+λ) vec(SXᵀ)
    system = np.kron(np.eye(d), s @ s.T) + lam * np.kron(x @ x.T, np.eye(e))
    w = np.linalg.solve(system, (1 + lam) * (s @ x.T).reshape(-1, order="F")).reshape((e, d), order="F")
    np.testing.assert_allclose(model.encoder_, w, rtol=1e-4, atol=1e-6)

    # the solution is a stationary point of the objective
    def objective(m: np.ndarray) -> float:
        return float(np.sum((x - m.T @ s) ** 2) + lam * np.sum((m @ x - s) ** 2))

    bumped = w + 1e-3 * np.random.default_rng(0).normal(size=w.shape)
    assert objective(w) < objective(bumped)

    probe = np.random.default_rng(7).normal(size=(2, d)).astype(np.float32)
    unit = semantics.get(["c3", "c4"]) / np.linalg.norm(semantics.get(["c3", "c4"]), axis=1, keepdims=True)
    np.testing.assert_allclose(
        model.embed_images(probe) @ model.class_prototypes(["c3", "c4"]).T,
        probe @ w.T @ unit.T,
        rtol=1e-4,
        atol=1e-5,
    )
    decoder = create(
        "sae", lam=lam, direction="s2v", normalize_w=False, features="none", semantic_norm="none"
    )
    decoder.fit(data, semantics)
    decoded = semantics.get(["c3", "c4"]) @ w
    decoded /= np.linalg.norm(decoded, axis=1, keepdims=True)
    np.testing.assert_allclose(
        decoder.embed_images(probe) @ decoder.class_prototypes(["c3", "c4"]).T,
        probe @ decoded.T,
        rtol=1e-4,
        atol=1e-5,
    )


def test_ridge_equals_least_squares_on_an_augmented_system():
    data, semantics = _tiny(seed=4)
    alpha = 1.3
    model = create("ridge", alpha=alpha, features="none", semantic_norm="none").fit(data, semantics)
    x = data.features.astype(np.float64)
    targets = semantics.get(data.seen_wnids).astype(np.float64)[data.labels]
    stacked_x = np.vstack([x, np.sqrt(alpha) * np.eye(x.shape[1])])
    stacked_y = np.vstack([targets, np.zeros((x.shape[1], targets.shape[1]))])
    expected = np.linalg.lstsq(stacked_x, stacked_y, rcond=None)[0]
    np.testing.assert_allclose(model.map_, expected, rtol=1e-5, atol=1e-6)


def test_ridge_s2v_ranks_classes_by_euclidean_distance_to_the_predicted_mean():
    data, semantics = _tiny(seed=5)
    model = create("ridge_s2v", alpha=0.5, features="none", semantic_norm="none").fit(data, semantics)
    probe = np.random.default_rng(2).normal(size=(6, data.features.shape[1])).astype(np.float32)
    classes = ["c0", "c1", "c2", "c3", "c4"]
    means = model.visual_prototypes(classes).astype(np.float64)
    scores = model.embed_images(probe).astype(np.float64) @ model.class_prototypes(classes).T
    distances = np.sum((probe[:, None, :] - means[None]) ** 2, axis=2)
    # score = -|x - p|²/2 + |x|²/2 exactly
    half_norms = 0.5 * np.sum(probe.astype(np.float64) ** 2, axis=1)[:, None]
    np.testing.assert_allclose(scores, -0.5 * distances + half_norms, rtol=1e-4, atol=1e-4)
    # the predicted mean of a seen class is the ridge fit of its images' mean: at alpha → 0 with as
    # many classes as semantic dimensions + 1 the fit is exact
    exact = create("ridge_s2v", alpha=0.0, features="none", semantic_norm="none").fit(data, semantics)
    class_means = np.array([data.features[data.labels == c].mean(axis=0) for c in range(3)])
    np.testing.assert_allclose(exact.visual_prototypes(data.seen_wnids), class_means, atol=1e-4)


@pytest.mark.parametrize("name", ["eszsl", "sae", "ridge", "ridge_s2v"])
def test_linear_models_transfer_to_unseen_classes(problem, name):
    model = create(name).fit(problem.seen_data(), problem.semantics)
    features, labels = problem.draw(problem.unseen)
    assert accuracy(model, features, labels, problem.unseen) >= 0.6  # chance: 1/3


def test_bad_hyperparameters_are_rejected():
    from imagenet_zsl.errors import UserInputError

    with pytest.raises(UserInputError, match="gamma"):
        create("eszsl", gamma=-1)
    with pytest.raises(UserInputError, match="unknown hyper-parameters"):
        create("eszsl", gamm=1)
    with pytest.raises(UserInputError, match="direction"):
        create("sae", direction="sideways")


def test_sae_normalises_the_rows_of_w_as_the_reference():
    """Kodirov's demo predicts with NormalizeFea(W): each of W's E rows scaled to unit length, the
    same W in both directions."""
    data, semantics = _tiny(seed=3)
    raw = create("sae", lam=10.0, normalize_w=False, features="none", semantic_norm="none").fit(
        data, semantics
    )
    model = create("sae", lam=10.0, features="none", semantic_norm="none").fit(data, semantics)
    expected = raw.encoder_ / np.linalg.norm(raw.encoder_, axis=1, keepdims=True)
    np.testing.assert_allclose(model.encoder_, expected, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(model.encoder_, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(model.map_, expected.T, rtol=1e-5)
