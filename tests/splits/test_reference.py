"""The compact reference MILP of tools/bench_splits.py (the yardstick of the optimiser's speed)
against brute force, and against the exact optimiser on the same small hierarchies."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.benchmark import select_max_ratio
from imagenet_zsl.splits.structure import structural_ratio

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench_splits.py"


@pytest.fixture(scope="module")
def bench_splits():
    spec = importlib.util.spec_from_file_location("tools_bench_splits_reference", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _random_hierarchy(seed: int, n: int) -> tuple[ClassGraph, list[str], list[str]]:
    """A random DAG (mostly a tree, some second parents), 2 training leaves, the rest candidates."""
    rng = np.random.default_rng(seed)
    names = [f"c{i:02d}" for i in range(n)]
    edges = []
    for i in range(1, n):
        parents = {int(rng.integers(0, i))}
        if rng.random() < 0.15 and i > 2:
            parents.add(int(rng.integers(0, i)))
        edges += [(names[p], names[i]) for p in sorted(parents)]
    graph = ClassGraph.from_edges(edges, nodes=names)
    leaves = [w for w in names if not graph.children(w)]
    train = sorted(rng.choice(leaves, size=2, replace=False).tolist())
    return graph, [w for w in names if w not in train], train


def _brute_force(graph: ClassGraph, candidates: list[str], train: list[str], size: int) -> float | None:
    related = {frozenset(p) for p in graph.related_pairs(candidates)}
    pool = [c for c in candidates if c not in {a for a, _ in graph.related_pairs(candidates, train)}]
    ratios = [
        structural_ratio(graph, list(combo), train)
        for combo in itertools.combinations(pool, size)
        if not any(frozenset(p) in related for p in itertools.combinations(combo, 2))
    ]
    return max(ratios) if ratios else None


def test_level_model_values_a_hand_computed_set(bench_splits):
    """Two classes at distance 2 (num 4 and 6) and one alone at distance 5 (num 10), 2 levels:
    the objective (scale lcm(2, 3) = 6) is 6 (4/2 + 6/2 + 10/3) = 12 + 18 + 20 = 50."""
    numer = np.array([4, 6, 10])
    dist = np.array([[0, 2, 5], [2, 0, 5], [5, 5, 0]], dtype=np.uint8)
    cost, constraints, integrality, scale = bench_splits._level_model(
        numer, dist, np.zeros((0, 2), dtype=np.int64), 3, 2
    )
    assert scale == 6 and integrality.tolist() == [1, 1, 1, 0, 0, 0]
    x = np.array([1, 1, 1, 1, 1, 0])  # z_c2 = 1 for the pair only (the third has no one within 2)
    assert float(cost @ x) == 50.0
    for c in constraints:
        assert np.all(c.A @ x <= c.ub + 1e-9) and np.all(c.A @ x >= c.lb - 1e-9)
    x[5] = 1  # claiming a neighbour within 2 for the lone class breaks a constraint
    assert any(np.any(c.A @ x > c.ub + 1e-9) for c in constraints)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("size", [2, 3])
def test_reference_matches_brute_force(bench_splits, seed, size):
    graph, candidates, train = _random_hierarchy(seed, 14)
    best = _brute_force(graph, candidates, train, size)
    if best is None:
        pytest.skip("no feasible set for this seed")
    ratio, bound, _, certified = bench_splits.reference_optimum(graph, candidates, train, size)
    assert certified and ratio == pytest.approx(best, abs=1e-9) and bound == pytest.approx(best, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_reference_and_optimiser_agree(bench_splits, seed):
    graph, candidates, train = _random_hierarchy(seed, 60)
    ours = select_max_ratio(graph, candidates, train, 6)
    ratio, bound, _, certified = bench_splits.reference_optimum(graph, candidates, train, 6)
    assert certified and ours.status == "optimal"
    assert ours.ratio == pytest.approx(ratio, abs=1e-9) and ours.upper_bound == pytest.approx(bound, abs=1e-6)


def test_reference_starts_at_two_distance_levels_and_widens_for_a_far_member(bench_splits):
    """a lies 5 edges from b and c (a-z-y-x-root-b), b and c 2 apart; every class's distance to
    the training class t: a 5, b 2, c 2. R({a, b, c}) = (5/5 + 2/2 + 2/2) / 3 = 1. The first model
    (2 distance levels, K = 3) values a at 5/4 and bounds R by (5/4 + 2) / 3 = 13/12: not tight,
    and a lies beyond K, so the 4-level model (K = 5) follows and certifies R = 1."""
    assert bench_splits.REFERENCE_SCHEDULE[:2] == (3, 5)
    edges = [("root", "t"), ("root", "x"), ("x", "y"), ("y", "z"), ("z", "a"), ("root", "b"), ("root", "c")]
    graph = ClassGraph.from_edges(edges)
    ratio, bound, levels, certified = bench_splits.reference_optimum(graph, ["a", "b", "c"], ["t"], 3)
    assert certified and levels == 5
    assert ratio == pytest.approx(1.0, abs=1e-12) and bound == pytest.approx(1.0, abs=1e-12)
    first = bench_splits.reference_optimum(graph, ["a", "b", "c"], ["t"], 3, schedule=(3,))
    assert first[2] == 3 and not first[3] and first[1] == pytest.approx(13 / 12, abs=1e-12)
