"""The rows of ``imagenet-zsl report``'s inputs: result records (:mod:`imagenet_zsl.evaluation.
result_records`) read from ``evaluate`` run directories (their metrics.json made into records),
``run``'s ``results/*.json`` and directories of them, merged (each row once), each made one table
row with its hit@1 interval (:mod:`imagenet_zsl.evaluation.intervals`: recomputed, paired across
the given run directories of a split; a record read from JSON keeps its run's); the tables are
:mod:`imagenet_zsl.evaluation.report`'s.

Trust: only run directories whose manifest verifies are read (metrics.json by sha256, the top-k
lists by size), a row given twice is reported once (refused when its numbers differ), and a run
whose own evaluation was allowed a feature mismatch is marked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import (
    CI_COLUMN,
    LEAD_COLUMNS,
    NS_COLUMN,
    SEEN_COLUMN,
    STATUS_COLUMN,
    TEXT_COLUMNS,
    all_columns,
    column_ks,
)
from imagenet_zsl.evaluation.intervals import RowInterval, row_intervals
from imagenet_zsl.evaluation.result_records import (
    RESULT_FORMAT,
    RESULTS_DIR,
    merge_results,
    read_result,
    result_record,
)
from imagenet_zsl.evaluation.run.verify import METRICS_NAME, load_metrics
from imagenet_zsl.splits.named import PUBLISHED_SPLITS

if TYPE_CHECKING:
    import pandas as pd

#: appended to the backbone of a row combined under --allow-feature-mismatch
MISMATCH_MARK = " [mismatch]"
# ----------------------------------------------------------------------------- rows


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
        "label space": protocol["label_space"]["text"] + held_text(record),
        "classes": f"{classes.get('evaluated', '–')}/{classes.get('in_split', '–')}"
        + (f" +{missed} missed" if missed else ""),
    }
    ks = ks if ks is not None else (protocol.get("ks") or column_ks(record["metrics"]))
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


def held_text(record: dict) -> str:
    """`` (1,412 of 1,549 held)`` for a row on a published list (``dgp-2hops``) that the user's
    copy of ImageNet holds in part (``protocol.coverage``), else "": a published list held in part
    is another list, and the table says so."""
    coverage = record["protocol"].get("coverage") or {}
    if record.get("split") not in PUBLISHED_SPLITS or coverage.get("complete", True):
        return ""
    return f" ({coverage['held']:,} of {coverage['classes']:,} held)"


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
        if not metrics["inputs"]["split"]["name"]:  # the row's split
            raise KeyError("inputs.split.name")
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


@dataclass
class ReportTable:
    """The rows of ``report``'s inputs with what produced them: each row's result record and the
    run directory holding its top-k lists (None when not on this machine), and the legend's
    notes."""

    rows: list[dict[str, Any]]
    records: list[dict]
    cells: list[Path | None]
    notes: list[str]


def _cell_dir(place: str, record: dict, run: Path | None) -> Path | None:
    """The run directory of a row: the one given, or a record's ``source`` beside its
    ``results/`` folder (a ``run`` directory's cell), when it is there."""
    if run is not None:
        return run
    source = record.get("source")
    if not source:
        return None
    cell = Path(place).parent.parent / str(source)
    return cell if (cell / METRICS_NAME).is_file() else None


def report_table(paths: Sequence[str | Path]) -> ReportTable:
    """The rows of every input (sorted by split, then model, then backbone), each row once, with
    their records, run directories and the legend's notes (rows given twice, the intervals')."""
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
    ks = sorted({int(k) for r in records for k in (r["protocol"].get("ks") or column_ks(r["metrics"]))})
    gzsl = any(r["protocol"].get("gzsl") is not None for r in records)
    rows = [
        record_row(r, interval if run is not None else None, ks, gzsl)
        for r, run, interval in zip(records, runs, intervals, strict=True)
    ]
    cells = [_cell_dir(where[id(r)][0], r, where[id(r)][1]) for r in records]
    return ReportTable(rows, records, cells, notes + interval_notes + leakage_notes(rows))


def report_rows(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of every input (sorted by split, then model, then backbone), each row once, and
    the legend's notes (rows given twice, the intervals' notes)."""
    table = report_table(paths)
    return table.rows, table.notes


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
