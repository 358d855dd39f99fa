"""The summary of ``imagenet-zsl run``: one row per (model, split), as Markdown, CSV and LaTeX, one
result record per row (``results/``), and one plot of hit@K per split.

The table is ``report``'s (:mod:`imagenet_zsl.evaluation.report`): the same columns in the same
order (:mod:`imagenet_zsl.evaluation.columns`), the paper table by default and ``--columns`` for
the rest, every column in summary.csv. A row of ``run`` knows more than a run directory alone: the
backbone ("MISMATCH ALLOWED" when ``--allow-feature-mismatch`` let a model fitted on other features
through; ``NAME: identity`` in a run over several feature sets), the classes evaluated / in the
split (the same for every model of a split: ``missing_semantics``; "+N missed" with
``count_as_miss``), and the label space the run fixed (its name and size, ``All−vec 18,925``). The
hit@1 interval and the models not significantly different come from one paired bootstrap per split
(:mod:`imagenet_zsl.evaluation.intervals`). A failed cell keeps its row, with its error. The legend
under the Markdown table carries the column legend and the run's notes: which classes left and why,
how γ was chosen, the label space, any feature override, the intervals' caveats.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_json, atomic_write_text
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.columns import (
    CI_COLUMN,
    NS_COLUMN,
    SEEN_COLUMN,
    STATUS_COLUMN,
    all_columns,
)
from imagenet_zsl.evaluation.intervals import row_intervals
from imagenet_zsl.evaluation.report import leakage_notes, record_row, render_tables
from imagenet_zsl.evaluation.result_records import (
    RESULT_FORMAT,
    RESULTS_DIR,
    result_file_name,
    result_record,
    set_interval,
)
from imagenet_zsl.evaluation.run.classes import class_image_counts
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.images.coverage import coverage_of
from imagenet_zsl.plotting import colormap, line_handle, save_figure, subplots

SUMMARY_FILES = ("summary.md", "summary.csv", "summary.tex", "hit_at_k.png")
#: the BibTeX entries the published rows cite (``run --published``)
BIB_FILE = "summary.bib"
TEX_MARK = "% imagenet-zsl run summary"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryTable:
    """How ``run`` prints its summary: ``columns`` (``--columns``; None: the paper table) and
    ``published`` (``--published``: the published rows of the same splits beside the run's)."""

    columns: str | None = None
    published: bool = False


def _backbone(record: dict) -> str:
    """The row's backbone: the test features' identity, the override, the recipe's name."""
    origin = record.get("provenance") or {}
    backbone = str(origin.get("backbone") or "unknown")
    override = origin.get("feature_override")
    if override:
        fitted_on = override.get(f"model {record['model']}", "?")
        backbone += f" (MISMATCH ALLOWED: model fitted on {fitted_on})"
    if "backbone" in record:  # a run over several feature sets: the recipe's name first
        backbone = f"{record['backbone']}: {backbone}"
    return backbone


def _failed_row(record: dict, ks: Sequence[int], gzsl: bool) -> dict[str, Any]:
    """The row of a cell without results: its names, no values, its error."""
    classes = record["classes"]
    evaluated = classes.get("evaluated")
    missed = len(classes.get("missed") or ())
    row: dict[str, Any] = dict.fromkeys(all_columns(ks, gzsl))
    row |= {
        "backbone": _backbone(record),
        "model": record["model"],
        "split": record["split"],
        "class vectors": str((record.get("provenance") or {}).get("class_vectors") or "–"),
        "label space": "–",
        "classes": f"{evaluated if evaluated is not None else '–'}/{classes['in_split']}"
        + (f" +{missed} missed" if missed else ""),
        CI_COLUMN: "–",
        NS_COLUMN: "–",
        SEEN_COLUMN: "–",
        STATUS_COLUMN: f"failed: {record['error']}",
    }
    return row


def _row_name(record: dict) -> str:
    """A row's model, with its backbone in a run over several feature sets (``vit/eszsl``)."""
    return f"{record['backbone']}/{record['model']}" if "backbone" in record else str(record["model"])


def summary_tables(
    out: Path, records: Sequence[dict], ks: Sequence[int], gzsl: bool
) -> tuple[list[dict[str, Any]], list[dict | None], list[str]]:
    """(one row per cell record, the result record of each finished cell (None: failed), the
    legend's notes: the intervals' caveats and the failed cells)."""
    rows: list[dict[str, Any]] = []
    results: list[dict | None] = []
    for record in records:
        if record["status"] != "ok":
            rows.append(_failed_row(record, ks, gzsl))
            results.append(None)
            continue
        metrics = json.loads((out / record["run"] / "metrics.json").read_text())
        result = result_record(
            metrics,
            label_space=record.get("label_space"),
            classes=record["classes"],
            backbone=_backbone(record),
            source=record["run"],
        )
        # the run's names of the row (a run over several feature sets: the same model per backbone)
        result.update(model=record["model"], split=record["split"])
        result["protocol"]["class_vectors"] = (record.get("provenance") or {}).get("class_vectors") or "–"
        if record.get("coverage"):  # the whole split list against the test features (split_coverage)
            result["protocol"]["coverage"] = record["coverage"]
        results.append(result)
        row = record_row(result)
        rows.append({c: row.get(c) for c in all_columns(ks, gzsl)})
    for row, record in zip(rows, records, strict=True):
        row[SERIES] = _row_name(record)
    runs = [out / r["run"] if r["status"] == "ok" else None for r in records]
    intervals, notes = row_intervals([r["split"] for r in records], runs, [_row_name(r) for r in records])
    for row, result, interval in zip(rows, results, intervals, strict=True):
        if result is None:
            continue
        row[CI_COLUMN], row[NS_COLUMN] = interval.text, interval.not_significant
        set_interval(result, interval)
    notes += [f"{r['model']} on {r['split']} failed: {r['error']}" for r in records if r["status"] != "ok"]
    return rows, results, notes + pretraining_warnings(rows)


def summary_rows(out: Path, records: Sequence[dict], ks: Sequence[int], gzsl: bool) -> list[dict[str, Any]]:
    """One row per cell record (values are fractions, None where missing)."""
    return summary_tables(out, records, ks, gzsl)[0]


#: a row's key (never a column) naming its line in the plot
SERIES = "_series"


def _series(row: dict) -> str:
    """A row's line in the plot: its model, ``NAME/model`` in a run over several feature sets."""
    return str(row.get(SERIES) or row["model"])


def seen_in_pretraining(metrics: dict) -> str:
    """A run's count of test classes seen in pretraining, as text ("unknown" when not recorded)."""
    count = (metrics.get("pretraining") or {}).get("test_classes_seen")
    return "unknown" if count is None else str(count)


def pretraining_warnings(rows: Sequence[dict]) -> list[str]:
    """One line per cell whose test classes include pretraining labels (not zero-shot there), or
    whose backbone's pretraining is known to be unknowable (web data); silent for features that
    record nothing (e.g. SIMULATED ones) and for failed cells (under the table, as ``report``'s)."""
    return leakage_notes(rows)


def render_summary(
    rows: Sequence[dict],
    notes: Sequence[str] = (),
    columns: str | None = None,
    published: Sequence[dict | None] | None = None,
) -> tuple[str, str, str]:
    """(summary.md, summary.csv, summary.tex) of ``rows``: ``columns`` (``--columns``; None: the
    paper table) printed, every column in the CSV, the legend and ``notes`` under the table;
    ``published``: the rows' result records (None: a failed cell), to put the published rows of
    their splits beside them (``run --published``; their BibTeX entries: :func:`write_summary`)."""
    tables = render_tables(rows, columns, notes, published, tex_mark=TEX_MARK, bib_name=BIB_FILE)
    return tables.markdown, tables.csv, tables.tex


#: the markers of the README's generated demo excerpt (:func:`demo_excerpt`)
DEMO_START, DEMO_END = "<!-- demo:start -->", "<!-- demo:end -->"


def demo_excerpt(summary_csv: str) -> str:
    """The README's excerpt of a demo run's table, from its summary.csv: flat hit@1 in % with
    strict hit@1 in brackets, one row per model, one column per split headed by its label space
    (as the table prints them: 2 decimals); '—' where a model does not run on a split."""
    rows = list(csv.DictReader(io.StringIO(summary_csv)))
    models = list(dict.fromkeys(r["model"] for r in rows))
    splits = list(dict.fromkeys(r["split"] for r in rows))
    space = {r["split"]: r["label space"] for r in reversed(rows)}
    cell = {(r["model"], r["split"]): r for r in rows}

    def text(row: dict | None) -> str:
        if row is None or not row["hit@1"]:
            return "—"
        return f"{float(row['hit@1']):.2f} ({float(row['strict hit@1']):.2f})"

    lines = [
        "| model | " + " | ".join(f"{s} ({space[s]})" for s in splits) + " |",
        "|---|" + "---:|" * len(splits),
    ]
    lines += [f"| {m} | " + " | ".join(text(cell.get((m, s))) for s in splits) + " |" for m in models]
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> float:
    return math.nan if value is None else 100 * value


#: markers cycled with the colours, so that more than 10 models (and a greyscale print) stay apart
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
#: panels per row of hit_at_k.png
PANEL_COLUMNS = 3


def model_styles(models: Sequence[str]) -> dict[str, dict[str, Any]]:
    """One colour and marker per model, the same in every panel (tab10, then tab20 past 10)."""
    cmap = colormap("tab10" if len(models) <= 10 else "tab20")
    return {m: {"color": cmap(i % cmap.N), "marker": MARKERS[i % len(MARKERS)]} for i, m in enumerate(models)}


def plot_hit_at_k(rows: Sequence[dict], ks: Sequence[int], path: Path) -> Path:
    """Save :func:`hit_at_k_figure` as ``path``."""
    return save_figure(hit_at_k_figure(rows, ks), path)


def hit_at_k_figure(rows: Sequence[dict], ks: Sequence[int]) -> Any:
    """One panel per split in a grid of :data:`PANEL_COLUMNS` columns (2 x 2 for 4 splits): flat
    hit@K against K, one line per model in the same colour and marker in every panel, one legend
    right of the grid (never over the data); a value a cell lacks is a gap, not 0."""
    splits = list(dict.fromkeys(r["split"] for r in rows)) or ["(no cells)"]
    models = list(dict.fromkeys(_series(r) for r in rows))
    styles = model_styles(models)
    ncols = 2 if len(splits) == 4 else min(PANEL_COLUMNS, len(splits))  # 4 panels: 2 x 2
    nrows = -(-len(splits) // ncols)
    size = (2.9 * ncols + 1.6, 2.5 * nrows + 0.3)
    fig, axes = subplots(nrows, ncols, figsize=size, squeeze=False, sharey=True, layout="constrained")
    ks = sorted(ks)
    for i, ax in enumerate(axes.flat):
        if i >= len(splits):
            ax.set_visible(False)
            continue
        for row in (r for r in rows if r["split"] == splits[i] and r["status"] == "ok"):
            values = [_pct(row.get(f"hit@{k}")) for k in ks]
            ax.plot(ks, values, linestyle="-", markersize=4, **styles[_series(row)])
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xticks([], minor=True)
        ax.set_ylim(0, 102)
        ax.set_title(splits[i], fontsize=9)
        ax.grid(alpha=0.3)
        if i % ncols == 0:
            ax.set_ylabel("flat hit@K (%)")
        if i >= len(splits) - ncols:
            ax.set_xlabel("K")
    handles = [line_handle(linestyle="-", markersize=4, **styles[m]) for m in models]
    if handles:
        fig.legend(handles, models, loc="outside right upper", fontsize=7, frameon=False)
    return fig


def write_results(out: Path, records: Sequence[dict], results: Sequence[dict | None]) -> list[Path]:
    """``OUT/results/BACKBONE__MODEL__SPLIT.json``, one result record per finished cell (a run over
    several feature sets names the backbone by its recipe name); records of cells no longer
    finished are removed."""
    folder = out / RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for record, result in zip(records, results, strict=True):
        if result is not None:
            name = result_file_name(result, record.get("backbone"))
            written.append(atomic_write_json(folder / name, result))
    for stale in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if stale not in written and _is_result(stale):
            stale.unlink()
    if folder.is_dir() and not any(folder.iterdir()):
        shutil.rmtree(folder)
    return written


def _is_result(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == RESULT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_summary(
    rows: Sequence[dict],
    out: Path,
    ks: Sequence[int],
    notes: Sequence[str] = (),
    columns: str | None = None,
    published: Sequence[dict | None] | None = None,
) -> tuple[str, list[Path]]:
    """Write summary.md/.csv/.tex and hit_at_k.png into ``out`` (and summary.bib with
    ``published``: the rows' result records, the published rows beside them); returns (Markdown,
    paths)."""
    tables = render_tables(rows, columns, notes, published, tex_mark=TEX_MARK, bib_name=BIB_FILE)
    paths = [
        atomic_write_text(out / "summary.md", tables.markdown),
        atomic_write_text(out / "summary.csv", tables.csv),
        atomic_write_text(out / "summary.tex", tables.tex),
        plot_hit_at_k(rows, ks, out / "hit_at_k.png"),
    ]
    if tables.bib:
        paths.append(atomic_write_text(out / BIB_FILE, tables.bib))
    else:
        (out / BIB_FILE).unlink(missing_ok=True)  # a run's earlier --published table's
    return tables.markdown, paths


def split_coverage(
    split_wnids: Mapping[str, Sequence[str]], split_files: Mapping[str, Path], test_dir: Callable[[str], Path]
) -> dict[str, dict[str, Any]]:
    """Per split, the classes of its whole list that the test features hold (the user's copy of
    ImageNet): ``classes``, ``held``, ``images``, ``complete``, ``split_sha256`` (a result record's
    ``protocol.coverage``) and ``missing`` (wnids, for the note); ``test_dir(split)``: the feature
    directory its cells evaluate. A split whose features cannot be read is left out (a warning)."""
    found: dict[str, dict[str, Any]] = {}
    opened: dict[Path, FeatureDir] = {}
    for split, wnids in split_wnids.items():
        try:
            path = test_dir(split)
            features = opened.setdefault(path, FeatureDir(path))
            counts = class_image_counts(features, wnids)
        except (UserInputError, OSError, KeyError) as err:
            log.warning("no coverage of %s: %s", split, err)
            continue
        held = coverage_of(dict(zip(wnids, counts.tolist(), strict=True)), wnids, reference={})
        found[split] = {
            "classes": held["total"],
            "held": held["held"],
            "images": held["images_held"],
            "complete": held["complete"],
            "split_sha256": sha256_file(split_files[split]),
            "missing": held["missing"],
        }
    return found


def coverage_notes(coverage: Mapping[str, dict[str, Any]]) -> list[str]:
    """One line per split: the classes of its list the test features hold, and their images."""
    lines = []
    for split, held in coverage.items():
        line = f"your copy of {split}: {held['held']:,} of {held['classes']:,} classes held"
        line += f", {held['images']:,} test images"
        if not held["complete"]:
            line += (
                f"; incomplete, {len(held['missing']):,} classes without an image "
                f"({preview(held['missing'], 3)}): not the published list, never marked comparable"
            )
        lines.append(line)
    return lines
