"""Command-line entry points of the `images` stage: ``imagenet-zsl images count``.

``imagenet-zsl images filter`` joins the same group from :mod:`imagenet_zsl.image_filter.cli`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from imagenet_zsl.images.store import open_store, write_counts_tsv

if TYPE_CHECKING:
    from imagenet_zsl.cli import CommandTree  # the tree is handed in; never imported upward

GROUP_HELP = "Image stores: count what you hold, filter bad images."


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    _register_count(tree.group("images", GROUP_HELP))


def _register_count(sub) -> None:
    parser = sub.add_parser(
        "count",
        help="Per-wnid image counts of a store (from its index, no decoding).",
        description="Per-wnid image counts of a store, in the packaged fall11 counts TSV format "
        "(wnid<TAB>num_images, header, sorted by wnid; zero-byte files are not counted). Builds "
        "and caches the store index on first use ($IMAGENET_ZSL_CACHE, default "
        "~/.cache/imagenet-zsl).",
    )
    parser.add_argument(
        "--store", required=True, help="fall11 tar folder, <wnid>/ folder tree, or flat val folder/tar"
    )
    parser.add_argument("--out", help="TSV file to write (default: stdout)")
    parser.add_argument("--layout", default="auto", choices=["auto", "tars", "tree", "flat"])
    parser.add_argument(
        "--val-labels",
        help="labels of a flat store: devkit ground truth "
        "(ILSVRC2012_ID per line) or 'filename<TAB>wnid' lines",
    )
    parser.add_argument("--rebuild-index", action="store_true", help="ignore the cached index")
    parser.set_defaults(func=_count)


def _count(args: argparse.Namespace) -> int:
    store = open_store(args.store, args.layout, args.val_labels, rebuild=args.rebuild_index)
    counts = store.counts()
    text = write_counts_tsv(counts, args.out)
    if args.out is None:
        sys.stdout.write(text)
    empty = int((store.size == 0).sum())
    note = f"; {empty} zero-byte files not counted" if empty else ""
    print(
        f"{sum(counts.values())} images in {len(counts)} classes ({store.layout} store {store.root}){note}",
        file=sys.stderr,
    )
    return 0
