"""Benchmark: the trivial baseline's class prototypes at full ImageNet-21K scale.

    python tools/bench_models.py [--classes 20842] [--repeat 3]

Prototypes of every zero-shot candidate (up to 20,842 classes) against the 1,000 training classes
on the real WordNet graph (23.5K nodes). The layered nearest-set computation (one multi-source BFS
plus one sparse product per BFS layer) is compared with the simple reference — a BFS from every
training class (scipy csgraph, 1,000 rows of 23.5K distances) — on the same inputs; both must give
identical prototypes.

It also times the graph models' training on the full graph (informational, no reference): ms
per epoch of each of ``--gcn-models`` (default SGCN and DGP, at their default hidden size 2048)
regressing ``--feature-dim``-d classifiers (2048: ResNet-50's) on each of ``--devices`` (default
the CPU, plus the GPU when torch sees one), and what the default 3,000 epochs then take.

    python tools/bench_models.py --devices cuda --gcn-models sgcn,dgp,gcnz   # on a GPU machine
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
from imagenet_zsl.models.trivial import nearest_seen_matrix, nearest_seen_matrix_bfs  # noqa: E402
from imagenet_zsl.semantics.class_vectors import ClassVectors  # noqa: E402


def best_of(repeat: int, func, *args):  # noqa: ANN001, ANN201
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = func(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


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
    args = parser.parse_args(argv)

    graph = load_class_graph("wordnet")
    seen = training_wnids()
    classes = candidate_wnids()[: args.classes]
    fast_s, fast = best_of(args.repeat, nearest_seen_matrix, graph, seen, classes)
    ref_s, ref = best_of(1, nearest_seen_matrix_bfs, graph, seen, classes)
    if not np.array_equal(fast, ref):
        print("MISMATCH between layered and reference prototypes", file=sys.stderr)
        return 1
    print(
        f"trivial prototypes, {len(classes)} classes x {len(seen)} training classes, graph {len(graph)} nodes"
    )
    print(f"  layered nearest sets : {fast_s * 1000:8.1f} ms")
    print(f"  BFS per training class: {ref_s * 1000:8.1f} ms   (reference)")
    print(f"  speed-up              : {ref_s / fast_s:8.1f}x  (identical prototypes)")

    if args.gcn_epochs:
        import torch

        devices = (
            args.devices.split(",")
            if args.devices
            else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
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
                        {}
                        if args.hidden is None
                        else {"hidden": [args.hidden] * (5 if model == "gcnz" else 1)}
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
