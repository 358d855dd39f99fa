"""The handler of ``imagenet-zsl run`` (flags in :mod:`imagenet_zsl.batch.cli`).

It takes :class:`~imagenet_zsl.batch.flags.RunOptions` (one field per flag, built by
:func:`imagenet_zsl.cli.handler_config`) and returns the exit status; imported only when the
command runs. Nothing imported here loads torch, so a recipe that extracts its test images tunes
the process (:func:`imagenet_zsl.devices.tune_process_for_image_pipeline`) before torch loads.
"""

from __future__ import annotations

import sys
from typing import Any

from imagenet_zsl import devices
from imagenet_zsl.batch.console import bar_echo
from imagenet_zsl.batch.flags import RunOptions, names_given, recipe_from_flags
from imagenet_zsl.batch.plan import RunResult
from imagenet_zsl.batch.ranks import PeerFailed
from imagenet_zsl.batch.runner import run as run_recipe
from imagenet_zsl.batch.scored_test_images import recipe_extracts
from imagenet_zsl.batch.summary import SummaryTable
from imagenet_zsl.errors import UserInputError


def run(cfg: RunOptions) -> int:
    """``run``: train and evaluate every cell of a recipe, then print what was written (rank 0)."""
    if cfg.store if cfg.recipe is None else recipe_extracts(cfg.recipe):
        # test images decoded in workers beside the backbone: tuned as `extract` is, before torch
        # loads (scheduling and memory reuse only; looked up on the module: tests patch it)
        devices.tune_process_for_image_pipeline()
    try:
        result = run_recipe(
            cfg.recipe,
            cfg.out,
            progress=cfg.progress,
            allow_feature_mismatch=cfg.allow_feature_mismatch,
            table=SummaryTable(cfg.columns, cfg.published),
            **_options(cfg),
        )
    except PeerFailed:  # under torchrun: rank 0 printed the error
        return 2
    if not result.primary:  # under torchrun: rank 0 reports for every rank
        return 1 if result.failed else 0
    _report(result, _verbose(cfg))
    if result.failed:
        first, cause = next(iter(result.errors.items()))
        print(
            f"error: {len(result.failed)} cells failed: {', '.join(result.failed)}; first, {first}: {cause}",
            file=sys.stderr,
        )
        return 1
    return 0


def _verbose(cfg: RunOptions) -> bool:
    """``run -v`` or the global ``imagenet-zsl -v``: the whole log."""
    return cfg.whole_log or cfg.verbose


def _options(cfg: RunOptions) -> dict[str, Any]:
    """The recipe (a file, or built from the flags: never both), how much to print, and where."""
    given = names_given(cfg)
    if given and cfg.recipe is not None:
        raise UserInputError(
            f"give a recipe file ({cfg.recipe}) or the names ({', '.join(given)}), not both: the "
            "recipe's keys say what the flags would"
        )
    if not given and cfg.recipe is None:
        raise UserInputError(
            "nothing to run: give a recipe YAML (e.g. configs/demo.yaml), or --models, --splits and "
            "--store with --backbones (or --features)"
        )
    verbose = _verbose(cfg)
    return {
        "recipe": recipe_from_flags(cfg) if given else None,
        "verbose": verbose,
        "echo": print if verbose or not cfg.progress else bar_echo,
    }


def _report(result: RunResult, verbose: bool) -> None:
    """What was done and written: every file with ``-v``, else one line."""
    counts = (
        f"trained {len(result.trained)} models; evaluated {len(result.evaluated)} cells, "
        f"skipped {len(result.skipped)} finished, {len(result.failed)} failed"
    )
    if not verbose:
        print(f"{counts}; table, records and cells in {result.out}")
        return
    print(counts)
    print("files written:")
    for path in result.files:
        print(f"  {path}")
    print(f"  {result.out / 'cells'}/  (one evaluation run directory per model and split)")
