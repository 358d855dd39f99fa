"""Benchmark: the trivial baseline's class prototypes at full ImageNet-21K scale.

    python tools/bench_models.py [--classes 20842] [--repeat 3]

Prototypes of every zero-shot candidate (up to 20,842 classes) against the 1,000 training classes
on the real WordNet graph (23.5K nodes). The layered nearest-set computation (one multi-source BFS
plus one sparse product per BFS layer) is compared with the simple reference — a BFS from every
training class (scipy csgraph, 1,000 rows of 23.5K distances) — on the same inputs; both must give
identical prototypes.

With ``--parts sae`` (not run by default: the reference takes minutes), SAE's Sylvester solve
(``--sae-dims``, default 2048-d features with 300-d and 85-d semantics) is
timed against ``scipy.linalg.solve_sylvester`` (the reference, measured in the same run) on the same
sufficient statistics of ``--sae-images`` random non-negative L2-normalised features: one λ, and an
8-value λ grid (SAE's own), where the eigendecompositions are shared by the grid; it prints the
largest relative difference of the solutions.

With ``--parts memory`` (not run by default: it trains every model three times), each model of
``--memory-models`` is trained by ``imagenet-zsl train``'s own code on random float16 features at
each of ``--memory-sizes`` images (default 66K, 99K, 132K x ``--feature-dim``, over
``--memory-classes`` ILSVRC classes), each in a fresh process. Sizes are at least two L-BFGS blocks
(2 x 32,768 rows), so that every block temporary is full at every size and the slope measures what
grows with the images only. It prints the peak memory per image
(the slope between sizes) and the projection to 1.28M x 2,048 with PASS/FAIL against 8 GB, both
for the peak resident set (the memory-mapped shards' file-backed pages included) and for the peak
anonymous memory:

    python tools/bench_models.py --parts memory --memory-models eszsl,sync,conse,devise

It also times the graph models' training on the full graph (informational, no reference): ms
per epoch of each of ``--gcn-models`` (default SGCN and DGP, at their default hidden size 2048)
regressing ``--feature-dim``-d classifiers (2048: ResNet-50's) on each of ``--devices`` (default
the CPU, plus the GPU when torch sees one), and what the default 3,000 epochs then take.

    python tools/bench_models.py --devices cuda --gcn-models sgcn,dgp,gcnz   # on a GPU machine
    python tools/bench_models.py --parts sae --repeat 1   # SAE only (no real graph needed)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids  # noqa: E402
from imagenet_zsl.models.base import SeenData, create  # noqa: E402
from imagenet_zsl.models.closed_form import SAE, SylvesterBases  # noqa: E402
from imagenet_zsl.models.trivial import nearest_seen_matrix, nearest_seen_matrix_bfs  # noqa: E402
from imagenet_zsl.semantics.class_vectors import ClassVectors  # noqa: E402


def best_of(repeat: int, func, *args):  # noqa: ANN001, ANN201
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = func(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


def bench_sae(dim: int, sem_dim: int, classes: int, images: int, repeat: int) -> None:
    """Time the eigh-based SAE solve against scipy's solve_sylvester on one problem and print it."""
    import scipy.linalg

    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(size=(images, dim)))  # non-negative, as post-ReLU features
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = rng.integers(0, classes, images)
    s = rng.normal(size=(classes, sem_dim))
    s /= np.linalg.norm(s, axis=1, keepdims=True)
    a, gram, c = s[labels].T @ s[labels], x.T @ x, s[labels].T @ x  # S_yᵀS_y, XᵀX, S_yᵀX
    grid = SAE.grid["lam"]

    def reference(lams: list[float]) -> list[np.ndarray]:
        return [scipy.linalg.solve_sylvester(a, lam * gram, (1 + lam) * c) for lam in lams]

    def eigh(lams: list[float]) -> list[np.ndarray]:
        bases = SylvesterBases.of(a, gram, c)
        return [bases.solve(lam, 1 + lam) for lam in lams]

    ref_one, ref = best_of(repeat, reference, grid[2:3])
    new_one, new = best_of(repeat, eigh, grid[2:3])
    ref_grid, refs = best_of(1, reference, grid)
    new_grid, news = best_of(repeat, eigh, grid)
    worst = max(
        np.linalg.norm(n - r) / np.linalg.norm(r) for n, r in zip(news + new, refs + ref, strict=True)
    )
    if worst > 1e-8:
        raise SystemExit(f"MISMATCH between the eigh and solve_sylvester SAE solutions: {worst:.1e}")
    print(f"SAE solve, D={dim}, E={sem_dim}, {classes} classes, {images} images:")
    print(
        f"  one λ : eigh {new_one:6.2f} s  solve_sylvester {ref_one:6.2f} s (reference)  "
        f"ratio {new_one / ref_one:.2f}"
    )
    print(
        f"  {len(grid)} λ  : eigh {new_grid:6.2f} s  solve_sylvester {ref_grid:6.2f} s (reference)  "
        f"ratio {new_grid / ref_grid:.2f}; largest relative difference {worst:.1e}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=20842, help="candidate classes to map")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gcn-epochs", type=int, default=5, help="epochs timed; 0 skips the GCN timing")
    parser.add_argument("--gcn-models", default="sgcn,dgp", help="graph models to time (sgcn, dgp, gcnz)")
    parser.add_argument(
        "--gcn-determinism",
        action="store_true",
        help="fit each graph model twice more and say whether the predicted classifiers are identical",
    )
    parser.add_argument("--devices", help="comma-separated (default: cpu, plus cuda when available)")
    parser.add_argument(
        "--feature-dim", type=int, default=2048, help="dimension of the regressed classifiers"
    )
    parser.add_argument("--hidden", type=int, help="hidden size (default: each model's own)")
    parser.add_argument(
        "--parts",
        default="prototypes,gcn",
        help="what to measure, comma-separated: prototypes, gcn, sae, memory",
    )
    parser.add_argument(
        "--sae-dims",
        default="2048:300:1000,2048:85:40",
        help="SAE problems as feature-dim:semantic-dim:classes, comma-separated",
    )
    parser.add_argument("--sae-images", type=int, default=20000)
    parser.add_argument("--memory-sizes", default="66000,99000,132000", help="images per training run")
    parser.add_argument(
        "--memory-models", default=DEFAULT_MEMORY_MODELS, help="models to train, comma-separated"
    )
    parser.add_argument("--memory-classes", type=int, default=1000, help="seen classes (ILSVRC wnids)")
    parser.add_argument(
        "--malloc-mmap-threshold",
        type=int,
        default=0,
        help="run the training processes with glibc's MALLOC_MMAP_THRESHOLD_ fixed to this many bytes "
        "(0: glibc's dynamic threshold, the default). With the dynamic threshold, freed block "
        "temporaries of a few MB stay in the heap, which adds noise to the anonymous peak",
    )
    parser.add_argument("--memory-child", nargs=4, metavar=("MODEL", "FEATURES", "VECTORS", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child(*args.memory_child)
        return 0
    parts = set(args.parts.split(","))
    status = 0
    if "prototypes" in parts:
        bench_prototypes(args.classes, args.repeat)
    if "gcn" in parts and args.gcn_epochs:
        bench_gcn(args)
    if "sae" in parts:
        for spec in args.sae_dims.split(","):
            dim, sem_dim, classes = (int(v) for v in spec.split(":"))
            bench_sae(dim, sem_dim, classes, args.sae_images, args.repeat)
    if "memory" in parts and not bench_memory(args):
        status = 1
    return status


def bench_prototypes(num_classes: int, repeat: int) -> None:
    """Time the layered nearest-seen sets against a BFS per training class (the reference)."""
    graph = load_class_graph("wordnet")
    seen = training_wnids()
    classes = candidate_wnids()[:num_classes]
    fast_s, fast = best_of(repeat, nearest_seen_matrix, graph, seen, classes)
    ref_s, ref = best_of(1, nearest_seen_matrix_bfs, graph, seen, classes)
    if not np.array_equal(fast, ref):
        raise SystemExit("MISMATCH between layered and reference prototypes")
    print(
        f"trivial prototypes, {len(classes)} classes x {len(seen)} training classes, graph {len(graph)} nodes"
    )
    print(f"  layered nearest sets : {fast_s * 1000:8.1f} ms")
    print(f"  BFS per training class: {ref_s * 1000:8.1f} ms   (reference)")
    print(f"  speed-up              : {ref_s / fast_s:8.1f}x  (identical prototypes)")


def bench_gcn(args: argparse.Namespace) -> None:
    """Time the graph models' epochs on the full WordNet graph (informational)."""
    import torch

    graph = load_class_graph("wordnet")
    seen = training_wnids()
    devices = (
        args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    )
    rng = np.random.default_rng(0)
    vectors = ClassVectors(graph.wnids, rng.normal(size=(len(graph), 50)), source="random")
    labels = np.repeat(np.arange(len(seen)), 2)
    data = SeenData(rng.normal(size=(len(labels), args.feature_dim)).astype(np.float32), labels, seen)
    for device in devices:
        where = (
            torch.cuda.get_device_name(device)
            if device.startswith("cuda")
            else f"CPU, {torch.get_num_threads()} threads"
        )
        for model in args.gcn_models.split(","):

            def fit(epochs: int, model: str = model, device: str = device) -> Any:  # the fitted model
                extra = (
                    {} if args.hidden is None else {"hidden": [args.hidden] * (5 if model == "gcnz" else 1)}
                )
                return create(
                    model, epochs=epochs, classifier="softmax", classifier_iter=5, device=device, **extra
                ).fit(data, vectors, graph)

            one, _ = best_of(2, fit, 1)  # the first call also pays one-off imports and set-up
            more, last = best_of(1, fit, 1 + args.gcn_epochs)
            per_epoch = (more - one) / args.gcn_epochs
            print(
                f"{model} on the full graph ({len(graph)} nodes), {args.feature_dim}-d targets: "
                f"{per_epoch * 1000:.0f} ms/epoch, 3,000 epochs {per_epoch * 3000 / 60:.1f} min ({where})"
            )
            if args.gcn_determinism:
                _, again = best_of(1, fit, 1 + args.gcn_epochs)
                digests = [
                    hashlib.sha256(np.ascontiguousarray(m.node_outputs_).tobytes()).hexdigest()
                    for m in (last, again)
                ]
                verdict = "identical" if digests[0] == digests[1] else "different"
                print(
                    f"{model} determinism ({where}): two fits of {1 + args.gcn_epochs} epochs, same seed: "
                    f"{verdict} predicted classifiers (sha256 {digests[0][:12]} / {digests[1][:12]})"
                )


# ----------------------------------------------------------------------------- training memory
#: 1.28M x 2048: the ILSVRC-2012 training set with ResNet-50 features (issue 27's target)
TARGET_IMAGES = 1_281_167
MEMORY_LIMIT = 8e9  # bytes (8 GB)
#: what each model trains with in the memory part: the fewest iterations that run every step of
#: the fit once (memory does not grow with iterations, except L-BFGS's history: added below)
MEMORY_PARAMS: dict[str, dict[str, Any]] = {
    "sync": {"max_iter": 3},
    "dap": {"max_iter": 3},
    "iap": {"max_iter": 3},
    "conse": {"classifier": "softmax", "classifier_iter": 3},
    "trivial": {"classifier": "softmax", "classifier_iter": 3},
    "sgcn": {"classifier": "softmax", "classifier_iter": 3, "epochs": 1},
    "gcnz": {"classifier": "softmax", "classifier_iter": 3, "epochs": 1},
    "dgp": {"classifier": "softmax", "classifier_iter": 3, "epochs": 1},
    **{name: {"epochs": 1} for name in ("devise", "ale", "sje", "latem", "cmt", "sse")},
}
#: full-batch L-BFGS models: history 20 pairs of (params) float32 vectors (+ 2 working copies)
LBFGS_MODELS = {"sync", "dap", "iap", "conse", "trivial", "sgcn", "gcnz", "dgp"}
DEFAULT_MEMORY_MODELS = "eszsl,sae,ridge,ridge_s2v,gfzsl,sync,dap,iap,conse,devise,cmt,latem"


def _status(field: str) -> int:
    """A /proc/self/status memory field in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def memory_child(model: str, features: str, vectors: str, out: str) -> None:
    """Train ``model`` with ``imagenet-zsl train``'s own code on a feature directory and print one
    JSON line: peak RSS (VmHWM: anonymous AND the file-backed pages of the memory-mapped shards it
    touched), peak anonymous RSS (RssAnon sampled every 2 ms), numpy's traced peak (tracemalloc),
    each with its value before training (after the imports)."""
    import json
    import threading
    import tracemalloc

    import torch

    torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])  # its lazy imports: before the baseline

    from imagenet_zsl.models.training import TrainConfig, train

    config = TrainConfig(model=model, params=MEMORY_PARAMS.get(model, {}), semantics=vectors, graph="wordnet")
    base = {"rss": _status("VmRSS"), "anon": _status("RssAnon")}
    peak = {"anon": base["anon"]}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak["anon"] = max(peak["anon"], _status("RssAnon"))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    tracemalloc.start()
    start = time.perf_counter()
    train(config, features, out)
    seconds = time.perf_counter() - start
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    done.set()
    thread.join()
    peak["anon"] = max(peak["anon"], _status("RssAnon"))
    print(json.dumps({
        "base_rss": base["rss"], "peak_rss": _status("VmHWM"), "base_anon": base["anon"],
        "peak_anon": peak["anon"], "traced": traced, "seconds": seconds,
    }))  # fmt: skip


def write_random_features(root: Path, images: int, dim: int, classes: list[str], seed: int = 0) -> None:
    """A feature directory of ``images`` random non-negative float16 features (shards of 10,000
    rows, labels round-robin over ``classes``) and class vectors (300-d) at root/vectors.npz."""
    from imagenet_zsl.features.shard_files import write_manifest, write_shard

    rng = np.random.default_rng(seed)
    records = []
    for index, start in enumerate(range(0, images, 10_000)):
        rows = min(10_000, images - start)
        x = np.abs(rng.standard_normal((rows, dim), dtype=np.float32)).astype(np.float16)
        labels = np.arange(start, start + rows) % len(classes)
        ids = [f"{classes[c]}/{start + i}" for i, c in enumerate(labels)]
        records.append(write_shard(root / "features", f"r000-s{index:06d}", x, labels, ids))
    write_manifest(root / "features", {"classes": classes, "dim": dim, "shards": records, "simulated": True})
    ClassVectors(classes, rng.normal(size=(len(classes), 300)), source="random").save(root / "vectors.npz")


def _slope(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """Least-squares (bytes per image, intercept) of ``values`` against ``sizes``."""
    slope, intercept = np.polyfit(np.asarray(sizes, float), np.asarray(values, float), 1)
    return float(slope), float(intercept)


def _lbfgs_history(model: str, dim: int, classes: int) -> float:
    """Bytes of torch L-BFGS's history (20 pairs of parameter vectors) that a 3-iteration run does
    not reach: added to the projection of the L-BFGS models (attributes: 300 outputs for DAP)."""
    if model not in LBFGS_MODELS:
        return 0.0
    outputs = 300 if model == "dap" else classes
    return 2 * 20 * (dim + 1) * outputs * 4.0


def bench_memory(args: argparse.Namespace) -> bool:
    """Train each model at each size in a fresh process; print peaks, bytes per image (slopes)
    and the projection to 1.28M x D against 8 GB. True when every model passes."""
    import json
    import os
    import subprocess
    import tempfile

    env = dict(os.environ)
    if args.malloc_mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
    sizes = [int(s) for s in args.memory_sizes.split(",")]
    models = args.memory_models.split(",")
    classes = _bench_classes(args.memory_classes)
    allocator = (
        f"MALLOC_MMAP_THRESHOLD_={args.malloc_mmap_threshold}"
        if args.malloc_mmap_threshold
        else "glibc default"
    )
    print(
        f"training memory, {args.feature_dim}-d float16 shards, {len(classes)} classes, malloc: {allocator}; "
        f"load: {_load()}"
    )
    results: dict[str, list[dict[str, float]]] = {m: [] for m in models}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            root = Path(tmp)
            write_random_features(root, size, args.feature_dim, classes)
            for model in models:
                command = [sys.executable, __file__, "--memory-child", model, str(root / "features"),
                           str(root / "vectors.npz"), str(root / f"out-{model}")]  # fmt: skip
                done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
                if done.returncode:
                    raise SystemExit(f"{model} at {size} images failed:\n{done.stderr[-3000:]}")
                results[model].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"  {model:10s} {size:>8,d} images: {json.dumps(results[model][-1])}", flush=True)
    return _report_memory(results, sizes, args.feature_dim, len(classes))


def _report_memory(
    results: dict[str, list[dict[str, float]]], sizes: list[int], dim: int, classes: int
) -> bool:
    """The table: per model, bytes per image of the peak RSS (file pages of the mapped shards
    included) and of the anonymous peak, and the projected peak RSS at 1.28M images."""
    print(f"\nprojection to {TARGET_IMAGES:,d} x {dim} (limit {MEMORY_LIMIT / 1e9:.0f} GB), load: {_load()}")
    print(f"{'model':10s} {'B/image RSS':>12s} {'B/image anon':>13s} {'projected RSS':>14s} "
          f"{'projected anon':>15s}  verdict")  # fmt: skip
    passed = True
    for model, runs in results.items():
        rss, rss0 = _slope(sizes, [r["peak_rss"] for r in runs])
        anon, anon0 = _slope(sizes, [r["peak_anon"] for r in runs])
        extra = _lbfgs_history(model, dim, classes)
        projected = rss0 + max(rss, 0.0) * TARGET_IMAGES + extra
        projected_anon = anon0 + max(anon, 0.0) * TARGET_IMAGES + extra
        ok = projected <= MEMORY_LIMIT
        passed &= ok
        verdict = "PASS" if ok else "FAIL"
        print(f"{model:10s} {rss:12,.0f} {anon:13,.0f} {projected / 1e9:11.2f} GB "
              f"{projected_anon / 1e9:12.2f} GB  {verdict}")  # fmt: skip
    print("RSS: peak resident set (VmHWM), counting the file-backed pages of the memory-mapped float16 "
          "shards (page cache, reclaimable); anon: sampled peak anonymous memory. L-BFGS models include "
          "their full 20-pair history.")  # fmt: skip
    return passed


def _bench_classes(count: int) -> list[str]:
    """The first ``count`` ILSVRC-1K training classes (real wnids: the graph models need them)."""
    wnids = training_wnids()
    if count > len(wnids):
        raise SystemExit(f"--memory-classes {count}: at most {len(wnids)}")
    return list(wnids[:count])


def _load() -> str:
    import os

    return " ".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
