"""The results tables of ``imagenet-zsl report`` and of ``run``'s summary (Markdown, CSV, LaTeX);
one run's report.md is :mod:`imagenet_zsl.evaluation.run.run_report`.

Both tables have the columns of :mod:`imagenet_zsl.evaluation.columns` in its one order: the paper
table by default, ``--columns`` for the rest, every column in the CSV. Rows come from result
records, read and merged by :mod:`imagenet_zsl.evaluation.report_inputs` (``evaluate`` run
directories made into records, ``run``'s ``results/*.json`` and directories of them, from any
number of runs and machines); each row names its backbone, class vectors and label space, with
the hit@1 interval of :mod:`imagenet_zsl.evaluation.intervals`. Best value per split in bold.

``--published`` (:func:`render_tables` with the rows' records): the published rows of the same
splits beside the user's (:mod:`imagenet_zsl.evaluation.published_compare`), each split's rows
sorted by hit@1, never bold; their figures as printed; the LaTeX cites each by ``\\cite{key}``
and the BibTeX entries it cites are written beside it (``.bib``).

Trust: ``report`` reads only run directories whose manifest verifies, marks a run whose own
evaluation was allowed a feature mismatch, reports a row given twice once (and refuses one given
twice with different numbers), and never writes its ``--out`` inside an input or over a file it
did not write.
"""

from __future__ import annotations

import csv
import io
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.evaluation.columns import (
    CI_COLUMN,
    HIT1_CI,
    LEAD_COLUMNS,
    NS_COLUMN,
    STATUS_COLUMN,
    TEXT_COLUMNS,
    all_columns,
    column_ks,
    legend,
    select_columns,
)
from imagenet_zsl.evaluation.intervals import BOOTSTRAP_NOTE, NS_NOTE
from imagenet_zsl.evaluation.published import bibtex_entries
from imagenet_zsl.evaluation.published_compare import (
    PRINTED,
    PUBLISHED_STATUS,
    TEX,
    Comparison,
    compare_published,
)
from imagenet_zsl.evaluation.report_inputs import (
    MISMATCH_MARK,
    ReportTable,
    aggregate_runs,
    collect_inputs,
    leakage_notes,
    record_row,
    report_rows,
    report_table,
    run_dir_record,
)
from imagenet_zsl.evaluation.run.run_report import md_table, pct
from imagenet_zsl.safe_output import check_out_file, check_out_stem

#: the rows' names (:mod:`~imagenet_zsl.evaluation.report_inputs`) are imported from here too
__all__ = [
    "BIB_MARK",
    "MD_MARK",
    "MISMATCH_MARK",
    "TEX_MARK",
    "ReportTable",
    "Tables",
    "aggregate_runs",
    "best_cells",
    "cell_text",
    "check_report_out",
    "collect_inputs",
    "is_report_output",
    "leakage_notes",
    "record_row",
    "render_tables",
    "report_paths",
    "report_rows",
    "report_table",
    "run_dir_record",
    "table_columns",
    "table_note",
    "tex_escape",
    "to_csv",
    "to_latex",
    "to_markdown",
    "with_published",
    "write_report_tables",
]

#: the first line of report's Markdown and LaTeX tables (``is_report_output``)
MD_MARK = "<!-- imagenet-zsl report -->"
TEX_MARK = "% imagenet-zsl report table"
#: the first line of the BibTeX file written beside a table with published rows
BIB_MARK = "% imagenet-zsl references of the published rows"


# ----------------------------------------------------------------------------- rendering


def _is_value(column: str) -> bool:
    return column not in TEXT_COLUMNS


def _ok(row: dict) -> bool:
    return row.get(STATUS_COLUMN, "ok") == "ok"


def _failed(row: dict) -> bool:
    """A row without results (a failed cell); a published row is not one."""
    return not _ok(row) and row.get(STATUS_COLUMN) != PUBLISHED_STATUS


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def best_cells(rows: Sequence[dict], columns: Sequence[str]) -> set[tuple[int, str]]:
    """(row, column) of the best (max) value of each printed value column within its split, among
    the split's finished rows, when it has at least two."""
    best: set[tuple[int, str]] = set()
    by_split: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if _ok(row):
            by_split.setdefault(str(row["split"]), []).append(i)
    for members in by_split.values():
        if len(members) < 2:
            continue
        for column in columns:
            key = "hit@1" if column == HIT1_CI else column
            if not _is_value(key) and column != HIT1_CI:
                continue
            values = {i: _number(rows[i].get(key)) for i in members}
            top = max((v for v in values.values() if v is not None), default=None)
            best.update((i, column) for i, v in values.items() if top is not None and v == top)
    return best


def cell_text(row: dict, column: str) -> str:
    """A cell as text: a fraction in % (2 decimals), :data:`HIT1_CI` as the value and its
    interval, text as it is; '–' where missing."""
    printed = (row.get(PRINTED) or {}).get("hit@1" if column == HIT1_CI else column)
    if printed is not None:  # a published figure: as the paper prints it
        return printed
    if column == HIT1_CI:
        interval = str(row.get(CI_COLUMN) or "–")
        value = pct(_number(row.get("hit@1")))
        # no interval (n/a: the legend's notes say why): the value alone
        return value if not interval.startswith("[") or value == "–" else f"{value} {interval}"
    if _is_value(column):
        return pct(_number(row.get(column)))
    value = row.get(column)
    return "–" if value is None else str(value)


def _bold_md(text: str) -> str:
    number, _, rest = text.partition(" ")
    return f"**{number}**" + (f" {rest}" if rest else "")


def to_markdown(rows: Sequence[dict], columns: Sequence[str], note: str, notes: Sequence[str] = ()) -> str:
    """The table in Markdown with its legend (``note``) and the run's ``notes`` below."""
    if not rows:
        return "(no cells)\n"
    best = best_cells(rows, columns)
    table = []
    for i, row in enumerate(rows):
        cells = [cell_text(row, c).replace("|", "/") for c in columns]
        table.append([_bold_md(t) if (i, c) in best else t for t, c in zip(cells, columns, strict=True)])
    listed = "".join(f"\n- {line}" for line in notes)
    return md_table(columns, table) + f"\n\n{note}.\n" + (listed + "\n" if listed else "")


_TEX_CHARS = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "–": "--",
    "—": "---",
    "−": "$-$",
    "γ": r"$\gamma$",
    "ρ": r"$\rho$",
    "≈": r"$\approx$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "×": r"$\times$",
    "±": r"$\pm$",
    "§": r"\S{}",
    "→": r"$\rightarrow$",
    "…": r"\ldots{}",
    "’": "'",
    "‘": "`",
    "“": "``",
    "”": "''",
}


def tex_escape(text: str) -> str:
    """``text`` for a LaTeX document in any input encoding: the special characters escaped, the
    symbols the tables use as math, any other non-ASCII character by its ASCII base (é → e)."""
    out = []
    for char in str(text):
        if char in _TEX_CHARS:
            out.append(_TEX_CHARS[char])
        elif ord(char) < 128:
            out.append(char)
        else:
            out.append(unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode() or "?")
    return "".join(out)


def to_latex(
    rows: Sequence[dict],
    columns: Sequence[str],
    note: str,
    mark: str = TEX_MARK,
    comments: Sequence[str] = (),
) -> str:
    """The table as a complete ``tabular`` a paper can ``\\input`` (booktabs rules; the first
    lines say which package and give the legend, escaped, as a note for the caption); values in %,
    the best of a split in bold, a failed row's values one 'failed' cell."""
    best = best_cells(rows, columns)
    lead = [c for c in columns if not _is_value(c) and c != HIT1_CI]
    lines = [
        f"{mark}: needs \\usepackage{{booktabs}}; \\input it inside a table environment",
        *(f"% {line}" for line in comments),
        f"% caption note: {tex_escape(note)}.",
        r"\begin{tabular}{" + "".join("l" if c in lead else "r" for c in columns) + "}",
        r"\toprule",
        " & ".join(tex_escape(c[:1].upper() + c[1:] if c in LEAD_COLUMNS else c) for c in columns) + r" \\",
        r"\midrule",
    ]
    previous = None
    for i, row in enumerate(rows):
        if previous is not None and row["split"] != previous:
            lines.append(r"\midrule")
        previous = row["split"]
        width = _lead_width(columns, lead)
        if _failed(row) and width < len(columns):
            cells = [tex_escape(cell_text(row, c)) for c in columns[:width]]
            failed = r"\multicolumn{" + str(len(columns) - width) + "}{c}{failed}"
            lines.append(" & ".join([*cells, failed]) + r" \\")
            continue
        cells = []
        for column in columns:
            raw = (row.get(TEX) or {}).get(column)  # a published row's \\cite
            text = raw if raw is not None else tex_escape(cell_text(row, column))
            if (i, column) in best:
                number, _, rest = text.partition(" ")
                text = rf"\textbf{{{number}}}" + (f" {rest}" if rest else "")
            cells.append(text)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _lead_width(columns: Sequence[str], lead: Sequence[str]) -> int:
    """How many of the first columns are text (a failed row spans the rest with one cell)."""
    width = 0
    for column in columns:
        if column not in lead:
            break
        width += 1
    return width


def to_csv(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Every column as CSV, values in % (6 decimals: a value rounded to the tables' 2 decimals from
    the CSV is the tables' value), empty where missing."""
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        values = []
        for column in columns:
            value = row.get(column)
            if _is_value(column):
                number = _number(value)
                values.append("" if number is None else round(100 * number, 6))
            else:
                values.append("" if value is None else value)
        writer.writerow(values)
    return buffer.getvalue()


def table_note(rows: Sequence[dict], columns: Sequence[str], every: Sequence[str]) -> str:
    """The legend under a table: what its columns are, the interval, the backbone when every row
    shares one, and the feature-mismatch mark."""
    parts = [legend(columns, every)]
    if HIT1_CI in columns or CI_COLUMN in columns:
        parts.append(BOOTSTRAP_NOTE)
    if NS_COLUMN in columns:
        parts.append(NS_NOTE)
    backbones = {str(r.get("backbone")) for r in rows if r.get(STATUS_COLUMN) != PUBLISHED_STATUS}
    if "backbone" not in columns and len(backbones) == 1:
        parts.append(f"backbone (every row): {backbones.pop()}")
    if "class vectors" not in columns:
        by_source: dict[str, list[str]] = {}
        for row in (r for r in rows if r.get(STATUS_COLUMN) != PUBLISHED_STATUS):
            models = by_source.setdefault(str(row.get("class vectors") or "–"), [])
            if row["model"] not in models:
                models.append(row["model"])
        shown = [f"{'none' if s == '–' else s} ({', '.join(m)})" for s, m in by_source.items()]
        parts.append(f"class vectors: {'; '.join(shown)}")
    if any(MISMATCH_MARK in str(r.get("backbone")) for r in rows):
        parts.append(
            f"{MISMATCH_MARK.strip()}: the model was scored on features of another identity than it "
            "was fitted on (--allow-feature-mismatch); these numbers are not comparable"
        )
    return "; ".join(parts)


def table_columns(rows: Sequence[dict], spec: str | None) -> tuple[list[str], list[str]]:
    """(the printed columns for ``--columns spec``, every column) of ``rows``."""
    ks = column_ks(rows[0] if rows else {})
    gzsl = bool(rows) and "GZSL H" in rows[0]
    return select_columns(spec, rows, ks, gzsl), all_columns(ks, gzsl)


@dataclass(frozen=True)
class Tables:
    """One table as each file holds it: Markdown, CSV, LaTeX, and the BibTeX entries its
    published rows cite ("" without published rows)."""

    markdown: str
    csv: str
    tex: str
    bib: str = ""


def with_published(rows: Sequence[dict], records: Sequence[dict | None], spec: str | None) -> Comparison:
    """``rows`` (their result ``records``; None: a failed row) and the published rows of their
    splits (:mod:`~imagenet_zsl.evaluation.published_compare`), for ``--columns spec``."""
    printed, _ = table_columns(rows, spec)
    ks = column_ks(rows[0] if rows else {})
    return compare_published(rows, records, printed, ks, bool(rows) and "GZSL H" in rows[0])


def render_tables(
    rows: Sequence[dict],
    spec: str | None = None,
    notes: Sequence[str] = (),
    published: Sequence[dict | None] | None = None,
    *,
    tex_mark: str = TEX_MARK,
    bib_name: str = "",
) -> Tables:
    """The tables of ``rows`` for ``--columns spec`` with the legend and ``notes`` under them;
    ``published``: the rows' result records, to put the published rows beside them (the .tex then
    cites them by key from ``bib_name``, written beside it)."""
    if published is None:
        printed, every = table_columns(rows, spec)
        note = table_note(rows, printed, every)
        md, tex = to_markdown(rows, printed, note, notes), to_latex(rows, printed, note, tex_mark)
        return Tables(md, to_csv(rows, every), tex)
    comparison = with_published(rows, published, spec)
    note = table_note(comparison.rows, comparison.columns, comparison.every)
    notes = [*notes, *comparison.notes]
    cites = (
        [f"the published rows cite keys of {bib_name}: add it to your \\bibliography"]
        if comparison.cited
        else []
    )
    bib = f"{BIB_MARK}\n\n" + bibtex_entries(comparison.cited) if comparison.cited else ""
    return Tables(
        to_markdown(comparison.rows, comparison.columns, note, notes),
        to_csv(comparison.rows, comparison.every),
        to_latex(comparison.rows, comparison.columns, note, tex_mark, cites),
        bib,
    )


# ----------------------------------------------------------------------------- report --out

#: the suffixes of the files ``report --out`` writes (.bib: with --published)
REPORT_SUFFIXES = (".md", ".csv", ".tex", ".bib")


def report_paths(out: str | Path, published: bool = False) -> list[Path]:
    """The .md, .csv and .tex files ``report --out`` writes, and the .bib with ``published``."""
    out = Path(out)
    stem = out.with_suffix("") if out.suffix in REPORT_SUFFIXES else out
    return [stem.with_suffix(suffix) for suffix in REPORT_SUFFIXES[: 4 if published else 3]]


#: how each report file begins (``is_report_output``): today's first lines, and those of the
#: tables written before (text column headers)
_REPORT_STARTS = {
    ".md": (
        MD_MARK,
        "| model | split | backbone | class vectors | label space | features |",
        "| split | model |",
    ),
    ".csv": (
        "backbone,model,split,class vectors,label space,classes,",
        "model,split,backbone,",
        "split,model,",
    ),
    ".tex": (TEX_MARK, "\\begin{tabular}{"),
    ".bib": (BIB_MARK,),
}


def is_report_output(path: Path) -> bool:
    """True when ``path`` begins as a table that ``report`` writes (its first line), so a re-run may
    replace it; any other existing file is never overwritten (``safe_output.check_out_file``)."""
    starts = _REPORT_STARTS.get(path.suffix)
    if starts is None:
        return False
    try:
        with path.open("r", encoding="utf-8") as handle:
            first = handle.readline(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return first.startswith(starts)


def check_report_out(out: str | Path, run_dirs: Sequence[str | Path], published: bool = False) -> None:
    """Refuse an ``--out`` whose files would land inside an input (e.g. over a run's own
    report.md), that would replace a file ``report`` did not write, or that cannot be written,
    before reading anything. An ``--out`` that is a directory or a device is refused too: the
    tables would land beside it (``/dev/full`` → ``/dev/full.md``)."""
    check_out_stem(out, report_paths(out, published))
    for path in report_paths(out, published):
        check_out_file(path, inputs=run_dirs, replaces=is_report_output, what="a report table")


def write_report_tables(
    rows: Sequence[dict],
    out: str | Path,
    columns: str | None = None,
    notes: Sequence[str] = (),
    published: Sequence[dict | None] | None = None,
) -> list[Path]:
    """Write ``out`` with .md, .csv and .tex suffixes: the printed ``columns`` (``--columns``;
    None: the paper table) in Markdown and LaTeX, every column in the CSV (values in %);
    ``published``: the rows' result records, to put the published rows beside them (and write
    the .bib their ``\\cite`` keys name)."""
    paths = report_paths(out, published is not None)
    tables = render_tables(rows, columns, notes, published, bib_name=paths[-1].name)
    written = [
        atomic_write_text(paths[0], f"{MD_MARK}\n" + tables.markdown),
        atomic_write_text(paths[1], tables.csv),
        atomic_write_text(paths[2], tables.tex),
    ]
    if published is not None:
        written.append(atomic_write_text(paths[3], tables.bib or f"{BIB_MARK}: no published row cited\n"))
    return written
