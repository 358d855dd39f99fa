"""Benchmark: test images scored while extracted (``run`` with ``features.test: {store, backbone}``)
against ``extract`` alone plus the run on the stored features, each the real command in a fresh
process. Also ``tools/bench_extract.py --fused`` (the same arguments).

Set-up (not timed): fall11-style tar stores of ImageNet-sized JPEGs (about 500x375, quality 90),
one per ``--counts`` entry, whose classes are real fall11 wnids outside ILSVRC-2012 (the first
``--classes`` of ``splits/hop1.txt`` with a GloVe vector), and a training feature directory
(``imagenet-zsl extract`` of a few ILSVRC-2012 classes, the same backbone); the store indexes and
the class vectors are built once, into the bench's own cache (``$IMAGENET_ZSL_CACHE``), as a
user's second command finds them, and the package's modules are byte-compiled, as an installed
package's are. Then, for every count, ``--repeats`` times, interleaved, each in
a fresh process started exactly as the docs show the command (docs/guides/features.md,
docs/guides/run.md)::

    imagenet-zsl extract --store S --classes C --backbone B --weights random --out X
    imagenet-zsl run stored.yaml --out OUT1          # features: {train: T, test: X}
    imagenet-zsl run fused.yaml --out OUT2           # features: {train: T, test: {store: S,
                                                     #   backbone: B, weights: random}}

The recipes name one model (``eszsl``, fixed params), the split file of the test classes and
``semantics: glove-6b-50d``; every other key is the default (``--label-space all`` adds
``label_space: all``: every image ranked against ~20,800 classes). ``--weights random`` is the one
flag beyond the docs' commands: the weights' values change no cost (the same ResNet-50
arithmetic), and there is no download. The bench sets nothing in the children's environment but
the cache directory: whatever process tuning happens (``OMP_WAIT_POLICY``, malloc) is what each
command does itself; an ``OMP_WAIT_POLICY`` already in the environment is printed.

CPU is user + system seconds of the command and every process it waited for (its decode workers),
from ``wait4``; peak memory is the largest resident set of any one of them. **CPU per image** is
the least-squares slope of the median CPU over the image counts: the start-up (imports, backbone
built, model trained, plots) is the intercept, given separately. The ratio the bench prints is the
fused run's slope over the sum of the two stored-path slopes (the goal is at most 1.0), and the
same for the intercepts (the fixed cost a user pays once per command).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the three commands timed, in the order they run within a repeat
KINDS = ("extract", "stored run", "fused run")


def command_line() -> list[str]:
    """How the bench starts ``imagenet-zsl``: the installed script beside this Python, else the
    module (the same entry point)."""
    script = Path(sys.executable).parent / "imagenet-zsl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "imagenet_zsl.cli"]


def timed(argv: list[str], env: dict[str, str], log: Path) -> dict:
    """Run ``argv`` in a fresh process (output to ``log``): wall seconds, CPU seconds (user +
    system, its waited-for children included) and peak resident memory (MB, the largest process)."""
    with log.open("w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def test_classes(count: int) -> list[str]:
    """The first ``count`` classes of ``splits/hop1.txt`` (real fall11 wnids, none in ILSVRC-2012)
    that have a GloVe 6B 50-d vector (the recipes' semantics)."""
    from imagenet_zsl.semantics.lemma_vectors import load_class_vectors
    from imagenet_zsl.splits.io import read_wnid_list

    have = set(load_class_vectors("glove-6b-50d").wnids)
    wnids = [w for w in read_wnid_list(REPO / "splits" / "hop1.txt") if w in have][:count]
    if len(wnids) < count:
        raise SystemExit(f"--classes {count}: only {len(wnids)} hop1 classes have a GloVe vector")
    return wnids


def spread(total: int, wnids: list[str]) -> dict[str, int]:
    """``total`` images over ``wnids``, as evenly as possible."""
    return {w: total // len(wnids) + (i < total % len(wnids)) for i, w in enumerate(wnids)}


def prepare(args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict:
    """The stores, the class list, the training features and the warm cache (nothing timed)."""
    import imagenet_zsl
    from imagenet_zsl.data import ilsvrc2012_wnids
    from imagenet_zsl.features.synthetic_store import make_store
    from imagenet_zsl.images.store import open_store

    # the package's bytecode, as an installed package has it (an environment with
    # PYTHONDONTWRITEBYTECODE would otherwise have every command compile its modules anew)
    package = str(Path(imagenet_zsl.__file__).parent)
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True, env=env)
    size = (args.width, args.height)
    wnids = test_classes(args.classes)
    classes = work / "test_classes.txt"
    classes.write_text("".join(f"{w}\n" for w in wnids))
    stores = {}
    for n in args.counts:
        store = make_store(work / f"store-{n}", "tars", spread(n, wnids), size=size, seed=n, oddities=False)
        open_store(store.root, "tars")  # its index, into the bench's cache
        stores[n] = store.root
    train_wnids = sorted(ilsvrc2012_wnids())[:3]
    train_store = make_store(work / "train-store", "tars", dict.fromkeys(train_wnids, 4), size=size)
    train_classes = work / "train_classes.txt"
    train_classes.write_text("".join(f"{w}\n" for w in train_wnids))
    train = work / "train-features"
    argv = [*command_line(), "extract", "--store", str(train_store.root), "--classes", str(train_classes)]
    argv += ["--backbone", args.backbone, "--weights", "random", "--out", str(train)]
    timed(argv, env, work / "train-extract.log")
    return {"classes": classes, "stores": stores, "train": train}


def recipe(args: argparse.Namespace, path: Path, train: Path, test: object, classes: Path) -> Path:
    """A run recipe: one model, the test classes' split, GloVe semantics, defaults otherwise."""
    data = {
        "features": {"train": str(train), "test": test},
        "semantics": "glove-6b-50d",
        "models": {"eszsl": {"model": "eszsl", "params": {"gamma": 1.0, "lam": 1.0}}},
        "splits": [str(classes)],
    }
    if args.label_space != "split":
        data["label_space"] = args.label_space
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_repeat(args: argparse.Namespace, ready: dict, n: int, tag: str, work: Path, env: dict) -> dict:
    """The three commands on the store of ``n`` images, one after the other: {kind: timing}."""
    store, classes, cli = ready["stores"][n], ready["classes"], command_line()
    feats = work / f"feats-{tag}"
    extract = [*cli, "extract", "--store", str(store), "--classes", str(classes)]
    extract += ["--backbone", args.backbone, "--weights", "random", "--out", str(feats)]
    stored = recipe(args, work / f"stored-{tag}.yaml", ready["train"], str(feats), classes)
    spec = {"store": str(store), "backbone": args.backbone, "weights": "random"}
    fused = recipe(args, work / f"fused-{tag}.yaml", ready["train"], spec, classes)
    argvs = {
        "extract": extract,
        "stored run": [*cli, "run", str(stored), "--out", str(work / f"run-stored-{tag}")],
        "fused run": [*cli, "run", str(fused), "--out", str(work / f"run-fused-{tag}")],
    }
    rows = {kind: timed(argvs[kind], env, work / f"{kind.replace(' ', '-')}-{tag}.log") for kind in KINDS}
    rows["extract"]["bytes_per_image"] = _shard_bytes(feats) / n
    rows["fused run"]["bytes_per_image"] = (
        _shard_bytes(work / f"run-fused-{tag}" / "test-images" / "scored") / n
    )
    return rows


def _shard_bytes(directory: Path) -> int:
    """Bytes of the shards' files (what grows with the images: features or labels and ids, records)."""
    return sum(p.stat().st_size for p in directory.rglob("r[0-9]*") if p.is_file())


def fit(counts: list[int], cpu: dict[int, float]) -> tuple[float, float]:
    """(slope per image, intercept) of the least-squares line through (count, median CPU)."""
    xs, ys = counts, [cpu[n] for n in counts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def paired_ratios(counts: list[int], runs: dict[str, dict[int, list[dict]]]) -> list[float]:
    """Per repeat, the fused run's slope over the sum of the stored path's, each fitted on that
    repeat's runs alone (run close together in time, so a slow spell of the machine falls on all
    three): the spread of these says how far the medians' ratio can be trusted."""
    ratios = []
    for repeat in range(min(len(runs[kind][n]) for kind in KINDS for n in counts)):
        slope = {kind: fit(counts, {n: runs[kind][n][repeat]["cpu_s"] for n in counts})[0] for kind in KINDS}
        ratios.append(slope["fused run"] / (slope["extract"] + slope["stored run"]))
    return ratios


def summarise(args: argparse.Namespace, runs: dict[str, dict[int, list[dict]]]) -> dict:
    """Medians per kind and count, the per-image slopes and intercepts, and the ratios."""
    counts, top = args.counts, max(args.counts)
    table = {}
    for kind in KINDS:
        median = {n: statistics.median(r["cpu_s"] for r in runs[kind][n]) for n in counts}
        slope, intercept = fit(counts, median)
        table[kind] = {
            "cpu_s_median": {str(n): median[n] for n in counts},
            "cpu_s_runs": {str(n): [r["cpu_s"] for r in runs[kind][n]] for n in counts},
            "wall_s_median": {str(n): statistics.median(r["wall_s"] for r in runs[kind][n]) for n in counts},
            "cpu_ms_per_image": 1e3 * slope,
            "fixed_cpu_s": intercept,
            "peak_mb": max(r["peak_mb"] for r in runs[kind][top]),
            "bytes_per_image": statistics.median(r.get("bytes_per_image", 0.0) for r in runs[kind][top]),
        }
    stored = table["extract"]["cpu_ms_per_image"] + table["stored run"]["cpu_ms_per_image"]
    fixed = table["extract"]["fixed_cpu_s"] + table["stored run"]["fixed_cpu_s"]
    return {
        "kinds": table,
        "ratio_per_image": table["fused run"]["cpu_ms_per_image"] / stored,
        "ratio_per_image_by_repeat": paired_ratios(counts, runs),
        "ratio_fixed": table["fused run"]["fixed_cpu_s"] / fixed,
        "ratio_at_largest": statistics.median(r["cpu_s"] for r in runs["fused run"][top])
        / (table["extract"]["cpu_s_median"][str(top)] + table["stored run"]["cpu_s_median"][str(top)]),
    }


def report(args: argparse.Namespace, result: dict, load: tuple[float, float, float]) -> None:
    counts = ", ".join(str(n) for n in args.counts)
    print(
        f"\n{args.backbone} (random weights), test images {counts} over {args.classes} fall11 classes, "
        f"label space {args.label_space}; median of {args.repeats} interleaved fresh processes; "
        f"nproc {len(os.sched_getaffinity(0))}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    print("| command | CPU ms / image (slope) | fixed CPU s | median CPU s per count | peak MB | B / image |")
    print("|---|---:|---:|---|---:|---:|")
    for kind, row in result["kinds"].items():
        medians = " / ".join(f"{v:.2f}" for v in row["cpu_s_median"].values())
        print(
            f"| {kind} | {row['cpu_ms_per_image']:.1f} | {row['fixed_cpu_s']:.2f} | {medians} | "
            f"{row['peak_mb']:.0f} | {row['bytes_per_image']:.0f} |"
        )
    print(
        f"\nfused run / (extract + stored run): {result['ratio_per_image']:.3f}x CPU per image, "
        f"{result['ratio_fixed']:.3f}x fixed CPU, {result['ratio_at_largest']:.3f}x CPU at "
        f"{max(args.counts)} images; per image, repeat by repeat: "
        + ", ".join(f"{r:.3f}x" for r in result["ratio_per_image_by_repeat"])
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fused", action="store_true", help="ignored (bench_extract.py's flag)")
    parser.add_argument(
        "--counts",
        default="32,128",
        type=lambda s: sorted({int(v) for v in s.split(",")}),
        help="test-image counts, at least two (default 32,128): CPU per image is the slope over them",
    )
    parser.add_argument("--classes", type=int, default=8, help="test classes (default 8)")
    parser.add_argument("--backbone", default="resnet50")
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per count (default 3)")
    parser.add_argument("--label-space", default="split", choices=["split", "all"])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--keep", help="work in this folder and keep it")
    args, _ = parser.parse_known_args(argv)
    if len(args.counts) < 2:
        parser.error("--counts: give at least two image counts")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_fused."))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["IMAGENET_ZSL_CACHE"] = str(work / "cache")
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" in env:
        print(f"note: OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']} is set in this environment", flush=True)
    started = time.perf_counter()
    # in a fresh process: a command forked from this one starts with this process's resident pages
    # counted in its peak (Linux keeps the high-water mark across exec), so this one stays small
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        ready = pool.submit(prepare, args, work, env).result()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"stores, training features and cache ready in {time.perf_counter() - started:.0f} s "
        f"(this process: {own:.0f} MB peak, the floor of every peak below)",
        flush=True,
    )
    runs: dict[str, dict[int, list[dict]]] = {kind: {n: [] for n in args.counts} for kind in KINDS}
    for repeat in range(args.repeats):
        for n in args.counts:
            rows = one_repeat(args, ready, n, f"{n}-{repeat}", work, env)
            for kind, row in rows.items():
                runs[kind][n].append(row)
            line = ", ".join(
                f"{kind} {row['cpu_s']:.2f} s CPU ({row['wall_s']:.1f} s wall)" for kind, row in rows.items()
            )
            print(f"[{n} images, repeat {repeat + 1}] {line}", flush=True)
    load = os.getloadavg()
    result = summarise(args, runs)
    report(args, result, load)
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "load": load, "args": vars(args)}, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
