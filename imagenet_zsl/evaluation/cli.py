"""Command-line entry points of the `evaluation` stage: ``evaluate`` and ``report``.

Start-up imports nothing of the stage: each handler imports what it runs.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import positive_int, seed
from imagenet_zsl.devices import DEVICE_HELP

#: help of --label-space (the names are ``splits.label_space.NAMED_LABEL_SPACES``)
LABEL_SPACE_HELP = (
    "the classes each test image is ranked against: 'split' (the split's classes, the default; "
    "classes without test images stay as distractors), 'all' (every ImageNet-21K class that is "
    "not a training class: the 'All' protocol), or a wnid list FILE holding the split's classes"
)

#: help of evaluate's --allow-feature-mismatch
MISMATCH_HELP = (
    "combine features whose identity (backbone, weights, preprocessing, layer) differs from the "
    "model's training features or from each other; the override is recorded and shown in every table"
)

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def open_fraction(text: str) -> float:
    """A fraction strictly between 0 and 1 (``nan``, ``inf``, 0 and 1 are usage errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
    if not math.isfinite(value) or not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be a number strictly between 0 and 1")
    return value


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    ev = tree.command(
        "evaluate",
        "Score images against class prototypes (exact top-k) and write ZSL/GZSL metrics, "
        "per-class table, report and plots.",
    )
    ev.add_argument(
        "--features", type=Path, required=True, help="feature directory holding the test classes' images"
    )
    ev.add_argument(
        "--split",
        type=Path,
        required=True,
        help="test-class list (one wnid per line), a published split (dgp-2hops, dgp-3hops, dgp-all) "
        "or a committed name (splits/NAME.txt)",
    )
    ev.add_argument("--label-space", default="split", metavar="split|all|FILE", help=LABEL_SPACE_HELP)
    ev.add_argument("--allow-feature-mismatch", action="store_true", help=MISMATCH_HELP)
    source = ev.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="fitted model directory (imagenet-zsl train)")
    source.add_argument(
        "--prototypes",
        type=Path,
        help="ClassVectors .npz (wnids + matrix) in feature space, scored against the raw features",
    )
    ev.add_argument(
        "--l2-normalize", action="store_true", help="L2-normalise queries and prototypes (cosine similarity)"
    )
    ev.add_argument(
        "--k",
        type=int,
        nargs="+",
        default=None,  # scoring.DEFAULT_KS, applied by the handler: scoring imports numpy
        metavar="K",
        help="hit@K values (default: 1 2 5 10 20)",  # = DEFAULT_KS, checked in tests/test_cli.py
    )
    ev.add_argument("--gzsl", action="store_true", help="also evaluate generalized ZSL (test + seen classes)")
    ev.add_argument(
        "--seen-features",
        type=Path,
        help="held-out images of the seen classes (e.g. ILSVRC-2012 val); --gzsl",
    )
    ev.add_argument(
        "--seen-classes", type=Path, help="seen-class list (default: classes with images in --seen-features)"
    )
    ev.add_argument(
        "--val-split",
        type=Path,
        help="validation classes (disjoint from test and seen) to choose the calibration γ maximising H",
    )
    ev.add_argument(
        "--val-features", type=Path, help="features of the validation classes (default: --features)"
    )
    ev.add_argument(
        "--val-seen-features",
        type=Path,
        help="held-out seen images for validation (default: hold out --val-seen-fraction of --seen-features)",
    )
    ev.add_argument(
        "--val-seen-fraction",
        type=open_fraction,
        default=0.5,
        help="share of the seen images held out to choose γ, in (0, 1) (default 0.5)",
    )
    ev.add_argument("--seed", type=seed, default=0, help="seed of the seen-image hold-out")
    ev.add_argument(
        "--graph",
        default="auto",
        help="hierarchy for the error breakdown and class properties: wordnet, "
        "imagenet, none, a parent<TAB>child edge file, or auto (default: "
        "WordNet when installed, else none)",
    )
    ev.add_argument(
        "--no-label-frequency", action="store_true", help="skip the label-frequency column (needs WordNet)"
    )
    ev.add_argument(
        "--kept-images",
        type=Path,
        help="output dir of 'imagenet-zsl images filter': evaluate only kept test images",
    )
    ev.add_argument("--no-plots", action="store_true")
    ev.add_argument(
        "--block-rows",
        type=positive_int,
        default=32768,
        help="images read and converted at once (memory bound)",
    )
    ev.add_argument(
        "--search",
        choices=("exact", "faiss"),
        default="exact",
        help="exact: the fixed-shape BLAS search (default); faiss: faiss's IndexFlatIP (faiss-cpu, or "
        "faiss-gpu with a CUDA --device) proposes each image's candidates and the exact scores decide: "
        "the same lists, metrics and tables, about 1.8x the CPU",
    )
    ev.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    ev.add_argument("--out", type=Path, required=True, help="run directory to write")
    ev.set_defaults(func=_evaluate)

    rep = tree.command(
        "report",
        "Aggregate evaluation runs into one table (Markdown, CSV and LaTeX): models x splits "
        "x hit@K, ZSL and GZSL.",
    )
    rep.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="run directories of 'imagenet-zsl evaluate' (a directory given twice is reported once)",
    )
    rep.add_argument(
        "--out",
        type=Path,
        required=True,
        help="output path, outside every RUN_DIR; .md, .csv and .tex files are written beside it",
    )
    rep.set_defaults(func=_report)


def _evaluate(args: argparse.Namespace) -> int:
    from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
    from imagenet_zsl.scoring import DEFAULT_KS
    from imagenet_zsl.splits.named import resolve_split

    cfg = EvaluationConfig(
        features=args.features,
        split=resolve_split(args.split, "splits", "--split"),
        out=args.out,
        model=args.model,
        prototypes=args.prototypes,
        l2_normalize=args.l2_normalize,
        ks=list(DEFAULT_KS) if args.k is None else args.k,
        gzsl=args.gzsl,
        seen_features=args.seen_features,
        seen_classes=args.seen_classes,
        val_split=args.val_split,
        val_features=args.val_features,
        val_seen_features=args.val_seen_features,
        val_seen_fraction=args.val_seen_fraction,
        seed=args.seed,
        graph=args.graph,
        label_frequency=not args.no_label_frequency,
        plots=not args.no_plots,
        block_rows=args.block_rows,
        search=args.search,
        device=args.device,
        kept_images=args.kept_images,
        label_space=args.label_space,
        allow_feature_mismatch=args.allow_feature_mismatch,
    )
    metrics = evaluate(cfg)
    zsl = metrics["zsl"]
    ks = sorted(int(k) for k in zsl["flat"])
    print(
        f"ZSL   {zsl['images']} images of {zsl['classes_with_test_images']} classes, label space "
        f"{zsl['classes_in_label_space']} classes ({zsl['label_space']}): "
        + ", ".join(f"hit@{k} {100 * zsl['flat'][str(k)]:.2f}%" for k in ks)
        + (
            f" (strict ties: hit@{ks[0]} {100 * zsl['flat_strict'][str(ks[0])]:.2f}%)"
            if zsl.get("tied_images")
            else ""
        )
    )
    gzsl = metrics.get("gzsl")
    if gzsl:
        d = gzsl["per_class"]["1"]
        line = (
            f"GZSL  seen {100 * d['seen']:.2f}%, unseen {100 * d['unseen']:.2f}%, "
            f"H {100 * d['H']:.2f}%, AUSUC {100 * d['ausuc']:.2f}"
        )
        cal = gzsl.get("calibration")
        if cal:
            line += f"; calibrated γ={cal['gamma']:.4g}: H {100 * cal['test']['per_class']['1']['H']:.2f}%"
        print(line)
    print(f"wrote {args.out}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from imagenet_zsl.evaluation.report import aggregate_runs, check_report_out, write_report_tables

    check_report_out(args.out, args.runs)
    table = aggregate_runs(args.runs)
    for path in write_report_tables(table, args.out):
        print(f"wrote {path}")
    return 0
