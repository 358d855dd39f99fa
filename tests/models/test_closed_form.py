"""ESZSL, SAE and ridge against their closed forms, computed here independently of the models."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.models.base import SeenData, create
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
    with pytest.raises(
        UserInputError, match=r"unknown key 'gamm' \(model eszsl: params.gamm\): did you mean 'gamma'"
    ):
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


def _random_psd(rng: np.random.Generator, size: int, rank: int | None = None) -> np.ndarray:
    factor = rng.normal(size=(size, rank or size + 3))
    return factor @ factor.T


@pytest.mark.parametrize("e, d", [(4, 7), (12, 30), (30, 12)])
def test_sylvester_bases_equal_scipys_solve_sylvester(e, d):
    """A W + λ W G = μ C with A, G symmetric positive definite: the eigenbasis solve equals
    scipy's Bartels-Stewart solve to 1e-10 for every λ of SAE's grid."""
    import scipy.linalg

    from imagenet_zsl.models.closed_form import SylvesterBases

    rng = np.random.default_rng(e * d)
    a, g, c = _random_psd(rng, e), _random_psd(rng, d), rng.normal(size=(e, d))
    bases = SylvesterBases.of(a, g, c)
    for lam in [1e-2, 1.0, 1e3, 1e5]:
        w = bases.solve(lam, 1.0 + lam)
        reference = scipy.linalg.solve_sylvester(a, lam * g, (1.0 + lam) * c)
        assert np.linalg.norm(w - reference) / np.linalg.norm(reference) < 1e-10
        # and it solves the equation
        np.testing.assert_allclose(
            a @ w + lam * w @ g, (1.0 + lam) * c, atol=1e-8 * np.abs(c).max() * (1 + lam)
        )


def test_sylvester_bases_give_the_minimum_norm_solution_when_both_matrices_are_singular():
    """A = diag(2, 0), G = diag(3, 0): the (2, 2) entry of the equation reads 0 · w = 0, so any value
    solves it; the minimum-norm solution puts 0 there. By hand, for λ = 1: w_11 = c_11 / (2 + 3),
    w_12 = c_12 / 2, w_21 = c_21 / 3."""
    from imagenet_zsl.models.closed_form import SylvesterBases

    a, g = np.diag([2.0, 0.0]), np.diag([3.0, 0.0])
    c = np.array([[5.0, 4.0], [6.0, 0.0]])
    w = SylvesterBases.of(a, g, c).solve(1.0)
    np.testing.assert_allclose(w, [[1.0, 2.0], [2.0, 0.0]], atol=1e-12)


def test_sae_fit_equals_solve_sylvester_and_its_grid_shares_one_decomposition(monkeypatch):
    """SAE's float64 W equals scipy's solve_sylvester on the model's own statistics to 1e-10; a grid
    from fit_many decomposes once and equals separate fits exactly."""
    import scipy.linalg

    from imagenet_zsl.models import closed_form

    data, semantics = _tiny(seed=4, n_per_class=6, classes=4, dim=9, sem_dim=5)
    solutions: list[np.ndarray] = []
    decompositions: list[int] = []
    solve, of = closed_form.SylvesterBases.solve, closed_form.SylvesterBases.of.__func__

    def recording_solve(self: closed_form.SylvesterBases, lam: float, scale: float = 1.0) -> np.ndarray:
        solutions.append(solve(self, lam, scale))
        return solutions[-1]

    def counting_of(cls: type, *args: np.ndarray) -> closed_form.SylvesterBases:
        decompositions.append(1)
        return of(cls, *args)

    monkeypatch.setattr(closed_form.SylvesterBases, "solve", recording_solve)
    monkeypatch.setattr(closed_form.SylvesterBases, "of", classmethod(counting_of))
    model = create("sae", lam=3.0, normalize_w=False, features="l2", semantic_norm="l2")
    model.fit(data, semantics)
    gram, sums, counts, s = model._statistics(data, semantics)
    reference = scipy.linalg.solve_sylvester((s.T * counts) @ s, 3.0 * gram, 4.0 * s.T @ sums)
    assert np.linalg.norm(solutions[-1] - reference) / np.linalg.norm(reference) < 1e-10

    grid = [{"lam": lam, "direction": direction} for lam in (0.1, 3.0, 1e4) for direction in ("v2s", "s2v")]
    decompositions.clear()
    many = list(closed_form.SAE.fit_many(grid, data, semantics))
    assert len(decompositions) == 1
    for params, fitted in zip(grid, many, strict=True):
        alone = create("sae", **params).fit(data, semantics)
        np.testing.assert_array_equal(fitted.encoder_, alone.encoder_)
        np.testing.assert_array_equal(fitted.class_prototypes(["c4"]), alone.class_prototypes(["c4"]))


def test_bench_models_times_sae_against_solve_sylvester(capsys):
    """tools/bench_models.py --parts sae on a tiny problem: both solvers, their ratio, their agreement."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "bench_models.py"
    spec = importlib.util.spec_from_file_location("tools_bench_models_sae", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        argv = ["--parts", "sae", "--sae-dims", "6:3:4,5:4:2", "--sae-images", "40", "--repeat", "1"]
        assert module.main(argv) == 0
    finally:
        del sys.modules[spec.name]
    out = capsys.readouterr().out
    assert "D=6, E=3, 4 classes" in out and "D=5, E=4, 2 classes" in out
    assert out.count("solve_sylvester") == 4 and "largest relative difference" in out
