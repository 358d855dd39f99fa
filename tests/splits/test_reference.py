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
    """Two classes at distance 2 (num 4 and 6) and one alone at distance 5 (num 10), K_c = 3 (two
    levels): scale lcm(2, 3, 4) = 12; variables x0..x2, then z for classes 0 and 1 at k = 2, 3
    (class 2 has no unrelated class within 3: no z). The set's objective is
    12 (4/2 + 6/2 + 10/4) = 24 + 36 + 30 = 90."""
    numer = np.array([4, 6, 10])
    dist = np.array([[255, 2, 5], [2, 255, 5], [5, 5, 255]], dtype=np.uint8)  # itself masked
    cost, constraints, scale = bench_splits._level_model(
        numer, dist, np.array([3, 3, 3]), np.zeros((0, 2), int), 3
    )
    assert scale == 12 and cost.tolist() == [12, 18, 30, 8, 4, 12, 6]
    x = np.array([1, 1, 1, 1, 1, 1, 1])
    assert float(cost @ x) == 90.0
    for c in constraints:
        assert np.all(c.A @ x <= c.ub + 1e-9) and np.all(c.A @ x >= c.lb - 1e-9)
    x[:3] = [1, 0, 1]  # without class 1, class 0 has no one within 3: its z must drop
    assert any(np.any(c.A @ x > c.ub + 1e-9) for c in constraints)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("anchored", [False, True])
def test_reference_matches_brute_force(bench_splits, seed, size, anchored):
    graph, candidates, train = _random_hierarchy(seed, 14)
    best = _brute_force(graph, candidates, train, size)
    if best is None:
        pytest.skip("no feasible set for this seed")
    ratio, bound, _, certified, _ = bench_splits.reference_optimum(
        graph, candidates, train, size, anchored=anchored
    )
    assert certified and ratio == pytest.approx(best, abs=1e-9) and bound == pytest.approx(best, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_reference_and_optimiser_agree(bench_splits, seed):
    graph, candidates, train = _random_hierarchy(seed, 60)
    ours = select_max_ratio(graph, candidates, train, 6)
    ratio, bound, _, certified, _ = bench_splits.reference_optimum(graph, candidates, train, 6)
    assert certified and ours.status == "optimal"
    assert ours.ratio == pytest.approx(ratio, abs=1e-9) and ours.upper_bound == pytest.approx(bound, abs=1e-6)


def test_reference_starts_at_two_distance_levels_and_widens_for_a_far_member(bench_splits):
    """a lies 5 edges from b and c (a-z-y-x-root-b), b and c 2 apart; every class's distance to
    the training class t: a 5, b 2, c 2. R({a, b, c}) = (5/5 + 2/2 + 2/2) / 3 = 1. The plain first
    model (2 distance levels, K = 3) values a at 5/4 and bounds R by (5/4 + 2) / 3 = 13/12: not
    tight, so a alone gets K_a = 5 and the second solve certifies R = 1. Anchored, a's levels reach
    its nearest unrelated pool class (5) from the start: one solve."""
    edges = [("root", "t"), ("root", "x"), ("x", "y"), ("y", "z"), ("z", "a"), ("root", "b"), ("root", "c")]
    graph = ClassGraph.from_edges(edges)
    ratio, bound, top, certified, solves = bench_splits.reference_optimum(graph, ["a", "b", "c"], ["t"], 3)
    assert certified and (top, solves) == (5, 2)
    assert ratio == pytest.approx(1.0, abs=1e-12) and bound == pytest.approx(1.0, abs=1e-12)
    anchored = bench_splits.reference_optimum(graph, ["a", "b", "c"], ["t"], 3, anchored=True)
    assert anchored[3] and anchored[2:] == (5, True, 1) and anchored[0] == pytest.approx(1.0, abs=1e-12)
    stepped = bench_splits.reference_optimum(graph, ["a", "b", "c"], ["t"], 3, step=2)
    assert stepped[3] and stepped[2] == 5 and stepped[4] == 2


def test_the_bench_prints_ours_and_both_references_for_the_smallest_benchmark(
    bench_splits, monkeypatch, capsys
):
    """``--reference-only`` on benchmark_in12k (seconds): one row with ours, both reference
    variants certified at the same R, and the totals."""
    monkeypatch.setattr(
        sys, "argv", ["bench_splits.py", "--reference-only", "--reference-splits", "benchmark_in12k"]
    )
    bench_splits.main()
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("benchmark_in12k"))
    assert row.count("cert.") == 3 and row.count("same R") == 2 and "3.103433" in row
    assert "load average" in out and "total: ours" in out
