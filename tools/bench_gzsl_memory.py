"""Benchmark: peak memory of the GZSL hierarchy breakdown, per test image, projected to 12.9M images.

    python tools/bench_gzsl_memory.py [--sizes 200000,400000] [--m 21] [--block 65536]

On the real WordNet graph with the "All" label space (20,842 unseen candidate classes plus the
1,000 ILSVRC-2012 seen classes), synthetic GZSL top-m lists (m = max K + 1 = 21, scores quantised
so that ties occur) for N test images, half of them seen-class images. Each measurement runs in a
fresh process (``--child``) and reports the tracemalloc peak of the breakdown (memory on top of
its inputs), how far the process's peak RSS rose above its RSS before the breakdown, and the
process's ru_maxrss (imports and the graph included; noisy by some 30 MB between runs):

* ``reference``: no breakdown: the GZSL lists alone (what GZSL holds whatever the breakdown does);
* ``whole``: the breakdown on whole arrays, as ``evaluation/run/gzsl.py``'s ``_gzsl_breakdown`` once did:
  ``calibrated_topk`` over all N images, then one ``expected_error_breakdown`` per image group;
* ``streamed``: ``hierarchy_errors.gzsl_error_breakdowns``, ``--block`` images at a time;
* ``metrics``: for scale, the GZSL figures themselves (``scoring.gzsl_metrics``, K = 1 2 5 10 20,
  with a calibrated γ), which hold O(N) per-image thresholds.

The per-image figures are slopes between the two sizes; the projection is intercept + slope ×
12.9M. ``whole`` and ``streamed`` must give the same counts (checked, bit for bit).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ALL_SPLIT_IMAGES = 12_900_000
VARIANTS = ("reference", "whole", "streamed", "metrics")


def _rss_bytes() -> int:
    """Current resident set size (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def synthetic_gzsl(n: int, m: int, seed: int = 0, chunk: int = 50_000):  # noqa: ANN201 - lazy types
    """(graph, joint wnids, GZSLTopK) with N images: sorted top-m lists, many ties.

    Built ``chunk`` images at a time into preallocated arrays, so that the process's peak RSS
    while building stays close to the lists' own size and ru_maxrss measures the breakdown.
    """
    from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids
    from imagenet_zsl.scoring import GZSLTopK, TieRanks

    graph = load_class_graph("wordnet")
    unseen, seen = candidate_wnids(), training_wnids()
    joint = list(unseen) + list(seen)
    seen_mask = np.r_[np.zeros(len(unseen), bool), np.ones(len(seen), bool)]
    rng = np.random.default_rng(seed)
    # int32 ids, as the search writes them and evaluation/run/gzsl.py's build_gzsl keeps them
    lists = [np.empty((n, m), dtype) for dtype in (np.float32, np.int32, np.float32, np.int32)]
    labels = np.empty(n, np.int64)
    above, tied = np.empty(n, np.int64), np.empty(n, np.int64)
    for lo in range(0, n, chunk):
        b = min(chunk, n - lo)
        is_seen = rng.random(b) < 0.5
        label = np.where(
            is_seen, len(unseen) + rng.integers(0, len(seen), b), rng.integers(0, len(unseen), b)
        )
        part = []
        for first, size in ((len(unseen), len(seen)), (0, len(unseen))):
            # quantised scores, sorted descending: ties within and across the two lists
            part += [
                -np.sort(-np.round(rng.normal(size=(b, m)) * 8) / 8, axis=1).astype(np.float32),
                (first + rng.integers(0, size, (b, m))).astype(np.int32),
            ]
        own_first = rng.random(b) < 0.6  # the true class listed first in its own list 60 % of the time
        part[1][own_first & is_seen, 0] = label[own_first & is_seen]
        part[3][own_first & ~is_seen, 0] = label[own_first & ~is_seen]
        checked = GZSLTopK(*part, labels=label, seen_mask=seen_mask)  # validates, derives own ranks
        for whole, piece in zip(lists, part, strict=True):
            whole[lo : lo + b] = piece
        labels[lo : lo + b], above[lo : lo + b] = label, checked.own_ranks.above
        tied[lo : lo + b] = checked.own_ranks.tied
    # each chunk was validated above; skip __post_init__'s whole-array checks (O(N·m) temporaries)
    gz = object.__new__(GZSLTopK)
    gz.__dict__.update(
        zip(
            ("seen_scores", "seen_ids", "unseen_scores", "unseen_ids"),
            lists,
            strict=True,
        ),
        labels=labels,
        seen_mask=seen_mask,
        own_ranks=TieRanks(above, tied),
    )
    return graph, joint, gz


def list_bytes(gz) -> int:  # noqa: ANN001
    """Bytes the GZSL lists and tie ranks occupy (the inputs, held whatever the breakdown does)."""
    arrays = (gz.seen_scores, gz.seen_ids, gz.unseen_scores, gz.unseen_ids, gz.labels)
    return sum(a.nbytes for a in arrays) + gz.own_ranks.above.nbytes + gz.own_ranks.tied.nbytes


def _whole(graph, joint, gz, gamma: float) -> dict:  # noqa: ANN001
    """The breakdown on whole arrays (the unstreamed path, as evaluation/run/gzsl.py's caller once did)."""
    from imagenet_zsl.evaluation.hierarchy_errors import expected_error_breakdown
    from imagenet_zsl.scoring import calibrated_topk

    scores, ids = calibrated_topk(gz, gamma, gz.m, block=len(gz.labels) + 1)
    seen_img = gz.seen_images
    masks = {"all": np.ones(len(gz.labels), dtype=bool), "unseen_images": ~seen_img, "seen_images": seen_img}
    return {
        part: expected_error_breakdown(graph, joint, gz.labels[mask], ids[mask], scores[mask]).counts
        for part, mask in masks.items()
    }


def _streamed(graph, joint, gz, gamma: float, block: int) -> dict:  # noqa: ANN001
    from imagenet_zsl.evaluation.hierarchy_errors import gzsl_error_breakdowns

    return {part: b.counts for part, b in gzsl_error_breakdowns(graph, joint, gz, gamma, block).items()}


def child(variant: str, n: int, m: int, block: int) -> dict:
    """One measurement, in this (fresh) process."""
    graph, joint, gz = synthetic_gzsl(n, m)
    graph.ancestor_matrix  # noqa: B018 - built (and cached) before measuring, as evaluate has it
    rss_before = _rss_bytes()
    tracemalloc.start()
    start = time.perf_counter()
    counts = None
    if variant == "whole":
        counts = _whole(graph, joint, gz, 0.0)
    elif variant == "streamed":
        counts = _streamed(graph, joint, gz, 0.0, block)
    elif variant == "metrics":
        from imagenet_zsl.scoring import gzsl_metrics

        gzsl_metrics(gz, (1, 2, 5, 10, 20), gamma=0.5)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "variant": variant,
        "n": n,
        "inputs": list_bytes(gz),
        "extra_peak": peak,
        "rss_before": rss_before,
        "maxrss": maxrss,
        "seconds": seconds,
        "counts": counts,
    }


def _run_child(variant: str, n: int, m: int, block: int) -> dict:
    argv = [sys.executable, __file__, "--child", variant, "--sizes", str(n), "--m", str(m)]
    argv += ["--block", str(block)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _slope(rows: dict, variant: str, key: str, sizes: list[int]) -> tuple[float, float]:
    """(bytes per image, intercept) of ``key`` between the smallest and largest size."""
    lo, hi = rows[variant, sizes[0]][key], rows[variant, sizes[-1]][key]
    per_image = (hi - lo) / (sizes[-1] - sizes[0])
    return per_image, lo - per_image * sizes[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200000,400000", help="test-image counts, comma-separated")
    parser.add_argument("--m", type=int, default=21, help="list length per label space (max K + 1)")
    parser.add_argument("--block", type=int, default=65536, help="images per block when streaming")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.child:
        print(json.dumps(child(args.child, sizes[0], args.m, args.block)))
        return 0
    if len(sizes) < 2:
        parser.error("--sizes needs two sizes to measure a per-image slope")
    rows = {(v, n): _run_child(v, n, args.m, args.block) for n in sizes for v in VARIANTS}
    for n in sizes:
        if rows["whole", n]["counts"] != rows["streamed", n]["counts"]:
            print(f"MISMATCH at N={n}: the streamed counts differ from the whole-array ones")
            return 1
    mb, gb = 1e6, 1e9
    print(f"GZSL hierarchy breakdown, m={args.m}, block={args.block}, joint space 21,842 classes")
    print(f"{'variant':<10} {'N':>9} {'lists MB':>9} {'extra peak MB':>14} {'maxrss MB':>10} {'s':>7}")
    for (variant, n), row in rows.items():
        print(
            f"{variant:<10} {n:>9,} {row['inputs'] / mb:>9.1f} {row['extra_peak'] / mb:>14.1f} "
            f"{row['maxrss'] / mb:>10.1f} {row['seconds']:>7.2f}"
        )
    print(
        f"\nper test image (slope {sizes[0]:,} -> {sizes[-1]:,}), projected to {ALL_SPLIT_IMAGES:,} images:"
    )
    lists, lists0 = _slope(rows, "reference", "inputs", sizes)
    projected = (lists0 + lists * ALL_SPLIT_IMAGES) / gb
    print(f"  GZSL lists (the inputs): {lists:7.1f} B/image -> {projected:6.2f} GB")
    for row in rows.values():
        row["rss_growth"] = max(row["maxrss"] - row["rss_before"], 0)
    for variant in VARIANTS[1:]:
        extra, extra0 = _slope(rows, variant, "extra_peak", sizes)
        growth, growth0 = _slope(rows, variant, "rss_growth", sizes)
        what = "GZSL metrics" if variant == "metrics" else f"breakdown, {variant}"
        print(
            f"  {what:<19}: extra peak {extra:7.1f} B/image -> "
            f"{(extra0 + extra * ALL_SPLIT_IMAGES) / gb:6.2f} GB on top of the lists "
            f"(RSS growth: {growth:7.1f} B/image -> {(growth0 + growth * ALL_SPLIT_IMAGES) / gb:6.2f} GB)"
        )
    for variant in VARIANTS:
        rss, rss0 = _slope(rows, variant, "maxrss", sizes)
        print(
            f"  process maxrss, {variant:<9}: {rss:7.1f} B/image -> "
            f"{(rss0 + rss * ALL_SPLIT_IMAGES) / gb:6.2f} GB (imports, graph and lists included)"
        )
    print("counts: identical (whole vs streamed, bit for bit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
