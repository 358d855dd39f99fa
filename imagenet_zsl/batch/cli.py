"""Command-line entry point of the `batch` stage: ``imagenet-zsl run RECIPE --out DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the command line."""
    parser = tree.command(
        "run",
        "The main job in one command: train every model of a recipe once, evaluate it on every "
        "split (ZSL and GZSL), and write a models x splits hit@K table (Markdown, CSV, LaTeX) "
        "and plot. Resumable; a failing cell is reported and the others still run.",
        epilog="example: imagenet-zsl run configs/demo.yaml --out out/demo; on several processes or "
        "nodes: torchrun --nproc_per_node N -m imagenet_zsl.cli run configs/demo.yaml --out out/demo",
    )
    parser.add_argument("recipe", type=Path, help="run recipe YAML (configs/demo.yaml documents every key)")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="run directory (re-running it resumes: finished cells are skipped)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (one line per cell)")
    parser.add_argument(
        "--allow-feature-mismatch",
        action="store_true",
        help="evaluate models fitted on features of another backbone than the test features "
        "(refused otherwise); recorded in the run manifest and shown in every row of the table",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from imagenet_zsl.batch.ranks import PeerFailed
    from imagenet_zsl.batch.runner import run

    try:
        result = run(
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
