"""report.md and the structural-ratio bar plot of a split build."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.io import atomic_write_text
from imagenet_zsl.plotting import save_figure, subplots

if TYPE_CHECKING:
    from imagenet_zsl.splits.build import BuiltSplit

PLOT_NAME = "structural_ratios.png"


def _fmt(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def split_table(splits: list[BuiltSplit]) -> str:
    """Markdown table: one row per split (printed by the CLI too)."""
    rows = [
        "| split | kind | classes | images (fall11) | R | flaws within | flaws with train | consistent |",
        "|---|---|---:|---:|---:|---:|---:|:---:|",
    ]
    for s in splits:
        lit = s.details.get("literature_name")
        kind = f'{s.kind} (lit. "{lit}")' if lit else s.kind
        rows.append(
            f"| {s.name} | {kind} | {len(s.wnids):,} | {s.n_images:,} | {_fmt(s.ratio)} | "
            f"{s.pairs_within:,} | {s.pairs_with_train:,} | {'yes' if s.consistent else 'no'} |"
        )
    return "\n".join(rows)


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
        f"candidates: {manifest['n_candidates']:,}. Config `{manifest['config']['name']}`.",
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
        lines += [
            "",
            f"Optimiser: pool {d['pool_size']:,} classes, {d['dropped_related_to_train']:,} dropped as "
            f"ancestors/descendants of training classes; greedy R {d['greedy_ratio']:.3f} → "
            f"{s.ratio:.3f} after {d['swaps']} improving moves (single swaps and pair moves) in "
            f"{d['passes']} passes (shortlist of "
            f"{d['shortlist']:,} classes farthest from training).",
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
    atomic_write_text(out_dir / "report.md", "\n".join(lines) + "\n")
