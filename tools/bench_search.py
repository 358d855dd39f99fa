#!/usr/bin/env python
"""Benchmark the evaluation search (exact top-k inner product) and the whole ``evaluate`` command.

``--mode search`` (on the same random data, N queries x C classes x E dims, float32) times:

1. the toolkit's search: ``imagenet_zsl.evaluation.topk_inner_product`` (top-k kept);
2. the floor: the plain BLAS matrix product ``Q @ P.T`` alone (numpy), no top-k at all;
3. the naive reference: the full score matrix, then a full ``argsort`` of every row.

and prints toolkit/matmul (target <= 1.3 on CPU) and naive/toolkit. It also checks that the
toolkit's top-k ids equal the naive reference's. With a GPU visible to torch it additionally
times the GPU search against its fp32 GEMM floor and plain matmul + topk in fp32 and bf16, and
extrapolates to the 12.9M ImageNet-21K test images (target < 60 s); ``--devices cpu`` runs that
code path on the CPU.

``--mode evaluate`` writes a float16 feature directory (``--eval-images`` images of
``--eval-classes`` classes, ``--dim``-d, in shards of 10,000 rows), a prototype file and a split,
then times the whole ``imagenet-zsl evaluate`` command (reading and verifying the shards, fp16 ->
fp32, search, tie ranks, metrics, per-class table, report, plots) against a plain floor over the
same shards: ``np.load``, fp16 -> fp32, ``Q @ P.T`` tiled as the toolkit tiles it (multi-threaded
BLAS) and ``torch.topk``, nothing else. Each runs in a fresh interpreter, as a user runs the
command; the floor reports the seconds its imports took, the command its start-up (importing the
CLI and building the parser: the stage is imported when the command runs). The two alternate
``--repeats`` times and each keeps its best. Both also run at a quarter of the images (at most one
shard): it prints evaluate / floor per image (the ratio of the slopes between the two sizes, so
fixed costs such as imports drop out; target <= 1.05), end to end (spawn to exit at the full size;
target <= 1.15) and each one's fixed cost (the line through both sizes at 0 images), on wall time
and on CPU time (user + sys of the process: steadier than wall time on a machine shared with other
work).

    .venv/bin/python tools/bench_search.py                    # both, ~3-5 min on 2 busy cores
    .venv/bin/python tools/bench_search.py --mode evaluate --eval-images 200000  # the issue's size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imagenet_zsl.devices import cuda_available  # noqa: E402
from imagenet_zsl.evaluation.search import TILE_ELEMENTS, topk_inner_product  # noqa: E402
from imagenet_zsl.features.shards import shard_name, write_manifest, write_shard  # noqa: E402
from imagenet_zsl.semantics.class_vectors import ClassVectors  # noqa: E402

IMAGENET21K_TEST_IMAGES = 12_900_000


def timed(fn, repeats: int):
    """Best wall time of ``repeats`` calls (the least disturbed by other load) and the result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


SHARD_ROWS = 10_000


def write_bench_inputs(root: Path, images: int, classes: int, dim: int, seed: int) -> dict[str, Path]:
    """A float16 feature directory, a prototype file and a split of ``classes`` synthetic wnids."""
    rng = np.random.default_rng(seed)
    wnids = [f"n{i:08d}" for i in range(classes)]
    features = root / "features"
    features.mkdir(parents=True)
    records = []
    for index, start in enumerate(range(0, images, SHARD_ROWS)):
        rows = np.arange(start, min(start + SHARD_ROWS, images))
        labels = rows % classes
        block = rng.standard_normal((len(rows), dim), dtype=np.float32).astype(np.float16)
        ids = [f"{wnids[label]}/{row}.JPEG" for row, label in zip(rows, labels, strict=True)]
        records.append(write_shard(features, shard_name(0, index), block, labels, ids))
    write_manifest(features, {"classes": wnids, "dim": dim, "shards": records, "simulated": True})
    ClassVectors(wnids, rng.standard_normal((classes, dim), dtype=np.float32)).save(root / "protos.npz")
    (root / "split.txt").write_text("\n".join(wnids) + "\n")
    return {"features": features, "prototypes": root / "protos.npz", "split": root / "split.txt"}


#: the floor, run as ``python -c FLOOR_SCRIPT FEATURES PROTOTYPES K TILE_ROWS TIMING_JSON``: its
#: imports are timed apart from its work, as the command's are (see TOOLKIT_SCRIPT)
FLOOR_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
import numpy as np
import torch
t1 = time.perf_counter()
features, protos, out = Path(sys.argv[1]), sys.argv[2], sys.argv[5]
k, tile = int(sys.argv[3]), int(sys.argv[4])
with np.load(protos) as data:
    prototypes = np.ascontiguousarray(data["matrix"], dtype=np.float32)
k = min(k, len(prototypes))
paths = sorted(features.glob("*.features.npy"))
rows = 0
with torch.inference_mode():
    for path in paths:
        shard = np.load(path).astype(np.float32)
        scores_out = np.empty((len(shard), k), np.float32)
        ids_out = np.empty((len(shard), k), np.int64)
        for lo in range(0, len(shard), tile):
            scores = torch.from_numpy(shard[lo : lo + tile] @ prototypes.T)
            values, ids = torch.topk(scores, k, dim=1)
            scores_out[lo : lo + tile], ids_out[lo : lo + tile] = values.numpy(), ids.numpy()
        rows += len(shard)
t2 = time.perf_counter()
Path(out).write_text(json.dumps({"imports": t1 - t0, "work": t2 - t1, "rows": rows}))
"""

#: the command, run as ``python -c TOOLKIT_SCRIPT TIMING_JSON ARGV...``: what the ``imagenet-zsl``
#: entry point does (import the CLI, call ``main``). Start-up (importing the CLI and building its
#: parser) is timed apart: ``main`` is handed the parser built here instead of building another.
#: The stage's own imports (numpy, torch, ...) happen inside the command, so they count as work.
TOOLKIT_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
from imagenet_zsl import cli
parser = cli.build_parser()
cli.build_parser = lambda: parser
t1 = time.perf_counter()
code = cli.main(sys.argv[2:])
t2 = time.perf_counter()
open(sys.argv[1], "w").write(json.dumps({"imports": t1 - t0, "work": t2 - t1, "code": code}))
sys.exit(code)
"""


def fresh_process(script: str, args: list[str], timing: Path) -> dict:
    """Run ``python -c script args`` in a new interpreter: its wall and CPU (user + sys) seconds from
    spawn to exit, and the seconds the script reports for its imports and its work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"benchmark process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"wall": wall, "cpu": cpu, **json.loads(timing.read_text())}


def _best(runs: list[dict], key: str) -> float:
    return min(run[key] for run in runs)


def _evaluate_argv(paths: dict[str, Path], ks: list[int], out: Path) -> list[str]:
    return [
        "evaluate",
        *("--features", str(paths["features"]), "--split", str(paths["split"])),
        *("--prototypes", str(paths["prototypes"]), "--k", *map(str, ks)),
        *("--graph", "none", "--no-label-frequency", "--device", "cpu", "--out", str(out)),
    ]


def _run_pair(root: Path, paths: dict[str, Path], args: argparse.Namespace) -> tuple[dict, dict]:
    """One fresh-process run of the floor, then one of the command, over ``paths``."""
    k = max(args.eval_ks) + 1  # what the command keeps: one extra class reveals ties
    tile = max(1, TILE_ELEMENTS // args.eval_classes)
    timing = root / "timing.json"
    floor_args = [str(paths["features"]), str(paths["prototypes"]), str(k), str(tile), str(timing)]
    floor = fresh_process(FLOOR_SCRIPT, floor_args, timing)
    out = root / "run"
    if out.exists():
        shutil.rmtree(out)
    command = fresh_process(TOOLKIT_SCRIPT, [str(timing), *_evaluate_argv(paths, args.eval_ks, out)], timing)
    return floor, command


def bench_evaluate(args: argparse.Namespace) -> dict:
    """The whole ``imagenet-zsl evaluate`` command against the plain floor over the same shards,
    each in a fresh process, at ``--eval-images`` and at a quarter of that (at most one shard):
    end to end is the ratio of the full size's wall times (spawn to exit), per image the ratio of
    the slopes between the two sizes (so the fixed costs, imports, parser, report and plots, drop
    out); both on wall and on CPU time. Runs alternate ``--repeats`` times; each process and size
    keeps its best time."""
    n = args.eval_images
    small = max(1, min(SHARD_ROWS, n // 4))
    sizes = {"full": n, "small": small}
    runs: dict[str, dict[str, list[dict]]] = {size: {"floor": [], "evaluate": []} for size in sizes}
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        inputs = {
            size: write_bench_inputs(root / size, images, args.eval_classes, args.dim, args.seed)
            for size, images in sizes.items()
        }
        print(
            f"evaluate: {n} (and {small}) images x {args.eval_classes} classes x {args.dim}-d float16 "
            f"shards written in {time.perf_counter() - t0:.1f} s; load average {os.getloadavg()[0]:.2f}"
        )
        # alternate the two so that load from other processes hits both alike
        for repeat in range(args.repeats):
            for size, paths in inputs.items():
                floor, command = _run_pair(root / size, paths, args)
                runs[size]["floor"].append(floor)
                runs[size]["evaluate"].append(command)
                print(
                    f"  run {repeat + 1}, {sizes[size]} images: floor {floor['wall']:.2f} s (imports "
                    f"{floor['imports']:.2f} s), evaluate {command['wall']:.2f} s "
                    f"(start-up: CLI import + parser {command['imports']:.2f} s)"
                )
    best, slope, ratios, fixed = {}, {}, {}, {}
    for clock in ("wall", "cpu"):
        best[clock] = {size: {who: _best(r, clock) for who, r in by.items()} for size, by in runs.items()}
        b = best[clock]
        slope[clock] = {
            who: (b["full"][who] - b["small"][who]) / max(1, n - small) for who in ("floor", "evaluate")
        }
        ratios[clock] = {
            "per_image": slope[clock]["evaluate"] / slope[clock]["floor"],
            "end_to_end": b["full"]["evaluate"] / b["full"]["floor"],
        }
        # the straight line through both sizes at 0 images: spawn, imports, set-up, report, plots
        fixed[clock] = {who: b["full"][who] - n * slope[clock][who] for who in ("floor", "evaluate")}
        print(f"best of {args.repeats} alternating fresh-process runs, {clock} seconds (spawn to exit):")
        print(f"{'':36s} {n:>9d} img {small:>9d} img   per extra image")
        for label, who in (
            ("floor (load+fp32+BLAS+torch.topk)", "floor"),
            ("imagenet-zsl evaluate", "evaluate"),
        ):
            print(
                f"{label:36s} {b['full'][who]:11.2f} s {b['small'][who]:11.2f} s"
                f" {1e6 * slope[clock][who]:14.1f} us"
            )
        print(
            f"  fixed cost (line through both sizes at 0 images): floor {fixed[clock]['floor']:.2f} s, "
            f"evaluate {fixed[clock]['evaluate']:.2f} s"
        )
        print(f"  ratio evaluate / floor per image  : {ratios[clock]['per_image']:.2f}x  (target <= 1.05x)")
        print(f"  ratio evaluate / floor end to end : {ratios[clock]['end_to_end']:.2f}x  (target <= 1.15x)")
    per_image, end_to_end = ratios["wall"]["per_image"], ratios["wall"]["end_to_end"]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return {
        "images": n,
        "small_images": small,
        "classes": args.eval_classes,
        "dim": args.dim,
        "ks": args.eval_ks,
        "repeats": args.repeats,
        "load_average": list(os.getloadavg()),
        "best_wall_seconds": best["wall"],
        "seconds_per_image": slope["wall"],
        "fixed_seconds": fixed,
        "best_cpu_seconds": best["cpu"],
        "runs": runs,
        "per_image_ratio": per_image,
        "end_to_end_ratio": end_to_end,
        "cpu_ratios": ratios["cpu"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("search", "evaluate", "both"), default="both")
    parser.add_argument("--eval-images", type=int, default=20_000)
    parser.add_argument("--eval-classes", type=int, default=10_000)
    parser.add_argument("--eval-ks", type=int, nargs="+", default=[1, 2, 5, 10, 20])
    parser.add_argument("--queries", type=int, default=4096)
    parser.add_argument("--classes", type=int, default=21842)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--gpu-queries",
        type=int,
        default=1_000_000,
        help="queries for the GPU timing (extrapolated to 12.9M)",
    )
    parser.add_argument(
        "--devices",
        help="torch devices for the device search, comma-separated (default: cuda when torch sees "
        "a GPU); cpu runs the GPU code path on the CPU",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    result = {"cpu": platform.processor() or platform.machine()}
    if args.mode in ("search", "both"):
        result["search"] = bench_search(args)
    if args.mode in ("evaluate", "both"):
        result["evaluate"] = bench_evaluate(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def bench_device(args: argparse.Namespace, prototypes: np.ndarray, device: str) -> dict:
    """The search on a torch device (the GPU path; ``cpu`` runs the same code on the CPU) against
    its GEMM floor, with plain ``matmul`` + ``topk`` in fp32 and bf16 for comparison.

    ``--gpu-queries`` random queries, streamed in blocks of 65,536 rows as ``evaluate`` streams
    shards: each block is copied to the device and cut into the search's tiles. The floor copies
    the same blocks and multiplies the same tiles in fp32 (no TF32), selecting nothing. The plain
    lines select the top-k on the device and copy them back, without the toolkit's tie order,
    tie counts or duplicate handling; the bf16 one is not exact. Times are projected linearly to
    the 12.9M ImageNet-21K test images.
    """
    import torch

    from imagenet_zsl.evaluation.device_search import full_fp32_matmul
    from imagenet_zsl.evaluation.search import DEVICE_TILE_ELEMENTS

    target = torch.device(device)
    queries = np.random.default_rng(args.seed + 1).standard_normal(
        (args.gpu_queries, args.dim), dtype=np.float32
    )
    block = 65_536
    tile = max(1, DEVICE_TILE_ELEMENTS // len(prototypes))
    on_device = torch.from_numpy(prototypes).to(target)

    def synchronize():
        if target.type == "cuda":
            torch.cuda.synchronize(target)

    def plain(dtype: torch.dtype | None, select: bool):
        weights = on_device if dtype is None else on_device.to(dtype)
        with full_fp32_matmul(), torch.inference_mode():
            for start in range(0, len(queries), block):
                rows = torch.from_numpy(queries[start : start + block]).to(target)
                rows = rows if dtype is None else rows.to(dtype)
                for lo in range(0, len(rows), tile):
                    scores = rows[lo : lo + tile] @ weights.T
                    if select:
                        values, ids = scores.topk(args.k, dim=1)
                        values.cpu(), ids.cpu()
        synchronize()

    def toolkit():
        return topk_inner_product(
            queries, prototypes, args.k, device=device, torch_kernel=True, block_rows=block
        )

    toolkit()  # warm-up: kernels, allocator, cuBLAS handles
    plain(torch.bfloat16, True)
    seconds = {
        "toolkit_topk": timed(toolkit, args.repeats)[0],
        "gemm_floor_fp32": timed(lambda: plain(None, False), args.repeats)[0],
        "plain_matmul_topk_fp32": timed(lambda: plain(None, True), args.repeats)[0],
        "plain_matmul_topk_bf16": timed(lambda: plain(torch.bfloat16, True), args.repeats)[0],
    }
    name = torch.cuda.get_device_name(target) if target.type == "cuda" else "cpu (the GPU code path)"
    scale = IMAGENET21K_TEST_IMAGES / args.gpu_queries
    out = {
        "device": name,
        "queries": args.gpu_queries,
        "seconds": seconds,
        "toolkit_over_floor": seconds["toolkit_topk"] / seconds["gemm_floor_fp32"],
        "projected_imagenet21k_seconds": {key: value * scale for key, value in seconds.items()},
    }
    print(f"[{name}] {args.gpu_queries} queries, projected to {IMAGENET21K_TEST_IMAGES / 1e6:.1f}M images:")
    for key, value in seconds.items():
        print(f"  {key:24s} {value:8.2f} s  -> {value * scale:8.1f} s")
    print(f"  ratio toolkit / fp32 GEMM floor: {out['toolkit_over_floor']:.2f}x; target: 12.9M in < 60 s")
    return out


def faiss_reference(queries: np.ndarray, prototypes: np.ndarray, k: int, repeats: int) -> float | None:
    """faiss's exhaustive inner-product ``knn`` on the same data (None when faiss is absent).

    The toolkit's search used to be this call; it is now a blocked BLAS product + argpartition
    because the tie-fair metrics need, for each image, the number of classes scoring above and
    exactly equal to the true class, computed from one consistent score row. This line shows what
    that choice costs against faiss.
    """
    try:
        import faiss
    except ImportError:
        return None
    seconds, _ = timed(lambda: faiss.knn(queries, prototypes, k, metric=faiss.METRIC_INNER_PRODUCT), repeats)
    return seconds


def bench_search(args: argparse.Namespace) -> dict:
    """The search call alone against the BLAS floor and a naive full sort."""
    import threadpoolctl

    rng = np.random.default_rng(args.seed)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    prototypes = rng.standard_normal((args.classes, args.dim), dtype=np.float32)
    threads = sum(info.get("num_threads", 0) for info in threadpoolctl.threadpool_info()[:1])
    print(
        f"data: {args.queries} queries x {args.classes} classes x {args.dim}-d float32, "
        f"top-{args.k}; numpy {np.__version__} BLAS, {threads} threads, "
        f"{platform.processor() or platform.machine()}"
    )
    # warm-up (thread pools, page faults) on a slice
    _ = queries[:512] @ prototypes.T
    topk_inner_product(queries[:512], prototypes, args.k, device="cpu")

    t_matmul, _ = timed(lambda: queries @ prototypes.T, args.repeats)
    t_toolkit, (_, ids) = timed(
        lambda: topk_inner_product(queries, prototypes, args.k, device="cpu"), args.repeats
    )

    def naive():
        scores = queries @ prototypes.T
        return np.argsort(-scores, axis=1, kind="stable")[:, : args.k]

    t_naive, naive_ids = timed(naive, 1)
    agree = float(np.mean(naive_ids == ids))
    t_faiss = faiss_reference(queries, prototypes, args.k, args.repeats)
    gflop = 2 * args.queries * args.classes * args.dim / 1e9
    result = {
        "queries": args.queries,
        "classes": args.classes,
        "dim": args.dim,
        "k": args.k,
        "threads": threads,
        "seconds": {
            "toolkit_topk": t_toolkit,
            "blas_matmul": t_matmul,
            "naive_argsort": t_naive,
            "faiss_knn": t_faiss,
        },
        "toolkit_over_matmul": t_toolkit / t_matmul,
        "naive_over_toolkit": t_naive / t_toolkit,
        "ids_agree_with_naive": agree,
    }
    print(f"BLAS matmul alone   {t_matmul:8.2f} s  ({gflop / t_matmul:6.1f} GFLOP/s)")
    print(f"toolkit top-{args.k:<3d}     {t_toolkit:8.2f} s  ({gflop / t_toolkit:6.1f} GFLOP/s)")
    print(f"naive full argsort  {t_naive:8.2f} s")
    if t_faiss is not None:
        print(f"faiss.knn (IP)      {t_faiss:8.2f} s  (top-k only: no exact tie counts)")
    print(f"ratio toolkit / matmul : {result['toolkit_over_matmul']:.2f}x  (target <= 1.3x)")
    print(f"ratio naive / toolkit  : {result['naive_over_toolkit']:.1f}x faster than naive")
    print(f"top-{args.k} ids identical to the naive reference: {100 * agree:.2f}%")

    devices = args.devices.split(",") if args.devices else (["cuda"] if cuda_available() else [])
    result["devices"] = {device: bench_device(args, prototypes, device) for device in devices}
    if not devices:
        print("GPU: not measured (torch sees no GPU)")
    return result


if __name__ == "__main__":
    sys.exit(main())
