"""The handler of ``imagenet-zsl run`` (flags in :mod:`imagenet_zsl.batch.cli`).

It takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when the
command runs. Nothing imported here loads torch, so a recipe that extracts its test images tunes
the process (:func:`imagenet_zsl.devices.tune_process_for_image_pipeline`) before torch loads.
"""

from __future__ import annotations

import argparse
import sys

from imagenet_zsl import devices
from imagenet_zsl.batch.ranks import PeerFailed
from imagenet_zsl.batch.runner import run as run_recipe
from imagenet_zsl.batch.test_images import recipe_extracts


def run(args: argparse.Namespace) -> int:
    """``run``: train and evaluate every cell of a recipe, then print what was written (rank 0)."""
    if recipe_extracts(args.recipe):
        # test images decoded in workers beside the backbone: tuned as `extract` is, before torch
        # loads (scheduling and memory reuse only; looked up on the module: tests patch it)
        devices.tune_process_for_image_pipeline()
    try:
        result = run_recipe(
            args.recipe,
            args.out,
            progress=not args.no_progress,
            allow_feature_mismatch=args.allow_feature_mismatch,
        )
    except PeerFailed:  # under torchrun: rank 0 printed the error
        return 2
    if not result.primary:  # under torchrun: rank 0 reports for every rank
        return 1 if result.failed else 0
    print(
        f"trained {len(result.trained)} models; evaluated {len(result.evaluated)} cells, "
        f"skipped {len(result.skipped)} finished, {len(result.failed)} failed"
    )
    print("files written:")
    for path in result.files:
        print(f"  {path}")
    print(f"  {result.out / 'cells'}/  (one evaluation run directory per model and split)")
    if result.failed:
        first, cause = next(iter(result.errors.items()))
        print(
            f"error: {len(result.failed)} cells failed: {', '.join(result.failed)}; first, {first}: {cause}",
            file=sys.stderr,
        )
        return 1
    return 0
