"""report.md and the structural-ratio bar plot of a split build."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.plotting import save_figure, subplots

if TYPE_CHECKING:
    from imagenet_zsl.splits.built import BuiltSplit

PLOT_NAME = "structural_ratios.png"


def _fmt(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def split_table(splits: list[BuiltSplit]) -> str:
    """Markdown table: one row per split (printed by the CLI too)."""
    rows = [
        "| split | kind | classes | images (fall11) | R | bound | gap | flaws within "
        "| flaws with train | consistent |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for s in splits:
        lit = s.details.get("literature_name")
        kind = f'{s.kind} (lit. "{lit}")' if lit else s.kind
        bound, gap = s.details.get("upper_bound"), s.details.get("gap")
        bound_cell = "-" if bound is None else f"{bound:.3f}"
        gap_cell = "-" if gap is None else f"{gap:.3g}"
        rows.append(
            f"| {s.name} | {kind} | {len(s.wnids):,} | {s.n_images:,} | {_fmt(s.ratio)} | "
            f"{bound_cell} | {gap_cell} | "
            f"{s.pairs_within:,} | {s.pairs_with_train:,} | {'yes' if s.consistent else 'no'} |"
        )
    return "\n".join(rows)


def store_table(splits: list[BuiltSplit]) -> str:
    """Markdown table of splits built on a store: each replacement beside its original (the same
    rule on every fall11 candidate). Empty when the splits were not built on a store."""
    rows = [
        "| split | classes (all → store) | original classes held | R (all → store) "
        "| images on store | dropped | added |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in splits:
        original, on_store = s.details.get("original"), s.details.get("on_store")
        if original is None or on_store is None:
            continue
        rows.append(
            f"| {s.name} | {original['n_classes']:,} → {len(s.wnids):,} | "
            f"{original['held']:,} of {original['n_classes']:,} | "
            f"{_fmt(original['structural_ratio'])} → {_fmt(s.ratio)} | {on_store['images']:,} | "
            f"{on_store['dropped']:,} | {on_store['added']:,} |"
        )
    return "\n".join(rows) if len(rows) > 2 else ""


def _store_lines(splits: list[BuiltSplit], manifest: dict[str, Any]) -> list[str]:
    """The report's section on the store the splits were built on (none without a store)."""
    store = manifest.get("store")
    table = store_table(splits)
    if store is None or not table:
        return []
    return [
        "",
        "## On your image store",
        "",
        f"Every split above is built on the classes the store holds with at least "
        f"{store['min_images']} image(s) (`{store['counts']}`: {store['candidates_held']:,} of the "
        f"{manifest['n_candidates']:,} candidates): the same rule restricted to those classes, the "
        "structurally closest split complete on the store. Beside it, the split the same rule "
        "gives on every fall11 candidate (the original; a published list's numbers are on it).",
        "",
        table,
    ]


def plot_ratios(splits: list[BuiltSplit], path: Path) -> None:
    names = [s.name for s in splits]
    values = [0.0 if math.isnan(s.ratio) else s.ratio for s in splits]
    fig, ax = subplots(figsize=(max(6, 0.7 * len(names)), 3.6))
    colours = ["#c44e52" if s.kind == "benchmark" else "#4c72b0" for s in splits]
    ax.bar(names, values, color=colours)
    for x, v in enumerate(values):
        ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("structural ratio R")
    ax.set_title("Structural ratio R = mean d(c, train) / d(c, other test)")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def write_report(out_dir: Path, splits: list[BuiltSplit], manifest: dict[str, Any]) -> None:
    plot_ratios(splits, out_dir / PLOT_NAME)
    graph = manifest["graph"]
    lines = [
        "# ImageNet-21K zero-shot splits",
        "",
        f"Graph: {graph['source']} ({graph['nodes']:,} nodes, {graph['edges']:,} is-a edges, "
        f"WordNet {graph['wordnet_version']}); training classes: {manifest['training']['n_classes']:,}; "
        f"candidates: {manifest['n_candidates']:,}. Config `{manifest['inputs']['config']['path']}`.",
        "",
        split_table(splits),
        "",
        "R is Hascoet et al.'s structural ratio: the mean over test classes of (distance to the "
        "nearest training class) / (distance to the nearest other test class), in undirected is-a "
        "edges. Flaws are ancestor/descendant pairs inside the split and with the training set. "
        "`hopK` holds classes at distance <= K from the training set; the literature names these "
        'one hop higher ("2-hops" = hop1, "3-hops" = hop2).',
        "",
        f"![structural ratios]({PLOT_NAME})",
    ]
    lines += _store_lines(splits, manifest)
    for s in splits:
        if s.kind != "benchmark":
            continue
        d = s.details
        lines += [
            "",
            f"## Benchmark split `{s.name}`",
            "",
            "Candidate pool, filter by filter:",
            "",
            "| filter | parameters | before | after | removed |",
            "|---|---|---:|---:|---:|",
        ]
        for step in s.pool_steps:
            params = ", ".join(f"{k}={v}" for k, v in step.params.items()) or "-"
            lines.append(
                f"| {step.filter} | {params} | {step.before:,} | {step.after:,} | {step.removed:,} |"
            )
        dist = manifest["splits"][s.name]["ratio_distribution"]
        lines += ["", _optimiser_line(s, d)]
        lines += [
            "",
            "Per-class ratio r(c): " + ", ".join(f"{k} {v:.2f}" for k, v in dist.items()),
            "",
            "Composition by WordNet branch (lexicographer file):",
            "",
            "| branch | classes |",
            "|---|---:|",
        ]
        for branch, n in sorted(d["branches"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"| {branch} | {n} |")
    lines += _leakage_lines(splits, manifest)
    atomic_write_text(out_dir / "report.md", "\n".join(lines) + "\n")


def _optimiser_line(s: BuiltSplit, d: dict[str, Any]) -> str:
    pool = (
        f"pool {d['pool_size']:,} classes, {d['dropped_related_to_train']:,} dropped as "
        "ancestors/descendants of training classes"
    )
    if d.get("optimizer") == "exact":
        certified = (
            "certified optimal"
            if d["gap"] is not None and d["gap"] <= 1e-6
            else f"not certified ({d['status']})"
        )
        return (
            f"Optimiser: exact (MILP, HiGHS); {pool}. R {s.ratio:.6f}, proven upper bound "
            f"{d['upper_bound']:.6f}, gap {d['gap']:.3g}: {certified} over the whole pool "
            f"(shortlist {d['shortlist']:,} classes, {d['rounds']} solve(s){_refined(d)})."
        )
    return (
        f"Optimiser: local search; {pool}; greedy R {d['greedy_ratio']:.3f} → "
        f"{s.ratio:.3f} after {d['swaps']} improving moves in {d['passes']} passes (shortlist of "
        f"{d['shortlist']:,} classes farthest from training); no upper bound."
    )


def _refined(d: dict[str, Any]) -> str:
    """ ", N classes with more distance levels" when the certificate needed them (see splits.milp)."""
    n = d.get("refined_levels", 0)
    return f", {n:,} {'class' if n == 1 else 'classes'} with more distance levels" if n else ""


def _leakage_lines(splits: list[BuiltSplit], manifest: dict[str, Any]) -> list[str]:
    records = manifest["splits"]
    if not splits or "leakage" not in records[splits[0].name]:
        return []
    names = list(records[splits[0].name]["leakage"])
    lines = [
        "",
        "## Pretraining leakage",
        "",
        "Share of test classes (and of their fall11 images) that are labels of a pretraining set "
        "(timm's synset lists): a backbone pretrained on that set has seen these classes.",
        "",
        "| split | " + " | ".join(f"{n} classes | {n} images" for n in names) + " |",
        "|---|" + "---:|---:|" * len(names),
    ]
    for s in splits:
        cells = []
        for n in names:
            leak = records[s.name]["leakage"][n]
            cells.append(f"{leak['seen_classes']:,} ({100 * leak['class_share']:.1f}%)")
            cells.append(f"{100 * leak['image_share']:.1f}%")
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Classes outside MIIL's ImageNet-21K-P list (`in21k-p-w21`)",
        "",
        "The list is timm's `imagenet21k_miil_w21_synsets.txt`: MIIL's *processed* ImageNet-21K-P "
        "subset (10,450 classes, each with at least 501 fall11 images), label set `in21k-p-w21`. "
        "It is not the winter21 release's class list but a subset of it: a class outside this list "
        "may still be in winter21. It tells which test "
        "classes a backbone pretrained on ImageNet-21K-P (winter21 version) never saw as a label.",
        "",
        "| split | outside in21k-p-w21 | classes (benchmark splits) |",
        "|---|---:|---|",
    ]
    for s in splits:
        absent = records[s.name]["absent_from_in21k_p_winter21"]
        shown = ", ".join(absent) if s.kind == "benchmark" and absent else "-"
        lines.append(f"| {s.name} | {len(absent):,} | {shown} |")
    return lines
