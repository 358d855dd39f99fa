"""Command-line entry points of the `images` stage: ``imagenet-zsl images count``.

``imagenet-zsl images filter`` joins the same group from :mod:`imagenet_zsl.image_filter.cli`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import non_negative_int

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree
    from imagenet_zsl.images.store import ImageStore

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
    _register_coverage(group)


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
    parser.add_argument("--layout", default="auto", choices=LAYOUT_CHOICES)
    parser.add_argument(
        "--val-labels",
        help="labels of a flat store: devkit ground truth "
        "(ILSVRC2012_ID per line) or 'filename<TAB>wnid' lines",
    )
    parser.add_argument("--rebuild-index", action="store_true", help="ignore the cached index")
    parser.set_defaults(func=_count)


def _count(args: argparse.Namespace) -> int:
    from imagenet_zsl.images.store import is_counts_tsv, open_store, skipped_file_count, write_counts_tsv
    from imagenet_zsl.io import check_out_file

    if args.out is not None:  # before the store is scanned: a wrong --out fails at once
        check_out_file(
            args.out, [args.store, args.val_labels], replaces=is_counts_tsv, what="a counts table (TSV)"
        )
    store = open_store(args.store, args.layout, args.val_labels, rebuild=args.rebuild_index)
    counts = store.counts()
    text = write_counts_tsv(counts, args.out)
    if args.out is None:
        sys.stdout.write(text)
    empty = int((store.size == 0).sum())
    note = f"; {empty} zero-byte files not counted" if empty else ""
    problems = [p for p in store.problems if p["kind"] != "skipped-files"]
    if problems:
        kinds = sorted({p["kind"] for p in problems})
        note += (
            f"; {len(problems)} damaged or skipped entries ({', '.join(kinds)}) recorded in the "
            "store index, see the warnings"
        )
    not_images = sum(skipped_file_count(store).values())
    if not_images:
        note += f"; {not_images} files not read as images (see the warning)"
    print(
        f"{sum(counts.values())} images in {len(counts)} classes ({store.layout} store {store.root}){note}",
        file=sys.stderr,
    )
    return 0


def _register_coverage(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "coverage",
        help="Per split: the classes and images of fall11 missing from your copy of ImageNet.",
        description="Compare a store (e.g. the winter21 release, or a partial download) with the "
        "fall11 release the committed splits were built from: for every --split file, the classes "
        "the store lacks entirely, and the images missing (fall11 count minus the store's count, "
        "per class). Reads the store index (built and cached on first use), decodes nothing.",
    )
    parser.add_argument("--store", required=True, help=STORE_HELP)
    parser.add_argument("--split", required=True, nargs="+", metavar="FILE", help="wnid list(s)")
    parser.add_argument("--layout", default="auto", choices=LAYOUT_CHOICES)
    parser.add_argument("--val-labels", help="labels of a flat store (see 'images count')")
    parser.add_argument(
        "--show", type=non_negative_int, default=10, help="missing classes listed per split (default 10)"
    )
    parser.set_defaults(func=_coverage)


def split_coverage(store_counts: dict[str, int], wnids: list[str], reference: dict[str, int]) -> dict:
    """Coverage of one split: ``classes``/``images`` expected (fall11), held and missing;
    ``missing_classes``: wnids with no image in the store; ``short_classes``: wnids with fewer."""
    expected_images = sum(reference.get(w, 0) for w in wnids)
    held = {w: min(store_counts.get(w, 0), reference.get(w, store_counts.get(w, 0))) for w in wnids}
    missing_classes = [w for w in wnids if store_counts.get(w, 0) == 0]
    short = [w for w in wnids if 0 < store_counts.get(w, 0) < reference.get(w, 0)]
    return {
        "classes": len(wnids),
        "classes_missing": len(missing_classes),
        "images_fall11": expected_images,
        "images_held": sum(held.values()),
        "images_missing": expected_images - sum(held.values()),
        "missing_classes": missing_classes,
        "short_classes": short,
    }


def _coverage(args: argparse.Namespace) -> int:
    from imagenet_zsl.data import fall11_counts
    from imagenet_zsl.images.store import open_store
    from imagenet_zsl.splits.io import read_wnid_list

    splits = {path: read_wnid_list(path) for path in args.split}
    store: ImageStore = open_store(args.store, args.layout, args.val_labels)
    counts, reference = store.counts(), fall11_counts()
    print("split\tclasses\tclasses_missing\timages_fall11\timages_held\timages_missing\tshare_missing")
    details = []
    for path, wnids in splits.items():
        c = split_coverage(counts, wnids, reference)
        share = c["images_missing"] / c["images_fall11"] if c["images_fall11"] else 0.0
        print(
            f"{path}\t{c['classes']}\t{c['classes_missing']}\t{c['images_fall11']}\t"
            f"{c['images_held']}\t{c['images_missing']}\t{share:.2%}"
        )
        if c["missing_classes"]:
            shown = ", ".join(c["missing_classes"][: args.show])
            more = len(c["missing_classes"]) - args.show
            details.append(f"{path}: classes missing: {shown}{f' (+{more} more)' if more > 0 else ''}")
    for line in details:
        print(line, file=sys.stderr)
    return 0
