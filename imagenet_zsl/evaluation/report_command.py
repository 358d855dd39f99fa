"""The handler of ``imagenet-zsl report`` (flags in :mod:`imagenet_zsl.evaluation.cli`): the tables
(:mod:`~imagenet_zsl.evaluation.report`), the published rows beside them
(:mod:`~imagenet_zsl.evaluation.published_compare`) and the page
(:mod:`~imagenet_zsl.evaluation.html_report`). Apart from ``evaluate``'s handler, so that
``evaluate`` imports none of them.
"""

from __future__ import annotations

import argparse

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.html_report import REPORT_TOOL, write_html_report
from imagenet_zsl.evaluation.report import check_report_out, report_table, write_report_tables
from imagenet_zsl.safe_output import check_out_dir


def report(args: argparse.Namespace) -> int:
    """``report``: the cross-run table of run directories and result records (Markdown, CSV, LaTeX;
    with ``--published`` the published rows beside them and a .bib), and with ``--html`` a page.
    Every output is checked before any input is read."""
    if args.out is None and args.html is None:
        raise UserInputError("report: give --out OUT (the tables), --html DIR (a page), or both")
    if args.out is not None:
        check_report_out(args.out, args.runs, args.published)
    if args.html is not None:
        check_out_dir(args.html, REPORT_TOOL, args.runs, own_files=True)
    table = report_table(args.runs)
    if args.out is not None:
        published = table.records if args.published else None
        for path in write_report_tables(table.rows, args.out, args.columns, table.notes, published):
            print(f"wrote {path}")
    if args.html is not None:
        page = write_html_report(table, args.html, args.columns, args.published, args.runs)
        print(f"wrote {page / 'index.html'}")
    return 0
