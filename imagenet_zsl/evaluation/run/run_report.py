"""One run's ``report.md``: the metrics of ``metrics.json`` as Markdown, with their legend.

Written by :mod:`.writer` into each run directory; the cross-run table of ``imagenet-zsl report``
is :mod:`imagenet_zsl.evaluation.report`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from imagenet_zsl.errors import preview
from imagenet_zsl.scoring.ranks import ks_of

#: table columns holding counts, not fractions: printed as integers, never bold, never scaled
COUNT_COLUMNS = ("seen in pretraining",)


def table_cell(table_column: str, value: float | None) -> str:
    """One table cell: a count as an integer, a fraction as a percentage; '–' when missing."""
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
        kept = missing.get("kept_never_predicted")
        what = "stayed in the label space, never predicted" if kept else "left the label space"
        lines.append(f"- {what} (no prototype): {missing['classes']} classes ({preview(missing['wnids'])})")
    miss = metrics.get("count_as_miss") or {}
    if miss.get("classes"):
        lines.append(
            f"- counted as misses (no prototype; out of the label space, images in every denominator): "
            f"{len(miss['classes'])} classes, {miss['images']} test images ({preview(miss['classes'])})"
        )
    return lines


def _by_k(block: dict) -> list[tuple[int, dict | float]]:
    return [(k, block[str(k)]) for k in ks_of(block)]


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
    ks = ks_of(zsl["flat"])
    modes = [("flat (per image)", "flat"), ("per-class mean", "per_class")]
    if "flat_strict" in zsl:
        modes += [("flat, strict ties", "flat_strict"), ("per-class, strict ties", "per_class_strict")]
    rows = [[name, *[pct(zsl[key][str(k)]) for k in ks]] for name, key in modes]
    table = md_table(["", *[f"hit@{k}" for k in ks]], rows)
    return ["## ZSL (test classes only)", "", table, "", "![hit@K](hit_at_k.svg)", ""]


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
        "![SUC](suc_curve.svg)",
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
        "![errors](error_breakdown.svg)",
        "",
    ]


def _hp_lines(hp: dict | None) -> list[str]:
    """Hierarchical precision@K (Frome et al. 2013) with its definition and correct-set sizes."""
    if not hp:
        return []
    ks = ks_of(hp["flat"])
    rows = [["hP@K", *[pct(hp["flat"][str(k)]) for k in ks]]]
    sizes = hp["mean_correct_set_size"]  # None (JSON null) when no test class is in the graph
    rows.append(["mean |H_K|", *["–" if sizes[str(k)] is None else f"{sizes[str(k)]:.1f}" for k in ks]])
    head = ["", *[f"K={k}" for k in ks]]
    left = hp.get("not_in_graph")
    note = (
        [
            f"{left['classes']} test classes ({left['images']} images) are not nodes of the graph and "
            f"are left out of hP@K: {preview(left['wnids'])}.",
            "",
        ]
        if left
        else []
    )
    return ["## Hierarchical precision@K", "", f"{hp['definition']}.", "", md_table(head, rows), "", *note]


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
