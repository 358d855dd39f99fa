"""The handlers of ``imagenet-zsl images count | coverage`` and ``splits coverage`` (flags in
:mod:`imagenet_zsl.images.cli`).

Each takes its config (:class:`CountOptions`, :class:`CoverageOptions`: one field per flag, built
by :func:`imagenet_zsl.cli.handler_config`) and returns the exit status; imported only when one of
these commands runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.images.coverage import (
    COUNTS_NAME,
    COVERAGE_TOOL,
    MISSING_NAME,
    TABLE_NAME,
    SplitCoverage,
    coverage_of,
    coverage_table,
    default_split_names,
    missing_lines,
    write_coverage,
)
from imagenet_zsl.images.store import (
    ImageStore,
    is_counts_tsv,
    open_store,
    skipped_file_count,
    write_counts_tsv,
)
from imagenet_zsl.safe_output import check_out_dir, check_out_file
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.named import PUBLISHED_SPLITS, resolve_split


@dataclass(frozen=True)
class CountOptions:
    """The flags of ``images count``."""

    #: the image store (a folder or file of one of the layouts)
    store: str
    #: the counts TSV to write (None: stdout)
    out: str | None = None
    layout: str = "auto"
    #: labels of a flat store (devkit ground truth or ``filename<TAB>wnid`` lines)
    val_labels: str | None = None
    #: ignore the cached store index
    rebuild_index: bool = False
    allow_incomplete: bool = False


@dataclass(frozen=True)
class CoverageOptions:
    """The flags of ``splits coverage`` (and its alias ``images coverage``)."""

    #: the image store
    store: str
    #: split names or wnid files (empty: the published and committed lists)
    splits: Sequence[str] = ()
    #: where committed split names live
    splits_dir: str = "splits"
    #: also write the tables and a manifest to this directory
    out: str | None = None
    layout: str = "auto"
    #: labels of a flat store
    val_labels: str | None = None
    allow_incomplete: bool = False
    #: missing classes listed per split
    show: int = 10


def count(cfg: CountOptions) -> int:
    """``images count``: per-wnid image counts of a store, as the packaged counts TSV."""
    if cfg.out is not None:  # before the store is scanned: a wrong --out fails at once
        check_out_file(
            cfg.out, [cfg.store, cfg.val_labels], replaces=is_counts_tsv, what="a counts table (TSV)"
        )
    store = open_store(
        cfg.store,
        cfg.layout,
        cfg.val_labels,
        rebuild=cfg.rebuild_index,
        allow_incomplete=cfg.allow_incomplete,
    )
    counts = store.counts()
    text = write_counts_tsv(counts, cfg.out)
    if cfg.out is None:
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


def coverage(cfg: CoverageOptions) -> int:
    """``splits coverage`` (alias ``images coverage``): per split, the classes and images the store
    holds, what it lacks of fall11, and whether the split is complete on it."""
    names = cfg.splits or default_split_names(cfg.splits_dir)
    where = "splits coverage"
    paths = {name: resolve_split(name, cfg.splits_dir, where) for name in names}  # before the scan
    splits = {name: read_wnid_list(path) for name, path in paths.items()}
    packaged = {PUBLISHED_SPLITS[n].path for n in names if n in PUBLISHED_SPLITS}
    inputs = [cfg.store, cfg.val_labels, *(p for p in paths.values() if p not in packaged)]
    if cfg.out is not None:
        # a wrong --out (an input, another tool's, a file the user added or edited) fails before the scan
        check_out_dir(cfg.out, COVERAGE_TOOL, inputs, own_files=True)
    store: ImageStore = open_store(
        cfg.store, cfg.layout, cfg.val_labels, allow_incomplete=cfg.allow_incomplete
    )
    counts, reference = store.counts(), fall11_counts()
    rows = [
        SplitCoverage(name, paths[name], wnids, coverage_of(counts, wnids, reference))
        for name, wnids in splits.items()
    ]
    sys.stdout.write(coverage_table(rows))
    for line in missing_lines(rows, cfg.show):
        print(line, file=sys.stderr)
    if cfg.out is not None:
        parameters = {"splits": list(names), "layout": cfg.layout, "allow_incomplete": cfg.allow_incomplete}
        write_coverage(cfg.out, rows, store, inputs, parameters)
        print(
            f"wrote {TABLE_NAME}, {COUNTS_NAME}, {MISSING_NAME} and manifest.json to {cfg.out}",
            file=sys.stderr,
        )
    return 0
