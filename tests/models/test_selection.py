"""Hyper-parameter selection on class-disjoint validation classes."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.selection import (
    grid_points,
    holdout_images,
    search_hyperparameters,
    split_classes_with_images,
    split_seen_classes,
    split_seen_data,
)
from tests.models.problems import Problem


def test_validation_classes_are_disjoint_seeded_and_never_empty():
    fit, val = split_seen_classes(1000, 0.2, seed=0)
    assert len(val) == 200 and len(fit) == 800
    assert not set(fit) & set(val) and set(fit) | set(val) == set(range(1000))
    np.testing.assert_array_equal(val, split_seen_classes(1000, 0.2, seed=0)[1])
    assert not np.array_equal(val, split_seen_classes(1000, 0.2, seed=1)[1])
    fit, val = split_seen_classes(3, 0.01, seed=0)
    assert len(val) == 1 and len(fit) == 2
    with pytest.raises(UserInputError):
        split_seen_classes(2, 0.5, seed=0)


def test_with_a_stored_head_only_classes_with_images_validate():
    counts = np.array([0, 3, 0, 2, 5, 0, 0, 1])  # classes 1, 3, 4, 7 have images
    # round(0.5 * 8) = 4 validation classes: exactly the four with images
    fit, val = split_classes_with_images(counts, 0.5, seed=0, fit_images=False)
    assert val.tolist() == [1, 3, 4, 7] and fit.tolist() == [0, 2, 5, 6]
    # GZSL holds out images of a fit class: one class with images stays among the fit classes
    fit, val = split_classes_with_images(counts, 0.5, seed=0, fit_images=True)
    assert len(val) == 3 and set(val) < {1, 3, 4, 7} and len(set(fit) & {1, 3, 4, 7}) == 1
    assert sorted([*fit, *val]) == list(range(8))
    with pytest.raises(UserInputError, match="at least 2 seen classes to validate on, 1 of the 8"):
        split_classes_with_images(np.array([0, 0, 4, 0, 0, 0, 0, 0]), 0.5, seed=0, fit_images=False)


def test_holdout_takes_a_share_of_every_class():
    labels = np.repeat([0, 1, 2], [10, 5, 1])
    mask = holdout_images(labels, 0.2, seed=0)
    assert [int(mask[labels == c].sum()) for c in range(3)] == [2, 1, 0]
    labels = np.repeat(np.arange(4), [10, 5, 2, 1])
    mask = holdout_images(labels, 0.2, seed=3)
    assert [int(mask[labels == c].sum()) for c in range(4)] == [2, 1, 1, 0]
    np.testing.assert_array_equal(mask, holdout_images(labels, 0.2, seed=3))
    assert not np.array_equal(mask, holdout_images(labels, 0.2, seed=4))


def test_grid_points_cover_the_product_in_a_stable_order():
    assert grid_points({"b": [1, 2], "a": ["x"]}) == [{"a": "x", "b": 1}, {"a": "x", "b": 2}]
    with pytest.raises(UserInputError, match="non-empty list"):
        grid_points({"a": []})


def test_selection_finds_the_planted_good_value_and_only_looks_at_seen_classes():
    problem = Problem(groups=4, leaves=6)
    data = problem.seen_data()
    # an absurd regulariser maps every image to ~0: ties everywhere, the worst possible hit@1
    split = split_seen_data(data, val_fraction=0.3, seed=0)
    result = search_hyperparameters("ridge", {"alpha": [1e9, 1.0]}, split, problem.semantics)
    assert result.best_params["alpha"] == 1.0
    assert result.rows[0]["score"] < result.rows[1]["score"]
    assert set(result.val_wnids) <= set(problem.seen) and not set(result.val_wnids) & set(result.fit_wnids)
    assert result.gamma is None and result.best_model.params["alpha"] == 1.0  # nothing to calibrate on
    with pytest.raises(UserInputError, match="unknown hyper-parameters"):
        search_hyperparameters("ridge", {"beta": [1.0]}, split, problem.semantics)


def test_gzsl_selection_reports_harmonic_mean_and_calibration():
    problem = Problem(groups=4, leaves=6)
    split = split_seen_data(problem.seen_data(), val_fraction=0.3, seed=0, seen_holdout=0.2)
    result = search_hyperparameters(
        "eszsl",
        {"gamma": [1.0], "lam": [1.0]},
        split,
        problem.semantics,
        mode="gzsl",
        base_params={"features": "none"},
    )
    assert result.mode == "gzsl" and result.gamma is not None
    assert 0 < result.best_score <= 1 and result.best_params == {"gamma": 1.0, "lam": 1.0, "features": "none"}
    assert result.rows[0]["gamma"] == result.gamma and result.validation_h == result.best_score


def test_zsl_selection_calibrates_the_best_point_when_seen_images_are_held_out():
    problem = Problem(groups=4, leaves=6)
    split = split_seen_data(problem.seen_data(), val_fraction=0.3, seed=0, seen_holdout=0.2)
    assert split.calibrates and not set(split.fit_wnids) & set(split.val_wnids)
    result = search_hyperparameters("ridge", {"alpha": [1e9, 1.0]}, split, problem.semantics)
    assert result.best_params == {"alpha": 1.0} and "gamma" not in result.rows[0]
    assert result.gamma is not None and 0 < result.validation_h <= 1


@pytest.mark.parametrize(
    ("name", "grid", "logits"),
    [
        ("eszsl", {"gamma": [0.1, 1.0], "lam": [0.1, 1.0, 10.0]}, False),
        ("sae", {"lam": [0.1, 10.0], "direction": ["v2s", "s2v"]}, False),
        ("ridge", {"alpha": [0.1, 1.0], "features": ["none", "standard"]}, False),
        ("conse", {"top": [1, 3]}, True),
        ("conse", {"top": [1, 3]}, False),
        ("sync", {"sigma": [0.5, 2.0], "max_iter": [50]}, False),
    ],
)
def test_fit_many_shares_work_and_equals_separate_fits(problem, name, grid, logits):
    """A grid search's fits share statistics / the γ-solve / the seen classifier (fit_many): every
    model is bit-identical to a separate ``fit`` with the same parameters, and the shared work is
    done once (one entry per distinct key in the private cache)."""
    from imagenet_zsl.models.base import MODELS, create

    data = problem.seen_data(logits=logits)
    points = grid_points(grid)
    cls = MODELS.get(name)
    models = list(cls.fit_many(points, data, problem.semantics))
    x = problem.draw(problem.unseen)[0]
    for point, model in zip(points, models, strict=True):
        alone = create(name, **point).fit(data, problem.semantics)
        assert model.params == alone.params and not hasattr(model, "_shared")
        for attribute in alone.fitted_attributes():
            mine, theirs = getattr(model, attribute), getattr(alone, attribute)
            if isinstance(theirs, np.ndarray):
                np.testing.assert_array_equal(mine, theirs)
        np.testing.assert_array_equal(
            model.scores(x, problem.unseen, problem.bayes_logits(x) if logits else None),
            alone.scores(x, problem.unseen, problem.bayes_logits(x) if logits else None),
        )
    if name == "conse":  # one seen classifier for the whole grid
        assert models[0].classifier_ is models[1].classifier_
    if name == "sync":  # W does not depend on σ: learnt once, V = pinv(S_σ) W per σ
        assert models[0].classifiers_ is models[1].classifiers_


def test_shared_without_fit_many_just_computes(problem):
    from imagenet_zsl.models.base import create

    model = create("eszsl")
    calls = []
    assert model.shared("k", lambda: calls.append(1) or 5) == 5
    assert model.shared("k", lambda: calls.append(1) or 5) == 5
    assert calls == [1, 1]
