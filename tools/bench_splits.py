"""Benchmark: split building and the structural ratio vs straightforward networkx references.

Measures, in one run on the real WordNet / ImageNet-21K graph (warm WordNet cache):
  1. R of the committed 500-class benchmark split with ClassGraph (multi-source BFS + Voronoi),
     vs networkx BFS from every test class (exact), and vs networkx shortest paths per pair
     (timed on a sample of test classes, extrapolated linearly to all 500 — labelled as such);
  2. the exact optimiser (MILP, HiGHS) vs the local-search heuristic on the default
     ``benchmark`` pool, side by side: time, R, proven upper bound and gap;
  3. the whole default build (configs/default.yaml) vs the per-pair networkx
     reference for its hop splits alone (sampled and extrapolated the same way).

Usage: .venv/bin/python tools/bench_splits.py [--sample 20] [--skip-build] [--skip-optimisers]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import networkx as nx

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids
from imagenet_zsl.splits.build import (
    benchmark_pool,
    build_splits,
    config_graph,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=5, help="classes timed for per-pair refs")
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--skip-optimisers", action="store_true")
    args = parser.parse_args()
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
