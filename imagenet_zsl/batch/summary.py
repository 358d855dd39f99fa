"""The summary of ``imagenet-zsl run``: models x splits x flat hit@K, as Markdown, CSV and LaTeX,
and one plot of hit@K per split.

Columns: the backbone of the test features
(:func:`~imagenet_zsl.features.identity.describe_identity`; "MISMATCH ALLOWED" when
``--allow-feature-mismatch`` let a model fitted on other features through), the model's
class-vector source, classes evaluated / classes in the split (the same for every model of a split:
``missing_semantics``; "+N missed" with ``count_as_miss``), the label space (classes ranked against,
and those with test images, from metrics.json's ``label_space``), then the metric columns of
:mod:`imagenet_zsl.evaluation.columns`, named and ordered as in ``imagenet-zsl report`` (hit@K,
per-class hit@1, strict hit@K, hP@K, GZSL per image as Chao et al. score ImageNet; the CSV also
carries strict hit@K for every K and the per-class GZSL twins), the hit@1 95% interval of a paired,
class-clustered bootstrap and the models of the split not significantly different
(:mod:`imagenet_zsl.scoring.bootstrap`, from each cell's stored true-class ranks), and the number of
test classes seen in the backbone's pretraining (``pretraining.test_classes_seen``; "unknown" when
the features do not record it). A failed cell keeps its row, with its error. The legend under the
Markdown table carries the column legend and the run's notes: which classes left and why, how γ was
chosen, the label space, any feature override.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.evaluation.columns import COLUMN_LEGEND, csv_only, metric_columns
from imagenet_zsl.evaluation.report import label_space_cell, tex_escape
from imagenet_zsl.evaluation.run.run_report import md_table, pct
from imagenet_zsl.io import atomic_write_text
from imagenet_zsl.plotting import colormap, line_handle, save_figure, subplots
from imagenet_zsl.scoring import TieRanks
from imagenet_zsl.scoring.bootstrap import LEVEL, RESAMPLES, SEED, paired_bootstrap

SUMMARY_FILES = ("summary.md", "summary.csv", "summary.tex", "hit_at_k.png")
SEEN_COLUMN = "seen in pretraining"
CI_COLUMN = "hit@1 95% CI"
NS_COLUMN = "n.s. vs"
#: the columns before the values, in order
LEAD_COLUMNS = ("model", "split", "backbone", "class vectors", "classes", "label space")
#: the text columns after the values, in order
TRAIL_COLUMNS = (CI_COLUMN, NS_COLUMN, SEEN_COLUMN, "status")
#: columns printed as text (the others are fractions, printed in %)
TEXT_COLUMNS = (*LEAD_COLUMNS, *TRAIL_COLUMNS)
BOOTSTRAP_NOTE = (
    f"hit@1 95% CI: percentile interval of a paired, class-clustered bootstrap ({RESAMPLES} "
    f"resamples of the split's test classes with replacement, seed {SEED}; each resample's flat "
    "hit@1 is its images' expected credit over its images, count-as-miss images included); "
    "n.s. vs: the models of the same split whose hit@1 differs from this row's by an amount whose "
    f"{LEVEL:.0%} paired interval (the same resamples for both) contains 0, i.e. not significantly "
    "different (none: every difference is significant)"
)


def summary_rows(out: Path, records: Sequence[dict], ks: Sequence[int], gzsl: bool) -> list[dict[str, Any]]:
    """One row per cell record (values are fractions, None where missing)."""
    rows = []
    for record in records:
        classes = record["classes"]
        evaluated = classes.get("evaluated")
        missed = len(classes.get("missed") or ())
        origin = record.get("provenance") or {}
        backbone = str(origin.get("backbone") or "unknown")
        override = origin.get("feature_override")
        if override:
            fitted_on = override.get(f"model {record['model']}", "?")
            backbone += f" (MISMATCH ALLOWED: model fitted on {fitted_on})"
        row: dict[str, Any] = {}
        if "backbone" in record:  # a run over several feature sets: the backbone column comes first
            row["backbone"] = f"{record['backbone']}: {backbone}"
        row |= {
            "model": record["model"],
            "split": record["split"],
            "backbone": row.get("backbone", backbone),
            "class vectors": str(origin.get("class_vectors") or "–"),
            "classes": f"{evaluated if evaluated is not None else '–'}/{classes['in_split']}"
            + (f" +{missed} missed" if missed else ""),
        }
        metrics: dict = {}
        if record["status"] == "ok":
            metrics = json.loads((out / record["run"] / "metrics.json").read_text())
        row["label space"] = label_space_cell(metrics) if "label_space" in metrics else "–"
        row.update(metric_columns(metrics, ks, gzsl))
        row[CI_COLUMN] = row[NS_COLUMN] = "–"
        row[SEEN_COLUMN] = seen_in_pretraining(metrics) if record["status"] == "ok" else "–"
        row["status"] = "ok" if record["status"] == "ok" else f"failed: {record['error']}"
        rows.append(row)
    add_intervals(out, records, rows)
    return rows


def class_credit(run_dir: Path) -> dict[str, tuple[float, int]] | None:
    """One cell's hit@1 credit (expected tie rule) summed per test class and its test images, by
    wnid, from the run's true-class ranks (count-as-miss classes: no credit); None when the run
    has no top-k lists or they do not fit together (the row then shows no interval)."""
    topk = run_dir / "topk"
    try:
        labels = np.load(topk / "test.labels.npy").astype(np.int64)
        ranks = TieRanks(*(np.load(topk / f"test.true_{f}.npy").astype(np.int64) for f in ("above", "tied")))
        classes = json.loads((topk / "classes.json").read_text())
    except (OSError, ValueError):
        return None
    space = classes.get("unseen") if isinstance(classes, dict) else None
    if not isinstance(space, list) or not len(labels) == len(ranks.above) == len(ranks.tied):
        return None
    if len(labels) and (labels.min() < 0 or labels.max() >= len(space)):
        return None
    sums = np.bincount(labels, weights=ranks.credit(1), minlength=len(space))
    counts = np.bincount(labels, minlength=len(space))
    credit = {w: (float(s), int(n)) for w, s, n in zip(space, sums, counts, strict=True) if n}
    credit.update({w: (0.0, int(n)) for w, n in (classes.get("count_as_miss") or {}).items() if n})
    return credit


def add_intervals(out: Path, records: Sequence[dict], rows: Sequence[dict]) -> None:
    """Fill each row's hit@1 interval and the models it is not significantly different from
    (:data:`BOOTSTRAP_NOTE`): one paired bootstrap per split over the cells scored on the same
    classes and images."""
    groups: dict[tuple, list[tuple[int, list[float]]]] = {}
    for i, record in enumerate(records):
        credit = class_credit(out / record["run"]) if record["status"] == "ok" else None
        if not credit:
            continue
        wnids = sorted(credit)
        key = (record["split"], tuple(wnids), tuple(credit[w][1] for w in wnids))
        groups.setdefault(key, []).append((i, [credit[w][0] for w in wnids]))
    for (_, _, counts), members in groups.items():
        boot = paired_bootstrap(np.array([c for _, c in members]), np.array(counts))
        for a, (i, _) in enumerate(members):
            rows[i][CI_COLUMN] = f"[{pct(boot.low[a])}, {pct(boot.high[a])}]"
            same = [
                _row_name(rows[j], records[j])
                for b, (j, _) in enumerate(members)
                if b != a and boot.not_significant(a, b)
            ]
            rows[i][NS_COLUMN] = ", ".join(same) if same else "none"


def _row_name(row: dict, record: dict) -> str:
    """A row's model, with its backbone in a run over several feature sets (``vit/eszsl``)."""
    return f"{record['backbone']}/{row['model']}" if "backbone" in record else row["model"]


def _series(row: dict) -> str:
    """A row's line in the plot: its model, ``NAME/model`` in a run over several feature sets
    (whose rows lead with ``backbone`` = ``NAME: identity``)."""
    if next(iter(row)) == "backbone":
        return f"{row['backbone'].split(': ', 1)[0]}/{row['model']}"
    return row["model"]


def lead_columns(rows: Sequence[dict]) -> list[str]:
    """The text columns before the values, in the rows' order: :data:`LEAD_COLUMNS`, with the
    backbone first in a run over several feature sets."""
    return [c for c in (rows[0] if rows else LEAD_COLUMNS) if c in LEAD_COLUMNS]


def seen_in_pretraining(metrics: dict) -> str:
    """The cell's count of test classes seen in pretraining, as text ("unknown" when not recorded)."""
    count = (metrics.get("pretraining") or {}).get("test_classes_seen")
    return "unknown" if count is None else str(count)


def pretraining_warnings(rows: Sequence[dict]) -> list[str]:
    """One line per cell whose test classes include pretraining labels (not zero-shot there), or
    whose backbone's pretraining is known to be unknowable (web data); silent for features that
    record nothing (e.g. SIMULATED ones) and for failed cells."""
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


def _value_columns(rows: Sequence[dict], printed: bool = True) -> list[str]:
    """The value columns; ``printed``: only those of the Markdown and LaTeX tables."""
    columns = [c for c in rows[0] if c not in TEXT_COLUMNS] if rows else []
    return [c for c in columns if not (printed and csv_only(c))]


def _pct(value: float | None) -> str:
    return pct(None if value is not None and math.isnan(value) else value)


def to_markdown(rows: Sequence[dict], notes: Sequence[str] = ()) -> str:
    """The table in Markdown, values in %, with a legend: the tie rules and the run's ``notes``."""
    if not rows:
        return "(no cells)\n"
    values = _value_columns(rows)
    columns = [*lead_columns(rows), *values, *TRAIL_COLUMNS]
    table = [
        [(_pct(row[c]) if c in values else str(row[c])).replace("|", "/") for c in columns] for row in rows
    ]
    note = (
        f"\nValues in %. {COLUMN_LEGEND}; backbone: the identity of the test features; class "
        "vectors: the model's class semantics; classes: evaluated / in the split, the same for every "
        "model of a split (+N missed: classes the model cannot score, counted as misses); seen in "
        "pretraining: test classes that were labels of the backbone's pretraining (unknown: the "
        f"features do not record it); label space: classes ranked against (with test images); "
        f"{BOOTSTRAP_NOTE}.\n"
    )
    legend = "".join(f"\n- {line}" for line in notes)
    return md_table(columns, table) + "\n" + note + (legend + "\n" if legend else "")


def to_csv(rows: Sequence[dict]) -> str:
    """The table as CSV, values in % (4 decimals), empty where missing."""
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    values = _value_columns(rows, printed=False)
    for row in rows:
        writer.writerow(
            {c: ("" if row[c] is None else round(100 * row[c], 4)) if c in values else row[c] for c in row}
        )
    return buffer.getvalue()


def to_latex(rows: Sequence[dict]) -> str:
    """The table as a LaTeX tabular (booktabs), values in %; a failed cell reads 'failed'."""
    values = _value_columns(rows)
    lead = lead_columns(rows)
    trail = [c for c in TRAIL_COLUMNS if c != "status" and c in (rows[0] if rows else {})]
    lines = [
        r"\begin{tabular}{" + "l" * len(lead) + "r" * (len(values) + len(trail)) + "}",
        r"\toprule",
        " & ".join([*(tex_escape(c.capitalize()) for c in lead), *(tex_escape(c) for c in (*values, *trail))])
        + r" \\",
        r"\midrule",
    ]
    for row in rows:
        cells = [tex_escape(str(row[c])) for c in lead]
        if row["status"] == "ok":
            cells += [_pct(row[c]).replace("–", "--") for c in values]
            cells += [tex_escape(str(row.get(c, "unknown"))).replace("–", "--") for c in trail]
        else:
            cells += [r"\multicolumn{" + str(len(values) + len(trail)) + "}{c}{failed}"]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


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
            values = [100 * row[f"hit@{k}"] if row.get(f"hit@{k}") is not None else math.nan for k in ks]
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


def write_summary(
    rows: Sequence[dict], out: Path, ks: Sequence[int], notes: Sequence[str] = ()
) -> tuple[str, list[Path]]:
    """Write summary.md/.csv/.tex and hit_at_k.png into ``out``; returns (Markdown, paths)."""
    markdown = to_markdown(rows, notes)
    paths = [
        atomic_write_text(out / "summary.md", markdown),
        atomic_write_text(out / "summary.csv", to_csv(rows)),
        atomic_write_text(out / "summary.tex", to_latex(rows)),
        plot_hit_at_k(rows, ks, out / "hit_at_k.png"),
    ]
    return markdown, paths
