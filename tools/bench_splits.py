"""Benchmark: split building and the structural ratio vs straightforward networkx references.

Measures, in one run on the real WordNet / ImageNet-21K graph (warm WordNet cache):
  1. R of the committed 500-class benchmark split with ClassGraph (multi-source BFS + Voronoi),
     vs networkx BFS from every test class (exact), and vs networkx shortest paths per pair
     (timed on a sample of test classes, extrapolated linearly to all 500 — labelled as such);
  2. the exact optimiser (MILP, HiGHS) vs the local-search heuristic on the default
     ``benchmark`` pool, side by side: time, R, proven upper bound and gap;
  3. the whole default build (configs/default.yaml) vs the per-pair networkx
     reference for its hop splits alone (sampled and extrapolated the same way);
  0. (first) the exact optimiser vs a compact *reference* MILP written here from the problem
     statement alone (scipy HiGHS, one indicator per class and distance level, every pool class,
     2 levels, then 4 when 2 is not tight; see :func:`reference_optimum`): CPU seconds of both on
     the same pools and sizes, their ratio, and a check that both reach the same R. By default a
     small pool (``min_images`` raised to 1,000) and N = 100, so that it takes seconds;
     ``--reference-min-images 301 --reference-sizes 500,1000`` is the default benchmark pool.

Usage: .venv/bin/python tools/bench_splits.py [--sample 20] [--skip-build] [--skip-optimisers]
       [--reference-sizes 100] [--reference-min-images 1000] [--reference-only | --skip-reference]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csgraph

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids
from imagenet_zsl.splits.build import (
    benchmark_pool,
    build_splits,
    config_graph,
    lexname_branches,
    resolve_counts,
    resolve_train,
    select_for,
)
from imagenet_zsl.splits.config import load_splits_config
from imagenet_zsl.splits.frontier import pick_benchmark
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.pool import PoolContext
from imagenet_zsl.splits.structure import structural_ratio

REPO = Path(__file__).resolve().parents[1]


def timed(fn, repeat: int = 1):
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def nx_ratio_bfs(und: nx.Graph, test: list[str], train: set[str]) -> float:
    test_set = set(test)
    total = 0.0
    for c in test:
        lengths = nx.single_source_shortest_path_length(und, c)
        d_train = min(d for n, d in lengths.items() if n in train)
        d_test = min(d for n, d in lengths.items() if n in test_set and n != c)
        total += d_train / d_test
    return total / len(test)


def nx_ratio_pairs(und: nx.Graph, sample: list[str], test: list[str], train: list[str]) -> float:
    """Per-pair reference: shortest_path_length for every (class, other) pair of the sample."""
    total = 0.0
    for c in sample:
        d_train = min(nx.shortest_path_length(und, c, t) for t in train)
        d_test = min(nx.shortest_path_length(und, c, o) for o in test if o != c)
        total += d_train / d_test
    return total / len(sample)


def compare_optimisers(config: Path = REPO / "configs" / "default.yaml", split: str = "benchmark") -> None:
    """exact vs local_search on one benchmark pool: time, R, bound, gap in one table."""
    cfg = load_splits_config(config)
    spec = pick_benchmark(config, split)
    train = resolve_train(cfg.train, str(config))
    counts = resolve_counts(cfg.counts)
    graph = config_graph(cfg)
    candidates = sorted(w for w in fall11_counts() if w not in set(train))
    pool, _ = benchmark_pool(spec, PoolContext(graph, train, counts), candidates, split)
    print(f"optimisers on {config.name}:{split} (pool {len(pool):,}, N = {spec.size})")
    print(f"  {'optimizer':<14}{'time':>9}{'R':>10}{'bound':>10}{'gap':>10}")
    for optimizer in ("exact", "local_search"):
        start = time.perf_counter()
        sel = select_for(spec, graph, train, pool, optimizer=optimizer)
        took = time.perf_counter() - start
        bound = "-" if sel.upper_bound is None else f"{sel.upper_bound:.4f}"
        gap = "unknown" if sel.gap is None else f"{sel.gap:.2g}"
        print(f"  {optimizer:<14}{took:8.1f}s{sel.ratio:10.4f}{bound:>10}{gap:>10}")


# --- the compact reference MILP (independent of imagenet_zsl.splits.milp) ---------------------


def _undirected(graph: ClassGraph) -> sp.csr_matrix:
    """(n, n) symmetric 0/1 adjacency of the is-a edges."""
    edges = graph.child_to_parent.tocoo()
    rows = np.concatenate([edges.row, edges.col])
    cols = np.concatenate([edges.col, edges.row])
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=graph.child_to_parent.shape)


def _distances(und: sp.csr_matrix, sources: np.ndarray, targets: np.ndarray, limit: float) -> np.ndarray:
    """(len(sources), len(targets)) hop distances (inf beyond ``limit``), 256 sources at a time."""
    out = np.empty((len(sources), len(targets)))
    for i in range(0, len(sources), 256):
        block = csgraph.dijkstra(und, directed=False, indices=sources[i : i + 256], limit=limit)
        out[i : i + 256] = block[:, targets]
    return out


def _exact_ratio(und: sp.csr_matrix, chosen: np.ndarray, numer: np.ndarray) -> float:
    """R = mean_c d(c, train) / d(c, T \\ {c}) for graph node ids ``chosen`` (numer: (n,) d(., train))."""
    d = _distances(und, chosen, chosen, np.inf)
    np.fill_diagonal(d, np.inf)
    return float(np.mean(numer[chosen] / d.min(axis=1)))


def _level_model(numer: np.ndarray, dist: np.ndarray, pairs: np.ndarray, size: int, levels: int):
    """Maximise sum_c [x_c num_c/(K+1) + sum_k z_ck num_c (1/k - 1/(k+1))] (scaled by lcm(2..K+1)):
    z_ck <= x_c, z_ck <= sum_{c' != c, d(c, c') <= k} x_c', x_a + x_b <= 1 (related), sum x = N."""
    p = len(numer)
    scale = math.lcm(*range(2, levels + 2))
    ks = np.arange(2, levels + 1)
    z = p + np.arange(p * len(ks)).reshape(p, len(ks))  # variable index of z_ck
    cost = np.concatenate(
        [numer * (scale // (levels + 1)), (numer[:, None] * (scale // ks - scale // (ks + 1))).ravel()]
    ).astype(np.float64)
    rows, cols, vals, n = [], [], [], 0
    for c in range(p):
        for j, k in enumerate(ks):
            ball = np.flatnonzero(dist[c] <= k)
            ball = ball[ball != c]
            rows += [np.full(2, n), np.full(1 + len(ball), n + 1)]  # z - x_c <= 0; z - ball <= 0
            cols += [np.array([z[c, j], c]), np.concatenate([[z[c, j]], ball])]
            vals += [np.array([1.0, -1.0]), np.concatenate([[1.0], -np.ones(len(ball))])]
            n += 2
    n_le0 = n
    for a, b in pairs:
        rows.append(np.full(2, n))
        cols.append(np.array([a, b]))
        vals.append(np.ones(2))
        n += 1
    shape = (n, len(cost))
    a_ub = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=shape)
    ub = np.concatenate([np.zeros(n_le0), np.ones(n - n_le0)])
    pick = sp.csr_matrix(np.concatenate([np.ones(p), np.zeros(len(cost) - p)])[None, :])
    constraints = [LinearConstraint(a_ub, -np.inf, ub), LinearConstraint(pick, size, size)]
    integrality = np.concatenate([np.ones(p), np.zeros(len(cost) - p)])
    return cost, constraints, integrality, scale


def reference_optimum(
    graph: ClassGraph, pool: list[str], train: list[str], size: int, time_limit: float = 600.0
):
    """The compact formulation on the whole pool: 2 levels, then 4 when 2 is not tight.

    Returns (R, upper bound on R, levels used, certified). Upper bound: the K-level objective
    values a member with no other member within K at num/(K+1), so HiGHS's dual bound bounds R.
    """
    und = _undirected(graph)
    ids = graph.indices(pool)
    train_ids = graph.indices(train)
    anc = graph.ancestor_matrix
    related_to_train = np.zeros(len(graph), dtype=bool)
    related_to_train[(anc[train_ids] + anc.T.tocsr()[train_ids]).indices] = True
    to_train = csgraph.dijkstra(und, directed=False, indices=train_ids, min_only=True)
    ids = ids[~related_to_train[ids] & np.isfinite(to_train[ids])]
    numer = to_train[ids].astype(np.int64)
    rel = (anc[ids][:, ids] + anc[ids][:, ids].T).tocoo()
    pairs = np.unique(np.stack([rel.row, rel.col], axis=1)[rel.row < rel.col], axis=0)
    dist = _distances(und, ids, ids, 4.5)
    result = None
    for levels in (2, 4):
        cost, constraints, integrality, scale = _level_model(numer, dist, pairs, size, levels)
        res = milp(
            -cost,
            integrality=integrality,
            bounds=Bounds(0, 1),
            constraints=constraints,
            options={"time_limit": time_limit, "mip_rel_gap": 1e-7, "presolve": False},
        )
        if res.x is None:  # no feasible set within the time limit: reported, not a crash
            print(f"  reference MILP, {levels} levels: {res.message}")
            return math.nan, math.nan, levels, False
        chosen = ids[np.flatnonzero(res.x[: len(ids)] > 0.5)]
        ratio = _exact_ratio(und, chosen, to_train)
        bound = math.floor(-res.mip_dual_bound + 1e-6) / scale / size
        certified = res.status == 0 and abs(ratio - bound) < 1e-9
        result = (ratio, bound, levels, certified)
        if certified:
            break
    return result


def compare_reference(
    sizes: list[int],
    min_images: int,
    config: Path = REPO / "configs" / "default.yaml",
    split: str = "benchmark",
) -> None:
    """CPU seconds of the exact optimiser (with its tie-break) vs the reference, same pool and N."""
    cfg = load_splits_config(config)
    spec = pick_benchmark(config, split)
    steps = [
        {**step, "min": min_images} if step.get("filter") == "min_images" else step for step in spec.pool
    ]
    spec = spec.model_copy(update={"pool": steps})
    train = resolve_train(cfg.train, str(config))
    graph = config_graph(cfg)
    candidates = sorted(w for w in fall11_counts() if w not in set(train))
    pool, _ = benchmark_pool(spec, PoolContext(graph, train, resolve_counts(cfg.counts)), candidates, split)
    _ = graph.ancestor_matrix, graph.adjacency, lexname_branches(pool)  # warm caches for both sides
    print(f"exact optimiser vs compact reference MILP ({config.name}:{split} pool, min_images {min_images})")
    print(
        f"  {'pool':>7}{'N':>6}{'ours CPU':>10}{'R':>9}{'gap':>8}{'ref CPU':>9}{'R':>9}{'K':>3}{'ratio':>8}"
    )
    for size in sizes:
        start = time.process_time()
        sel = select_for(spec, graph, train, pool, size=size, optimizer="exact")
        ours = time.process_time() - start
        start = time.process_time()
        ref_r, ref_bound, levels, certified = reference_optimum(graph, pool, train, size)
        ref = time.process_time() - start
        same = "same R" if abs(ref_r - sel.ratio) < 1e-9 else "R DIFFERS"
        proof = "both certified" if certified and sel.status == "optimal" else "NOT both certified"
        gap = math.nan if sel.gap is None else sel.gap
        print(
            f"  {len(pool):>7,}{size:>6}{ours:9.1f}s{sel.ratio:9.4f}{gap:8.2g}{ref:8.1f}s"
            f"{ref_r:9.4f}{levels:>3}{ours / ref:7.2f}x  {same}, {proof} (ref bound {ref_bound:.4f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=5, help="classes timed for per-pair refs")
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--skip-optimisers", action="store_true")
    parser.add_argument(
        "--reference-sizes", default="100", help="N values for the reference MILP, e.g. 500,1000"
    )
    parser.add_argument(
        "--reference-min-images", type=int, default=1000, help="pool filter (default pool: 301)"
    )
    parser.add_argument("--reference-only", action="store_true", help="only the optimiser vs reference MILP")
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()
    if not args.skip_reference:
        compare_reference([int(n) for n in args.reference_sizes.split(",")], args.reference_min_images)
        if args.reference_only:
            return
    if not args.skip_optimisers:
        compare_optimisers()

    graph = load_class_graph("wordnet")
    train = training_wnids()
    test = read_wnid_list(REPO / "splits" / "benchmark.txt")
    und = nx.Graph()
    und.add_edges_from(
        (graph.wnids[p], graph.wnids[c]) for c, p in zip(*graph.child_to_parent.nonzero(), strict=True)
    )
    _ = graph.ancestor_matrix, graph.adjacency  # warm caches, as in a build

    t_fast, r_fast = timed(lambda: structural_ratio(graph, test, train), repeat=5)
    t_bfs, r_bfs = timed(lambda: nx_ratio_bfs(und, test, set(train)))
    sample = test[: args.sample]
    t_pair_sample, _ = timed(lambda: nx_ratio_pairs(und, sample, test, train))
    t_pair = t_pair_sample * len(test) / len(sample)
    assert abs(r_fast - r_bfs) < 1e-9, (r_fast, r_bfs)
    print(f"R of a {len(test)}-class set = {r_fast:.4f} (networkx agrees: {r_bfs:.4f})")
    print(f"  imagenet-zsl (multi-source BFS + Voronoi)   {t_fast * 1e3:9.1f} ms")
    print(
        f"  networkx BFS per test class                 {t_bfs * 1e3:9.1f} ms   ratio {t_bfs / t_fast:8.0f}x"
    )
    print(
        f"  networkx shortest path per pair (extrap.)   {t_pair * 1e3:9.0f} ms"
        f"   ratio {t_pair / t_fast:8.0f}x   [{len(sample)} classes timed]"
    )

    if args.skip_build:
        return
    with tempfile.TemporaryDirectory() as tmp:
        t_build, built = timed(
            lambda: build_splits(REPO / "configs" / "default.yaml", Path(tmp) / "splits", progress=False)
        )
    cands = candidate_wnids()
    hop_sample = cands[:: max(1, len(cands) // args.sample)][: args.sample]

    def nx_hops():
        for c in hop_sample:
            min(nx.shortest_path_length(und, c, t) for t in train)

    t_hop_sample, _ = timed(nx_hops)
    t_hops = t_hop_sample * len(cands) / len(hop_sample)
    print(f"default build ({len(built)} splits incl. the 500-class max-ratio benchmark, warm cache)")
    print(f"  imagenet-zsl splits build                   {t_build:9.1f} s")
    print(
        f"  networkx per-pair hop distances only (extr.) {t_hops:8.0f} s"
        f"   ratio {t_hops / t_build:8.0f}x   [{len(hop_sample)} classes timed]"
    )


if __name__ == "__main__":
    main()
