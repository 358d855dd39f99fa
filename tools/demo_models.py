"""Demo: simulate ImageNet-scale features, train ESZSL, ConSE, trivial and SGCN, print hit@1/5.

    python tools/demo_models.py [--out out/demo-models] [--splits-dir splits]

Steps (the same as the CLI sequence ``imagenet-zsl simulate`` + ``imagenet-zsl train``):
1. simulate features over the real WordNet graph for the 1,000 training classes and the classes of
   ``hop1`` and ``benchmark`` (configs/simulate.yaml);
2. train each model from configs/models/<name>.yaml (the GCN with a CPU-sized schedule);
3. score every test image against the split's classes (one faiss top-k search) and print hit@1/5
   next to chance. Expect the trivial baseline to rival the models on hop1 and to fall to chance
   on the benchmark split: the structural bias the benchmark removes.

The features are SIMULATED: the numbers illustrate the pipeline, not real performance.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagenet_zsl.errors import UserInputError  # noqa: E402
from imagenet_zsl.evaluation.search import topk_inner_product  # noqa: E402
from imagenet_zsl.features.shards import FeatureDir  # noqa: E402
from imagenet_zsl.features.simulate import (  # noqa: E402
    load_simulation_config,
    resolve_class_vectors,
    simulate,
)
from imagenet_zsl.models.registry import load_model  # noqa: E402
from imagenet_zsl.models.training import load_train_config, train  # noqa: E402
from imagenet_zsl.scoring import hit_at_k  # noqa: E402
from imagenet_zsl.splits.io import read_wnid_list  # noqa: E402

MODELS = ("trivial", "conse", "eszsl", "sgcn")
SPLITS = ("hop1", "benchmark")
#: a CPU-sized schedule for the demo (the YAML keeps the paper's 3000 epochs x 2048 units)
DEMO_OVERRIDES = {"sgcn": {"epochs": 300, "hidden": [256], "lr": 0.01, "dropout": 0.0, "device": "cpu"}}


def split_images(test_dir: Path, classes: list[str]):  # noqa: ANN201 - (FeatureBlock, labels)
    """The test images of ``classes`` and their labels as indices into ``classes``."""
    features = FeatureDir(test_dir)
    block = features.load(with_logits=features.has_logits)
    position = {w: i for i, w in enumerate(classes)}
    labels = np.array([position.get(w, -1) for w in features.classes], dtype=np.int64)[block.labels]
    keep = labels >= 0
    block.features, block.labels = block.features[keep], labels[keep]
    block.logits = None if block.logits is None else block.logits[keep]
    return block


def evaluate(model, block, classes: list[str], ks=(1, 5)) -> dict[int, float]:  # noqa: ANN001
    """Flat hit@k of ``model`` on ``block`` (labels index ``classes``) among ``classes`` only."""
    queries = model.embed_images(block.features, block.logits)
    scores, ids = topk_inner_product(queries, model.class_prototypes(classes), max(ks) + 1)
    return hit_at_k(ids, block.labels, ks, topk_scores=scores)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "demo-models")
    parser.add_argument("--splits-dir", type=Path, default=ROOT / "splits")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "simulate.yaml")
    parser.add_argument("--semantics", default=None, help="override the class vectors (name or .npz)")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from tabulate import tabulate

    split_files = {name: args.splits_dir / f"{name}.txt" for name in SPLITS}
    missing = [str(p) for p in split_files.values() if not p.exists()]
    if missing:
        raise UserInputError(
            f"split files missing: {', '.join(missing)}; run 'imagenet-zsl splits build' first"
        )
    start = time.perf_counter()
    config = load_simulation_config(args.config)
    config.test.classes = [str(p) for p in split_files.values()]
    if args.semantics:
        config.semantics = args.semantics
    simulate(config, args.out / "features")
    print(f"simulated features in {time.perf_counter() - start:.1f}s -> {args.out / 'features'}")

    semantics = resolve_class_vectors(config.semantics)
    split_classes = {}
    for name, path in split_files.items():
        wnids = read_wnid_list(path)
        kept = [w for w in wnids if w in semantics]
        split_classes[name] = kept
        if len(kept) < len(wnids):
            print(
                f"{name}: {len(wnids) - len(kept)} of {len(wnids)} classes have no word vector; "
                f"every model is scored on the other {len(kept)}"
            )

    blocks = {split: split_images(args.out / "features" / "test", split_classes[split]) for split in SPLITS}

    rows = []
    for name in args.models:
        tic = time.perf_counter()
        train_config = load_train_config(ROOT / "configs" / "models" / f"{name}.yaml")
        train_config.semantics = config.semantics
        model_dir = train(
            train_config,
            args.out / "features" / "train",
            args.out / "models" / name,
            overrides=DEMO_OVERRIDES.get(name),
        )
        model = load_model(model_dir)
        fitted = time.perf_counter() - tic
        row = [name]
        for split in SPLITS:
            hits = evaluate(model, blocks[split], split_classes[split])
            row += [100 * hits[1], 100 * hits[5]]
        rows.append(row + [round(fitted, 1)])
    chance = ["chance"]
    for split in SPLITS:
        chance += [100 / len(split_classes[split]), 500 / len(split_classes[split])]
    rows.append(chance + [None])
    headers = ["model"] + [f"{s} hit@{k} %" for s in SPLITS for k in (1, 5)] + ["train s"]
    print(tabulate(rows, headers=headers, floatfmt=".2f"))
    print(
        f"total {time.perf_counter() - start:.0f}s. SIMULATED features: illustrates the pipeline, "
        "not real ImageNet performance."
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
