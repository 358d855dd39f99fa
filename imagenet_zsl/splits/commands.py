"""The handlers of ``imagenet-zsl splits ...`` (flags in :mod:`imagenet_zsl.splits.cli`).

Each takes its typed options (``<Command>Options``: one field per flag, named by the flag's
``dest``; the command layer builds them from the parsed flags) and returns the exit status; imported
only when one of these commands runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class LeakageOptions:
    """``splits leakage``."""

    #: the wnid lists to measure
    splits: Sequence[str]
    #: a label set (``pretraining.LABEL_SET_FILES``) or a wnid-list file
    pretraining: str
    #: a 'wnid<TAB>count' TSV (None: the packaged fall11 counts)
    counts: str | None = None
    #: print one JSON object per split
    json: bool = False


def leakage(cfg: LeakageOptions) -> int:
    """``splits leakage``: the share of each split's classes and images that are pretraining labels."""
    counts = resolve_counts(cfg.counts)
    seen = label_set(cfg.pretraining)  # fail fast on an unknown set
    del seen
    for path in cfg.splits:
        wnids = read_wnid_list(path)
        leak = split_leakage(wnids, cfg.pretraining, counts)
        if cfg.json:
            print(json.dumps({"split": path, **leak.as_dict()}, sort_keys=True))
        else:
            print(
                f"{path}: {leak.seen_classes:,}/{leak.n_classes:,} test classes "
                f"({100 * leak.class_share:.1f}%) and {100 * leak.image_share:.1f}% of "
                f"{leak.n_images:,} test images are {cfg.pretraining} labels"
            )
    return 0


@dataclass(frozen=True)
class FrontierOptions:
    """``splits frontier``."""

    #: the split recipe
    config: str
    #: the output directory (replaced atomically)
    out: str
    #: the benchmark split of the recipe (None: its first)
    split: str | None = None
    #: the max_branch_share values swept
    shares: Sequence[float] = DEFAULT_SHARES


def frontier(cfg: FrontierOptions) -> int:
    """``splits frontier``: the optimal R as the largest share of one branch goes down."""
    rows = solve_frontier(cfg.config, cfg.out, split=cfg.split, shares=cfg.shares)
    print(frontier_table(rows))
    unproven = sum(not row["proven"] for row in rows)
    proven = f" ({unproven} not proven optimal)" if unproven else " (all proven optimal)"
    print(f"\nwrote {len(rows)} sets{proven}, frontier.csv/.md/.png and manifest.json to {cfg.out}")
    return 0


@dataclass(frozen=True)
class BuildOptions:
    """``splits build``."""

    #: the split recipe
    config: str
    #: the output directory (replaced atomically)
    out: str
    #: progress bars (``--no-progress`` hides them)
    progress: bool = True
    #: the counts table of the image store to build on (the recipe's ``store.counts``)
    store_counts: str | None = None
    #: a class is held with at least this many images (with ``store_counts``)
    store_min_images: int = 1

    def __post_init__(self) -> None:
        if self.store_counts is None and self.store_min_images != 1:
            raise UserInputError("--store-min-images needs --store-counts FILE (the store's counts table)")


def build(cfg: BuildOptions) -> int:
    """``splits build``: every split of a recipe, its manifest and report."""
    store = None
    if cfg.store_counts is not None:
        store = StoreConfig(counts=cfg.store_counts, min_images=cfg.store_min_images)
    built = build_splits(cfg.config, cfg.out, progress=cfg.progress, store=store)
    print(split_table(built))
    on_store = store_table(built)
    if on_store:
        print(
            f"\nbuilt on the store's classes; beside each, the split on every fall11 candidate:\n{on_store}"
        )
    print(f"\nwrote {len(built)} splits, manifest.json and report.md to {cfg.out}")
    return 0


@dataclass(frozen=True)
class StatsOptions:
    """``splits stats``."""

    #: the wnid list measured
    file: str
    #: the training wnid list (None: the ILSVRC-2012 1,000)
    train: str | None = None
    #: "wordnet" or "imagenet"
    graph: str = "wordnet"
    #: a 'wnid<TAB>count' TSV (None: the packaged fall11 counts)
    counts: str | None = None
    #: the split recipe whose benchmark pool gives the optimum R (None: configs/default.yaml if any)
    pool_config: str | None = None
    #: the benchmark split of ``pool_config`` (None: its first)
    split: str | None = None
    #: compute the optimum R (``--no-optimum`` skips it)
    optimum: bool = True
    #: print one JSON object
    json: bool = False


def stats(cfg: StatsOptions) -> int:
    """``splits stats``: counts, R and flaws of a wnid list (and the optimum R for its size)."""
    train = resolve_train(cfg.train, "--train")
    graph = resolve_graph(cfg.graph)
    stats = split_stats(cfg.file, train, graph, resolve_counts(cfg.counts))
    pool_config = cfg.pool_config or (default_pool_config() if cfg.optimum else None)
    if pool_config is not None and cfg.optimum:
        stats.update(optimum_for_size(pool_config, cfg.split, stats["n_classes"]))
    if cfg.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        width = max(map(len, stats))
        for key, value in stats.items():
            print(f"{key:<{width}}  {value}")
    return 0


@dataclass(frozen=True)
class ShowOptions:
    """``splits show``."""

    #: a published split, a committed split name or a wnid file
    name: str
    #: where committed names live
    splits_dir: str = "splits"
    #: print the wnids only, one a line
    wnids: bool = False
    #: print one JSON object
    json: bool = False


def show(cfg: ShowOptions) -> int:
    """``splits show``: a named or published split with its source, sha256 and differences."""
    path = resolve_split(cfg.name, cfg.splits_dir, "splits show")
    if cfg.wnids:
        print("\n".join(read_wnid_list(path)))
        return 0
    record = show_split(path, cfg.name if cfg.name in PUBLISHED_SPLITS else None)
    print(json.dumps(record, sort_keys=True) if cfg.json else format_show(record))
    return 0
