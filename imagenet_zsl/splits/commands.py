"""The handlers of ``imagenet-zsl splits ...`` (flags in :mod:`imagenet_zsl.splits.cli`).

Each takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when one of
these commands runs.
"""

from __future__ import annotations

import argparse
import json

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.splits.build import build_splits, resolve_counts, resolve_train
from imagenet_zsl.splits.config import StoreConfig
from imagenet_zsl.splits.frontier import DEFAULT_SHARES, frontier_table
from imagenet_zsl.splits.frontier import frontier as solve_frontier
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.leakage import split_leakage
from imagenet_zsl.splits.named import PUBLISHED_SPLITS, resolve_split
from imagenet_zsl.splits.pretraining import label_set
from imagenet_zsl.splits.published_report import format_show, show_split
from imagenet_zsl.splits.report import split_table, store_table
from imagenet_zsl.splits.stats import default_pool_config, optimum_for_size, split_stats


def leakage(args: argparse.Namespace) -> int:
    """``splits leakage``: the share of each split's classes and images that are pretraining labels."""
    counts = resolve_counts(args.counts)
    seen = label_set(args.pretraining)  # fail fast on an unknown set
    del seen
    for path in args.splits:
        wnids = read_wnid_list(path)
        leak = split_leakage(wnids, args.pretraining, counts)
        if args.json:
            print(json.dumps({"split": path, **leak.as_dict()}, sort_keys=True))
        else:
            print(
                f"{path}: {leak.seen_classes:,}/{leak.n_classes:,} test classes "
                f"({100 * leak.class_share:.1f}%) and {100 * leak.image_share:.1f}% of "
                f"{leak.n_images:,} test images are {args.pretraining} labels"
            )
    return 0


def frontier(args: argparse.Namespace) -> int:
    """``splits frontier``: the optimal R as the largest share of one branch goes down."""
    shares = DEFAULT_SHARES if args.shares is None else args.shares
    rows = solve_frontier(args.config, args.out, split=args.split, shares=shares)
    print(frontier_table(rows))
    unproven = sum(not row["proven"] for row in rows)
    proven = f" ({unproven} not proven optimal)" if unproven else " (all proven optimal)"
    print(f"\nwrote {len(rows)} sets{proven}, frontier.csv/.md/.png and manifest.json to {args.out}")
    return 0


def build(args: argparse.Namespace) -> int:
    """``splits build``: every split of a recipe, its manifest and report."""
    store = None
    if args.store_counts is not None:
        store = StoreConfig(counts=args.store_counts, min_images=args.store_min_images)
    elif args.store_min_images != 1:
        raise UserInputError("--store-min-images needs --store-counts FILE (the store's counts table)")
    built = build_splits(args.config, args.out, progress=not args.no_progress, store=store)
    print(split_table(built))
    on_store = store_table(built)
    if on_store:
        print(
            f"\nbuilt on the store's classes; beside each, the split on every fall11 candidate:\n{on_store}"
        )
    print(f"\nwrote {len(built)} splits, manifest.json and report.md to {args.out}")
    return 0


def stats(args: argparse.Namespace) -> int:
    """``splits stats``: counts, R and flaws of a wnid list (and the optimum R for its size)."""
    train = resolve_train(args.train, "--train")
    graph = resolve_graph(args.graph)
    stats = split_stats(args.file, train, graph, resolve_counts(args.counts))
    pool_config = args.pool_config or (None if args.no_optimum else default_pool_config())
    if pool_config is not None and not args.no_optimum:
        stats.update(optimum_for_size(pool_config, args.split, stats["n_classes"]))
    if args.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        width = max(map(len, stats))
        for key, value in stats.items():
            print(f"{key:<{width}}  {value}")
    return 0


def show(args: argparse.Namespace) -> int:
    """``splits show``: a named or published split with its source, sha256 and differences."""
    path = resolve_split(args.name, args.splits_dir, "splits show")
    if args.wnids:
        print("\n".join(read_wnid_list(path)))
        return 0
    record = show_split(path, args.name if args.name in PUBLISHED_SPLITS else None)
    print(json.dumps(record, sort_keys=True) if args.json else format_show(record))
    return 0
