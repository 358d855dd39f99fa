"""Hierarchical precision@K (Frome et al. 2013) on a hand-made hierarchy, with hand-computed
correct sets and credits, ties against brute-force enumeration of the tie-breaking orders."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from imagenet_zsl import scoring as M
from imagenet_zsl.evaluation.hierarchical_precision import correct_sets, hierarchical_precision
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.scoring.hierarchical import hp_credit

#   root ─┬─ a ─┬─ a1
#         │     └─ a2 ── a21
#         └─ b ─┬─ b1
#               └─ b2
EDGES = [("root", "a"), ("a", "a1"), ("a", "a2"), ("a2", "a21"), ("root", "b"), ("b", "b1"), ("b", "b2")]
SPACE = ["a1", "a2", "a21", "b1", "b2", "a"]  # root and b are hops, not classes
A1, A2, A21, B1, B2, A = range(6)


@pytest.fixture
def tree() -> ClassGraph:
    return ClassGraph.from_edges(EDGES)


def test_correct_sets_grow_by_undirected_hops(tree):
    # from a1: a at 1 hop, a2 at 2 (sibling), a21 at 3, b1/b2 at 4 (through root and b)
    sets = correct_sets(tree, SPACE, [A1, B1], [1, 2, 3, 4, 5])
    assert [sets.radius[k][A1] for k in (1, 2, 3, 4, 5)] == [0, 1, 2, 3, 4]
    assert [sets.size[k][A1] for k in (1, 2, 3, 4, 5)] == [1, 2, 3, 4, 6]  # the whole last ring
    ids = np.array([[A1, A, A2, A21, B1, B2]])
    assert sets.member(np.array([A1]), ids, 2).tolist() == [[True, True, False, False, False, False]]
    assert sets.member(np.array([A1]), ids, 5).all()
    # from b1: R=2 brings b2 (sibling), nothing at R=1 (b is not a class), R=3 brings a
    assert [sets.size[k][B1] for k in (1, 2, 3)] == [1, 2, 3]
    assert [sets.radius[k][B1] for k in (1, 2, 3)] == [0, 2, 3]


def test_class_outside_the_graph_and_a_small_space(tree):
    sets = correct_sets(tree, [*SPACE, "zz"], [6, A1], [2, 20])
    # a class that is not a node has no correct set (not {itself}): hierarchical_precision
    # leaves its images out (tests/robustness/test_hierarchy_metrics.py)
    assert not sets.in_graph[6] and sets.size[2][6] == 0 and sets.size[20][6] == 0
    assert not sets.member(np.array([6]), np.array([[6, A1]]), 20).any()
    assert sets.in_graph[A1] and sets.size[20][A1] == 6  # the whole connected label space, fewer than K


def test_hand_computed_precision_without_ties(tree):
    ids = np.array([[A2, B1, A1, A, B2, A21]])
    scores = np.array([[6.0, 5, 4, 3, 2, 1]])
    got = hierarchical_precision(tree, SPACE, np.array([A1]), (scores, ids), [1, 2, 3, 5])
    # H1={a1}: top-1 a2 → 0; H2={a1,a}: {a2,b1} → 0; H3={a1,a,a2}: {a2,b1,a1} → 2/3;
    # H5 = all six: 5/5
    assert got["flat"] == pytest.approx({"1": 0.0, "2": 0.0, "3": 2 / 3, "5": 1.0})
    # a count-as-miss image halves every value
    halved = hierarchical_precision(tree, SPACE, np.array([A1]), (scores, ids), [3], misses=1)
    assert halved["flat"]["3"] == pytest.approx(1 / 3) and halved["images"] == 2


def test_hand_computed_ties(tree):
    ids = np.array([[B1, A, A1, B2, A2, A21]])
    scores = np.array([[5.0, 5, 4, 4, 3, 1]])
    labels = np.array([A1])
    got = hierarchical_precision(tree, SPACE, labels, (scores, ids), [1, 2, 3])["flat"]
    # K=1: {b1,a} tie for first, neither is a1 → 0; K=2: both in the top-2, a ∈ H2 → 1/2;
    # K=3: b1, a above (a ∈ H3), one of {a1, b2} drawn (a1 ∈ H3 half the time) → 1.5/3
    assert got == pytest.approx({"1": 0.0, "2": 0.5, "3": 0.5})


def _brute_force(ids, scores, members, k):
    """Mean |top-k ∩ H| / k over every order that breaks the ties of ``scores``."""
    values = []
    for order in itertools.permutations(range(len(ids))):
        if all(scores[order[i]] >= scores[order[i + 1]] for i in range(len(order) - 1)):
            values.append(sum(members[j] for j in order[:k]) / k)
    return np.mean(values)


def test_ties_match_brute_force_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(30):
        m = 6
        ids = rng.permutation(8)[:m]
        scores = rng.integers(0, 3, m).astype(float)
        order = np.lexsort((ids, -scores))
        ids, scores = ids[order], scores[order]
        label = ids[rng.integers(m)]
        members = rng.random(m) < 0.5
        members[ids == label] = True
        for k in range(1, m + 1):
            # a complete list: every class of the space is listed, so ties are judged exactly
            got = hp_credit(ids[None], scores[None], members[None], np.array([label]), k, complete=True)
            assert got[0] == pytest.approx(_brute_force(ids, scores, members, k)), (ids, scores, k)


def test_hp_at_1_is_the_expected_hit_at_1():
    rng = np.random.default_rng(1)
    n, m, c = 40, 4, 12
    scores = np.round(rng.random((n, c)) * 3) / 3  # many ties
    labels = rng.integers(0, c, n)
    top_scores, top_ids = M.topk_from_scores(scores, m)
    ranks = M.true_ranks(labels, scores=scores)
    member = top_ids == labels[:, None]
    got = hp_credit(top_ids, top_scores, member, labels, 1, ranks=ranks)
    assert got.mean() == pytest.approx(M.hit_at_k(ranks, labels, [1])[1])


def test_tie_group_running_past_the_list():
    # a1 tied first with 4 others (exact ranks: above 0, tied 4), three of the group listed;
    # of the listed others (b1, a) one is in H2 = {a1, a}: the 2 unlisted ones count 1/2 each
    ids = np.array([[B1, A1, A]])
    scores = np.array([[5.0, 5, 5]])
    member = np.array([[False, True, True]])
    ranks = M.TieRanks(np.array([0]), np.array([4]))
    got = hp_credit(ids, scores, member, np.array([A1]), 2, ranks=ranks)
    # group of 5 with 1 + 1 + 2·(1/2) = 3 members of H2; 2 slots → 2·3/5 / 2
    assert got[0] == pytest.approx(0.6)
    # judged from the list alone (no ranks): the listed proportion, 2/3
    assert hp_credit(ids, scores, member, np.array([A1]), 2)[0] == pytest.approx(2 / 3)


def test_evaluate_writes_hand_computed_hp(bench, graph, tmp_path):
    """The toy benchmark (tests/evaluation/conftest.py): one-hot images and prototypes, so an
    image's own class scores 1 and the 5 other test classes tie at 0; image 0 (n00000000) looks
    like its parent n00000001. Graph: root─n1─n0─n2, root─n3─{n4, n5}."""
    cfg = EvaluationConfig(
        features=bench["features"],
        split=bench["split"],
        out=tmp_path / "run",
        prototypes=bench["protos"],
        ks=[1, 2, 5],
        label_frequency=False,
        plots=False,
    )
    hp = evaluate(cfg, graph=graph, progress=False)["hierarchical_precision"]
    # K=2: H2 = {c} ∪ 1-hop classes: 3 classes for n0 and n3, 2 for the others; the second slot
    # draws one of 5 tied classes: (1 + (|H2| - 1) / 5) / 2 = 0.7 or 0.6; image 0 (top-1 n1 ∈ H2,
    # then 2 of the 5 tied in H2) also 0.7 → (6 · 0.7 + 12 · 0.6) / 18
    # K=5: H5 is all 6 classes from n0, n1, n2; from n3, n4, n5 it misses n2 (5 hops):
    # (1 + 4 · 4/5) / 5 = 0.84 for those 9 images
    assert hp["flat"] == pytest.approx({"1": 17 / 18, "2": 11.4 / 18, "5": (9 + 9 * 0.84) / 18})
    assert hp["mean_correct_set_size"] == pytest.approx({"1": 1.0, "2": 14 / 6, "5": 33 / 6})


def test_a_label_space_smaller_than_k_is_precision_over_its_classes(tree):
    # 3 classes, all connected: H5 holds all 3; the top-5 is the 3 classes, all correct → 1
    # (not 3/5); with one of them outside H2 and the list complete, hP@2 is over 2 predictions
    space = ["a1", "a", "b1"]
    ids, scores = np.array([[2, 0, 1, -1, -1, -1]]), np.array([[3.0, 2, 1, -np.inf, -np.inf, -np.inf]])
    got = hierarchical_precision(tree, space, np.array([0]), (scores, ids), [1, 2, 5])["flat"]
    # H2(a1) = {a1, a}: top-2 {b1, a1} → 1/2
    assert got == pytest.approx({"1": 0.0, "2": 0.5, "5": 1.0})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_sets_match_a_breadth_first_search_per_class(seed):
    """The vectorised rings (all test classes a step at a time, in blocks) against networkx's
    distances from each class on its own, on random DAGs with hubs and label spaces of every
    density: the radius and size of H_K for each K, and membership of every space class."""
    import networkx as nx

    from imagenet_zsl.evaluation import hierarchical_precision as hp

    rng = np.random.default_rng(seed)
    n = 80
    edges = [
        (f"v{p}", f"v{c}") for c in range(1, n) for p in rng.choice(c, min(c, rng.integers(1, 3)), False)
    ]
    edges += [("v0", f"v{c}") for c in range(40, 60)]  # a hub of many children
    graph = ClassGraph.from_edges(edges, nodes=[f"v{i}" for i in range(n)] + ["lone"])
    undirected = nx.Graph(edges)
    undirected.add_node("lone")
    space = sorted(rng.choice(graph.wnids, [5, 30, 81][seed], replace=False).tolist())
    ks = [1, 2, 5, 10]
    classes = np.arange(len(space))
    old_block = hp.VISITED_ELEMENTS
    hp.VISITED_ELEMENTS = 3 * len(graph)  # blocks of 3 sources
    try:
        sets = correct_sets(graph, space, classes, ks)
    finally:
        hp.VISITED_ELEMENTS = old_block
    for c, wnid in enumerate(space):
        dist = nx.single_source_shortest_path_length(undirected, wnid)
        hops = np.array(sorted(dist[w] for w in space if w in dist))
        for k in ks:
            # R grown from 0 until H holds at least K classes (or the component is exhausted:
            # then every space class it holds, whatever R beyond the farthest)
            radius = next((r for r in range(n + 1) if (hops <= r).sum() >= k), None)
            if radius is None:
                radius = hops.max()
                assert sets.radius[k][c] >= radius
            else:
                assert sets.radius[k][c] == radius
            assert sets.size[k][c] == (hops <= radius).sum()
            inside = [j for j, w in enumerate(space) if dist.get(w, n + 1) <= radius]
            got = sets.member(np.full(1, c), classes[None], k)[0]
            assert np.flatnonzero(got).tolist() == inside
