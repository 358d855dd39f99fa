"""``imagenet-zsl splits build | stats | leakage | frontier | show``: the flags; the handlers are
:mod:`imagenet_zsl.splits.commands`.

Start-up imports nothing of the stage (the optimiser loads scipy.optimize): each command names its
handler by dotted target, and help texts that list a stage's names are dotted targets too, resolved
only when shown. Each flag's ``dest`` is a field of its handler's options
(``commands.<Command>Options``), which hold the defaults: no flag here states one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import lazy_help, overwrite_flag, positive_int

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def register(tree: CommandTree) -> None:
    """Add the ``splits`` group to the command line."""
    group = tree.group("splits", "build ImageNet-21K zero-shot splits and analyse wnid lists")
    build = group.add_parser(
        "build",
        help="build every split of a config (files, manifest, report)",
        description="Build every split of a YAML config into DIR: one sorted "
        "wnid file per split, manifest.json, report.md and a ratio plot.",
    )
    build.add_argument("config", help="split config, e.g. configs/default.yaml")
    build.add_argument("--out", required=True, help="output directory (replaced atomically)")
    overwrite_flag(build)
    build.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    build.add_argument(
        "--store-counts",
        metavar="FILE",
        help="build every split on the classes your image store holds (FILE: the counts table of "
        "'images count --out' or 'splits coverage --out'): the same rule restricted to the held "
        "classes, each split's original size and R beside it (sets the recipe's store.counts)",
    )
    build.add_argument(
        "--store-min-images",
        type=positive_int,
        metavar="N",
        help="a class is held with at least N images (default 1; with --store-counts)",
    )
    build.set_defaults(func="imagenet_zsl.splits.commands:build")

    stats = group.add_parser("stats", help="class/image counts, structural ratio and flaws of a wnid list")
    stats.add_argument("file", help="wnid list (one wnid a line)")
    stats.add_argument("--train", help="training wnid list (default: the ILSVRC-2012 1,000)")
    stats.add_argument("--graph", choices=("wordnet", "imagenet"))
    stats.add_argument("--counts", help="'wnid<TAB>count' TSV (default: packaged fall11 counts)")
    stats.add_argument(
        "--pool-config",
        help="split recipe whose benchmark pool gives the optimum R for a list of this size "
        "(default: configs/default.yaml's 'benchmark' pool when the repository has it)",
    )
    stats.add_argument("--split", help="benchmark split of --pool-config (default: its first)")
    stats.add_argument(
        "--no-optimum", dest="optimum", action="store_false", help="skip the optimum R (it takes seconds)"
    )
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(func="imagenet_zsl.splits.commands:stats")

    leak = group.add_parser(
        "leakage",
        help="share of a split's test classes and images seen as labels in pretraining",
        description="For each split file, the share of its classes (and of their images) that "
        "are labels of a pretraining label set.",
    )
    leak.add_argument("splits", nargs="+", help="wnid list(s)")
    lazy_help(
        leak.add_argument("--pretraining", required=True),
        "label set: %(label_sets)s or a wnid-list FILE",
        label_sets="imagenet_zsl.splits.pretraining:LABEL_SET_FILES",
    )
    leak.add_argument("--counts", help="'wnid<TAB>count' TSV (default: packaged fall11 counts)")
    leak.add_argument("--json", action="store_true", help="print one JSON object per split")
    leak.set_defaults(func="imagenet_zsl.splits.commands:leakage")

    front = group.add_parser(
        "frontier",
        help="optimal R as the largest share of one WordNet branch goes from 1.0 to 0.1",
        description="Solve a benchmark split of CONFIG exactly for each max_branch_share; write "
        "the sets, frontier.csv/.md, frontier.png and manifest.json to DIR.",
    )
    front.add_argument("config", help="split recipe, e.g. configs/default.yaml")
    front.add_argument("--out", required=True, help="output directory (replaced atomically)")
    overwrite_flag(front)
    front.add_argument("--split", help="benchmark split of CONFIG (default: its first)")
    front.add_argument(
        "--shares",
        type=_shares,
        help="comma-separated max_branch_share values (default: 1.0,0.9,...,0.1)",
    )
    front.set_defaults(func="imagenet_zsl.splits.commands:frontier")

    show = group.add_parser(
        "show",
        help="a named split: class count, source, licence, sha256 and its difference from our hop lists",
        description="Show a published split (dgp-2hops, dgp-3hops, dgp-all: DGP's "
        "materials/imagenet-testsets.json, the classes of published GCNZ/DGP/SGCN numbers) with "
        "its source, licence, sha256 and the classes it differs in from our hop lists, or a "
        "committed split (splits/NAME.txt) or wnid file with its count and sha256.",
    )
    show.add_argument("name", help="dgp-2hops, dgp-3hops, dgp-all, a committed split name or a wnid file")
    show.add_argument("--splits-dir", help="where committed names live (default: splits)")
    show.add_argument("--wnids", action="store_true", help="print the wnids only, one a line")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func="imagenet_zsl.splits.commands:show")


def _shares(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or not all(0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"each share must be in (0, 1], got {text!r}")
    return values
