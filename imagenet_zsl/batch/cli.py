"""``imagenet-zsl run RECIPE --out DIR``: the flags; the handler is :mod:`imagenet_zsl.batch.commands`.

Start-up imports nothing of the stage (the runner loads the whole pipeline): the command names its
handler by dotted target, resolved only when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import allow_incomplete_flag, non_negative_int, positive_int

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the command line."""
    parser = tree.command(
        "run",
        "The main job in one command: train every model of a recipe once, evaluate it on every "
        "split (ZSL and GZSL), and write a models x splits hit@K table (Markdown, CSV, LaTeX) "
        "and plot. Resumable; a failing cell is reported and the others still run. Without a "
        "recipe file, --models, --splits and --store/--backbones (or --features) build one, "
        "written to OUT/recipe.yaml.",
        epilog="example: imagenet-zsl run configs/demo.yaml --out out/demo; from names: imagenet-zsl run "
        "--backbones resnet50 --models conse,trivial --splits dgp-2hops,dgp-3hops,dgp-all --store "
        "/data/fall11 --out out/dgp; on several processes or nodes: torchrun --nproc_per_node N -m "
        "imagenet_zsl.cli run configs/demo.yaml --out out/demo",
    )
    parser.add_argument(
        "recipe",
        type=Path,
        nargs="?",
        help="run recipe YAML (configs/demo.yaml documents every key); or leave it out and name "
        "--models, --splits and the test images",
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="run directory (re-running it resumes: finished cells are skipped)",
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar (one line per cell)"
    )
    parser.add_argument(
        "--columns",
        metavar="NAME,...",
        help="the columns of summary.md and summary.tex (and the printed table), comma-separated: names "
        "(e.g. 'strict hit@1', 'validation H') or groups: paper (default: model, split, label space, "
        "hit@1 [95%% CI], hit@2/5/10/20, GZSL U/S/H; at most 12 columns), strict, gzsl, all; "
        "summary.csv always has every column",
    )
    parser.add_argument(
        "--published",
        action="store_true",
        help="put the published rows of the same splits beside the run's in the summary (sorted by "
        "hit@1, with their source and every protocol difference; 'comparable' only when none is "
        "material); summary.tex cites them by key from summary.bib",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="whole_log",
        action="store_true",
        help="the whole log (every stage's lines); default: a progress bar, warnings, errors and the table",
    )
    parser.add_argument(
        "--allow-feature-mismatch",
        action="store_true",
        help="evaluate models fitted on features of another backbone than the test features "
        "(refused otherwise); recorded in the run manifest and shown in every row of the table",
    )
    names = parser.add_argument_group(
        "from names, without a recipe file (the recipe is written to OUT/recipe.yaml; names are "
        "shell patterns over the registries, e.g. --models '*' or --splits 'dgp-*')"
    )
    names.add_argument("--models", help="models, comma-separated (configs/models/NAME.yaml if present)")
    names.add_argument(
        "--splits",
        help="splits, comma-separated: published (dgp-2hops, dgp-3hops, dgp-all), committed or files",
    )
    names.add_argument("--splits-dir", help="where committed split names are found (default: splits)")
    names.add_argument("--store", help="image store of the test images, scored while extracted")
    names.add_argument("--backbones", help="backbones extracting --store, comma-separated")
    names.add_argument("--weights", help="weights file (one backbone) or NAME=FILE,... (several)")
    names.add_argument("--features", help="extracted test features instead: DIR, or NAME=DIR,...")
    names.add_argument("--semantics", help="class vectors of every model (a vector-set name or a .npz)")
    names.add_argument("--label-space", help="split (default) | all | a wnid FILE")
    names.add_argument(
        "--missing-semantics",
        choices=("drop", "count_as_miss", "keep", "error"),
        help="classes without a class vector: drop (default) | count_as_miss | keep (the full label "
        "space, never predicted) | error",
    )
    names.add_argument("--per-class", type=positive_int, help="extract at most this many images per class")
    names.add_argument("--device", help="extraction device (default auto)")
    names.add_argument("--batch-size", type=positive_int, help="extraction batch size")
    names.add_argument("--workers", type=non_negative_int, help="extraction data-loading workers")
    allow_incomplete_flag(names)  # --store's: a recipe gives it as features.test.allow_incomplete
    parser.set_defaults(func="imagenet_zsl.batch.commands:run")
