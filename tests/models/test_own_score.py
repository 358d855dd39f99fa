"""Every registered model is ranked by its own score (issue 33 §4): the top-k that ``evaluate``'s
search gives through a saved model directory (the query source ``evaluate``, ``run`` and
``predict`` read) are the top-k of the model's own :meth:`~imagenet_zsl.models.base.ZSLModel.scores`,
ties aside. LATEM scores by the max over its K maps, not by their sum."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.evaluation.model_source import ModelDirectory
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.models.base import MODELS, create
from imagenet_zsl.models.persistence import save_model
from imagenet_zsl.scoring.vectors import map_scores
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import QUICK as SHARED_QUICK
from tests.models.problems import Problem

#: a few epochs / iterations: the ranking rule is checked, not the accuracy (LATEM with 3 maps)
QUICK = {**SHARED_QUICK, "sje": {"epochs": 2}, "latem": {"epochs": 3, "k": 3}}


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem()


def _fitted(name: str, problem: Problem):
    cls = MODELS.get(name)
    data = problem.seen_data(logits=cls.uses_training_logits)
    semantics = problem.semantics
    if name == "vlm_zero_shot":  # class vectors in the image space: the class means
        semantics = ClassVectors(problem.wnids, np.array([problem.means[w] for w in problem.wnids]))
    return create(name, **QUICK.get(name, {})).fit(data, semantics, problem.graph), data.logits is not None


def _assert_top_k_of(exact: np.ndarray, ids: np.ndarray, k: int) -> None:
    """Each row's ``ids`` hold classes whose exact scores are the row's k best (ties aside: equal
    up to float32 rounding)."""
    best = -np.sort(-exact, axis=1)[:, :k]
    got = np.take_along_axis(exact, ids, axis=1)
    scale = np.abs(exact).max(axis=1, keepdims=True) + 1e-12
    np.testing.assert_allclose(got / scale, best / scale, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_evaluate_ranks_every_model_by_its_own_scores(problem, tmp_path, name):
    model, logits_needed = _fitted(name, problem)
    source = ModelDirectory(save_model(model, tmp_path / name))
    features, _ = problem.draw(problem.unseen + problem.seen, images=6)
    logits = problem.bayes_logits(features) if logits_needed else None
    wnids = problem.unseen + problem.seen
    k = 3
    queries = source.encode(features, logits)
    _, ids = source.searcher(wnids, k, device="cpu").search(queries)
    exact = model.scores(features, wnids, logits)
    _assert_top_k_of(exact, ids, k)
    # and predict's rule (QuerySource.score) is the model's scores
    np.testing.assert_allclose(source.score(queries, source.prototypes(wnids)), exact, rtol=1e-5, atol=1e-5)


def test_latem_is_ranked_by_the_max_over_its_maps_not_their_sum(problem):
    """The planted case: on this problem the sum of the maps ranks some images otherwise than
    their max (the old search did so); the search now gives the max's top-k."""
    model, _ = _fitted("latem", problem)
    assert model.score_maps() == 3
    features, _ = problem.draw(problem.unseen + problem.seen, images=8)
    wnids = problem.unseen + problem.seen
    x = model.prep_(features)
    semantic = model.class_prototypes(wnids)
    by_max = np.max([x @ w @ semantic.T for w in model.maps_], axis=0)
    by_sum = x @ model.maps_.sum(axis=0) @ semantic.T
    assert (by_max.argmax(axis=1) != by_sum.argmax(axis=1)).any()
    queries = model.embed_images(features)
    assert queries.shape == (len(features), 3 * semantic.shape[1])
    _, ids = TopKSearcher(semantic, 1, device="cpu", maps=model.score_maps()).search(queries)
    _assert_top_k_of(by_max, ids, 1)
    np.testing.assert_allclose(model.scores(features, wnids), by_max, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("torch_kernel", [False, True])
@pytest.mark.parametrize("maps", [1, 2, 4])
def test_the_search_takes_the_max_over_maps_exactly(torch_kernel, maps, monkeypatch):
    """Integer data (exact scores, ties everywhere), tiles of a few rows: the searcher's lists
    and tie ranks with ``maps`` are those of the brute-force max over the maps."""
    from imagenet_zsl.evaluation import numpy_search, torch_search

    rng = np.random.default_rng(maps)
    prototypes = rng.integers(-2, 3, (300, 5)).astype(np.float32)
    prototypes[200:] = prototypes[:100]
    queries = rng.integers(-2, 3, (70, maps * 5)).astype(np.float32)
    labels = rng.integers(-1, 300, 70)
    monkeypatch.setattr(numpy_search, "TILE_ELEMENTS", 300 * 9)
    monkeypatch.setattr(torch_search, "DEVICE_TILE_ELEMENTS", 300 * 9)
    searcher = TopKSearcher(prototypes, 4, device="cpu", torch_kernel=torch_kernel, maps=maps)
    scores, ids, ranks = searcher.search_ranked(queries, labels)
    full = map_scores(queries, prototypes, maps)
    order = np.argsort(-full, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(ids, order)
    np.testing.assert_array_equal(scores, np.take_along_axis(full, order, axis=1))
    true = full[np.arange(70), np.maximum(labels, 0)]
    np.testing.assert_array_equal(ranks.above, np.where(labels >= 0, (full > true[:, None]).sum(axis=1), 300))
    np.testing.assert_array_equal(
        ranks.tied, np.where(labels >= 0, (full == true[:, None]).sum(axis=1) - 1, 0)
    )


def test_a_latem_directory_written_before_is_ranked_by_the_max_too(problem, tmp_path):
    """A LATEM model directory from before stored the sum of its maps as ``map_``: its maps
    (``maps_``) are what it is embedded and ranked with, so it is ranked by the max as well."""
    model, _ = _fitted("latem", problem)
    model.map_ = model.maps_.sum(axis=0)  # as written before
    source = ModelDirectory(save_model(model, tmp_path / "old"))
    assert source.maps == 3
    features, _ = problem.draw(problem.unseen + problem.seen, images=6)
    wnids = problem.unseen + problem.seen
    _, ids = source.searcher(wnids, 2, device="cpu").search(source.encode(features))
    x = model.prep_(features)
    semantic = model.class_prototypes(wnids)
    _assert_top_k_of(np.max([x @ w @ semantic.T for w in model.maps_], axis=0), ids, 2)
