"""The handler of ``imagenet-zsl evaluate`` (flags in :mod:`imagenet_zsl.evaluation.cli`; ``report``'s
handler is :func:`imagenet_zsl.evaluation.report_command.report`, so ``evaluate`` imports none of
the tables' modules; ``predict``'s is :func:`imagenet_zsl.evaluation.predict.predict_command`).

Each takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when one of
these commands runs.
"""

from __future__ import annotations

import argparse

from imagenet_zsl.evaluation.run import EvaluationConfig
from imagenet_zsl.evaluation.run import evaluate as run_evaluation
from imagenet_zsl.scoring import DEFAULT_KS
from imagenet_zsl.splits.named import resolve_split


def evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: score the test images of a split, write the run directory and print its headline."""
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
    metrics = run_evaluation(cfg)
    print(_zsl_line(metrics["zsl"]))
    gzsl = metrics.get("gzsl")
    if gzsl:
        print(_gzsl_line(gzsl))
    print(f"wrote {args.out}")
    return 0


def _zsl_line(zsl: dict) -> str:
    """The ZSL headline: images, classes, label space and hit@K (with the strict hit@ of ties)."""
    ks = sorted(int(k) for k in zsl["flat"])
    return (
        f"ZSL   {zsl['images']} images of {zsl['classes_with_test_images']} classes, label space "
        f"{zsl['classes_in_label_space']} classes ({zsl['label_space']}): "
        + ", ".join(f"hit@{k} {100 * zsl['flat'][str(k)]:.2f}%" for k in ks)
        + (
            f" (strict ties: hit@{ks[0]} {100 * zsl['flat_strict'][str(ks[0])]:.2f}%)"
            if zsl.get("tied_images")
            else ""
        )
    )


def _gzsl_line(gzsl: dict) -> str:
    """The GZSL headline: seen, unseen, H and AUSUC, and the calibrated H when γ was chosen."""
    d = gzsl["per_class"]["1"]
    line = (
        f"GZSL  seen {100 * d['seen']:.2f}%, unseen {100 * d['unseen']:.2f}%, "
        f"H {100 * d['H']:.2f}%, AUSUC {100 * d['ausuc']:.2f}"
    )
    cal = gzsl.get("calibration")
    if cal:
        line += f"; calibrated γ={cal['gamma']:.4g}: H {100 * cal['test']['per_class']['1']['H']:.2f}%"
    return line
