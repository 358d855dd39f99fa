#!/usr/bin/env bash
# The GPU path's first-run check: speed, peak memory and determinism, as Markdown for the README.
#
#   bash tools/gpu_check.sh                  # on a GPU machine (--device cuda): under 10 minutes
#   bash tools/gpu_check.sh --device cpu     # the same sizes on the CPU, same code (about an hour)
#   bash tools/gpu_check.sh --device cpu --small   # everything scaled down: the suite runs this
#
# Steps (each in its own process, so that each peak memory is its own):
#   1. extract: 10,000 generated JPEGs (~500x375, 20 fall11-style tars) with ResNet-50 (random
#      weights: nothing is downloaded), once with --fast and twice in the default deterministic mode;
#      images/s of each mode, and the determinism check: the two deterministic runs' shard sha256s;
#   2. search: tools/bench_search.py --mode search, 1M queries x 21,842 classes x 2,048-d top-20 on
#      the device (images/s, and the projection to the 12.9M ImageNet-21K test images);
#   3. evaluate: the whole `imagenet-zsl evaluate` command on 100,000 fp16 images x 21,842 classes x
#      2,048-d, on the device and on the CPU: seconds of each, and whether hit@k and the per-class
#      table are equal (the device path: read-ahead, pinned staging, pipelined tiles);
#   4. train: tools/bench_models.py, SGCN and DGP for 100 epochs on the real WordNet graph (s/epoch;
#      one process for both models, so the peak memory is the larger model's), then each trained
#      twice more with the same seed: the determinism check of the graph models (torch.sparse.mm's
#      CUDA backward is not promised deterministic).
# Peak memory: torch.cuda.max_memory_allocated on CUDA, the process's ru_maxrss on the CPU.
# Prints a Markdown block (device named: nvidia-smi's name when present) ready to paste; exits 1
# when a step fails or the determinism check fails. PYTHON overrides the interpreter.
set -euo pipefail

DEVICE=cuda
SMALL=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --device) DEVICE="${2:?--device needs cuda, cuda:N or cpu}"; shift 2 ;;
        --device=*) DEVICE="${1#--device=}"; shift ;;
        --small) SMALL=1; shift ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (use --device cuda|cpu, --small)" >&2; exit 2 ;;
    esac
done
case "$DEVICE" in
    cpu|cuda|cuda:[0-9]*) ;;
    *) echo "error: --device $DEVICE: use cuda, cuda:N or cpu" >&2; exit 2 ;;
esac

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
if [[ "$DEVICE" == cuda* ]] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    echo "error: --device $DEVICE: torch sees no CUDA GPU; use --device cpu" >&2
    exit 2
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" REPO

if [[ $SMALL == 1 ]]; then
    IMAGES=16 CLASSES=2 WIDTH=96 HEIGHT=72 CROP_ARGS="--resize 72 --crop 64 --batch-size 8"
    QUERIES=4096 PROTOS=2000 DIM=64 CPU_QUERIES=256
    EPOCHS=2 MODEL_ARGS="--classes 50 --feature-dim 16 --hidden 16"
    EVAL_ARGS="512 200 64"
else
    IMAGES=10000 CLASSES=20 WIDTH=500 HEIGHT=375 CROP_ARGS=""
    QUERIES=1000000 PROTOS=21842 DIM=2048 CPU_QUERIES=1024
    EPOCHS=100 MODEL_ARGS="--classes 1000 --feature-dim 2048"
    EVAL_ARGS="100000 21842 2048"
fi

# ---------------------------------------------------------------- the measuring harness (Python)
cat > "$WORK/measure.py" <<'PY'
"""Run one step in this process and write {"seconds", "peak_gib", "peak_kind", ...} to argv[1]."""
import json
import os
import resource
import runpy
import sys
import time

out, device, step, *rest = sys.argv[1:]


def peak() -> tuple[float, str]:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated() / 2**30, "torch.cuda.max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "ru_maxrss"


record = {}
start = time.perf_counter()
if step == "tool":  # a tools/ script, run in this process so that its peak memory is ours
    sys.argv = rest
    try:
        runpy.run_path(rest[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
elif step == "evaluate":  # the whole evaluate command on the device and on the CPU, same inputs
    sys.path.insert(0, os.path.join(os.environ["REPO"], "tools"))
    from pathlib import Path

    from bench_search import write_bench_inputs

    from imagenet_zsl.cli import main

    images, classes, dim = (int(v) for v in rest[:3])
    work = Path(os.path.dirname(out)) / "evaluate"
    paths = write_bench_inputs(work, images, classes, dim, seed=0)
    runs = {}
    for where in (device, "cpu"):
        argv = ["evaluate", "--features", str(paths["features"]), "--split", str(paths["split"])]
        argv += ["--prototypes", str(paths["prototypes"]), "--k", "1", "5", "--graph", "none"]
        argv += ["--no-label-frequency", "--no-plots", "--device", where]
        argv += ["--out", str(work / f"run-{where.replace(':', '')}")]
        begin = time.perf_counter()
        if main(argv) != 0:
            raise SystemExit(f"evaluate --device {where} failed")
        runs[where] = time.perf_counter() - begin
        if where == device:
            record["peak_gib"], record["peak_kind"] = peak()
        if where == "cpu":
            break  # --device cpu: one run is both
    outputs = {}
    for where in runs:
        run = work / f"run-{where.replace(':', '')}"
        outputs[where] = (json.loads((run / "metrics.json").read_text())["zsl"], (run / "per_class.csv").read_bytes())
    record.update(images=images, classes=classes, dim=dim, seconds_device=runs[device])
    record["seconds_cpu"] = runs.get("cpu", runs[device])
    record["same_as_cpu"] = outputs[device] == outputs.get("cpu", outputs[device])
else:  # extract: generate the store, one --fast run, two deterministic runs
    from imagenet_zsl.devices import tune_process_for_image_pipeline

    tune_process_for_image_pipeline()  # as `imagenet-zsl extract` does, before torch loads
    import hashlib
    from concurrent.futures import ProcessPoolExecutor
    from pathlib import Path

    from imagenet_zsl.data import ilsvrc2012_wnids
    from imagenet_zsl.features.synthetic_store import make_store

    images, classes, width, height = (int(v) for v in rest[:4])
    crop = dict(zip(rest[4::2], (int(v) for v in rest[5::2]), strict=True))
    work = Path(os.path.dirname(out))
    wnids = sorted(ilsvrc2012_wnids())[:classes]
    counts = [images // classes + (i < images % classes) for i in range(classes)]
    with ProcessPoolExecutor(min(classes, os.cpu_count() or 1)) as pool:  # one tar per process
        jobs = [
            pool.submit(make_store, work / "store", "tars", {w: n}, (width, height), i, False)
            for i, (w, n) in enumerate(zip(wnids, counts, strict=True))
        ]
        [job.result() for job in jobs]
    (work / "classes.txt").write_text("".join(f"{w}\n" for w in wnids))
    record["generate_seconds"] = time.perf_counter() - start

    import torch

    from imagenet_zsl.features.extract import ExtractConfig, run_extraction

    def extract(name: str, mode: str) -> dict:
        cfg = ExtractConfig(
            store=str(work / "store"),
            classes_file=str(work / "classes.txt"),
            backbone="resnet50",
            weights="random",
            out=str(work / name),
            device=device,
            mode=mode,
            progress=False,
            resize=crop.get("--resize"),
            crop=crop.get("--crop"),
            batch_size=crop.get("--batch-size"),
        )
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        result = run_extraction(cfg)
        shards = sorted((work / name).glob("r*-s*.npy"))
        return {
            "images": result.images,
            "images_per_s": result.images_per_second,
            "peak_gib": peak()[0],
            "sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in shards},
        }

    record["fast"] = extract("fast", "fast")
    record["deterministic"] = [extract(f"det{i}", "deterministic") for i in (1, 2)]
record["seconds"] = time.perf_counter() - start
if "peak_gib" not in record:
    record["peak_gib"], record["peak_kind"] = peak()
with open(out, "w") as f:
    json.dump(record, f)
PY

step() {  # step NAME ARGS...: run measure.py, its output in $WORK/NAME.log; show the log on failure
    local name="$1"; shift
    echo "gpu_check: $name ..." >&2
    if ! "$PYTHON" "$WORK/measure.py" "$WORK/$name.json" "$DEVICE" "$@" > "$WORK/$name.log" 2>&1; then
        echo "gpu_check: step $name failed; its output:" >&2
        tail -n 40 "$WORK/$name.log" >&2
        exit 1
    fi
}

# shellcheck disable=SC2086  # the size arguments are word lists on purpose
step extract extract "$IMAGES" "$CLASSES" "$WIDTH" "$HEIGHT" $CROP_ARGS
step search tool "$REPO/tools/bench_search.py" --mode search --devices "$DEVICE" \
    --gpu-queries "$QUERIES" --queries "$CPU_QUERIES" --classes "$PROTOS" --dim "$DIM" --k 20 \
    --repeats 1 --json "$WORK/search.out.json"
# shellcheck disable=SC2086
step evaluate evaluate $EVAL_ARGS
if grep -q -- '"--parts"' "$REPO/tools/bench_models.py"; then
    MODEL_ARGS="$MODEL_ARGS --parts gcn"  # only the graph models' timing
fi
# shellcheck disable=SC2086
step models tool "$REPO/tools/bench_models.py" --repeat 1 --gcn-epochs "$EPOCHS" \
    --gcn-models sgcn,dgp --devices "$DEVICE" --gcn-determinism $MODEL_ARGS

# ---------------------------------------------------------------- the Markdown lines
if [[ "$DEVICE" == cuda* ]] && command -v nvidia-smi > /dev/null 2>&1; then
    index="${DEVICE#cuda}"; index="${index#:}"
    NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${index:-0}" 2>/dev/null | head -n 1 || true)"
fi
if [[ -z "${NAME:-}" && "$DEVICE" == cpu ]]; then
    NAME="CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1), $(nproc) cores"
fi
export NAME="${NAME:-$DEVICE}" DEVICE SMALL IMAGES WIDTH HEIGHT QUERIES PROTOS DIM EPOCHS WORK
"$PYTHON" - <<'PY'
import json
import os
import re
import sys

env = os.environ
work, device = env["WORK"], env["DEVICE"]


def load(name: str) -> dict:
    with open(os.path.join(work, f"{name}.json")) as f:
        return json.load(f)


def mem(record: dict) -> str:
    return f"peak memory {record['peak_gib']:.2f} GiB ({record['peak_kind']})"


scale = " (scaled down by --small: not README figures)" if env["SMALL"] == "1" else ""
print(f"\n### GPU check: {env['NAME']}{scale}\n")
print(f"`bash tools/gpu_check.sh --device {device}{' --small' if scale else ''}`\n")

ext = load("extract")
det = ext["deterministic"]
print(
    f"- extract, ResNet-50 (random weights), {ext['fast']['images']:,} generated JPEGs "
    f"~{env['WIDTH']}x{env['HEIGHT']}: deterministic (default, fp32) "
    f"{max(d['images_per_s'] for d in det):.1f} images/s, --fast {ext['fast']['images_per_s']:.1f} "
    f"images/s; {mem(ext)}"
)

search = load("search")
with open(os.path.join(work, "search.out.json")) as f:
    numbers = json.load(f)["search"]["devices"][device]
seconds = numbers["seconds"]["toolkit_topk"]
projected = numbers["projected_imagenet21k_seconds"]["toolkit_topk"]
print(
    f"- search, {numbers['queries']:,} queries x {int(env['PROTOS']):,} classes x {int(env['DIM']):,}-d, "
    f"top-20: {seconds:.2f} s ({numbers['queries'] / seconds:,.0f} images/s; 12.9M images projected "
    f"{projected:.0f} s); {mem(search)}"
)

ev = load("evaluate")
same_eval = bool(ev["same_as_cpu"])
print(
    f"- evaluate (the whole command: fp16 shards read ahead, staged, searched, tie ranks, tables), "
    f"{ev['images']:,} images x {ev['classes']:,} classes x {ev['dim']:,}-d: {ev['seconds_device']:.2f} s "
    f"({ev['images'] / ev['seconds_device']:,.0f} images/s; CPU {ev['seconds_cpu']:.2f} s); "
    f"hit@k and per-class table {'equal to' if same_eval else 'DIFFERENT from'} the CPU's; {mem(ev)}"
)

failed = False
with open(os.path.join(work, "models.log")) as f:
    text = f.read()
for model in ("sgcn", "dgp"):
    found = re.search(rf"{model} on the full graph \(([\d,]+) nodes\).*?: (-?[\d.]+) ms/epoch", text)
    if found is None:
        print(f"- {model.upper()}: no ms/epoch line in tools/bench_models.py's output", file=sys.stderr)
        failed = True
        continue
    # (bench_models times 1 + N epochs minus 1 epoch: with --small's 2 epochs, noise can win)
    print(
        f"- {model.upper()}, {env['EPOCHS']} epochs on the real WordNet graph ({found[1]} nodes): "
        f"{float(found[2]) / 1000:.4f} s/epoch; {mem(load('models'))}, SGCN and DGP in one process"
    )

a, b = (d["sha256"] for d in det)
same = bool(a) and a == b
first = sorted(a.values())[0][:12] if a else "none"
graph_same = {}
for model in ("sgcn", "dgp"):
    found = re.search(rf"{model} determinism \(.*?\): .*?: (identical|different) predicted classifiers", text)
    graph_same[model] = found is not None and found[1] == "identical"
    if found is None:
        print(f"- {model.upper()}: no determinism line in tools/bench_models.py's output", file=sys.stderr)
        failed = True
all_same = same and same_eval and all(graph_same.values())
verdict = "PASS" if all_same else "FAIL"
models = ", ".join(f"{m.upper()} {'identical' if ok else 'different'}" for m, ok in graph_same.items())
print(
    f"- determinism: {verdict}: two deterministic extractions wrote "
    f"{'identical' if same else 'different'} shards ({len(a)} files; first sha256 {first}...); "
    f"two same-seed trainings gave predicted classifiers: {models}"
)
sys.exit(1 if failed or not all_same else 0)
PY
