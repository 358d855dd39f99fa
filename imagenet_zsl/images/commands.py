"""The handlers of ``imagenet-zsl images count | coverage`` (flags in :mod:`imagenet_zsl.images.cli`).

Each takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when one of
these commands runs.
"""

from __future__ import annotations

import argparse
import sys

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.images.store import (
    ImageStore,
    is_counts_tsv,
    open_store,
    skipped_file_count,
    write_counts_tsv,
)
from imagenet_zsl.io import check_out_file
from imagenet_zsl.splits.io import read_wnid_list


def count(args: argparse.Namespace) -> int:
    """``images count``: per-wnid image counts of a store, as the packaged counts TSV."""
    if args.out is not None:  # before the store is scanned: a wrong --out fails at once
        check_out_file(
            args.out, [args.store, args.val_labels], replaces=is_counts_tsv, what="a counts table (TSV)"
        )
    store = open_store(
        args.store,
        args.layout,
        args.val_labels,
        rebuild=args.rebuild_index,
        allow_incomplete=args.allow_incomplete,
    )
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


def coverage(args: argparse.Namespace) -> int:
    """``images coverage``: per split, the fall11 classes and images the store lacks."""
    splits = {path: read_wnid_list(path) for path in args.split}
    store: ImageStore = open_store(
        args.store, args.layout, args.val_labels, allow_incomplete=args.allow_incomplete
    )
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
