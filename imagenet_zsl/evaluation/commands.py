"""The handler of ``imagenet-zsl evaluate`` (flags in :mod:`imagenet_zsl.evaluation.cli`; ``report``'s
handler is :func:`imagenet_zsl.evaluation.report_command.report`, so ``evaluate`` imports none of
the tables' modules; ``predict``'s is :func:`imagenet_zsl.evaluation.predict.predict_command`).

Each takes its validated config (built from the flags by :func:`imagenet_zsl.cli.handler_config`) and
returns the exit status; imported only when one of
these commands runs.
"""

from __future__ import annotations

import dataclasses

from imagenet_zsl.evaluation.run import EvaluationConfig
from imagenet_zsl.evaluation.run import evaluate as run_evaluation
from imagenet_zsl.scoring import ks_of
from imagenet_zsl.splits.named import resolve_split


def evaluate(cfg: EvaluationConfig) -> int:
    """``evaluate``: score the test images of a split, write the run directory and print its headline."""
    cfg = dataclasses.replace(cfg, split=resolve_split(cfg.split, "splits", "--split"))
    metrics = run_evaluation(cfg)
    print(_zsl_line(metrics["zsl"]))
    gzsl = metrics.get("gzsl")
    if gzsl:
        print(_gzsl_line(gzsl))
    print(f"wrote {cfg.out}")
    return 0


def _zsl_line(zsl: dict) -> str:
    """The ZSL headline: images, classes, label space and hit@K (with the strict hit@ of ties)."""
    ks = ks_of(zsl["flat"])
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
