"""The handlers of ``imagenet-zsl analyze ladder | factor`` and ``imagenet-zsl splits factor`` (flags
in :mod:`imagenet_zsl.analysis.cli`).

Each takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when one of
these commands runs (the analyses load pandas and scipy).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagenet_zsl.analysis.factor_analysis import FactorOptions, run_factor_analysis
from imagenet_zsl.analysis.factor_analysis import render_markdown as render_factor_table
from imagenet_zsl.analysis.factor_splits import write_factor_splits
from imagenet_zsl.analysis.ladder import DEFAULT_MIN_IMAGES, LadderOptions, render_markdown, run_ladder
from imagenet_zsl.analysis.runs import mismatch_note


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def ladder(args: argparse.Namespace) -> int:
    """``analyze ladder``: hit@K of a finished run under cumulative corrections."""
    opts = LadderOptions(
        run_dir=Path(args.run_dir),
        out=_path(args.out),
        filter_dir=_path(args.filter_dir),
        labels_dir=_path(args.labels_dir),
        graph=args.graph,
        counts=args.counts,
        relation=args.relation,
        min_images=DEFAULT_MIN_IMAGES if args.min_images is None else args.min_images,
        ks=args.k,
        allow_feature_mismatch=args.allow_feature_mismatch,
    )
    table = run_ladder(opts)
    print(
        render_markdown(table, sorted(set(args.k))) + mismatch_note(table.attrs["feature_mismatch"]), end=""
    )
    print(f"\nwrote ladder.md, ladder.csv, ladder.png and manifest.json to {opts.out_dir}")
    return 0


def factor_splits(args: argparse.Namespace) -> int:
    """``splits factor``: B test splits where one factor moves and the others are matched."""
    manifest = write_factor_splits(args.config, args.factor, args.bins, args.size, args.out)
    report = Path(args.out) / "report.md"
    print(report.read_text(encoding="utf-8"), end="")
    print(f"wrote {len(manifest['splits'])} splits, classes.csv, report.md and manifest.json to {args.out}")
    return 0


def factor_plot(args: argparse.Namespace) -> int:
    """``analyze factor``: per-class hit@K against a controlled factor, with bootstrap intervals."""
    opts = FactorOptions(
        run_dir=Path(args.run_dir),
        out=_path(args.out),
        splits_dir=_path(args.splits_dir),
        ks=args.k,
        resamples=args.resamples,
        seed=args.seed,
        allow_feature_mismatch=args.allow_feature_mismatch,
    )
    table = run_factor_analysis(opts)
    print(render_factor_table(table, opts.level) + mismatch_note(table.attrs["feature_mismatch"]), end="")
    print(f"\nwrote factor.md, factor.csv, factor.png and manifest.json to {opts.out_dir}")
    return 0
