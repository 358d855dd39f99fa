"""The handlers of ``imagenet-zsl analyze ladder | factor`` and ``imagenet-zsl splits factor`` (flags
in :mod:`imagenet_zsl.analysis.cli`).

Each takes its typed config (the analyses' own :class:`~imagenet_zsl.analysis.ladder.LadderOptions`
and :class:`~imagenet_zsl.analysis.factor_analysis.FactorOptions`, and :class:`FactorSplitsOptions`:
one field per flag, built by :func:`imagenet_zsl.cli.handler_config`) and returns the exit status;
imported only when one of these commands runs (the analyses load pandas and scipy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.analysis.factor_analysis import FactorOptions, run_factor_analysis
from imagenet_zsl.analysis.factor_analysis import render_markdown as render_factor_table
from imagenet_zsl.analysis.factor_splits import write_factor_splits
from imagenet_zsl.analysis.ladder import LadderOptions, render_markdown, run_ladder
from imagenet_zsl.analysis.runs import mismatch_note
from imagenet_zsl.scoring import hit_ks


@dataclass(frozen=True)
class FactorSplitsOptions:
    """``imagenet-zsl splits factor``: one field per flag."""

    #: the split config (e.g. configs/default.yaml, its optional ``factor:`` section)
    config: str
    #: the factor that moves (``analysis.factors.FACTORS``)
    factor: str
    #: the output directory, as given (replaced atomically)
    out: str
    #: number of splits (meaning: 2)
    bins: int = 5
    #: classes per split
    size: int = 100


def ladder(opts: LadderOptions) -> int:
    """``analyze ladder``: hit@K of a finished run under cumulative corrections."""
    table = run_ladder(opts)
    print(render_markdown(table, hit_ks(opts.ks)) + mismatch_note(table.attrs["feature_mismatch"]), end="")
    print(f"\nwrote ladder.md, ladder.csv, ladder.png and manifest.json to {opts.out_dir}")
    return 0


def factor_splits(cfg: FactorSplitsOptions) -> int:
    """``splits factor``: B test splits where one factor moves and the others are matched."""
    manifest = write_factor_splits(cfg.config, cfg.factor, cfg.bins, cfg.size, cfg.out)
    report = Path(cfg.out) / "report.md"
    print(report.read_text(encoding="utf-8"), end="")
    print(f"wrote {len(manifest['splits'])} splits, classes.csv, report.md and manifest.json to {cfg.out}")
    return 0


def factor_plot(opts: FactorOptions) -> int:
    """``analyze factor``: per-class hit@K against a controlled factor, with bootstrap intervals."""
    table = run_factor_analysis(opts)
    print(render_factor_table(table, opts.level) + mismatch_note(table.attrs["feature_mismatch"]), end="")
    print(f"\nwrote factor.md, factor.csv, factor.png and manifest.json to {opts.out_dir}")
    return 0
