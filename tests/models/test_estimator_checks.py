"""One shared estimator check over every registered model (scikit-learn's ``check_estimator`` idea).

On a tiny generated problem (``problems.Problem``: 8 seen and 3 unseen classes, 12-dim features),
each model must: leave its inputs untouched by ``fit``; score the same images twice with the same
numbers; refuse every use before ``fit`` with one :class:`NotFittedError`; round-trip its
hyper-parameters through ``get_params``/``set_params``; and ``clone`` to an unfitted model with
equal hyper-parameters.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import MODELS, NotFittedError, check_is_fitted, clone, create
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import QUICK, Problem


def _inputs(name: str, problem: Problem):
    cls = MODELS.get(name)
    data = problem.seen_data(logits=cls.uses_training_logits)
    semantics = problem.semantics
    if name == "vlm_zero_shot":  # class vectors in the image space: the class means
        semantics = ClassVectors(problem.wnids, np.array([problem.means[w] for w in problem.wnids]))
    return data, semantics


def _snapshot(data, semantics) -> list:
    return [
        np.array(data.features, copy=True),
        np.array(data.labels, copy=True),
        list(data.seen_wnids),
        None if data.logits is None else np.array(data.logits, copy=True),
        list(semantics.wnids),
        np.array(semantics.matrix, copy=True),
    ]


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem()


@pytest.fixture(scope="module")
def fitted(problem) -> dict:
    """name -> (model, inputs snapshot before fit, the inputs after fit): each model fitted once."""
    out = {}
    for name in sorted(MODELS):
        data, semantics = _inputs(name, problem)
        before = _snapshot(data, semantics)
        graph = copy.deepcopy(problem.graph)
        model = create(name, **QUICK.get(name, {}))
        params = model.get_params()
        assert model.fit(data, semantics, graph) is model  # fit returns self
        assert model.get_params() == params  # and leaves the hyper-parameters as they were
        out[name] = (model, before, _snapshot(data, semantics), graph)
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fit_does_not_mutate_its_input(fitted, problem, name):
    model, before, after, graph = fitted[name]
    for was, now in zip(before, after, strict=True):
        if isinstance(was, np.ndarray):
            np.testing.assert_array_equal(now, was)
        else:
            assert now == was
    assert graph.wnids == problem.graph.wnids
    assert (graph.child_to_parent != problem.graph.child_to_parent).nnz == 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_repeated_scoring_is_identical(fitted, problem, name):
    model = fitted[name][0]
    features, _ = problem.draw(problem.unseen + problem.seen[:2], images=3)
    logits = problem.bayes_logits(features) if model.uses_training_logits else None
    wnids = problem.unseen + problem.seen
    first = model.scores(features, wnids, logits)
    assert first.shape == (len(features), len(wnids)) and first.dtype == np.float32
    np.testing.assert_array_equal(model.scores(features, wnids, logits), first)
    np.testing.assert_array_equal(model.scores(features.copy(), list(wnids), logits), first)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_unfitted_model_raises_one_clear_error(problem, name):
    model = create(name, **QUICK.get(name, {}))
    features, _ = problem.draw(problem.unseen, images=1)
    for use in (
        lambda: check_is_fitted(model),
        lambda: model.embed_images(features),
        lambda: model.class_prototypes(problem.unseen),
        lambda: model.scores(features, problem.unseen),
    ):
        with pytest.raises(NotFittedError, match=r"call fit\(\) first"):
            use()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_get_params_set_params_round_trip(fitted, name):
    model = fitted[name][0]
    params = model.get_params()
    assert set(params) == set(type(model).Params.model_fields)
    assert params == model.params and params is not model.params  # a copy
    params["not_a_param"] = 1  # editing the copy changes nothing
    assert "not_a_param" not in model.params
    same = create(name).set_params(**model.get_params())
    assert same.get_params() == model.get_params()
    assert model.set_params(**model.get_params()) is model
    check_is_fitted(model)  # the same values keep the fit
    with pytest.raises(UserInputError, match="not_a_param"):
        create(name).set_params(not_a_param=1)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_clone_is_unfitted_with_equal_params(fitted, name):
    model = fitted[name][0]
    twin = clone(model)
    assert type(twin) is type(model) and twin is not model
    assert twin.get_params() == model.get_params()
    assert twin.fitted_attributes() == []
    with pytest.raises(NotFittedError):
        check_is_fitted(twin)
    check_is_fitted(model)  # the original keeps its fit


def test_set_params_with_a_new_value_drops_the_fit(problem):
    model = create("eszsl", gamma=1.0).fit(problem.seen_data(), problem.semantics)
    model.set_params(gamma=1.0)
    check_is_fitted(model)
    model.set_params(gamma=0.5)
    assert model.get_params()["gamma"] == 0.5 and model.fitted_attributes() == []
    with pytest.raises(NotFittedError):
        model.class_prototypes(problem.unseen)
    with pytest.raises(UserInputError, match="gamma"):
        model.set_params(gamma="large")
    assert model.get_params()["gamma"] == 0.5  # a refused value changes nothing
