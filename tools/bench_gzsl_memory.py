"""Benchmark: peak memory (RSS) of evaluate's ZSL and GZSL metrics (with the WordNet error breakdown)
per test image, measured at two sizes (the largest >= 1M images) and continued to the 12.9M test
images of the "All" split.

    python tools/bench_gzsl_memory.py [--sizes 250000,1000000] [--m 21] [--variants ...]

(``PYTHONPATH=<another checkout>`` measures that version's ``imagenet_zsl`` with this harness.)

Setting: the real WordNet graph, the "All" label space (20,842 unseen candidate classes) and the
1,000 ILSVRC-2012 seen classes, m = max K + 1 = 21 (K = 1 2 5 10 20). No search is run (no GEMM):
synthetic search results, written as the search's per-shard cache; the search's join turns them
into what ``evaluation/run/search_sets.py`` returns: per image set the labels, row numbers and
tie ranks (int64, on the heap) and the top-m lists (float32 scores, int32 ids) as memory-mapped
.npy files in the cache directory. What grows per image here (top-k lists,
tie counts, true ranks, per-class tables, the calibrated merge, the γ thresholds) does not depend
on the feature dimension, which therefore does not enter. Continuous scores (so that the
Seen-Unseen curves have a breakpoint per threshold entry, their largest size), with a tie in 5 % of
the lists. N test images, plus 50,000 seen images and 10,000 + 10,000 validation images whatever N.

Each (variant, N) runs in a fresh process (``--child``):

* ``inputs``: the search results only (the floor);
* ``zsl``: ``evaluation.run.zsl.zsl_metrics`` (hit@K, both tie rules, the breakdown, hP@K);
* ``gzsl``: ``evaluation.run.gzsl.gzsl_metrics`` (the joint lists, direct stacking, AUSUC, the
  calibrated γ, the curves to plot, per-class GZSL hit@K and both breakdowns);
* ``metrics``: both, as ``evaluation.run.compute_outputs`` runs them (GZSL while the ZSL result
  is held);
* ``evaluate``: ``metrics``, then the run directory's top-k lists written as
  ``evaluation.run.writer`` writes them: ``evaluate --gzsl`` after its search.

Every variant starts from the search cache (one entry per shard of 100,000 images) joined by the
search's own join (``search_sets.joined_from_cache``, inside the measured process), so the
memory of that join is in every figure.

Memory, measured: the peak RSS is the kernel's high-water mark (VmHWM: heap and file-backed pages
together, what the issue's "peak RSS" counts); the peak RssAnon and RssFile are sampled every 5 ms
in a thread. The slope is between the two measured sizes, and the figure at 12.9M is the line
through both measured points, continued; no model of the code enters it. Where the heap goes is
reported apart, phase by phase (tracemalloc, :class:`PhaseTracker`), each phase projected on its
own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ALL_SPLIT_IMAGES = 12_900_000
VARIANTS = ("inputs", "zsl", "gzsl", "metrics", "evaluate")
#: image sets whose size does not grow with the test split: (name, images, own space, spaces)
FIXED_SETS = (
    ("seen", 50_000, "seen", ("unseen", "seen")),
    ("val", 10_000, "val_unseen", ("seen", "val_unseen")),
    ("val_seen", 10_000, "seen", ("seen", "val_unseen")),
)
VAL_CLASSES = 500


def _status_bytes(key: str) -> int:
    """A field of /proc/self/status in bytes (0 where there is none)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _space_sizes() -> dict[str, int]:
    from imagenet_zsl.hierarchy.universe import candidate_wnids, training_wnids

    return {"unseen": len(candidate_wnids()), "seen": len(training_wnids()), "val_unseen": VAL_CLASSES}


SHARD = 100_000  # images per cached shard, as a feature directory's shards


def _sets() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(name, own space, spaces searched) of each image set."""
    return (("test", "unseen", ("unseen", "seen")), *((s[0], s[2], s[3]) for s in FIXED_SETS))


def write_set(
    directory: Path, name: str, n: int, own: str, spaces: tuple[str, ...], m: int, seed: int
) -> list[tuple[str, str, int, int]]:
    """One image set's synthetic search results, one search-cache entry per shard of ``SHARD``
    images (``evaluation.run.cache.SearchCache``, the files the search leaves: row numbers relative
    to the shard) → the ``done`` list that the search's join reads: (shard, key, images, offset)."""
    from imagenet_zsl.evaluation.run.cache import SearchCache
    from imagenet_zsl.scoring import true_ranks

    sizes = _space_sizes()
    rng = np.random.default_rng(seed)
    cache = SearchCache(directory / "cache")
    done = []
    for lo in range(0, n, SHARD):
        b = min(SHARD, n - lo)
        labels = rng.integers(0, sizes[own], b)
        shard = {"labels": labels, "rows": np.arange(b, dtype=np.int64)}
        for space in spaces:
            # continuous scores (one breakpoint per entry: the curves' worst case), a tie in 5 % of
            # the rows, sorted descending; distinct ids: a run of m consecutive classes
            scores = rng.normal(size=(b, m)).astype(np.float32)
            tie = rng.random(b) < 0.05
            scores[tie, 1] = scores[tie, 0]
            scores = -np.sort(-scores, axis=1)
            ids = (rng.integers(0, sizes[space], b)[:, None] + np.arange(m)) % sizes[space]
            if space == own:  # the true class listed first 60 % of the time
                first = rng.random(b) < 0.6
                ids[first, 0] = labels[first]
                ranks = true_ranks(labels, topk_ids=ids, topk_scores=scores)
                shard["above"], shard["tied"] = ranks.above, ranks.tied
            shard[f"{space}.scores"], shard[f"{space}.ids"] = scores, ids.astype(np.int32)
            shard[f"{space}.tail"] = np.zeros(b, np.int32)  # continuous scores: no list's last value repeats
        shard_name = f"shard-{lo // SHARD:05d}"
        cache.put(name, shard_name, "bench", shard)
        done.append((shard_name, "bench", b, lo))
    return done


def write_results(directory: Path, n: int, m: int) -> None:
    """Every image set's search cache and ``done.json`` (the done lists)."""
    done = {}
    for i, (name, own, spaces) in enumerate(_sets()):
        size = n if name == "test" else next(s[1] for s in FIXED_SETS if s[0] == name)
        done[name] = write_set(directory, name, size, own, spaces, m, seed=i)
    (directory / "done.json").write_text(json.dumps({"m": m, "done": done}))


def load_results(directory: Path):  # noqa: ANN201 - lazy types
    """SearchResults as the search returns them, joined from its cache by the search's own join
    (``search_sets.joined_from_cache``): labels, row numbers and tie ranks on the heap, the
    lists memory-mapped .npy files in the cache directory."""
    from imagenet_zsl.evaluation.run import search_sets
    from imagenet_zsl.evaluation.run.cache import SearchCache
    from imagenet_zsl.evaluation.run.results import SearchResults

    record = json.loads((directory / "done.json").read_text())
    cache, sets = SearchCache(directory / "cache"), {}
    for name, _, spaces in _sets():
        searchers = {space: SimpleNamespace(k=record["m"]) for space in spaces}
        done = [search_sets.CachedPart(*entry) for entry in record["done"][name]]
        sets[name] = search_sets.joined_from_cache(name, searchers, cache, done)
    return SearchResults(sets["test"], sets["seen"], sets["val"], sets["val_seen"])


def write_lists(directory: Path, results: object) -> None:
    """The run directory's top-k lists, as ``evaluation.run.writer`` writes them."""
    from imagenet_zsl.evaluation.run import writer

    topk = directory / "run-topk"
    topk.mkdir(exist_ok=True)
    for name, result in results.sets():
        writer.save_set(topk, name, result)


def inputs(graph):  # noqa: ANN001, ANN201 - lazy types
    """The parts of EvaluationInputs that the metrics read (the "All" label space, no misses)."""
    from imagenet_zsl.hierarchy.universe import candidate_wnids, training_wnids

    unseen, seen = candidate_wnids(), training_wnids()
    space = SimpleNamespace(
        wnids=unseen, spec="all", split=unseen, seen_source="split", seen_count=len(seen),
        without_prototype=[], miss=[],
    )  # fmt: skip
    return SimpleNamespace(
        ks=[1, 2, 5, 10, 20], graph=graph, space=space, space_wnids=unseen, eval_wnids=unseen,
        seen_wnids=seen, val_wnids=unseen[:VAL_CLASSES], class_counts_all=np.ones(len(unseen)),
        miss_counts=np.zeros(0, np.int64), spaces={"unseen": SimpleNamespace(duplicate_classes=0)},
        sets=SimpleNamespace(excluded_seen=(), seen_fd=None),
        cfg=SimpleNamespace(val_split="val.json", gamma=None, gamma_source=None, hold_calibration_rows=False),
    )  # fmt: skip


class PhaseTracker:
    """tracemalloc peaks phase by phase: each wrapped top-level call is one phase, and the code
    between two of them another. Why: a peak measured once over the whole step is the largest
    phase at the sizes measured (the breakdown's fixed-size blocks at a few 100K images), not the
    one that grows fastest; projecting each phase separately finds the peak at 12.9M."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, int]] = []
        self.depth = 0

    def close(self, name: str) -> None:
        self.phases.append((name, tracemalloc.get_traced_memory()[1]))
        tracemalloc.reset_peak()

    def wrap(self, owner: object, attribute: str) -> None:
        function = getattr(owner, attribute, None)
        if function is None:  # an older version without this step (see --help)
            return

        def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if self.depth:
                return function(*args, **kwargs)
            self.close(f"before {attribute}")
            self.depth += 1
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1
                self.close(attribute)

        setattr(owner, attribute, wrapped)


def _tracked(variant: str) -> PhaseTracker:
    """Wrap the top-level steps of the variant's metrics function."""
    import imagenet_zsl.evaluation.run.gzsl as run_gzsl
    import imagenet_zsl.evaluation.run.zsl as run_zsl
    from imagenet_zsl import scoring

    tracker = PhaseTracker()
    if variant == "zsl":
        for owner, name in ((run_zsl, "expected_error_breakdown"), (run_zsl, "scored_labels_and_ranks")):
            tracker.wrap(owner, name)
        tracker.wrap(scoring, "hit_at_k")
    elif variant == "gzsl":
        for name in ("build_gzsl", "_calibration", "_hierarchy", "_curves"):
            tracker.wrap(run_gzsl, name)
        for name in ("gzsl_metrics", "gzsl_calibrated", "gzsl_class_rates"):
            tracker.wrap(scoring, name)
    return tracker


class RssSampler:
    """The largest RssAnon and RssFile seen, sampled every ``interval`` seconds in a thread (the
    kernel keeps a high-water mark of the total only: VmHWM)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval, self.anon, self.file = interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        self.anon = max(self.anon, _status_bytes("RssAnon"))
        self.file = max(self.file, _status_bytes("RssFile"))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _metrics(variant: str, inp: SimpleNamespace, results: object) -> dict | None:
    """The variant's step, as ``evaluation.run.compute_outputs`` runs it (ZSL, then GZSL while the
    ZSL result is held)."""
    from imagenet_zsl.evaluation.run.gzsl import gzsl_metrics
    from imagenet_zsl.evaluation.run.zsl import zsl_metrics

    if variant == "zsl":
        return zsl_metrics(inp, results).blocks["hierarchy"]["counts"]
    if variant in ("gzsl", "metrics", "evaluate"):
        zsl = zsl_metrics(inp, results) if variant != "gzsl" else None
        counts = gzsl_metrics(inp, results).block["hierarchy"]["calibrated"]["all"]["counts"]
        del zsl
        return counts
    return None


def child(variant: str, directory: Path) -> dict:
    """One measurement, in this (fresh) process."""
    from imagenet_zsl.hierarchy.universe import load_class_graph

    graph = load_class_graph("wordnet")
    graph.ancestor_matrix  # noqa: B018 - built (and cached) before measuring, as evaluate has it
    inp = inputs(graph)
    anon_base = _status_bytes("RssAnon")  # imports and graph
    results = load_results(directory)
    heap_inputs = sum(
        a.nbytes
        for _, part in results.sets()
        for a in (part.labels, part.rows, part.ranks.above, part.ranks.tied)
    )
    tracker = _tracked(variant) if variant != "metrics" else PhaseTracker()
    tracemalloc.start()
    start = time.perf_counter()
    with RssSampler() as sampler:
        summary = _metrics(variant, inp, results)
        if variant == "evaluate":
            write_lists(directory, results)
    seconds = time.perf_counter() - start
    tracker.close("after")
    tracemalloc.stop()
    return {
        "variant": variant,
        "n": len(results.test.labels),
        "base": anon_base,
        "heap_inputs": heap_inputs,
        "phases": tracker.phases,
        "traced_peak": max(peak for _, peak in tracker.phases),
        "anon_peak": sampler.anon,
        "file_peak": sampler.file,
        "maxrss": _status_bytes("VmHWM"),
        "seconds": seconds,
        "summary": summary,
    }


def _run_child(variant: str, directory: Path) -> dict:
    argv = [sys.executable, __file__, "--child", variant, "--data", str(directory)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(lo: float, hi: float, sizes: list[int]) -> tuple[float, float]:
    """(bytes per image, value at 12.9M images) of a figure measured at the smallest and largest
    size: the slope between the two measured points, continued from the largest one."""
    per_image = (hi - lo) / (sizes[-1] - sizes[0])
    return per_image, hi + per_image * (ALL_SPLIT_IMAGES - sizes[-1])


def project(rows: dict, variant: str, sizes: list[int]) -> dict:
    """Where the variant's heap goes at 12.9M images, phase by phase (tracemalloc): base
    (imports, graph) + the search results' heap arrays + the largest projected phase peak. A
    breakdown to read; the goal is judged on the measured peak RSS (:func:`measured`)."""
    small, large = rows[variant, sizes[0]], rows[variant, sizes[-1]]
    base = large["base"]
    inputs_per, inputs_at = _line(small["heap_inputs"], large["heap_inputs"], sizes)
    names = [name for name, _ in large["phases"]]
    if names != [name for name, _ in small["phases"]]:
        raise SystemExit(f"{variant}: the phases differ between sizes: {names}")
    phases = {}
    for (name, lo), (_, hi) in zip(small["phases"], large["phases"], strict=True):
        per, at = _line(lo, hi, sizes)
        if name not in phases or at > phases[name][1]:
            phases[name] = (per, at)
    top = max(phases, key=lambda name: phases[name][1])
    return {
        "base": base,
        "inputs": (inputs_per, inputs_at),
        "phases": phases,
        "top": top,
        "peak_per_image": inputs_per + phases[top][0],
        "peak": base + inputs_at + phases[top][1],
    }


def measured(rows: dict, variant: str, sizes: list[int]) -> dict:
    """The measured peak RSS (VmHWM: heap and file-backed pages) and sampled peak RssAnon at the
    smallest and largest size, their per-image slope and the line through both continued to
    12.9M images."""
    small, large = rows[variant, sizes[0]], rows[variant, sizes[-1]]
    return {
        key: (small[key], large[key], *_line(small[key], large[key], sizes))
        for key in ("maxrss", "anon_peak")
    }


def measure(sizes: list[int], m: int, variants: tuple[str, ...] = VARIANTS) -> dict:
    rows = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-gzsl-") as tmp:
            write_results(Path(tmp), n, m)
            for variant in variants:
                rows[variant, n] = _run_child(variant, Path(tmp))
    return rows


def _machine() -> str:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    return f"nproc {os.cpu_count()}, load average {load}"


def report(rows: dict, sizes: list[int], m: int) -> dict:
    mb, gb = 1e6, 1e9
    variants = sorted({v for v, _ in rows}, key=VARIANTS.index)
    print(f"evaluate's metrics at m={m}: 'All' label space (20,842 + 1,000 classes), WordNet breakdown")
    print("no search: synthetic search results (the feature dimension does not enter this memory)")
    print(f"machine: {_machine()}")
    head = f"{'variant':<8} {'N':>10} {'peak RSS MB':>12} {'peak anon MB':>13} {'peak file MB':>13}"
    print(f"{head} {'traced MB':>10} {'s':>7}")
    for (variant, n), row in rows.items():
        print(
            f"{variant:<8} {n:>10,} {row['maxrss'] / mb:>12.1f} {row['anon_peak'] / mb:>13.1f} "
            f"{row['file_peak'] / mb:>13.1f} {row['traced_peak'] / mb:>10.1f} {row['seconds']:>7.2f}"
        )
    print(
        f"\nmeasured peak RSS, slope {sizes[0]:,} -> {sizes[-1]:,} images, continued to {ALL_SPLIT_IMAGES:,}:"
    )
    out = {}
    for variant in variants:
        got = out[variant] = measured(rows, variant, sizes)
        for key, what in (("maxrss", "peak RSS (VmHWM)"), ("anon_peak", "peak RssAnon")):
            lo, hi, per, at = got[key]
            print(
                f"  {variant:<8} {what:<17} {lo / gb:.3f} GB -> {hi / gb:.3f} GB: {per:6.1f} B/image "
                f"-> {at / gb:.2f} GB at {ALL_SPLIT_IMAGES:,}"
            )
    print("\nwhere the heap goes (tracemalloc, each phase projected on its own):")
    for variant in (v for v in variants if v in ("zsl", "gzsl")):
        p = project(rows, variant, sizes)
        per, at = p["inputs"]
        print(f"  {variant}: search results' heap arrays {per:.1f} B/image -> {at / gb:.2f} GB")
        for name, (per, at) in p["phases"].items():
            print(f"          phase {name:<28} {per:7.1f} B/image -> {at / gb:5.2f} GB")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250000,1000000", help="test-image counts, comma-separated")
    parser.add_argument("--m", type=int, default=21, help="list length per label space (max K + 1)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="variants to run, comma-separated")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.data)))
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    variants = tuple(v for v in VARIANTS if v in args.variants.split(","))
    if len(sizes) < 2:
        parser.error("--sizes needs two sizes to measure a per-image slope")
    rows = measure(sizes, args.m, variants)
    out = report(rows, sizes, args.m)
    peak = max(got["maxrss"][3] for got in out.values())
    if sizes[-1] < 1_000_000:
        print(f"goal not judged: the largest size measured is under 1M images ({sizes[-1]:,})")
    else:
        verdict = "met" if peak < 4e9 else "NOT met"
        print(
            f"goal: peak RSS under 4 GB at {ALL_SPLIT_IMAGES:,} test images: {peak / 1e9:.2f} GB, {verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
