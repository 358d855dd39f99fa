"""The trivial baseline: the nearest-training-class mapping on a hand-made graph, exactness of the
layered computation against brute-force BFS, and scoring through the seen-class posterior."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import SeenData, create
from imagenet_zsl.models.trivial import nearest_seen_matrix, nearest_seen_matrix_bfs
from tests.toy import TOY_EDGES, TOY_TRAIN


def test_nearest_training_classes_on_the_toy_graph():
    # root ── A ── a1 (train), a2, a3 ── a31 ;  root ── B ── b1 ── b11, b2 (train) ; m under a2 and b1
    graph = ClassGraph.from_edges(TOY_EDGES, nodes=["island"])
    codes = nearest_seen_matrix(graph, TOY_TRAIN, ["a1", "a2", "a31", "A", "root", "b11", "m", "island"])
    expected = np.array(
        [
            [1, 0],  # a1 is a training class
            [1, 0],  # a2 - A - a1: 2 hops (b2 is 4)
            [1, 0],  # a31 - a3 - A - a1: 3 hops
            [1, 0],  # A - a1
            [0.5, 0.5],  # root is 2 hops from both: uniform over the tie
            [0, 1],  # b11 - b1 - B - b2: 3 hops (a1 is 5)
            [0.5, 0.5],  # m - a2 - A - a1 and m - b1 - B - b2: 3 hops each
            [0.5, 0.5],  # isolated: no training class reachable, uniform
        ]
    )
    np.testing.assert_allclose(codes, expected)


def test_layered_nearest_sets_equal_brute_force_bfs():
    rng = np.random.default_rng(0)
    for _ in range(25):
        n = int(rng.integers(5, 40))
        edges = [
            (f"v{rng.integers(0, i)}", f"v{i}") for i in range(1, n) for _ in range(int(rng.integers(1, 3)))
        ]
        graph = ClassGraph.from_edges(edges, nodes=[f"v{i}" for i in range(n)] + ["lonely"])
        seen = list(rng.choice(graph.wnids[:-1], size=int(rng.integers(1, 6)), replace=False))
        np.testing.assert_allclose(
            nearest_seen_matrix(graph, seen, graph.wnids), nearest_seen_matrix_bfs(graph, seen, graph.wnids)
        )


def test_trivial_scores_an_image_by_the_posterior_of_its_nearest_training_classes(problem):
    data = problem.seen_data(logits=True)
    model = create("trivial").fit(data, None, problem.graph)
    features, _ = problem.draw(["g0c3"], images=2)
    logits = problem.bayes_logits(features)
    posterior = np.exp(logits - logits.max(axis=1, keepdims=True))
    posterior /= posterior.sum(axis=1, keepdims=True)
    embedded = model.embed_images(features, logits)
    np.testing.assert_allclose(embedded, posterior, rtol=1e-4, atol=1e-6)
    # g0c3's nearest training classes are its three siblings (2 hops): score = their mean posterior
    siblings = [problem.seen.index(w) for w in ("g0c0", "g0c1", "g0c2")]
    score = embedded @ model.class_prototypes(["g0c3"]).T
    np.testing.assert_allclose(score[:, 0], posterior[:, siblings].mean(axis=1), rtol=1e-4)


def test_trivial_needs_the_graph(problem):
    with pytest.raises(UserInputError, match="class graph"):
        create("trivial").fit(problem.seen_data(), None, None)
    with pytest.raises(UserInputError, match="not nodes"):
        create("trivial").fit(problem.seen_data(), None, ClassGraph.from_edges([("x", "y")]))


def test_hascoet_trivial_is_ridge_onto_one_hot_codes_of_the_nearest_training_class():
    """Hand-made graph: root ── A ── a1 (train), a2 ; root ── B ── b1 (train), b2. Images of a1 sit
    at (1, 0), of b1 at (0, 1); with α = 0 the ridge map onto one-hot codes is the identity, so an
    image at (0.9, 0.2) scores a2 (nearest training class a1) 0.9 and b2 0.2; root ties a1 and b1."""
    graph = ClassGraph.from_edges(
        [("root", "A"), ("root", "B"), ("A", "a1"), ("A", "a2"), ("B", "b1"), ("B", "b2")]
    )
    features = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], np.float32)
    data = SeenData(features, np.array([0, 0, 1, 1]), ["a1", "b1"])
    model = create("hascoet_trivial", alpha=0.0, features="none").fit(data, graph=graph)
    np.testing.assert_allclose(model.map_, np.eye(2), atol=1e-6)
    np.testing.assert_allclose(model.class_prototypes(["a2", "b2", "root"]), [[1, 0], [0, 1], [0.5, 0.5]])
    scores = model.embed_images(np.array([[0.9, 0.2]], np.float32)) @ model.class_prototypes(["a2", "b2"]).T
    np.testing.assert_allclose(scores, [[0.9, 0.2]], atol=1e-6)
    with pytest.raises(UserInputError, match="graph"):
        create("hascoet_trivial").fit(data)
