"""Benchmark: end-to-end feature extraction speed of the toolkit vs a plain reference loop.

Generates ImageNet-sized JPEGs (about 500x375, quality 90) as a fall11-style tar store, then times,
in the same run and on each device:

* reference: read each tar member, PIL decode + torchvision transforms (resize 256, crop 224,
  normalise), ResNet-50 in fp32, batch 32, one process: the loop most research code uses;
* toolkit:   ``imagenet-zsl extract`` with its defaults for the device (decode workers, pinned
  memory, channels_last, bf16 autocast on CUDA), optionally with torchvision/nvJPEG decoding and
  ``--compile`` (``--compile both`` times it without and with).

Both use the same randomly initialised weights (pretrained ones are not needed to time it); times
are wall clock from start to the last feature, model construction and index build included. Each
toolkit run happens in a fresh process, set up as ``imagenet-zsl extract`` sets itself up before
torch loads (OpenMP threads that sleep rather than spin while they wait, and glibc keeping freed
memory: see :func:`imagenet_zsl.devices.tune_process_for_image_pipeline`); the reference runs in
this process with the defaults, as a plain script would. Imports are not timed in either. A
compiled run is reported twice: end to end (its one-off compile included, as a user waits for it)
and excluding the compile (the compile time, which includes one warm-up forward pass, subtracted
from the wall clock): the speed a long run approaches.

    python tools/bench_extract.py                          # CPU, 128 images (~1-2 min on 2 cores)
    python tools/bench_extract.py --compile both           # toolkit eager and compiled
    python tools/bench_extract.py --devices cpu,cuda --images 8192 --decoders pil,torchvision
    python tools/bench_extract.py --device-resize --images 256     # nvJPEG path's resize, per image
    python tools/bench_extract.py --fused --counts 32,128 --repeats 3   # run's fused path: see bench_fused.py

``--fused`` (issues 38 §1, 46) runs ``tools/bench_fused.py`` (its flags: ``--counts``,
``--classes``, ``--repeats``, ...): the real ``imagenet-zsl run`` with ``features.test: {store,
backbone}`` against ``imagenet-zsl extract`` plus the run on the stored features, each command in
a fresh process as the docs show it, CPU per image as the slope over image counts.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


#: what either pipeline imports, imported before its timer starts (both timed without imports; the
#: toolkit's index cache is written with pyarrow, which loads pandas)
PRELOAD = (
    "torch",
    "torchvision.transforms",
    "PIL.Image",
    "pyarrow.parquet",
    "pandas",
    "imagenet_zsl.features.backbones",
    "imagenet_zsl.features.transforms",
    "imagenet_zsl.features.extract",
)


def preload() -> None:
    """Import :data:`PRELOAD` (so that no timer below includes an import)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def reference_loop(store_root: Path, backbone: str, device: str, batch_size: int = 32) -> int:
    """Plain loop: tarfile + PIL + torchvision transforms + fp32 model, batch 32."""
    import torch
    from PIL import Image

    from imagenet_zsl.features.backbones import create_backbone
    from imagenet_zsl.features.transforms import Preprocessing

    net, _ = create_backbone(backbone, "random")
    net = net.to(device).eval()
    transform = Preprocessing().reference_transform()
    batch, done = [], 0
    with torch.no_grad():
        for path in sorted(store_root.glob("*.tar")):
            with tarfile.open(path) as tar:
                for member in tar:
                    data = tar.extractfile(member).read()
                    batch.append(transform(Image.open(io.BytesIO(data)).convert("RGB")))
                    if len(batch) == batch_size:
                        net(torch.stack(batch).to(device))
                        done, batch = done + len(batch), []
        if batch:
            net(torch.stack(batch).to(device))
            done += len(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return done


@dataclass(frozen=True)
class ToolkitRun:
    """One timed ``imagenet-zsl extract`` run: where, how, and its ``tag`` (output and cache names)."""

    device: str
    device_name: str
    decode: str
    compiled: bool
    tag: str


def toolkit_run(store_root: Path, classes: Path, out: Path, args: argparse.Namespace, run: ToolkitRun):
    """(images extracted, seconds spent compiling) of one ``imagenet-zsl extract`` run."""
    from imagenet_zsl.features.extract import ExtractConfig, run_extraction

    config = ExtractConfig(
        store=str(store_root),
        classes_file=str(classes),
        backbone=args.backbone,
        out=str(out),
        weights="random",
        device=run.device,
        decode=run.decode.removesuffix("-draft"),
        jpeg_draft=run.decode.endswith("-draft"),  # "pil-draft": extract --jpeg-draft
        batch_size=args.batch_size,
        workers=args.workers,
        progress=False,
        compile=run.compiled,
        mode="fast",  # the speed setting (bf16 + cuDNN autotuning on CUDA; the same fp32 on CPU)
    )
    result = run_extraction(config)
    return result.images, result.compile_seconds


def time_toolkit(
    store_root: Path, classes: Path, work: Path, args: argparse.Namespace, run: ToolkitRun
) -> dict:
    """One toolkit row: wall-clock speed end to end, and with the one-off compile subtracted.

    Each run writes its own output and builds the store index into its own empty cache, so every
    run pays what a first run on a new store pays.
    """
    os.environ["IMAGENET_ZSL_CACHE"] = str(work / f"index-cache-{run.tag}")
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    n, compile_s = toolkit_run(store_root, classes, work / f"out-{run.tag}", args, run)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    files = [p for p in (work / f"out-{run.tag}").rglob("*") if p.is_file()]
    # per image: the shards' files; the rest (head, manifest, run record, log) is written once per run
    written = sum(p.stat().st_size for p in files if p.name.startswith(("r", ".r")))
    fixed = sum(p.stat().st_size for p in files) - written
    return {
        "device": run.device_name,
        "pipeline": f"imagenet-zsl extract (decode {run.decode}{', --compile' if run.compiled else ''})",
        "bytes_per_image": written / max(n, 1),
        "bytes_per_run": fixed,
        "cpu_s": cpu,
        "images_per_cpu_s": n / cpu if cpu > 0 else 0.0,
        "images": n,
        "images_per_s": n / seconds,
        "compile": run.compiled,
        "compile_s": compile_s,
        "images_per_s_excl_compile": n / (seconds - compile_s),
    }


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its finished children (decode workers)."""
    import resource

    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def _toolkit_child(connection, *args) -> None:
    """Spawned process: set up as the command does (before torch loads), time one toolkit row."""
    from imagenet_zsl.devices import tune_process_for_image_pipeline

    settings = tune_process_for_image_pipeline()
    # this process was spawned, which made spawn its default: start the decode workers the way
    # the command does (the platform's default), not by re-importing everything in each of them
    multiprocessing.set_start_method(None, force=True)
    try:
        preload()
        row = time_toolkit(*args)
        row.update(settings)
        connection.send(row)
    except BaseException as err:
        connection.send(err)
        raise


def time_toolkit_fresh(*args) -> dict:
    """:func:`time_toolkit` in a fresh (spawned, non-daemonic: it starts decode workers) process."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_toolkit_child, args=(send, *args))
    child.start()
    send.close()
    try:
        row = receive.recv()
    except EOFError:  # it died before sending anything
        row = None
    child.join()
    if row is None:
        raise RuntimeError(f"the toolkit process died (exit status {child.exitcode})")
    if isinstance(row, BaseException):
        raise row
    return row


def reference_row(device_name: str, images: int, images_per_s: float) -> dict:
    """The table row of one reference run."""
    return {
        "device": device_name,
        "pipeline": "reference (PIL, fp32, batch 32)",
        "openmp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "malloc": "default",
        "images": images,
        "images_per_s": images_per_s,
        "compile": False,
        "compile_s": 0.0,
        "images_per_s_excl_compile": images_per_s,
    }


def describe(row: dict, reference: float) -> str:
    """The progress line of a toolkit row, against the reference run just before it."""
    line = f"toolkit ({row['pipeline'].removeprefix('imagenet-zsl extract (').removesuffix(')')}): "
    speed = row["images_per_s"]
    line += f"{speed:.1f} images/s end to end = {speed / reference:.2f}x reference"
    line += f", {row['images_per_cpu_s']:.1f} images per CPU s"
    line += f" [OpenMP waits: {row['openmp_wait_policy']}, freed memory: {row['malloc']}]"
    if row["compile"]:
        line += (
            f" (one-off compile {row['compile_s']:.1f} s included); excluding it "
            f"{row['images_per_s_excl_compile']:.1f} images/s = "
            f"{row['images_per_s_excl_compile'] / reference:.2f}x reference"
        )
    return line


def _sizes(spec: str, count: int, seed: int = 0) -> list[tuple[int, int]]:
    """``count`` (width, height) pairs: ``spec`` "WxH,WxH,..." cycled, or "random" (every image its
    own size, 200-640 on a side: the worst case for grouping by size)."""
    import numpy as np

    if spec == "random":
        rng = np.random.default_rng(seed)
        return [(int(w), int(h)) for w, h in rng.integers(200, 641, (count, 2))]
    pairs = [tuple(int(v) for v in pair.split("x")) for pair in spec.split(",")]
    return [pairs[k % len(pairs)] for k in range(count)]


def bench_device_resize(args: argparse.Namespace, devices: list[str]) -> list[dict]:
    """``--device-resize``: the main process's work per image on the ``--decode torchvision`` path
    after decode_jpeg: the resize + crop of each decoded JPEG, one ``crop_tensor`` call per image
    and a stack (before), against ``crop_tensors`` with the device's group size (now: one image per
    call on the CPU, the images of one size together on CUDA) and with CUDA's group size whatever
    the device. Every variant is checked equal to the first. Best of ``--repeats`` (at least 3)
    alternating runs of each."""
    import numpy as np
    import torch

    from imagenet_zsl.features.extract_loop import GROUP_ELEMENTS, decode_jpegs
    from imagenet_zsl.features.loading import Collate, split_raw
    from imagenet_zsl.features.synthetic_store import encode, smooth_image
    from imagenet_zsl.features.transforms import Preprocessing

    resize, crop = (int(v) for v in args.resize_crop.split(","))
    pre = Preprocessing(resize, crop)
    rng = np.random.default_rng(0)
    sizes = _sizes(args.resize_sizes, args.images)
    jpegs = [encode(smooth_image(rng, h, w)) for w, h in sizes]
    batch = Collate(pre.crop)([(k, None, data, None) for k, data in enumerate(jpegs)])
    rows = []
    for device in devices:
        dev = torch.device(device)

        def timed(work, dev=dev):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            start = time.perf_counter()
            out = work()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            return time.perf_counter() - start, out

        raw = split_raw(batch)
        timed(lambda raw=raw, dev=dev: decode_jpegs(raw, dev))  # warm-up (nvJPEG handles, kernels)
        decode_s = min(timed(lambda raw=raw, dev=dev: decode_jpegs(raw, dev))[0] for _ in range(3))
        decoded = decode_jpegs(raw, dev)
        own, by_size = GROUP_ELEMENTS.get(dev.type, 0), GROUP_ELEMENTS["cuda"]
        variants = {
            "per_image": lambda d=decoded: torch.stack([pre.crop_tensor(i) for i in d]),
            "grouped_device_default": lambda d=decoded, g=own: pre.crop_tensors(d, g),
            "grouped_by_size": lambda d=decoded, g=by_size: pre.crop_tensors(d, g),
        }
        runs: dict[str, list[float]] = {name: [] for name in variants}
        first = None
        for _ in range(max(3, args.repeats)):
            for name, work in variants.items():
                seconds, out = timed(work)
                runs[name].append(1e3 * seconds / len(decoded))
                first = out if first is None else first
                assert torch.equal(out, first), f"{name}: crops differ from the per-image crops"
        row = {
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "images": len(decoded),
            "sizes": args.resize_sizes,
            "distinct_sizes": len(set(sizes)),
            "resize_crop": [resize, crop],
            "torch_threads": torch.get_num_threads(),
            "decode_ms_per_image": 1e3 * decode_s / len(decoded),
            **{f"{name}_ms": min(times) for name, times in runs.items()},
            "runs_ms": runs,
        }
        rows.append(row)
        base = row["per_image_ms"]
        print(
            f"[{row['device']}] {len(decoded)} JPEGs ({row['distinct_sizes']} sizes: {args.resize_sizes}), "
            f"resize {resize} crop {crop}, {row['torch_threads']} torch threads; ms per image, best of "
            f"{len(runs['per_image'])}: decode_jpeg {row['decode_ms_per_image']:.3f}; resize + crop one "
            f"image per crop_tensor call (before) {base:.3f}; crop_tensors with the device's group size "
            f"(now) {row['grouped_device_default_ms']:.3f} ({base / row['grouped_device_default_ms']:.2f}x); "
            f"grouped by size, CUDA's group size {row['grouped_by_size_ms']:.3f} "
            f"({base / row['grouped_by_size_ms']:.2f}x); all the same pixels",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    if "--fused" in (sys.argv[1:] if argv is None else argv):
        from tools import bench_fused  # its own flags

        return bench_fused.main(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=128, help="images to generate (default 128)")
    parser.add_argument("--classes", type=int, default=8, help="synsets (tars) to spread them over")
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--backbone", default="resnet50")
    parser.add_argument(
        "--devices", default=None, help="comma-separated, default: cpu, plus cuda when available"
    )
    parser.add_argument(
        "--decoders",
        default="pil",
        help="toolkit decoders to time: pil,pil-draft,torchvision (pil-draft: extract --jpeg-draft)",
    )
    parser.add_argument("--batch-size", type=int, help="toolkit batch size (default: its own)")
    parser.add_argument("--workers", type=int, help="toolkit decode workers (default: its own)")
    parser.add_argument(
        "--compile",
        nargs="?",
        const="on",
        default="off",
        choices=["off", "on", "both"],
        help="toolkit with --compile: on (bare --compile), off (default), or both (each decoder timed "
        "eager and compiled); the reference stays plain eager fp32",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="alternate the reference and the toolkit this many times and keep each one's best "
        "(default 1); every run is printed and kept in --json",
    )
    parser.add_argument(
        "--device-resize",
        action="store_true",
        help="instead: time the main process's resize + crop of --images decoded JPEGs on the "
        "--decode torchvision path, per image (before) against grouped by size (now)",
    )
    parser.add_argument(
        "--resize-sizes",
        default="500x375,375x500,500x333",
        help="with --device-resize: WxH,... cycled over the images, or 'random'",
    )
    parser.add_argument(
        "--resize-crop", default="256,224", help="with --device-resize: resize,crop (default 256,224)"
    )
    parser.add_argument(
        "--fused",
        action="store_true",
        help="instead: tools/bench_fused.py (run's fused path against extract + the stored run; its flags)",
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--keep", help="generate the store into this folder and keep it")
    args = parser.parse_args(argv)

    preload()
    import torch

    from imagenet_zsl.data import ilsvrc2012_wnids
    from imagenet_zsl.features.synthetic_store import make_store

    devices = (
        args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    )
    if args.device_resize:
        rows = bench_device_resize(args, devices)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
        return 0
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_extract."))
    wnids = sorted(ilsvrc2012_wnids())[: args.classes]
    per_class = {w: args.images // len(wnids) + (i < args.images % len(wnids)) for i, w in enumerate(wnids)}
    started = time.perf_counter()
    store = make_store(work / "store", "tars", per_class, size=(args.width, args.height), oddities=False)
    classes = work / "classes.txt"
    classes.write_text("".join(f"{w}\n" for w in wnids))
    megabytes = sum(p.stat().st_size for p in store.root.glob("*.tar")) / 1e6
    print(
        f"generated {len(store.ids)} JPEGs ~{args.width}x{args.height} ({megabytes:.1f} MB of "
        f"tars) in {time.perf_counter() - started:.1f} s; torch threads "
        f"{torch.get_num_threads()}, CPUs {os.cpu_count()}; the toolkit runs in a fresh process set "
        "up as the command sets itself up, the reference in this one with the defaults",
        flush=True,
    )

    compile_modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    rows = []
    for device in devices:
        name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
        runs: dict[tuple[str, bool] | None, list[dict]] = {}
        for repeat in range(args.repeats):  # alternate, so that a slow spell hits both
            start, cpu_start = time.perf_counter(), _cpu_seconds()
            n = reference_loop(store.root, args.backbone, device)
            reference, cpu = n / (time.perf_counter() - start), _cpu_seconds() - cpu_start
            runs.setdefault(None, []).append(reference_row(name, n, reference))
            print(f"[{name}] reference: {reference:.1f} images/s, {n / cpu:.1f} images per CPU s", flush=True)
            for decode in args.decoders.split(","):
                for compiled in compile_modes:
                    tag = f"{device.replace(':', '')}-{decode}{'-compile' if compiled else ''}-{repeat}"
                    run = ToolkitRun(device, name, decode, compiled, tag)
                    row = time_toolkit_fresh(store.root, classes, work, args, run)
                    runs.setdefault((decode, compiled), []).append(row)
                    print(f"[{name}] {describe(row, reference)}", flush=True)
        best_reference = max(r["images_per_s"] for r in runs[None])
        for measured in runs.values():
            best = dict(max(measured, key=lambda r: r["images_per_s_excl_compile"]))
            best["runs_images_per_s"] = [r["images_per_s"] for r in measured]
            best["ratio"] = best["images_per_s"] / best_reference
            best["ratio_excl_compile"] = best["images_per_s_excl_compile"] / best_reference
            rows.append(best)

    best = f"best of {args.repeats} alternating runs each, " if args.repeats > 1 else ""
    print(f"\n{args.backbone}, {len(store.ids)} images from tars, {best}end to end (compile included):\n")
    print("| device | pipeline | images/s | vs reference | compile s | images/s excl. compile |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['device']} | {row['pipeline']} | {row['images_per_s']:.1f} | {row['ratio']:.2f}x | "
            f"{row['compile_s']:.1f} | {row['images_per_s_excl_compile']:.1f} "
            f"({row['ratio_excl_compile']:.2f}x) |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
