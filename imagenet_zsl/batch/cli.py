"""``imagenet-zsl run RECIPE --out DIR``: the flags; the handler is :mod:`imagenet_zsl.batch.commands`.

Start-up imports nothing of the stage (the runner loads the whole pipeline): the command names its
handler by dotted target, resolved only when it runs.
"""

from __future__ import annotations

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
    parser.set_defaults(func="imagenet_zsl.batch.commands:run")
