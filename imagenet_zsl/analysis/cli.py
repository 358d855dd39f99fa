"""``imagenet-zsl analyze ladder|factor`` and ``imagenet-zsl splits factor``.

The flags; the handlers are :mod:`imagenet_zsl.analysis.commands`. Start-up imports nothing of the
stage (pandas, scipy): each command names its handler by dotted target, and the choices and defaults
kept in the analysis modules are dotted targets, read only when a flag is given or shown.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import LazyChoices, lazy_help, overwrite_flag, seed

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def register(tree: CommandTree) -> None:
    """Add the ``analyze`` group (``ladder``, ``factor``) and ``splits factor`` to the command line."""
    group = tree.group(
        "analyze", "Hascoet et al.'s analyses of finished runs (correction ladder, factor plots)"
    )
    _add_ladder(group)
    _add_factor_analysis(group)
    _add_factor_splits(tree.group("splits"))  # the group the splits stage created


def _add_ladder(group: argparse._SubParsersAction) -> None:
    """``analyze ladder``."""
    ladder = group.add_parser(
        "ladder",
        help="hit@1/hit@5 of a finished run under cumulative corrections, ZSL and GZSL (Hascoet Fig. 6)",
        description="Recompute, from the stored top-k lists (no new search), hit@K under cumulative "
        "corrections: as evaluated; related (parent/child) prediction counts; drop rare labels; drop "
        "secondary meanings; drop classes with few images; keep only filter-kept images. hit@K is the "
        "expected value under random tie-breaking (as `evaluate`), with the strict twin. A cell "
        "evaluated with --gzsl also gets the GZSL ladder: unseen u, seen s and H at γ = 0 per step, "
        "a prediction of the true class's seen parent/child counting from step 2 on. The cells' "
        "files are verified against their manifests first. Writes "
        "ladder.md, ladder.csv, ladder.png and manifest.json.",
    )
    ladder.add_argument(
        "run_dir", type=Path, help="--out of `imagenet-zsl run` (cells/*) or of `imagenet-zsl evaluate`"
    )
    ladder.add_argument(
        "--filter", dest="filter_dir", type=Path, help="--out of `imagenet-zsl images filter` (step 6)"
    )
    ladder.add_argument(
        "--labels",
        dest="labels_dir",
        type=Path,
        help="--out of `imagenet-zsl labels build` (default: computed)",
    )
    ladder.add_argument("--out", type=Path, help="output directory (default: RUN_DIR-ladder)")
    overwrite_flag(ladder)
    ladder.add_argument("--graph", help="wordnet, imagenet or a parent<TAB>child edge file")
    ladder.add_argument("--counts", help="'wnid<TAB>count' TSV for step 5 (default: fall11 counts)")
    ladder.add_argument(
        "--relation",
        choices=LazyChoices("imagenet_zsl.analysis.ladder_steps:RELATIONS"),
        metavar="RELATION",
        help="what step 2 accepts: %(choices)s (default: parent-child)",
    )
    lazy_help(
        ladder.add_argument("--min-images", type=int, metavar="N"),
        "step 5 keeps classes with >= N (default: %(default_min_images)s)",
        default_min_images="imagenet_zsl.analysis.ladder_steps:DEFAULT_MIN_IMAGES",
    )
    ladder.add_argument("--k", dest="ks", type=int, nargs="+", metavar="K", help="K values (default: 1 5)")
    _mismatch_flag(ladder)
    ladder.set_defaults(func="imagenet_zsl.analysis.commands:ladder")


def _add_factor_analysis(group: argparse._SubParsersAction) -> None:
    """``analyze factor``."""
    factor_plot = group.add_parser(
        "factor",
        help="per-class hit@K against a controlled factor per model, with bootstrap intervals",
        description="For a run on factor splits (`imagenet-zsl splits factor`), per-class hit@K per "
        "(model, bin) with a seeded bootstrap interval over classes, expected and strict tie rule. "
        "Writes factor.md, factor.csv, factor.png and manifest.json.",
    )
    factor_plot.add_argument(
        "run_dir", type=Path, help="--out of `imagenet-zsl run` (cells/*) or of `imagenet-zsl evaluate`"
    )
    factor_plot.add_argument(
        "--splits", dest="splits_dir", type=Path, help="the factor-split directory (default: found)"
    )
    factor_plot.add_argument("--out", type=Path, help="output directory (default: RUN_DIR-factor)")
    overwrite_flag(factor_plot)
    factor_plot.add_argument(
        "--k", dest="ks", type=int, nargs="+", metavar="K", help="K values (default: 1 5)"
    )
    factor_plot.add_argument("--resamples", type=int, help="bootstrap resamples")
    factor_plot.add_argument("--seed", type=seed, help="bootstrap seed")
    _mismatch_flag(factor_plot)
    factor_plot.set_defaults(func="imagenet_zsl.analysis.commands:factor_plot")


def _add_factor_splits(splits: argparse._SubParsersAction) -> None:
    """``splits factor``."""
    factor = splits.add_parser(
        "factor",
        help="B test splits where one factor moves and the others are matched (Hascoet Figs. 3, 5, 9)",
        description="Write B test splits of SIZE classes: the chosen factor moves from bin to bin, the "
        "other factors (frequency, meaning, population, ratio, depth) are held equal by seeded matched "
        "sampling; each split is structurally consistent, and (except for the ratio factor) a seeded "
        "swap step brings every bin's split-level R within factor.ratio_tolerance (default 0.05) of "
        "the bins' median. The pool requires a class vector (factor.require_vector, default "
        "glove-6b-50d). Writes one wnid file per bin, classes.csv, report.md (balance table, R per "
        "bin) and manifest.json.",
    )
    factor.add_argument("config", help="split config, e.g. configs/default.yaml (optional factor: section)")
    factor.add_argument(
        "--factor",
        required=True,
        choices=LazyChoices("imagenet_zsl.analysis.factors:FACTORS"),
        metavar="FACTOR",
        help="the factor that moves: %(choices)s",
    )
    factor.add_argument("--bins", type=int, help="number of splits (meaning: 2)")
    factor.add_argument("--size", type=int, help="classes per split")
    factor.add_argument("--out", required=True, help="output directory (replaced atomically)")
    overwrite_flag(factor)
    factor.set_defaults(func="imagenet_zsl.analysis.commands:factor_splits")


def _mismatch_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-feature-mismatch",
        action="store_true",
        help="combine cells evaluated on features of different backbones anyway (recorded in the "
        "manifest and shown under the table); by default that is an error",
    )
