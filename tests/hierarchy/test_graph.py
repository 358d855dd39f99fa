"""ClassGraph on a hand-made DAG (values worked out by hand) and against networkx on random DAGs."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from tests.toy import TOY_TRAIN


def test_parents_children_and_closure(toy_graph):
    assert sorted(toy_graph.parents("m")) == ["a2", "b1"]
    assert sorted(toy_graph.children("A")) == ["a1", "a2", "a3"]
    assert toy_graph.ancestors("m") == {"a2", "b1", "A", "B", "root"}
    assert toy_graph.ancestors("root") == set()
    assert toy_graph.descendants("A") == {"a1", "a2", "a3", "a31", "m"}
    assert toy_graph.is_ancestor("root", "a31")
    assert not toy_graph.is_ancestor("a31", "root")
    assert not toy_graph.is_ancestor("a2", "a3")
    assert toy_graph.roots == ["root"]
    assert toy_graph.depth("m") == 3 and toy_graph.depth("a31") == 3 and toy_graph.depth("B") == 1


def test_distances_by_hand(toy_graph):
    assert toy_graph.distance("a2", "a3") == 2
    assert toy_graph.distance("m", "b11") == 2
    assert toy_graph.distance("a31", "b11") == 6
    dist = toy_graph.nearest_distance(["a2", "a31", "A", "m", "b11", "root"], TOY_TRAIN)
    assert dist.tolist() == [2, 3, 1, 3, 3, 2]
    # nearest *other* member: a31→m is 4 (a31-a3-A-a2-m), b11↔m is 2
    assert toy_graph.nearest_other_distance(["a31", "b11", "m"]).tolist() == [4, 2, 2]
    assert np.isinf(toy_graph.nearest_other_distance(["a31"])).all()


def test_related_pairs_by_hand(toy_graph):
    assert toy_graph.related_pairs(["A", "a31", "b1", "b11"]) == [("A", "a31"), ("b1", "b11")]
    assert toy_graph.related_pairs(["A", "a31", "b1", "b11"], TOY_TRAIN) == [("A", "a1")]


def test_unknown_node_is_a_clear_error(toy_graph):
    with pytest.raises(UserInputError, match="zz"):
        toy_graph.nearest_distance(["zz"], TOY_TRAIN)


def test_cycle_is_rejected():
    graph = ClassGraph.from_edges([("a", "b"), ("b", "c"), ("c", "a")])
    with pytest.raises(ValueError, match="cycle"):
        _ = graph.ancestor_matrix


def _random_dag(seed: int, n: int = 60) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    edges = []
    for child in range(1, n):
        for parent in rng.choice(child, size=min(child, rng.integers(1, 3)), replace=False):
            edges.append((f"v{parent}", f"v{child}"))
    return edges


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hop_distances_are_breadth_first_lengths_up_to_the_limit(seed):
    """The optimiser's balls (and the bench's reference): hop counts between node indices, 255
    beyond the limit, equal to networkx's shortest path lengths."""
    edges = _random_dag(seed)
    graph = ClassGraph.from_edges(edges)
    lengths = dict(nx.all_pairs_shortest_path_length(nx.Graph(edges)))
    rng = np.random.default_rng(seed)
    sources, targets = rng.choice(len(graph), 9, replace=False), rng.choice(len(graph), 30, replace=False)
    got = graph.hop_distances(sources, targets, 3)
    for (i, s), (j, t) in itertools.product(enumerate(sources), enumerate(targets)):
        d = lengths[graph.wnids[s]].get(graph.wnids[t], math.inf)
        assert got[i, j] == (d if d <= 3 else 255)


def test_hop_distances_through_a_hub_of_more_neighbours_than_int8_counts():
    # 300 leaves under one root: a leaf's frontier product counts 300 paths to each sibling
    graph = ClassGraph.from_edges([("root", f"leaf{i}") for i in range(300)])
    leaves = graph.indices([f"leaf{i}" for i in range(300)])
    got = graph.hop_distances(leaves[:2], leaves, 2)
    assert got[0, 0] == 0 and got[0, 1] == 2 and (got[:, 2:] == 2).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_networkx_on_random_dags(seed):
    edges = _random_dag(seed)
    graph = ClassGraph.from_edges(edges)
    ref = nx.DiGraph(edges)
    und = ref.to_undirected()
    rng = np.random.default_rng(seed + 10)
    for node in rng.choice(graph.wnids, 10, replace=False):
        assert graph.ancestors(node) == nx.ancestors(ref, node)
        assert graph.descendants(node) == nx.descendants(ref, node)
    members = list(rng.choice(graph.wnids, 12, replace=False))
    sources = list(rng.choice(graph.wnids, 5, replace=False))
    lengths = dict(nx.all_pairs_shortest_path_length(und))
    expected_other = [min(lengths[c][o] for o in members if o != c) for c in members]
    assert graph.nearest_other_distance(members).tolist() == expected_other
    expected_src = [min(lengths[c].get(s, math.inf) for s in sources) for c in members]
    assert graph.nearest_distance(members, sources).tolist() == expected_src
    pairwise = graph.pairwise_distances(members)
    for (i, a), (j, b) in itertools.product(enumerate(members), repeat=2):
        assert pairwise[i, j] == lengths[a][b]
    limited = graph.pairwise_distances(members, limit=2)
    assert ((limited == 255) == (pairwise > 2)).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_neighbours_between_keeps_every_distance_among_the_kept_nodes(seed):
    """The graph stripped of the branches that join no two kept nodes: the same hop distances
    between kept nodes (networkx on the whole graph), and no node left that is a leaf outside the
    kept set."""
    from imagenet_zsl.hierarchy.graph import _bfs

    edges = _random_dag(seed, n=80)
    graph = ClassGraph.from_edges(edges)
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(graph), 6, replace=False))
    indptr, indices = graph.neighbours_between(keep)
    degree = np.diff(indptr)
    alive = np.flatnonzero(degree > 0)
    assert len(alive) < len(graph)
    assert all(degree[node] >= 2 for node in alive if node not in keep)
    lengths = dict(nx.all_pairs_shortest_path_length(nx.Graph(edges)))
    for source in keep:
        dist = _bfs(indptr, indices, np.array([source]))[0]
        expected = [lengths[graph.wnids[source]].get(graph.wnids[t], -1) for t in keep]
        assert dist[keep].tolist() == expected
