"""Human-readable outputs: one run's report.md, and the cross-run table of ``imagenet-zsl report``.

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

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.columns import COLUMN_LEGEND, csv_only, metric_columns
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_write_text,
    check_out_file,
    check_out_stem,
    read_manifest_verified,
)

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

METRICS_NAME = "metrics.json"
#: the manifest format of a run directory (v2: the one manifest of :func:`imagenet_zsl.io.write_manifest`)
EVALUATION_FORMAT = "imagenet-zsl/evaluation-v2"
RERUN = "re-run 'imagenet-zsl evaluate'"
#: the text columns that identify a row of the cross-run table (never scaled, never bold)
#: (the order of ``imagenet-zsl run``'s summary, :mod:`imagenet_zsl.batch.summary`, then the
#: feature directory)
TEXT_COLUMNS = ("model", "split", "backbone", "class vectors", "label space", "features")
#: appended to the backbone of a row combined under --allow-feature-mismatch
MISMATCH_MARK = " [mismatch]"
#: run files checked by size only (large, and not read by ``report``)
SIZE_ONLY_PREFIX = "topk/"
#: table columns holding counts, not fractions: printed as integers, never bold, never scaled
COUNT_COLUMNS = ("seen in pretraining",)


def _cell(table_column: str, value: float | None) -> str:
    if table_column in COUNT_COLUMNS:
        return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else str(int(value))
    return pct(value)


def pct(value: float | None, digits: int = 2) -> str:
    """A fraction as a percentage with ``digits`` decimals; '–' for a missing (None / NaN) value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{100 * value:.{digits}f}"


def _tie_rule_lines(rule: str | dict) -> list[str]:
    if isinstance(rule, str):  # runs written before both rules were reported
        return [f"- tie rule: {rule}"]
    return [f"- tie rule ({name}): {text}" for name, text in rule.items() if name != "headline"]


def _pretraining_lines(block: dict | None) -> list[str]:
    if not block:
        return []
    return [f"- seen in pretraining: {block['test_classes_seen']} test classes ({block['note']})"]


def _provenance_lines(metrics: dict) -> list[str]:
    """Backbone, class vectors and any --allow-feature-mismatch override of one run."""
    prov = metrics.get("provenance")
    if not prov:
        return []
    lines = [f"- backbone: {prov['features']['backbone']}; class vectors: {prov['class_vectors']}"]
    for record in prov.get("feature_mismatch") or []:
        sides = "; ".join(f"{k}: {v}" for k, v in record.items() if k not in ("allowed", "differ"))
        lines.append(
            f"- **feature mismatch allowed** (--allow-feature-mismatch): {sides} "
            f"(differ: {', '.join(record.get('differ', []))})"
        )
    return lines


def _label_space_lines(metrics: dict) -> list[str]:
    """The label space with both counts, and the classes that left it."""
    space = metrics.get("label_space")
    if not space:
        return []
    lines = [
        f"- label space: {space['spec']}: {space['classes_in_label_space']} classes in the label space, "
        f"{space['classes_with_test_images']} with test images ({space['split_classes']} split classes)"
    ]
    missing = space.get("without_prototype") or {}
    if missing.get("classes"):
        lines.append(
            f"- left the label space (no prototype): {missing['classes']} classes "
            f"({preview(missing['wnids'])})"
        )
    miss = metrics.get("count_as_miss") or {}
    if miss.get("classes"):
        lines.append(
            f"- counted as misses (no prototype; out of the label space, images in every denominator): "
            f"{len(miss['classes'])} classes, {miss['images']} test images ({preview(miss['classes'])})"
        )
    return lines


def _by_k(block: dict) -> list[tuple[int, dict | float]]:
    return sorted(((int(k), v) for k, v in block.items()), key=lambda kv: kv[0])


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (no trailing newline); cells are printed with ``str``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _header_lines(metrics: dict) -> list[str]:
    """Title, model, split, features, provenance, label space, tie rules and pretraining."""
    inputs, model = metrics["inputs"], metrics["model"]
    split, features = inputs["split"], inputs["features"]
    return [
        f"# Evaluation: {model['name']} on {split['name']}",
        "",
        f"- model: {model['kind']} `{model['path']}`",
        f"- split: `{split['path']}` ({split['classes']} classes, sha256 {split['sha256'][:12]})",
        f"- features: `{features['path']}` ({metrics['zsl']['images']} test images"
        f"{', simulated' if features.get('simulated') else ''})",
        *_provenance_lines(metrics),
        *_label_space_lines(metrics),
        *_tie_rule_lines(metrics["parameters"]["tie_rule"]),
        *_pretraining_lines(metrics.get("pretraining")),
        "",
    ]


def _zsl_lines(zsl: dict) -> list[str]:
    """The ZSL hit@K table (flat and per-class, strict twins when recorded) and its plot."""
    ks = [k for k, _ in _by_k(zsl["flat"])]
    modes = [("flat (per image)", "flat"), ("per-class mean", "per_class")]
    if "flat_strict" in zsl:
        modes += [("flat, strict ties", "flat_strict"), ("per-class, strict ties", "per_class_strict")]
    rows = [[name, *[pct(zsl[key][str(k)]) for k in ks]] for name, key in modes]
    table = md_table(["", *[f"hit@{k}" for k in ks]], rows)
    return ["## ZSL (test classes only)", "", table, "", "![hit@K](hit_at_k.png)", ""]


def _gzsl_lines(gzsl: dict | None) -> list[str]:
    """The GZSL table (every mode and K), the calibrated point and the SUC plot."""
    if not gzsl:
        return []
    images = gzsl["images"]
    rows = [
        [mode.replace("_", "-"), f"hit@{k}", pct(v["seen"]), pct(v["unseen"]), pct(v["H"]), pct(v["ausuc"])]
        for mode in ("per_class", "flat", "per_class_strict", "flat_strict")
        for k, v in _by_k(gzsl.get(mode, {}))
    ]
    return [
        "## Generalized ZSL (test + seen classes)",
        "",
        f"{images['unseen']} unseen-class and {images['seen']} seen-class test images; "
        "accuracies are per-class means (Xian et al.) with flat per-image values below; "
        "direct stacking is γ = 0.",
        "",
        md_table(["", "K", "seen", "unseen", "H", "AUSUC"], rows),
        *_calibration_lines(gzsl.get("calibration")),
        "",
        "![SUC](suc_curve.png)",
        "",
    ]


def _calibration_lines(cal: dict | None) -> list[str]:
    if not cal:
        return []
    averaging = cal.get("h_averaging") or "per_class"  # older runs chose γ by per-class H
    test = cal["test"][averaging if averaging in cal["test"] else "per_class"][str(cal["k"])]
    name = {"flat": "flat (per-image)", "per_class": "per-class"}.get(averaging, averaging)
    return [
        "",
        f"Calibrated stacking: γ = {cal['gamma']:.6g}, chosen on the validation "
        f"split `{cal['validation_split']}` to maximise {name} H@{cal['k']} "
        f"(validation H {pct(cal['validation_H'])}); on test: seen "
        f"{pct(test['seen'])}, unseen {pct(test['unseen'])}, "
        f"**H {pct(test['H'])}**.",
    ]


def _gzsl_hierarchy_lines(gzsl: dict | None) -> list[str]:
    """Error shares of the GZSL top-1 at γ = 0 and calibrated, unseen and seen images apart."""
    hier = (gzsl or {}).get("hierarchy")
    if not hier:
        return []
    blocks = [("direct (γ = 0)", hier["direct"]), ("calibrated", hier.get("calibrated"))]
    rows = [
        [name, part.replace("_", " "), *[pct(v, 1) for v in block[part]["error_shares"].values()]]
        for name, block in blocks
        if block is not None
        for part in ("unseen_images", "seen_images")
    ]
    header = list(hier["direct"]["all"]["error_shares"])
    return [
        "## Hierarchy-aware errors, GZSL (top-1 over test + seen classes)",
        "",
        md_table(["stacking", "images", *header], rows),
        "",
    ]


def _hierarchy_lines(hier: dict | None) -> list[str]:
    """Error shares of the ZSL top-1, the semantic accuracy bounds and the plot."""
    if not hier:
        return []
    shares = hier["error_shares"]
    return [
        "## Hierarchy-aware errors (top-1)",
        "",
        f"Graph: {hier['graph']}. Relation of the top-1 prediction to the true class "
        "(share of misclassified images).",
        "",
        md_table(list(shares), [[pct(v, 1) for v in shares.values()]]),
        "",
        f"Strict top-1 {pct(hier['strict_top1'])}%; semantically correct between "
        f"{pct(hier['semantic_lower_bound'])}% (prediction is the class or one of its "
        f"ancestors) and {pct(hier['semantic_upper_bound'])}% (also descendants).",
        "",
        "![errors](error_breakdown.png)",
        "",
    ]


def _hp_lines(hp: dict | None) -> list[str]:
    """Hierarchical precision@K (Frome et al. 2013) with its definition and correct-set sizes."""
    if not hp:
        return []
    ks = [k for k, _ in _by_k(hp["flat"])]
    rows = [["hP@K", *[pct(hp["flat"][str(k)]) for k in ks]]]
    rows.append(["mean |H_K|", *[f"{hp['mean_correct_set_size'][str(k)]:.1f}" for k in ks]])
    head = ["", *[f"K={k}" for k in ks]]
    return ["## Hierarchical precision@K", "", f"{hp['definition']}.", "", md_table(head, rows), ""]


def _property_lines(props: dict | None) -> list[str]:
    """Spearman ρ of per-class hit@1 with each class property."""
    if not props or not props.get("spearman_hit1"):
        return []
    rows = [[name, f"{v['rho']:.3f}", v["classes"]] for name, v in props["spearman_hit1"].items()]
    return [
        "## Accuracy by class property",
        "",
        "Spearman correlation of per-class ZSL hit@1 with each property "
        "(per-class values in `per_class.csv`).",
        "",
        md_table(["property", "Spearman ρ", "classes"], rows),
        "",
    ]


def render_run_report(metrics: dict) -> str:
    """report.md of one evaluation run, from its metrics.json content."""
    out = [
        *_header_lines(metrics),
        *_zsl_lines(metrics["zsl"]),
        *_gzsl_lines(metrics.get("gzsl")),
        *_gzsl_hierarchy_lines(metrics.get("gzsl")),
        *_hierarchy_lines(metrics.get("hierarchy")),
        *_hp_lines(metrics.get("hierarchical_precision")),
        *_property_lines(metrics.get("class_properties")),
    ]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- cross-run table


def verify_run_directory(run_dir: str | Path, *, hash_topk: bool = False) -> dict[str, Any]:
    """The manifest of a run directory after checking its files (:func:`read_manifest_verified`):
    every listed file must exist with its size, and its sha256 must match, except for the top-k
    lists unless ``hash_topk`` (gigabytes for ImageNet-21K; ``report`` does not read them).
    ``metrics.json`` must be listed. One line naming the file on any difference."""
    run_dir = Path(run_dir)

    def hashed(relpath: str) -> bool:
        return hash_topk or not relpath.startswith(SIZE_ONLY_PREFIX)

    manifest = read_manifest_verified(run_dir, EVALUATION_FORMAT, hash_files=hashed, rerun=RERUN)
    if METRICS_NAME not in {record["path"] for record in manifest["files"]}:
        raise UserInputError(f"{run_dir / MANIFEST_NAME}: does not list {METRICS_NAME}; {RERUN}")
    return manifest


def load_metrics(run_dir: str | Path, verify: bool = True) -> dict:
    """A run's metrics.json, after :func:`verify_run_directory` (``verify``)."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        raise UserInputError(
            f"{run_dir}: no {METRICS_NAME}; pass directories written by 'imagenet-zsl evaluate'"
        )
    if verify:
        verify_run_directory(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"{path}: not valid JSON ({err})") from err
    except RecursionError:  # json builds nested values recursively
        raise UserInputError(f"{path}: not a metrics file: its JSON is nested too deeply; {RERUN}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object")
    return data


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
    import pandas as pd  # heavy: only the cross-run table needs it (evaluate writes report.md without)

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
            text = _cell(col, row[col])
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
            text = _cell(col, row[col]).replace("–", "--")
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
