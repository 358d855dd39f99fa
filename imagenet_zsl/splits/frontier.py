"""The price of diversity: optimal R as the largest allowed share of one WordNet branch shrinks.

``imagenet-zsl splits frontier CONFIG --out DIR`` takes one benchmark split of a recipe and solves
it exactly for each ``max_branch_share`` in a sweep (default 1.0, 0.9, ..., 0.1). Per value it
writes the optimal set (``share-0.30.txt``), and one table row: R, proven bound, gap, whether R is
proven optimal, the largest branch share actually reached, the branch entropy (nats) and the
composition. ``frontier.png`` plots R against both diversity measures.

A point is *proven* only when the solver certified it (status ``optimal``, gap 0). A point that
the time limit cut short (gap > 0) is marked ``proven: no`` in the table and CSV and drawn as a
hollow marker ("not proven optimal") in the plot: its R is a lower bound of that share's optimum.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.data import fall11_counts
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.splits.build import (
    benchmark_pool,
    config_graph,
    input_files,
    resolve_counts,
    resolve_train,
    select_for,
)
from imagenet_zsl.splits.config import BenchmarkSplit, load_splits_config
from imagenet_zsl.splits.io import write_wnid_list
from imagenet_zsl.splits.pool import PoolContext
from imagenet_zsl.splits.problem import PROVEN_GAP, BenchmarkSolution

DEFAULT_SHARES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
TOOL = "imagenet-zsl splits frontier"
#: manifest format of a frontier directory (v2: one manifest writer, every file hashed)
FRONTIER_FORMAT = "imagenet-zsl/frontier-v2"
log = logging.getLogger(__name__)


def branch_entropy(counts: dict[str, int]) -> float:
    """Shannon entropy (nats) of the branch composition."""
    total = sum(counts.values())
    return -sum(n / total * math.log(n / total) for n in counts.values() if n)


def pick_benchmark(config_path: str | Path, split: str | None) -> BenchmarkSplit:
    """The named benchmark split of a recipe (or its first one)."""
    config = load_splits_config(config_path)
    benches = [s for s in config.splits if isinstance(s, BenchmarkSplit)]
    if split is not None:
        benches = [s for s in benches if s.name == split]
    if not benches:
        what = f"no benchmark split named {split!r}" if split else "no benchmark split"
        raise UserInputError(f"{what} ({config_path}): use --split NAME of a 'kind: benchmark' entry")
    return benches[0]


def frontier(
    config_path: str | Path,
    out_dir: str | Path,
    split: str | None = None,
    shares: Sequence[float] = DEFAULT_SHARES,
) -> list[dict[str, Any]]:
    """Solve the split for every share; write sets, frontier.csv/.md, frontier.png, manifest.json."""
    config_path = Path(config_path)
    for share in shares:
        if not 0 < share <= 1:
            raise UserInputError(f"--shares: each share must be in (0, 1], got {share}")
    config = load_splits_config(config_path)
    spec = pick_benchmark(config_path, split)
    train = resolve_train(config.train, str(config_path))
    graph = config_graph(config)
    candidates = sorted(w for w in fall11_counts() if w not in set(train))
    ctx = PoolContext(graph, train, resolve_counts(config.counts))
    pool, steps = benchmark_pool(spec, ctx, candidates, f"{config_path}: {spec.name}")
    rows: list[dict[str, Any]] = []
    sets: dict[str, list[str]] = {}
    for share in shares:
        sel = select_for(spec, graph, train, pool, max_branch_share=float(share), optimizer="exact")
        log.info(
            "frontier: share %.2f: R %.4f, bound %s, %.1f s", share, sel.ratio, sel.upper_bound, sel.seconds
        )
        row = frontier_row(share, sel)
        sets[row["file"]] = sel.wnids
        rows.append(row)
    inputs = [config_path] + [Path(p) for p in input_files(config)]
    with atomic_directory(out_dir, tool=TOOL, inputs=inputs) as tmp:
        for name, wnids in sets.items():
            write_wnid_list(tmp / name, wnids)
        atomic_write_text(tmp / "frontier.csv", _csv(rows))
        atomic_write_text(tmp / "frontier.md", frontier_table(rows) + "\n")
        _plot(rows, tmp / "frontier.png", spec.name)
        write_manifest(
            tmp,
            format=FRONTIER_FORMAT,
            tool=TOOL,
            inputs={
                "config": {**file_record(config_path), "path": config_path.name},
                "recipe_files": [file_record(p) for p in input_files(config)],
            },
            parameters={"split": spec.name, "shares": [float(x) for x in shares]},
            fields={
                "split": spec.name,
                "size": spec.size,
                "pool": [{"filter": s.filter, "parameters": s.params, "after": s.after} for s in steps],
                "rows": rows,
            },
        )
    return rows


def frontier_row(share: float, sel: BenchmarkSolution) -> dict[str, Any]:
    """One point of the sweep: R, bound, gap, proven, the diversity reached and the set's file."""
    return {
        "max_branch_share": share,
        "ratio": round(sel.ratio, 6),
        "upper_bound": None if sel.upper_bound is None else round(sel.upper_bound, 6),
        "gap": None if sel.gap is None else round(sel.gap, 6),
        "status": sel.status,
        "proven": is_proven(sel.status, sel.gap),
        "tie_break": sel.tie_break,
        "largest_share": round(max(sel.branch_counts.values()) / len(sel.wnids), 6),
        "entropy": round(branch_entropy(sel.branch_counts), 6),
        "file": f"share-{share:.2f}.txt",
        "branches": sel.branch_counts,
    }


def is_proven(status: str, gap: float | None) -> bool:
    """True when R is certified optimal: the solver said so and R meets the proven bound."""
    return status == "optimal" and gap is not None and gap <= PROVEN_GAP


def frontier_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the sweep (printed by the CLI too); ``proven`` is yes only for gap 0."""
    lines = [
        "| max share | R | bound | gap | proven | largest share | entropy | top branches |",
        "|---:|---:|---:|---:|:---:|---:|---:|---|",
    ]
    for r in rows:
        top = sorted(r["branches"].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        gap = "-" if r["gap"] is None else f"{r['gap']:.3g}"
        bound = "-" if r["upper_bound"] is None else f"{r['upper_bound']:.3f}"
        proven = "yes" if r["proven"] else "no"
        lines.append(
            f"| {r['max_branch_share']:.2f} | {r['ratio']:.3f} | {bound} | {gap} | {proven} | "
            f"{r['largest_share']:.2f} | {r['entropy']:.2f} | " + ", ".join(f"{b} {n}" for b, n in top) + " |"
        )
    return "\n".join(lines)


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    keys = ["max_branch_share", "ratio", "upper_bound", "gap", "proven", "largest_share", "entropy", "file"]
    writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _plot(rows: list[dict[str, Any]], path: Path, name: str) -> None:
    """R against both diversity measures: filled markers for proven optima, hollow for the rest."""
    fig, axes = subplots(1, 2, figsize=(9, 3.6))
    ratios = [r["ratio"] for r in rows]
    proven = [bool(r["proven"]) for r in rows]
    color = "#4c72b0"
    for ax, key, label in (
        (axes[0], "largest_share", "largest branch share"),
        (axes[1], "entropy", "branch entropy (nats)"),
    ):
        xs = [r[key] for r in rows]
        ax.plot(xs, ratios, color=color)
        for flag, face, legend in ((True, color, "proven optimal"), (False, "none", "not proven optimal")):
            pick = [i for i, p in enumerate(proven) if p is flag]
            if pick:
                ax.plot(
                    [xs[i] for i in pick],
                    [ratios[i] for i in pick],
                    linestyle="none",
                    marker="o",
                    markerfacecolor=face,
                    markeredgecolor=color,
                    label=legend,
                )
        ax.set_xlabel(label)
        ax.set_ylabel("structural ratio R")
    if not all(proven):
        axes[0].legend(loc="best", fontsize="small")
    axes[0].set_title(f"{name}: the price of diversity")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
