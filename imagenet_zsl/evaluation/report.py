"""Human-readable outputs: one run's report.md, and the cross-run table of ``imagenet-zsl report``.

The cross-run table mirrors the papers' tables: one row per (split, model, features), columns
ZSL hit@K (flat, the ImageNet convention), per-class top-1 (Xian et al.), and GZSL seen / unseen /
H / AUSUC with the validation-calibrated H. Best value per split in bold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.io import atomic_write_text

METRICS_NAME = "metrics.json"
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


def _by_k(block: dict) -> list[tuple[int, dict | float]]:
    return sorted(((int(k), v) for k, v in block.items()), key=lambda kv: kv[0])


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (no trailing newline); cells are printed with ``str``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_run_report(metrics: dict) -> str:
    """report.md of one evaluation run, from its metrics.json content."""
    inputs = metrics["inputs"]
    model = metrics["model"]
    zsl = metrics["zsl"]
    out = [
        f"# Evaluation: {model['name']} on {inputs['split']['name']}",
        "",
        f"- model: {model['kind']} `{model['path']}`",
        f"- split: `{inputs['split']['path']}` ({inputs['split']['classes']} classes, "
        f"sha256 {inputs['split']['sha256'][:12]})",
        f"- features: `{inputs['features']['path']}` ({zsl['images']} test images"
        f"{', simulated' if inputs['features'].get('simulated') else ''})",
        *_tie_rule_lines(metrics["parameters"]["tie_rule"]),
        *_pretraining_lines(metrics.get("pretraining")),
        "",
        "## ZSL (test classes only)",
        "",
    ]
    ks = [k for k, _ in _by_k(zsl["flat"])]
    out.append(
        md_table(
            ["", *[f"hit@{k}" for k in ks]],
            [
                ["flat (per image)", *[pct(zsl["flat"][str(k)]) for k in ks]],
                ["per-class mean", *[pct(zsl["per_class"][str(k)]) for k in ks]],
                *(
                    [
                        ["flat, strict ties", *[pct(zsl["flat_strict"][str(k)]) for k in ks]],
                        ["per-class, strict ties", *[pct(zsl["per_class_strict"][str(k)]) for k in ks]],
                    ]
                    if "flat_strict" in zsl
                    else []
                ),
            ],
        )
    )
    out += ["", "![hit@K](hit_at_k.png)", ""]
    gzsl = metrics.get("gzsl")
    if gzsl:
        images = gzsl["images"]
        out += [
            "## Generalized ZSL (test + seen classes)",
            "",
            f"{images['unseen']} unseen-class and {images['seen']} seen-class test images; "
            "accuracies are per-class means (Xian et al.) with flat per-image values below; "
            "direct stacking is γ = 0.",
            "",
        ]
        rows = []
        for mode in ("per_class", "flat", "per_class_strict", "flat_strict"):
            for k, v in _by_k(gzsl.get(mode, {})):
                rows.append(
                    [
                        mode.replace("_", "-"),
                        f"hit@{k}",
                        pct(v["seen"]),
                        pct(v["unseen"]),
                        pct(v["H"]),
                        pct(v["ausuc"]),
                    ]
                )
        out.append(md_table(["", "K", "seen", "unseen", "H", "AUSUC"], rows))
        cal = gzsl.get("calibration")
        if cal:
            test = cal["test"]["per_class"][str(cal["k"])]
            out += [
                "",
                f"Calibrated stacking: γ = {cal['gamma']:.6g}, chosen on the validation "
                f"split `{cal['validation_split']}` to maximise per-class H@{cal['k']} "
                f"(validation H {pct(cal['validation_H'])}); on test: seen "
                f"{pct(test['seen'])}, unseen {pct(test['unseen'])}, "
                f"**H {pct(test['H'])}**.",
            ]
        out += ["", "![SUC](suc_curve.png)", ""]
    gzsl_hier = (gzsl or {}).get("hierarchy")
    if gzsl_hier:
        out += ["## Hierarchy-aware errors, GZSL (top-1 over test + seen classes)", ""]
        rows = []
        for name, block in (
            ("direct (γ = 0)", gzsl_hier["direct"]),
            ("calibrated", gzsl_hier.get("calibrated")),
        ):
            if block is None:
                continue
            for part in ("unseen_images", "seen_images"):
                shares = block[part]["error_shares"]
                rows.append([name, part.replace("_", " "), *[pct(v, 1) for v in shares.values()]])
        header = list(gzsl_hier["direct"]["all"]["error_shares"])
        out += [md_table(["stacking", "images", *header], rows), ""]
    hier = metrics.get("hierarchy")
    if hier:
        out += [
            "## Hierarchy-aware errors (top-1)",
            "",
            f"Graph: {hier['graph']}. Relation of the top-1 prediction to the true class "
            "(share of misclassified images).",
            "",
        ]
        shares = hier["error_shares"]
        out.append(md_table(list(shares), [[pct(v, 1) for v in shares.values()]]))
        out += [
            "",
            f"Strict top-1 {pct(hier['strict_top1'])}%; semantically correct between "
            f"{pct(hier['semantic_lower_bound'])}% (prediction is the class or one of its "
            f"ancestors) and {pct(hier['semantic_upper_bound'])}% (also descendants).",
            "",
            "![errors](error_breakdown.png)",
            "",
        ]
    props = metrics.get("class_properties")
    if props and props.get("spearman_hit1"):
        out += [
            "## Accuracy by class property",
            "",
            "Spearman correlation of per-class ZSL hit@1 with each property "
            "(per-class values in `per_class.csv`).",
            "",
        ]
        out.append(
            md_table(
                ["property", "Spearman ρ", "classes"],
                [[name, f"{v['rho']:.3f}", v["classes"]] for name, v in props["spearman_hit1"].items()],
            )
        )
        out.append("")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- cross-run table


def load_metrics(run_dir: str | Path) -> dict:
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        raise UserInputError(
            f"{run_dir}: no {METRICS_NAME}; pass directories written by 'imagenet-zsl evaluate'"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}: not valid JSON ({err})") from err


def run_row(metrics: dict) -> dict:
    """One table row (values are fractions; NaN where a run lacks a figure)."""
    nan = float("nan")
    row: dict = {
        "split": metrics["inputs"]["split"]["name"],
        "model": metrics["model"]["name"],
        "features": Path(metrics["inputs"]["features"]["path"]).name,
    }
    zsl = metrics["zsl"]
    for k, v in _by_k(zsl["flat"]):
        row[f"hit@{k}"] = v
    row["per-class top-1"] = zsl["per_class"].get("1", nan)
    row["strict hit@1"] = zsl.get("flat_strict", {}).get("1", nan)
    seen_count = (metrics.get("pretraining") or {}).get("test_classes_seen")
    row["seen in pretraining"] = seen_count if isinstance(seen_count, int) else nan
    gzsl = metrics.get("gzsl") or {}
    direct = gzsl.get("per_class", {}).get("1", {})
    row["GZSL S"] = direct.get("seen", nan)
    row["GZSL U"] = direct.get("unseen", nan)
    row["GZSL H"] = direct.get("H", nan)
    row["AUSUC"] = direct.get("ausuc", nan)
    cal = gzsl.get("calibration")
    row["calibrated H"] = cal["test"]["per_class"][str(cal["k"])]["H"] if cal else nan
    return row


def aggregate_runs(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Table of every run (rows sorted by split, then model, then features)."""
    if not run_dirs:
        raise UserInputError("no run directories given")
    rows = [run_row(load_metrics(d)) for d in run_dirs]
    table = pd.DataFrame(rows)
    id_cols = ["split", "model", "features"]
    hit_cols = sorted((c for c in table.columns if c.startswith("hit@")), key=lambda c: int(c[4:]))
    rest = [c for c in table.columns if c not in id_cols and c not in hit_cols]
    table = table[id_cols + hit_cols + rest]
    return table.sort_values(id_cols, kind="stable").reset_index(drop=True)


def _value_columns(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c not in ("split", "model", "features")]


def _best_mask(table: pd.DataFrame) -> pd.DataFrame:
    """True where a value is the best (max) of its column within its split, for ≥ 2 runs."""
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
    rows = []
    for i, row in table.iterrows():
        cells = [row["split"], row["model"], row["features"]]
        for col in cols:
            text = _cell(col, row[col])
            cells.append(f"**{text}**" if best.loc[i, col] else text)
        rows.append(cells)
    note = (
        "\n\nValues in %. hit@K: flat ZSL hit@K over test classes (expected value under random "
        "tie-breaking); strict hit@1: ties count against the model; per-class top-1: Xian et "
        "al.; GZSL S/U/H: per-class hit@1 under direct stacking; calibrated H: γ chosen on "
        "validation; seen in pretraining: number of test classes (blank: unknown). Best per "
        "split in bold.\n"
    )
    return md_table(["split", "model", "features", *cols], rows) + note


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
    lines = [
        r"\begin{tabular}{lll" + "r" * len(cols) + "}",
        r"\toprule",
        " & ".join(["Split", "Model", "Features", *(tex_escape(c) for c in cols)]) + r" \\",
        r"\midrule",
    ]
    previous = None
    for i, row in table.iterrows():
        if previous is not None and row["split"] != previous:
            lines.append(r"\midrule")
        previous = row["split"]
        cells = [tex_escape(str(row[c])) for c in ("split", "model", "features")]
        for col in cols:
            text = _cell(col, row[col]).replace("–", "--")
            cells.append(rf"\textbf{{{text}}}" if best.loc[i, col] else text)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_report_tables(table: pd.DataFrame, out: str | Path) -> list[Path]:
    """Write ``out`` with .md, .csv and .tex suffixes (values in the CSV are percentages)."""
    out = Path(out)
    stem = out.with_suffix("") if out.suffix in (".md", ".csv", ".tex") else out
    csv_table = table.copy()
    for col in _value_columns(csv_table):
        if col not in COUNT_COLUMNS:
            csv_table[col] = (100 * csv_table[col]).round(4)
    paths = [
        atomic_write_text(stem.with_suffix(".md"), to_markdown(table)),
        atomic_write_text(stem.with_suffix(".csv"), csv_table.to_csv(index=False)),
        atomic_write_text(stem.with_suffix(".tex"), to_latex(table)),
    ]
    return paths
