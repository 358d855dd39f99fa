"""A small synthetic benchmark over real ImageNet classes, to try ``evaluate`` offline in seconds.

Class vectors are drawn down the WordNet is-a graph (a child's vector = its parents' mean plus
noise), so related classes are confusable as in real data and the hierarchy-aware breakdown has
something to show. Image features = class vector + noise. Nothing here is a real result.

    python -m imagenet_zsl.evaluation.demo OUT_DIR
    imagenet-zsl evaluate --features OUT_DIR/features --split OUT_DIR/split.txt \\
        --prototypes OUT_DIR/prototypes.npz --gzsl --seen-features OUT_DIR/seen \\
        --val-split OUT_DIR/val.txt --out OUT_DIR/run
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.cli_types import overwrite_flag
from imagenet_zsl.cli_types import seed as seed_type
from imagenet_zsl.errors import allow_overwrite
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids
from imagenet_zsl.manifests import write_manifest as write_directory_manifest
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.semantics.class_vectors import ClassVectors

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph


def hierarchical_vectors(
    graph: ClassGraph, dim: int, rng: np.random.Generator, step: float = 0.6
) -> np.ndarray:
    """(n_nodes, dim): roots ~ N(0, 1); every other node = mean of its parents + N(0, step²)."""
    depth = graph.depths
    depth = np.where(np.isfinite(depth), depth, 0).astype(int)
    parents = graph.child_to_parent.astype(np.float32).tocsr()
    n_parents = np.maximum(np.asarray(parents.sum(axis=1)).ravel(), 1)
    vectors = rng.standard_normal((len(graph), dim)).astype(np.float32)
    noise = step * rng.standard_normal((len(graph), dim)).astype(np.float32)
    for level in range(1, depth.max() + 1):
        nodes = np.flatnonzero(depth == level)
        vectors[nodes] = (parents[nodes] @ vectors) / n_parents[nodes, None] + noise[nodes]
    return vectors


#: the manifest format of a demo directory
DEMO_FORMAT = "imagenet-zsl/demo-v1"


@dataclass
class DemoSizes:
    """How big the demo is: test/validation classes, images per test/val and per seen class,
    feature dimension and the image noise around each class prototype."""

    n_test: int = 300
    n_val: int = 50
    images: int = 8
    seen_images: int = 2
    dim: int = 64
    noise: float = 1.6


def write_demo(
    out: str | Path, sizes: DemoSizes | None = None, seed: int = 0, graph_source: str = "wordnet"
) -> Path:
    """Write features/, seen/, prototypes.npz, split.txt, val.txt under ``out``."""
    sizes = sizes or DemoSizes()
    n_test, n_val, dim = sizes.n_test, sizes.n_val, sizes.dim
    rng = np.random.default_rng(seed)
    graph = load_class_graph(graph_source)
    candidates = [w for w in candidate_wnids() if w in graph]
    picked = rng.choice(len(candidates), n_test + n_val, replace=False)
    test = sorted(candidates[i] for i in picked[:n_test])
    val = sorted(candidates[i] for i in picked[n_test:])
    seen = [w for w in training_wnids() if w in graph]
    vectors = hierarchical_vectors(graph, dim, rng)
    classes = test + val + seen
    protos = vectors[graph.indices(classes)]
    with atomic_directory(out, tool="imagenet-zsl demo") as tmp:
        ClassVectors(classes, protos, source="demo: hierarchical random vectors").save(tmp / "prototypes.npz")
        atomic_write_text(tmp / "split.txt", "\n".join(test) + "\n")
        atomic_write_text(tmp / "val.txt", "\n".join(val) + "\n")
        for name, labels in (
            ("features", np.repeat(np.arange(n_test + n_val), sizes.images)),
            ("seen", np.repeat(np.arange(n_test + n_val, len(classes)), sizes.seen_images)),
        ):
            directory = tmp / name
            directory.mkdir()
            features = protos[labels] + sizes.noise * rng.standard_normal((len(labels), dim))
            ids = [f"{classes[lab]}/{classes[lab]}_{i}.JPEG" for i, lab in enumerate(labels)]
            records = [
                write_shard(
                    directory,
                    shard_name(0, s),
                    features[start : start + 1000],
                    labels[start : start + 1000],
                    ids[start : start + 1000],
                )
                for s, start in enumerate(range(0, len(labels), 1000))
            ]
            write_manifest(
                directory,
                {
                    "classes": classes,
                    "dim": dim,
                    "shards": records,
                    "simulated": True,
                    "source": "imagenet_zsl.evaluation.demo",
                    "seed": seed,
                },
            )
        write_directory_manifest(
            tmp,
            format=DEMO_FORMAT,
            tool="imagenet-zsl demo",
            parameters={"sizes": asdict(sizes), "seed": seed, "graph": graph_source},
        )
    return Path(out)


@dataclass(frozen=True)
class DemoOptions:
    """``python -m imagenet_zsl.evaluation.demo``: one field per flag."""

    out: Path
    #: test classes (``DemoSizes.n_test``)
    test_classes: int = 300
    seed: int = 0


def demo(cfg: DemoOptions) -> int:
    """Write the demo directory ``cfg.out`` and say so."""
    write_demo(cfg.out, DemoSizes(n_test=cfg.test_classes), seed=cfg.seed)
    print(f"wrote {cfg.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The script: its flags by ``dest`` become :class:`DemoOptions` (a flag left off takes the
    field's default); ``--overwrite`` goes to :func:`imagenet_zsl.errors.allow_overwrite`, as
    ``imagenet-zsl``'s command layer hands it on."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], argument_default=argparse.SUPPRESS)
    parser.add_argument("out", type=Path)
    parser.add_argument("--test-classes", type=int)
    parser.add_argument("--seed", type=seed_type)
    overwrite_flag(parser)
    options = vars(parser.parse_args(argv))
    allow_overwrite(options.pop("overwrite", False))
    return demo(DemoOptions(**options))


if __name__ == "__main__":
    sys.exit(main())
