"""``imagenet-zsl images count | coverage`` and ``splits coverage``: the flags; the handlers are
:mod:`imagenet_zsl.images.commands`.

``imagenet-zsl images filter`` joins the same group from :mod:`imagenet_zsl.image_filter.cli`.
Start-up imports nothing of the stage: each command names its handler by dotted target.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import allow_incomplete_flag, non_negative_int, overwrite_flag

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree

GROUP_HELP = "Image stores: count what you hold, filter bad images."
#: ``--layout`` choices (the names of images.layouts; spelt here so --help imports nothing heavy)
LAYOUT_CHOICES = ["auto", "tars", "tree", "flat", "wds", "parquet", "in21k-p"]
STORE_HELP = (
    "the image store: fall11 <wnid>.tar folder, <wnid>/ folder tree, flat val folder/tar, webdataset "
    ".tar shards, .parquet files, or ImageNet-21K-P (train/val/small_classes)"
)


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    group = tree.group("images", GROUP_HELP)
    _register_count(group)
    _register_coverage(group, tree.group("splits"))


def _register_count(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "count",
        help="Per-wnid image counts of a store (from its index, no decoding).",
        description="Per-wnid image counts of a store, in the packaged fall11 counts TSV format "
        "(wnid<TAB>num_images, header, sorted by wnid; zero-byte files are not counted). Builds "
        "and caches the store index on first use ($IMAGENET_ZSL_CACHE, default "
        "~/.cache/imagenet-zsl).",
    )
    parser.add_argument("--store", required=True, help=STORE_HELP)
    parser.add_argument(
        "--out",
        help="TSV file to write (default: stdout); never an input, and an existing file only if it "
        "is such a counts table",
    )
    parser.add_argument("--layout", choices=LAYOUT_CHOICES)
    parser.add_argument(
        "--val-labels",
        help="labels of a flat store: devkit ground truth "
        "(ILSVRC2012_ID per line) or 'filename<TAB>wnid' lines",
    )
    parser.add_argument("--rebuild-index", action="store_true", help="ignore the cached index")
    allow_incomplete_flag(parser)
    parser.set_defaults(func="imagenet_zsl.images.commands:count")


COVERAGE_DESCRIPTION = (
    "How much of each split your image store holds (fall11, winter21, ImageNet-21K-P and partial "
    "copies differ): per split, its classes, the classes the store holds (at least one image), the "
    "store's images of them, the fall11 images expected and missing, and whether the split is "
    "complete (every class held). A split is a published name (dgp-2hops, dgp-3hops, dgp-all), a "
    "committed name (--splits-dir/NAME.txt) or a wnid file; by default the published lists and the "
    "committed hop and benchmark lists. The table goes to stdout (TSV), the missing classes to "
    "stderr; --out DIR also writes coverage.tsv, the store's counts, missing.tsv and a manifest. "
    "Reads the store index (built and cached on first use), decodes nothing."
)


def _register_coverage(images: argparse._SubParsersAction, splits: argparse._SubParsersAction) -> None:
    """``splits coverage`` (the name the docs use) and ``images coverage`` (its alias, the same
    handler and table; splits given with ``--split``). Both are registered here, by the stage that
    reads stores: the splits stage may not import images (``tree.group("splits")`` joins its group)."""
    main = splits.add_parser(
        "coverage",
        help="per split: the classes and images your image store holds, and whether it is complete",
        description=COVERAGE_DESCRIPTION,
    )
    main.add_argument(
        "splits", nargs="*", metavar="SPLIT", help="split names or wnid files (default: see above)"
    )
    _coverage_flags(main)
    alias = images.add_parser(
        "coverage",
        help="alias of 'splits coverage' (splits given with --split)",
        description=COVERAGE_DESCRIPTION + " Alias of 'imagenet-zsl splits coverage'.",
    )
    alias.add_argument("--split", dest="splits", nargs="+", metavar="SPLIT", help="split names or wnid files")
    _coverage_flags(alias)


def _coverage_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", required=True, help=STORE_HELP)
    parser.add_argument("--splits-dir", help="where committed split names live (default: splits)")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="also write coverage.tsv, store_counts.tsv, missing.tsv and manifest.json to DIR",
    )
    overwrite_flag(parser)
    parser.add_argument("--layout", choices=LAYOUT_CHOICES)
    parser.add_argument("--val-labels", help="labels of a flat store (see 'images count')")
    allow_incomplete_flag(parser)
    parser.add_argument("--show", type=non_negative_int, help="missing classes listed per split (default 10)")
    parser.set_defaults(func="imagenet_zsl.images.commands:coverage")
