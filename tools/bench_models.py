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

It also times the graph models' training on the full graph (informational, no reference): ms
per epoch of each of ``--gcn-models`` (default SGCN and DGP, at their default hidden size 2048)
regressing ``--feature-dim``-d classifiers (2048: ResNet-50's) on each of ``--devices`` (default
the CPU, plus the GPU when torch sees one), and what the default 3,000 epochs then take.

    python tools/bench_models.py --devices cuda --gcn-models sgcn,dgp,gcnz   # on a GPU machine
    python tools/bench_models.py --parts sae --repeat 1   # SAE only (no real graph needed)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

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
    parser.add_argument("--devices", help="comma-separated (default: cpu, plus cuda when available)")
    parser.add_argument(
        "--feature-dim", type=int, default=2048, help="dimension of the regressed classifiers"
    )
    parser.add_argument("--hidden", type=int, help="hidden size (default: each model's own)")
    parser.add_argument(
        "--parts", default="prototypes,gcn", help="what to time, comma-separated: prototypes, gcn, sae"
    )
    parser.add_argument(
        "--sae-dims",
        default="2048:300:1000,2048:85:40",
        help="SAE problems as feature-dim:semantic-dim:classes, comma-separated",
    )
    parser.add_argument("--sae-images", type=int, default=20000)
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if "prototypes" in parts:
        bench_prototypes(args.classes, args.repeat)
    if "gcn" in parts and args.gcn_epochs:
        bench_gcn(args)
    if "sae" in parts:
        for spec in args.sae_dims.split(","):
            dim, sem_dim, classes = (int(v) for v in spec.split(":"))
            bench_sae(dim, sem_dim, classes, args.sae_images, args.repeat)
    return 0


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

            def fit(epochs: int, model: str = model, device: str = device) -> None:
                extra = (
                    {} if args.hidden is None else {"hidden": [args.hidden] * (5 if model == "gcnz" else 1)}
                )
                create(
                    model, epochs=epochs, classifier="softmax", classifier_iter=5, device=device, **extra
                ).fit(data, vectors, graph)

            one, _ = best_of(2, fit, 1)  # the first call also pays one-off imports and set-up
            more, _ = best_of(1, fit, 1 + args.gcn_epochs)
            per_epoch = (more - one) / args.gcn_epochs
            print(
                f"{model} on the full graph ({len(graph)} nodes), {args.feature_dim}-d targets: "
                f"{per_epoch * 1000:.0f} ms/epoch, 3,000 epochs {per_epoch * 3000 / 60:.1f} min ({where})"
            )


if __name__ == "__main__":
    sys.exit(main())
