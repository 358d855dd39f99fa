"""``imagenet-zsl splits build`` and ``imagenet-zsl splits stats``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.splits.build import build_splits, resolve_counts, resolve_train
from imagenet_zsl.splits.report import split_table
from imagenet_zsl.splits.stats import split_stats

if TYPE_CHECKING:
    from imagenet_zsl.cli import CommandTree  # the tree is handed in; never imported upward


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
    build.add_argument("--no-progress", action="store_true", help="hide progress bars")
    build.set_defaults(func=_build)

    stats = group.add_parser("stats", help="class/image counts, structural ratio and flaws of a wnid list")
    stats.add_argument("file", help="wnid list (one wnid a line)")
    stats.add_argument("--train", help="training wnid list (default: the ILSVRC-2012 1,000)")
    stats.add_argument("--graph", choices=("wordnet", "imagenet"), default="wordnet")
    stats.add_argument("--counts", help="'wnid<TAB>count' TSV (default: packaged fall11 counts)")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(func=_stats)


def _build(args: argparse.Namespace) -> int:
    built = build_splits(args.config, args.out, progress=not args.no_progress)
    print(split_table(built))
    print(f"\nwrote {len(built)} splits, manifest.json and report.md to {args.out}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    train = resolve_train(args.train, "--train")
    stats = split_stats(args.file, train, resolve_graph(args.graph), resolve_counts(args.counts))
    if args.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        width = max(map(len, stats))
        for key, value in stats.items():
            print(f"{key:<{width}}  {value}")
    return 0
