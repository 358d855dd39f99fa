"""The results tables of ``imagenet-zsl report`` and of ``run``'s summary (Markdown, CSV, LaTeX);
one run's report.md is :mod:`imagenet_zsl.evaluation.run.run_report`.

Both tables have the columns of :mod:`imagenet_zsl.evaluation.columns` in its one order: the paper
table by default, ``--columns`` for the rest, every column in the CSV. Rows come from result
records (:mod:`imagenet_zsl.evaluation.result_records`): ``report`` reads ``evaluate`` run
directories (made into records), ``run``'s ``results/*.json`` and directories of them, from any
number of runs and machines, and merges them; each row names its backbone, class vectors and label
space, with the hit@1 interval of :mod:`imagenet_zsl.evaluation.intervals` (recomputed, paired
across the given run directories of a split; a record read from JSON keeps its run's). Best value
per split in bold.

Trust: ``report`` reads only run directories whose manifest verifies (metrics.json, the table and
the report by sha256; the top-k lists, which can be gigabytes, by size), puts runs of different
backbones in one table (each row names its backbone: every run is consistent within itself, since
``evaluate`` refuses a model scored on another backbone's features) and marks a run whose own
evaluation was allowed such a mismatch, reports a row given twice once (and refuses one given twice
with different numbers), and never writes its ``--out`` inside an input.
"""

from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import (
    CI_COLUMN,
    HIT1_CI,
    LEAD_COLUMNS,
    NS_COLUMN,
    SEEN_COLUMN,
    STATUS_COLUMN,
    TEXT_COLUMNS,
    all_columns,
    legend,
    select_columns,
)
from imagenet_zsl.evaluation.intervals import BOOTSTRAP_NOTE, NS_NOTE, RowInterval, row_intervals
from imagenet_zsl.evaluation.result_records import (
    RESULT_FORMAT,
    RESULTS_DIR,
    merge_results,
    read_result,
    result_record,
)
from imagenet_zsl.evaluation.run.run_report import md_table, pct
from imagenet_zsl.evaluation.run.verify import METRICS_NAME, load_metrics
from imagenet_zsl.io import atomic_write_text, check_out_file, check_out_stem

if TYPE_CHECKING:
    import pandas as pd

#: appended to the backbone of a row combined under --allow-feature-mismatch
MISMATCH_MARK = " [mismatch]"
#: the first line of report's Markdown and LaTeX tables (``is_report_output``)
MD_MARK = "<!-- imagenet-zsl report -->"
TEX_MARK = "% imagenet-zsl report table"
# ----------------------------------------------------------------------------- rows


def hit_ks(columns: Any) -> list[int]:
    """The K of the ``hit@K`` names among ``columns`` (a row or a metrics dict), sorted."""
    return sorted(int(c[4:]) for c in columns if c.startswith("hit@") and c[4:].isdigit())


def record_row(
    record: dict,
    interval: RowInterval | None = None,
    ks: Sequence[int] | None = None,
    gzsl: bool | None = None,
) -> dict[str, Any]:
    """One table row of a result record: every column of :func:`~.columns.all_columns` (values
    are fractions, None where missing) for ``ks`` and ``gzsl`` (default: the record's own);
    ``interval``: the hit@1 interval recomputed for this table (default: the one the record's run
    computed)."""
    protocol = record["protocol"]
    classes = protocol.get("classes") or {}
    missed = classes.get("count_as_miss") or 0
    backbone = str(record["backbone"])
    if protocol.get("features", {}).get("feature_mismatch") and "MISMATCH" not in backbone.upper():
        backbone += MISMATCH_MARK
    row: dict[str, Any] = {
        "backbone": backbone,
        "model": record["model"],
        "split": record["split"],
        "class vectors": str(protocol.get("class_vectors") or "–"),
        "label space": protocol["label_space"]["text"],
        "classes": f"{classes.get('evaluated', '–')}/{classes.get('in_split', '–')}"
        + (f" +{missed} missed" if missed else ""),
    }
    ks = ks if ks is not None else (protocol.get("ks") or hit_ks(record["metrics"]))
    gzsl = gzsl if gzsl is not None else protocol.get("gzsl") is not None
    stored = record.get("interval") or {}
    for column in all_columns(ks, gzsl)[len(LEAD_COLUMNS) :]:
        row[column] = record["metrics"].get(column)
    if interval is not None:
        row[CI_COLUMN], row[NS_COLUMN] = interval.text, interval.not_significant
    else:
        row[CI_COLUMN] = stored.get("text", "–")
        row[NS_COLUMN] = stored.get("not_significant_text", "–")
    seen = (protocol.get("pretraining") or {}).get("test_classes_seen")
    row[SEEN_COLUMN] = "unknown" if seen is None else str(seen)
    row[STATUS_COLUMN] = "ok"
    return row


# ----------------------------------------------------------------------------- inputs


def _cell_record_beside(run_dir: Path) -> dict:
    """A ``run`` cell's record (``cells/NAME__SPLIT.json`` beside ``cells/NAME__SPLIT/``), whose
    label space and classes are the run's own; {} for an ``evaluate`` run directory."""
    path = run_dir.parent / f"{run_dir.name}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("run", "").endswith(run_dir.name) else {}


def run_dir_record(run_dir: Path) -> dict[str, Any]:
    """The result record of a verified run directory (one line naming the file if its metrics.json
    is not a complete one of ``evaluate``)."""
    metrics = load_metrics(run_dir)
    cell = _cell_record_beside(run_dir)
    try:
        if "flat" not in metrics["zsl"]:  # a run without the headline is not a run
            raise KeyError("zsl.flat")
        record = result_record(
            metrics, label_space=cell.get("label_space"), classes=cell.get("classes"), source=str(run_dir)
        )
        record_row(record)  # every field a row needs
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise UserInputError(
            f"{run_dir / METRICS_NAME}: not a complete metrics file of 'imagenet-zsl evaluate' "
            f"({type(err).__name__}: {err}); re-run the evaluation"
        ) from err
    return record


def _records_in(directory: Path) -> list[Path]:
    """The result record files of a directory: its ``results/`` (a ``run`` directory) or its own
    ``*.json`` files of the record format."""
    folder = directory / RESULTS_DIR if (directory / RESULTS_DIR).is_dir() else directory
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(head, dict) and head.get("format") == RESULT_FORMAT:
            found.append(path)
    return found


def collect_inputs(paths: Sequence[str | Path]) -> list[tuple[str, dict, Path | None]]:
    """(where, result record, run directory or None) of every input, in the order given: a run
    directory of ``evaluate`` (its metrics.json), a record file, or a directory of records (a
    ``run`` directory's ``results/``). A path given twice is read once."""
    if not paths:
        raise UserInputError("no run directories or result records given")
    items: list[tuple[str, dict, Path | None]] = []
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.resolve() in seen:
            continue
        seen.add(given.resolve())
        if given.is_dir() and not (given / METRICS_NAME).exists():
            files = _records_in(given)
            if not files:
                raise UserInputError(
                    f"{given}: no metrics.json and no result records ({RESULTS_DIR}/*.json); give "
                    "'imagenet-zsl evaluate' run directories, 'imagenet-zsl run' directories or their "
                    "results/*.json"
                )
            items += [(str(f), read_result(f), None) for f in files if f.resolve() not in seen]
            seen.update(f.resolve() for f in files)
        elif given.suffix == ".json" and not given.is_dir():
            items.append((str(given), read_result(given), None))
        else:
            items.append((str(given), run_dir_record(given), given))
    return items


def report_rows(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of every input (sorted by split, then model, then backbone), each row once, and
    the legend's notes (rows given twice, the intervals' notes)."""
    items = collect_inputs(paths)
    where = {id(record): (place, run) for place, record, run in items}
    records, notes = merge_results([(place, record) for place, record, _ in items])
    records.sort(key=lambda r: (str(r["split"]), str(r["model"]), str(r["backbone"])))
    runs = [where[id(r)][1] for r in records]
    names = [str(r["model"]) for r in records]
    if len({r["backbone"] for r in records}) > 1:
        names = [f"{r['backbone']}/{r['model']}" for r in records]
    intervals, interval_notes = row_intervals([str(r["split"]) for r in records], runs, names)
    # one set of columns for every row: the K of any record, GZSL if any has it
    ks = sorted({int(k) for r in records for k in (r["protocol"].get("ks") or hit_ks(r["metrics"]))})
    gzsl = any(r["protocol"].get("gzsl") is not None for r in records)
    rows = [
        record_row(r, interval if run is not None else None, ks, gzsl)
        for r, run, interval in zip(records, runs, intervals, strict=True)
    ]
    return rows, notes + interval_notes + leakage_notes(rows)


def leakage_notes(rows: Sequence[dict]) -> list[str]:
    """One line per row whose test classes include labels of the backbone's pretraining (its
    numbers are not zero-shot there), or whose pretraining cannot be known (web data); none for
    features that record nothing (e.g. SIMULATED ones)."""
    lines = []
    for row in rows:
        seen = str(row.get(SEEN_COLUMN, "–"))
        where = f"{row['model']} on {row['split']}"
        if seen.isdigit() and int(seen) > 0:
            lines.append(
                f"{where}: {seen} test classes were labels of the backbone's pretraining; "
                "results on them are not zero-shot"
            )
        elif seen not in ("0", "unknown", "–") and not seen.isdigit():
            lines.append(f"{where}: test classes seen in pretraining: {seen}")
    return lines


def aggregate_runs(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Table of every run or record (:func:`report_rows`: every column, values as fractions, NaN
    where a run lacks one), as a pandas DataFrame."""
    rows, _ = report_rows(run_dirs)
    # deferred: heavy; only the Python API's DataFrame needs it (the tables are written without)
    import pandas as pd

    table = pd.DataFrame(rows)
    values = [c for c in table.columns if c not in TEXT_COLUMNS]
    table[values] = table[values].astype(float)
    return table


# ----------------------------------------------------------------------------- rendering


def _is_value(column: str) -> bool:
    return column not in TEXT_COLUMNS


def _ok(row: dict) -> bool:
    return row.get(STATUS_COLUMN, "ok") == "ok"


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


def to_latex(rows: Sequence[dict], columns: Sequence[str], note: str, mark: str = TEX_MARK) -> str:
    """The table as a complete ``tabular`` a paper can ``\\input`` (booktabs rules; the first
    lines say which package and give the legend, escaped, as a note for the caption); values in %,
    the best of a split in bold, a failed row's values one 'failed' cell."""
    best = best_cells(rows, columns)
    lead = [c for c in columns if not _is_value(c) and c != HIT1_CI]
    lines = [
        f"{mark}: needs \\usepackage{{booktabs}}; \\input it inside a table environment",
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
        if not _ok(row) and width < len(columns):
            cells = [tex_escape(cell_text(row, c)) for c in columns[:width]]
            failed = r"\multicolumn{" + str(len(columns) - width) + "}{c}{failed}"
            lines.append(" & ".join([*cells, failed]) + r" \\")
            continue
        cells = []
        for column in columns:
            text = tex_escape(cell_text(row, column))
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
    backbones = {str(r.get("backbone")) for r in rows}
    if "backbone" not in columns and len(backbones) == 1:
        parts.append(f"backbone (every row): {backbones.pop()}")
    if "class vectors" not in columns:
        by_source: dict[str, list[str]] = {}
        for row in rows:
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
    ks = hit_ks(rows[0] if rows else {})
    gzsl = bool(rows) and "GZSL H" in rows[0]
    return select_columns(spec, rows, ks, gzsl), all_columns(ks, gzsl)


# ----------------------------------------------------------------------------- report --out


def report_paths(out: str | Path) -> list[Path]:
    """The .md, .csv and .tex files ``report --out`` writes."""
    out = Path(out)
    stem = out.with_suffix("") if out.suffix in (".md", ".csv", ".tex") else out
    return [stem.with_suffix(suffix) for suffix in (".md", ".csv", ".tex")]


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
}


def is_report_output(path: Path) -> bool:
    """True when ``path`` begins as a table that ``report`` writes (its first line), so a re-run may
    replace it; any other existing file is never overwritten (``io.check_out_file``)."""
    starts = _REPORT_STARTS.get(path.suffix)
    if starts is None:
        return False
    try:
        with path.open("r", encoding="utf-8") as handle:
            first = handle.readline(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return first.startswith(starts)


def check_report_out(out: str | Path, run_dirs: Sequence[str | Path]) -> None:
    """Refuse an ``--out`` whose files would land inside an input (e.g. over a run's own
    report.md), that would replace a file ``report`` did not write, or that cannot be written,
    before reading anything. An ``--out`` that is a directory or a device is refused too: the
    tables would land beside it (``/dev/full`` → ``/dev/full.md``)."""
    check_out_stem(out, report_paths(out))
    for path in report_paths(out):
        check_out_file(path, inputs=run_dirs, replaces=is_report_output, what="a report table")


def write_report_tables(
    rows: Sequence[dict], out: str | Path, columns: str | None = None, notes: Sequence[str] = ()
) -> list[Path]:
    """Write ``out`` with .md, .csv and .tex suffixes: the printed ``columns`` (``--columns``;
    None: the paper table) in Markdown and LaTeX, every column in the CSV (values in %)."""
    md_path, csv_path, tex_path = report_paths(out)
    printed, every = table_columns(rows, columns)
    note = table_note(rows, printed, every)
    return [
        atomic_write_text(md_path, f"{MD_MARK}\n" + to_markdown(rows, printed, note, notes)),
        atomic_write_text(csv_path, to_csv(rows, every)),
        atomic_write_text(tex_path, to_latex(rows, printed, note)),
    ]
