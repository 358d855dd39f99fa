"""Benchmark `imagenet-zsl images filter` against a plain full-batch reference.

Writes a synthetic feature directory (Gaussian class clusters, 5% relabelled images), then runs,
each in a fresh process so peak memory is its own:

- ``softmax``: the filter as shipped (float16 store loaded once, mini-batch AdamW, cross-fitted)
- ``ridge``: the filter with ``--classifier ridge`` (one statistics pass serves every fold)
- ``reference``: the simple way: ``FeatureDir.load()`` into float32, then per fold a float32 copy
  of the training rows and a full-batch L-BFGS softmax with as many iterations as epochs

and prints time, peak memory above the post-import baseline, the fraction of images kept, recall
of the planted labels, the fraction of clean images kept, and ratios against the reference, plus
an extrapolation of memory and time to the issue's scale (5,000 classes x 300 images x 2048-d).

    .venv/bin/python tools/bench_filter.py --classes 500 --per-class 100 --dim 512
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.image_filter.filtered import kept_image_ids
from imagenet_zsl.image_filter.folds import stratified_folds
from imagenet_zsl.image_filter.params import FilterParams
from imagenet_zsl.image_filter.quality import filter_feature_dir

FULL_SCALE = (5000, 300, 2048)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_synthetic(path: Path, classes: int, per_class: int, dim: int, seed: int = 0) -> None:
    """Shards of 10,000 rows generated one at a time (the writer never holds everything)."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 1.0, (classes, dim)).astype(np.float32)
    n = classes * per_class
    order = rng.permutation(n)
    truth = order % classes
    noisy = rng.random(n) < 0.05
    labels = np.where(noisy, (truth + rng.integers(1, classes, n)) % classes, truth)
    path.mkdir(parents=True)
    records = []
    for k, start in enumerate(range(0, n, 10_000)):
        rows = slice(start, min(start + 10_000, n))
        x = means[truth[rows]] + rng.normal(0.0, 2.0, (len(truth[rows]), dim)).astype(np.float32)
        ids = [f"img{i:09d}" for i in range(rows.start, rows.stop)]
        records.append(write_shard(path, shard_name(0, k), x, labels[rows], ids))
    write_manifest(
        path,
        {"classes": [f"n{c:08d}" for c in range(classes)], "dim": dim, "shards": records, "simulated": True},
    )
    np.save(path.parent / "noisy.npy", noisy)


def reference_filter(features_dir: Path, folds: int, epochs: int, seed: int) -> np.ndarray:
    """Plain cross-fitted softmax: everything float32 in memory, full-batch L-BFGS per fold."""
    import torch
    import torch.nn.functional as F

    fdir = FeatureDir(features_dir)
    block = fdir.load()
    x, y = torch.from_numpy(block.features), torch.from_numpy(block.labels)
    fold = stratified_folds(block.labels, len(fdir.classes), folds, seed)
    predicted = np.full(len(y), -1)
    for f in range(folds):
        train = torch.from_numpy(np.flatnonzero(fold != f))
        xtr, ytr = x[train], y[train]  # float32 copies of the training rows
        mean, std = xtr.mean(0), xtr.std(0).clamp_min(1e-6)
        xtr = (xtr - mean) / std
        weight = torch.zeros(x.shape[1], len(fdir.classes), requires_grad=True)
        bias = torch.zeros(len(fdir.classes), requires_grad=True)
        optimizer = torch.optim.LBFGS([weight, bias], max_iter=epochs, history_size=10)

        def closure(xtr=xtr, ytr=ytr, weight=weight, bias=bias, optimizer=optimizer):
            optimizer.zero_grad()
            loss = F.cross_entropy(xtr @ weight + bias, ytr) + 0.5e-4 * (weight**2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        test = np.flatnonzero(fold == f)
        with torch.no_grad():
            logits = ((x[test] - mean) / std) @ weight + bias
        predicted[test] = logits.argmax(1).numpy()
        del xtr
    return predicted == block.labels


def worker(mode: str, features_dir: Path, out: Path, args: argparse.Namespace) -> dict:
    import matplotlib.pyplot  # noqa: F401  (imported before the baseline: not data memory)
    import pandas  # noqa: F401
    import tabulate  # noqa: F401
    import torch

    torch.set_num_threads(args.threads)
    torch.zeros(1) @ torch.zeros(1)  # load the BLAS kernels before the baseline too
    baseline = peak_rss_mib()
    start = time.perf_counter()
    if mode == "reference":
        correct = reference_filter(features_dir, args.folds, args.epochs, args.seed)
        seconds, peak = time.perf_counter() - start, peak_rss_mib()
    else:
        params = FilterParams(
            folds=args.folds, epochs=args.epochs, classifier=mode, seed=args.seed, device="cpu"
        )
        filter_feature_dir(features_dir, out, params)
        seconds, peak = time.perf_counter() - start, peak_rss_mib()
        kept = kept_image_ids(out)
        ids = np.concatenate([b.ids for b in FeatureDir(features_dir).iter_shards()])
        correct = np.isin(ids, sorted(kept))
    noisy = np.load(features_dir.parent / "noisy.npy")
    return {
        "seconds": seconds,
        "peak_mib": peak - baseline,
        "kept_fraction": float(correct.mean()),
        "recall": float((~correct & noisy).sum() / noisy.sum()),
        "clean_kept": float(correct[~noisy].mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=500)
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="softmax,ridge,reference")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        root = Path(args.dir)
        print(json.dumps(worker(args.worker, root / "features", root / args.worker, args)))
        return
    n = args.classes * args.per_class
    print(
        f"synthetic: {args.classes} classes x {args.per_class} images x {args.dim}-d "
        f"({n} rows, {n * args.dim * 2 / 2**20:.0f} MiB as float16), {args.folds} folds, "
        f"{args.epochs} epochs, {args.threads} threads"
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_filter.") as tmp:
        write_synthetic(Path(tmp) / "features", args.classes, args.per_class, args.dim, args.seed)
        forwarded = [
            f"--{k.replace('_', '-')}={v}"
            for k, v in vars(args).items()
            if k not in ("worker", "dir", "modes")
        ]
        for mode in args.modes.split(","):
            done = subprocess.run(
                [sys.executable, __file__, "--worker", mode, "--dir", tmp, *forwarded],
                check=True,
                capture_output=True,
                text=True,
            )
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            r = results[mode]
            print(
                f"{mode:>9}: {r['seconds']:8.1f} s  peak +{r['peak_mib']:7.0f} MiB  "
                f"kept {r['kept_fraction']:.3f}  recall(planted) {r['recall']:.3f}  "
                f"clean kept {r['clean_kept']:.3f}"
            )
    if "reference" in results:
        ref = results["reference"]
        for mode in results.keys() - {"reference"}:
            r = results[mode]
            print(
                f"{mode} vs reference: speed-up {ref['seconds'] / r['seconds']:.2f}x, "
                f"memory saving {ref['peak_mib'] / max(r['peak_mib'], 1):.2f}x (>1: ours better)"
            )
    c, p, d = FULL_SCALE
    rows = c * p
    print(
        f"extrapolated to {c}x{p}x{d}: float16 store {rows * d * 2 / 2**30:.1f} GiB "
        f"(reference float32 + fold copy: "
        f"{rows * d * 4 * (1 + (args.folds - 1) / args.folds) / 2**30:.1f} GiB)"
    )
    # softmax work ~ rows x dim x classes per epoch; ridge ~ rows x dim x (dim + classes)
    work = {
        "softmax": (rows * d * c) / (n * args.dim * args.classes),
        "ridge": (rows * d * (d + c)) / (n * args.dim * (args.dim + args.classes)),
    }
    for mode, factor in work.items():
        if mode in results:
            hours = results[mode]["seconds"] * factor / 3600
            print(f"  {mode}: ~{hours:.1f} h on this machine with {args.threads} threads")


if __name__ == "__main__":
    main()
