"""The handler of ``imagenet-zsl report`` (flags in :mod:`imagenet_zsl.evaluation.cli`): the tables
(:mod:`~imagenet_zsl.evaluation.report`), the published rows beside them
(:mod:`~imagenet_zsl.evaluation.published_compare`) and the page
(:mod:`~imagenet_zsl.evaluation.html_report`). Apart from ``evaluate``'s handler, so that
``evaluate`` imports none of them. It takes :class:`ReportOptions`, one field per flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.html_report import REPORT_TOOL, write_html_report
from imagenet_zsl.evaluation.report import check_report_out, report_table, write_report_tables
from imagenet_zsl.safe_output import check_out_dir


@dataclass(frozen=True)
class ReportOptions:
    """``imagenet-zsl report``: one field per flag."""

    #: run directories of ``evaluate``, result records of ``run``, or directories of them
    runs: list[Path]
    #: the columns of the Markdown and LaTeX tables, comma-separated (None: the paper's)
    columns: str | None = None
    #: the tables' path (.md, .csv and .tex beside it)
    out: Path | None = None
    #: the published rows of the same splits beside the runs' (and a .bib)
    published: bool = False
    #: the directory of the static page
    html: Path | None = None


def report(cfg: ReportOptions) -> int:
    """``report``: the cross-run table of run directories and result records (Markdown, CSV, LaTeX;
    with ``--published`` the published rows beside them and a .bib), and with ``--html`` a page.
    Every output is checked before any input is read."""
    if cfg.out is None and cfg.html is None:
        raise UserInputError("report: give --out OUT (the tables), --html DIR (a page), or both")
    if cfg.out is not None:
        check_report_out(cfg.out, cfg.runs, cfg.published)
    if cfg.html is not None:
        check_out_dir(cfg.html, REPORT_TOOL, cfg.runs, own_files=True)
    table = report_table(cfg.runs)
    if cfg.out is not None:
        published = table.records if cfg.published else None
        for path in write_report_tables(table.rows, cfg.out, cfg.columns, table.notes, published):
            print(f"wrote {path}")
    if cfg.html is not None:
        page = write_html_report(table, cfg.html, cfg.columns, cfg.published, cfg.runs)
        print(f"wrote {page / 'index.html'}")
    return 0
