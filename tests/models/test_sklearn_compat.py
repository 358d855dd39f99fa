"""scikit-learn's own tools on every registered model: ``clone``, ``get_params``/``set_params`` as
scikit-learn defines them, and ``GridSearchCV`` with a zero-shot scorer over class-disjoint folds.

A model's hyper-parameters are keyword-only arguments of its ``__init__`` (one per field of its
``Params``, shown by ``inspect.signature``), stored unchanged as attributes; a :class:`SeenData`
is the ``X`` scikit-learn splits.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.base import clone as sklearn_clone
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.utils import _safe_indexing

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel, clone, create
from imagenet_zsl.models.params import ModelParams
from imagenet_zsl.models.selection import zsl_scorer
from tests.models.problems import QUICK, Problem

#: a 2-point grid for the models whose default ``grid`` is empty but which have hyper-parameters
FALLBACK_GRID = {"trivial": {"classifier_reg": [1e-4, 1e-2]}}


def _quick(cls: type[ZSLModel]) -> dict[str, Any]:
    """QUICK's settings, and one epoch for every model trained by epochs."""
    params = dict(QUICK.get(cls.name, {}))
    if "epochs" in cls.Params.model_fields:
        params["epochs"] = 1
    return params


def _grid(cls: type[ZSLModel]) -> dict[str, list[Any]]:
    """The first two values of the first key of the model's default grid that QUICK leaves free."""
    if cls.name in FALLBACK_GRID:
        return FALLBACK_GRID[cls.name]
    keys = [key for key in cls.grid if key not in _quick(cls)]
    return {keys[0]: list(cls.grid[keys[0]][:2])} if keys else {}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_signature_lists_every_hyper_parameter_with_its_default(name):
    cls = MODELS.get(name)
    parameters = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in parameters] == list(cls.Params.model_fields)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert {p.name: p.default for p in parameters} == cls.defaults
    assert all(p.annotation is not inspect.Parameter.empty for p in parameters)
    # scikit-learn reads the same names from inspect.signature(cls.__init__)
    assert BaseEstimator._get_param_names.__func__(cls) == sorted(cls.Params.model_fields)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sklearn_clone_works_on_every_model(name):
    cls = MODELS.get(name)
    model = create(name, **_quick(cls))
    model.pretend_fitted_ = np.ones(3)  # fitted state is never copied
    twin = sklearn_clone(model)
    assert type(twin) is cls and twin is not model
    assert twin.get_params(deep=False) == model.get_params(deep=False)
    assert twin.params == model.params and twin.fitted_attributes() == []
    for key, value in model.get_params(deep=False).items():
        if isinstance(value, list):  # e.g. the GCN models' hidden sizes: a copy, not shared
            assert getattr(twin, key) is not value


def test_hyper_parameters_are_attributes_stored_unchanged():
    hidden = [8, 4]
    model = create("gcnz", hidden=[8, 8, 8, 8, 8], epochs=2, lr=1)
    assert model.lr == 1 and isinstance(model.lr, int)  # as given: scikit-learn's convention
    assert model.params["lr"] == 1.0 and isinstance(model.params["lr"], float)  # as Params reads it
    model.set_params(hidden=hidden)
    assert model.hidden is hidden and model.get_params()["hidden"] is hidden
    assert model.params["hidden"] == [8, 4]
    assert create("sgcn").hidden is not create("sgcn").hidden  # a mutable default is not shared
    assert clone(model).hidden == hidden and clone(model).hidden is not hidden  # nor a cloned one
    assert repr(create("eszsl", gamma=2.0)) == "ESZSL(gamma=2.0)" and repr(create("eszsl")) == "ESZSL()"


def test_a_value_assigned_directly_is_checked_at_fit():
    problem = Problem()
    model = create("eszsl")
    model.gamma = 3
    assert model.params["gamma"] == 3.0
    model.gamma = "large"
    with pytest.raises(UserInputError, match=r"model eszsl: params\.gamma = 'large'"):
        model.fit(problem.seen_data(), problem.semantics)


class _Wrapper(ZSLModel):
    """Not registered: a model with an estimator-valued hyper-parameter (none of ours has one)."""

    name = "wrapper"

    class Params(ModelParams):
        inner: Any = None
        scale: float = 1.0

    def fit(self, data, semantics, graph=None):  # pragma: no cover - never fitted here
        return self

    def embed_images(self, features, logits=None):  # pragma: no cover
        return features

    def class_prototypes(self, wnids):  # pragma: no cover
        return np.zeros((len(wnids), 1))


def test_get_params_deep_and_set_params_nested_as_sklearn_defines_them():
    inner = create("eszsl", gamma=2.0)
    outer = _Wrapper(inner=inner, scale=0.5)
    shallow = outer.get_params(deep=False)
    assert shallow == {"inner": inner, "scale": 0.5}
    deep = outer.get_params(deep=True)
    assert deep == {**shallow, **{f"inner__{k}": v for k, v in inner.get_params().items()}}
    assert deep["inner__gamma"] == 2.0
    outer.fitted_ = True
    assert outer.set_params(inner__gamma=5.0, scale=2) is outer
    assert inner.gamma == 5.0 and outer.scale == 2 and outer.fitted_attributes() == []
    twin = sklearn_clone(outer)
    assert twin.inner is not inner and twin.inner.get_params() == inner.get_params()
    with pytest.raises(UserInputError, match="scale is not an estimator"):
        outer.set_params(scale__x=1)
    with pytest.raises(UserInputError, match="unknown key 'inne'"):
        outer.set_params(inne__gamma=1.0)


def _data() -> SeenData:
    """5 images of 3 classes (labels 0 2 1 2 0), 2-dim features = (image index, 0)."""
    features = np.array([[i, 0.0] for i in range(5)], np.float32)
    return SeenData(features, np.array([0, 2, 1, 2, 0]), ["a", "b", "c"])


def test_seen_data_is_indexed_by_images_and_relabelled_onto_their_classes():
    data = _data()
    assert len(data) == 5 and data.shape == (5, 2)
    part = data[np.array([1, 3, 4])]  # classes c, c, a
    assert part.seen_wnids == ["a", "c"] and part.labels.tolist() == [1, 1, 0]
    assert part.features[:, 0].tolist() == [1, 3, 4]
    mask = data[np.array([True, False, True, False, False])]
    assert mask.seen_wnids == ["a", "b"] and mask.labels.tolist() == [0, 1]
    assert data[1:3].seen_wnids == ["b", "c"] and data[1:3].labels.tolist() == [1, 0]
    same = _safe_indexing(data, np.array([1, 3, 4]))  # scikit-learn's own indexing of an X
    assert same.seen_wnids == part.seen_wnids and same.labels.tolist() == part.labels.tolist()
    with pytest.raises(TypeError, match="slice, int positions or a bool mask"):
        data[0]


class _Fixed(_Wrapper):
    """Not registered: image i scores [x_i0, x_i1, x_i2] against the 3 classes as given."""

    name = "fixed"

    def embed_images(self, features, logits=None):
        return np.asarray(features, np.float32)

    def class_prototypes(self, wnids):
        return np.eye(3, dtype=np.float32)[[["a", "b", "c"].index(w) for w in wnids]]


def test_the_zsl_scorer_is_per_class_hit_at_1_with_ties_against_the_model():
    scores = np.array(
        [
            [3.0, 1.0, 0.0],  # a: hit
            [1.0, 1.0, 0.0],  # a: tie with b, counted as a miss
            [0.0, 2.0, 1.0],  # b: hit
            [0.0, 0.0, 1.0],  # c: hit
            [5.0, 0.0, 1.0],  # c: miss
            [0.0, 0.0, 9.0],  # c: hit
        ],
        np.float32,
    )
    data = SeenData(scores, np.array([0, 0, 1, 2, 2, 2]), ["a", "b", "c"])
    # per class: a 1/2, b 1/1, c 2/3 → mean (1/2 + 1 + 2/3) / 3 = 13/18
    assert zsl_scorer(_Fixed(), data) == pytest.approx(13 / 18)


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_grid_search_cv_with_a_zsl_scorer_on_class_disjoint_folds(problem, name):
    cls = MODELS.get(name)
    grid = _grid(cls)
    if not grid:
        assert not cls.Params.model_fields, f"{name}: give it a 2-point grid in FALLBACK_GRID"
        pytest.skip(f"{name} has no hyper-parameter to grid (it is still cloned above)")
    data = problem.seen_data(logits=cls.uses_training_logits)
    semantics = problem.semantics
    model = create(name, **_quick(cls))
    search = GridSearchCV(model, grid, scoring=zsl_scorer, cv=GroupKFold(n_splits=3), error_score="raise")
    search.fit(data, groups=data.labels, semantics=semantics, graph=problem.graph)
    [(key, values)] = grid.items()
    assert [p[key] for p in search.cv_results_["params"]] == values
    scores = search.cv_results_["mean_test_score"]
    assert np.all((scores >= 0) & (scores <= 1))
    assert search.best_params_ == {key: values[int(np.argmax(scores))]}
    best = search.best_estimator_
    assert best is not model and model.fitted_attributes() == []  # the given model stays unfitted
    assert getattr(best, key) == search.best_params_[key] and best.fitted_attributes()
    # the refit saw every seen class: it scores the images of all of them
    assert 0 <= zsl_scorer(best, data) <= 1


def test_the_grid_search_example_of_the_models_guide_runs():
    """The code block of docs/guides/models.md, "Grid search with scikit-learn", run as pasted."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "models.md").read_text()
    section = text.split("### Grid search with scikit-learn", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/guides/models.md", "exec"), namespace)  # self-contained, as a reader runs it
    search, model, data = namespace["search"], namespace["model"], namespace["data"]
    assert len(search.cv_results_["params"]) == 3 and search.best_params_["gamma"] in (0.1, 1.0, 10.0)
    assert model.gamma == search.best_params_["gamma"] and model.fitted_attributes()
    # the refit model is the one a plain fit with the best parameters gives
    plain = create("eszsl", **search.best_params_).fit(data, namespace["semantics"])
    np.testing.assert_array_equal(model.map_, plain.map_)
