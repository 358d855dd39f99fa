"""The cross-run table of ``imagenet-zsl report`` (Markdown, CSV, LaTeX); one run's report.md is
:mod:`imagenet_zsl.evaluation.run.run_report`.

The cross-run table mirrors the papers' tables: one row per (model, split, features), with the
backbone, the class vectors and the label space of each row, then the metric columns of
:mod:`imagenet_zsl.evaluation.columns` in the order ``run``'s summary prints them (ZSL hit@K flat,
the ImageNet convention; per-class hit@1, Xian et al.; strict hit@K, DGP's tie rule; hP@K, Frome
et al.; GZSL U / S / H / AUSUC per image as Chao et al. score ImageNet, with the
validation-calibrated H). Best value per split in bold.

Trust: ``report`` reads only run directories whose manifest verifies (metrics.json, the table and
the report by sha256; the top-k lists, which can be gigabytes and are not read here, by size),
puts runs of different backbones in one table (each row names its backbone, as ``run`` does for a
recipe over several feature sets: every run is consistent within itself, since ``evaluate``
refuses a model scored on another backbone's features) and marks a run whose own evaluation was
allowed such a mismatch, reports a directory given twice once, and never writes its ``--out``
inside an input run directory.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import COLUMN_LEGEND, csv_only, metric_columns
from imagenet_zsl.evaluation.run.run_report import COUNT_COLUMNS, md_table, table_cell
from imagenet_zsl.evaluation.run.verify import METRICS_NAME, load_metrics
from imagenet_zsl.io import (
    atomic_write_text,
    check_out_file,
    check_out_stem,
)

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: the text columns that identify a row of the cross-run table (never scaled, never bold)
#: (the order of ``imagenet-zsl run``'s summary, :mod:`imagenet_zsl.batch.summary`, then the
#: feature directory)
TEXT_COLUMNS = ("model", "split", "backbone", "class vectors", "label space", "features")
#: appended to the backbone of a row combined under --allow-feature-mismatch
MISMATCH_MARK = " [mismatch]"
# ----------------------------------------------------------------------------- cross-run table


def label_space_cell(metrics: dict) -> str:
    """The label space of one run: its name, its classes and those with test images."""
    space = metrics.get("label_space")
    if not space:  # runs written before label spaces: the split's classes with test images
        return f"split: {metrics['zsl']['classes']}"
    name = Path(str(space["spec"])).name
    return f"{name}: {space['classes_in_label_space']} ({space['classes_with_test_images']} with images)"


def run_row(metrics: dict) -> dict:
    """One table row (values are fractions; NaN where a run lacks a figure)."""
    nan = float("nan")
    prov = metrics.get("provenance") or {}
    row: dict = {
        "model": metrics["model"]["name"],
        "split": metrics["inputs"]["split"]["name"],
        "backbone": (prov.get("features") or {}).get("backbone", "unknown"),
        "class vectors": prov.get("class_vectors", "unknown"),
        "label space": label_space_cell(metrics),
        "features": Path(metrics["inputs"]["features"]["path"]).name,
    }
    if prov.get("feature_mismatch"):
        row["backbone"] += MISMATCH_MARK
    if "flat" not in metrics["zsl"]:  # a run without the headline is not a run
        raise KeyError("zsl.flat")
    values = metric_columns(metrics)
    row.update({name: nan if value is None else value for name, value in values.items()})
    seen_count = (metrics.get("pretraining") or {}).get("test_classes_seen")
    row["seen in pretraining"] = seen_count if isinstance(seen_count, int) else nan
    return row


def _row_of(run_dir: Path, metrics: dict) -> dict:
    """:func:`run_row`, with a missing or malformed key as one line naming the file."""
    try:
        return run_row(metrics)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise UserInputError(
            f"{run_dir / METRICS_NAME}: not a complete metrics file of 'imagenet-zsl evaluate' "
            f"({type(err).__name__}: {err}); re-run the evaluation"
        ) from err


def unique_runs(run_dirs: Sequence[str | Path]) -> list[Path]:
    """The run directories in the order given, each once (compared by resolved path); a repeat is
    reported once with a warning, so no run is listed twice in a table."""
    seen: dict[Path, Path] = {}
    for given in map(Path, run_dirs):
        key = given.resolve()
        if key in seen:
            log.warning("%s is the run %s again: reported once", given, seen[key])
            continue
        seen[key] = given
    return list(seen.values())


def aggregate_runs(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Table of every run (rows sorted by split, then model, then backbone, then features), each
    run once. Runs of different backbones share the table, each row naming its backbone; a run
    whose evaluation allowed a feature mismatch is marked (:data:`MISMATCH_MARK`)."""
    if not run_dirs:
        raise UserInputError("no run directories given")
    rows = [_row_of(path, load_metrics(path)) for path in unique_runs(run_dirs)]
    # deferred: heavy; only the cross-run table needs it (evaluate writes its report.md without)
    import pandas as pd

    table = pd.DataFrame(rows)
    id_cols = list(TEXT_COLUMNS)
    hit_cols = sorted((c for c in table.columns if c.startswith("hit@")), key=lambda c: int(c[4:]))
    rest = [c for c in table.columns if c not in id_cols and c not in hit_cols]
    table = table[id_cols + hit_cols + rest]
    return table.sort_values(["split", "model", "backbone", "features"], kind="stable").reset_index(drop=True)


def report_paths(out: str | Path) -> list[Path]:
    """The .md, .csv and .tex files ``report --out`` writes."""
    out = Path(out)
    stem = out.with_suffix("") if out.suffix in (".md", ".csv", ".tex") else out
    return [stem.with_suffix(suffix) for suffix in (".md", ".csv", ".tex")]


#: how each report file begins (``is_report_output``): the table's text column headers (not the
#: summary of ``run``, which has ``classes`` before ``label space``), or the first two of the
#: tables written before the columns were ordered as ``run``'s
_REPORT_STARTS = {
    ".md": ("| " + " | ".join(TEXT_COLUMNS) + " |", "| split | model |"),
    ".csv": (",".join(TEXT_COLUMNS) + ",", "split,model,"),
    ".tex": ("\\begin{tabular}{",),
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
    """Refuse an ``--out`` whose files would land inside an input run directory (e.g. over a run's
    own report.md), that would replace a file ``report`` did not write, or that cannot be written,
    before reading anything. An ``--out`` that is a directory or a device is refused too: the
    tables would land beside it (``/dev/full`` → ``/dev/full.md``)."""
    check_out_stem(out, report_paths(out))
    for path in report_paths(out):
        check_out_file(path, inputs=run_dirs, replaces=is_report_output, what="a report table")


def _value_columns(table: pd.DataFrame, printed: bool = True) -> list[str]:
    """The value columns; ``printed``: only those of the Markdown and LaTeX tables."""
    return [c for c in table.columns if c not in TEXT_COLUMNS and not (printed and csv_only(c))]


def _best_mask(table: pd.DataFrame) -> pd.DataFrame:
    """True where a value is the best (max) of its column within its split, for ≥ 2 runs."""
    # deferred: `evaluate` (its commands module) and `run` (its summary cells) import this module
    # without building the cross-run table
    import pandas as pd

    cols = _value_columns(table)
    best = pd.DataFrame(False, index=table.index, columns=cols)
    for _, group in table.groupby("split", sort=False):
        if len(group) < 2:
            continue
        for col in (c for c in cols if c not in COUNT_COLUMNS):
            values = group[col]
            if values.notna().any():
                best.loc[group.index, col] = values == values.max()
    return best


def to_markdown(table: pd.DataFrame) -> str:
    best = _best_mask(table)
    cols = _value_columns(table)
    text_cols = [c for c in TEXT_COLUMNS if c in table.columns]
    rows = []
    for i, row in table.iterrows():
        cells = [row[c] for c in text_cols]
        for col in cols:
            text = table_cell(col, row[col])
            cells.append(f"**{text}**" if best.loc[i, col] else text)
        rows.append(cells)
    note = (
        f"\n\nValues in %. {COLUMN_LEGEND}; seen in pretraining: number of test classes (–: "
        "unknown); label space: classes ranked against (classes with test images). Best per split "
        "in bold.\n"
    )
    if any(str(b).endswith(MISMATCH_MARK) for b in table.get("backbone", [])):
        note += (
            f"\n{MISMATCH_MARK.strip()}: the model was scored on features of another identity than "
            "it was fitted on (evaluate --allow-feature-mismatch); these numbers are not comparable.\n"
        )
    return md_table([*text_cols, *cols], rows) + note


def tex_escape(text: str) -> str:
    """``text`` with the LaTeX special characters escaped, for a tabular cell."""
    for char, repl in (
        ("\\", r"\textbackslash{}"),
        ("_", r"\_"),
        ("%", r"\%"),
        ("&", r"\&"),
        ("#", r"\#"),
        ("$", r"\$"),
        ("{", r"\{"),
        ("}", r"\}"),
    ):
        text = text.replace(char, repl)
    return text


def to_latex(table: pd.DataFrame) -> str:
    best = _best_mask(table)
    cols = _value_columns(table)
    text_cols = [c for c in TEXT_COLUMNS if c in table.columns]
    lines = [
        r"\begin{tabular}{" + "l" * len(text_cols) + "r" * len(cols) + "}",
        r"\toprule",
        " & ".join([*(tex_escape(c.capitalize()) for c in text_cols), *(tex_escape(c) for c in cols)])
        + r" \\",
        r"\midrule",
    ]
    previous = None
    for i, row in table.iterrows():
        if previous is not None and row["split"] != previous:
            lines.append(r"\midrule")
        previous = row["split"]
        cells = [tex_escape(str(row[c])) for c in text_cols]
        for col in cols:
            text = table_cell(col, row[col]).replace("–", "--")
            cells.append(rf"\textbf{{{text}}}" if best.loc[i, col] else text)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_report_tables(table: pd.DataFrame, out: str | Path) -> list[Path]:
    """Write ``out`` with .md, .csv and .tex suffixes (values in the CSV are percentages)."""
    md_path, csv_path, tex_path = report_paths(out)
    csv_table = table.copy()
    for col in _value_columns(csv_table, printed=False):
        if col not in COUNT_COLUMNS:
            csv_table[col] = (100 * csv_table[col]).round(4)
    paths = [
        atomic_write_text(md_path, to_markdown(table)),
        atomic_write_text(csv_path, csv_table.to_csv(index=False)),
        atomic_write_text(tex_path, to_latex(table)),
    ]
    return paths
