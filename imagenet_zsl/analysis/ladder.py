"""``imagenet-zsl analyze ladder``: Hascoet et al.'s correction ladder (CVPR 2019, Fig. 6) of every
cell of a finished run, recomputed from its stored top-k lists with no new search, written as
``ladder.md``, ``ladder.csv``, ``ladder.png`` and a manifest (format imagenet-zsl/ladder-v2).

The steps, their tie rules and what is exact: :mod:`imagenet_zsl.analysis.ladder_steps`; the same
ladder in the GZSL setting: :mod:`imagenet_zsl.analysis.ladder_gzsl`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.ladder_gzsl import gzsl_cell_ladder, gzsl_columns
from imagenet_zsl.analysis.ladder_steps import (
    DEFAULT_KS,
    DEFAULT_MIN_IMAGES,
    RELATIONS,
    STEPS,
    cell_ladder,
    flags_for,
    metric_columns,
    related_keys,
)
from imagenet_zsl.analysis.properties import label_properties, read_label_tables
from imagenet_zsl.analysis.runs import (
    cell_backbone,
    check_cell_features,
    features_note,
    mismatch_note,
    read_cells,
)
from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.image_filter.filtered import kept_image_ids
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.splits.build import resolve_counts

#: 2: written by manifests.write_manifest ("files" for "outputs", settings under "parameters")
LADDER_FORMAT = "imagenet-zsl/ladder-v2"
LADDER_TOOL = "imagenet-zsl analyze ladder"


def ladder_table(rows: list[dict], ks: Sequence[int] = DEFAULT_KS) -> pd.DataFrame:
    """The ladder rows as a table with a fixed column order (GZSL-only columns empty for ZSL rows)."""
    columns = ["model", "split", "backbone", "setting", "step", "correction", "classes", "images"]
    columns += metric_columns(ks) + [f"undetermined@{k}" for k in ks] + gzsl_columns(ks)
    return pd.DataFrame(rows, columns=columns)


def render_markdown(table: pd.DataFrame, ks: Sequence[int] = DEFAULT_KS) -> str:
    """Markdown tables: ZSL hit@K in percent, expected (headline) and strict, flat and per class,
    one row per (model, split, step); then, for cells evaluated with ``--gzsl``, the GZSL ladder
    (per-class unseen u, seen s and H, flat u)."""
    zsl = table[table["setting"] == "zsl"]
    head = ["model", "split", "step", "classes", "images"]
    head += [f"hit@{k} %" for k in ks] + [f"strict hit@{k} %" for k in ks]
    head += [f"per-class hit@{k} %" for k in ks] + [f"per-class strict hit@{k} %" for k in ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for values in zsl.to_dict("records"):
        cells = [str(values["model"]), str(values["split"]), str(values["step"])]
        cells += [f"{values['classes']:,}", f"{values['images']:,}"]
        cells += [_pct(values[name]) for name in metric_columns(ks) if not name.endswith("_upper")]
        lines.append("| " + " | ".join(cells) + " |")
    gzsl = table[table["setting"] == "gzsl"]
    if len(gzsl):
        lines += ["", "GZSL (test images among the test and seen classes, γ = 0; per class as GBU):", ""]
        head = ["model", "split", "step", "classes", "images"]
        head += [f"u@{k} %" for k in ks] + [f"s@{k} %" for k in ks] + [f"H@{k} %" for k in ks]
        head += [f"flat u@{k} %" for k in ks]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
        names = [f"per_class_hit@{k}" for k in ks] + [f"seen_per_class_hit@{k}" for k in ks]
        names += [f"H@{k}" for k in ks] + [f"hit@{k}" for k in ks]
        for values in gzsl.to_dict("records"):
            cells = [str(values["model"]), str(values["split"]), str(values["step"])]
            cells += [f"{values['classes']:,}", f"{values['images']:,}"]
            cells += [_pct(values[name]) for name in names]
            lines.append("| " + " | ".join(cells) + " |")
    undetermined = sum(int(table[f"undetermined@{k}"].sum()) for k in ks)
    if undetermined:
        lines.append(
            "\nSome hits could not be decided from the stored lists (`undetermined@K` in ladder.csv); "
            "they count as lower bounds (upper bounds in `hit@K_upper`)."
        )
    return "\n".join(lines) + "\n"


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.2f}"


def plot_ladder(table: pd.DataFrame, path: str | Path, ks: Sequence[int] = DEFAULT_KS) -> None:
    """Grouped bars: one panel per (setting, K), one group per step, one bar per (model, split);
    GZSL panels show the unseen accuracy u (flat, as the ZSL panels).

    Step names are the (rotated) tick labels and the layout is constrained, so neither the
    captions of neighbouring panels nor the legend overlap."""
    steps = list(dict.fromkeys(table["step"]))
    cells = list(dict.fromkeys(zip(table["model"], table["split"], strict=True)))
    panels = [(setting, k) for setting in ("zsl", "gzsl") if (table["setting"] == setting).any() for k in ks]
    fig, axes = subplots(
        1, len(panels), figsize=(4.8 * len(panels), 4.0), squeeze=False, layout="constrained"
    )
    width = 0.8 / max(len(cells), 1)
    for ax, (setting, k) in zip(axes[0], panels, strict=True):
        part_of = table[table["setting"] == setting]
        for j, (model, split) in enumerate(cells):
            part = part_of[(part_of["model"] == model) & (part_of["split"] == split)].set_index("step")
            values = [100 * part.loc[s, f"hit@{k}"] if s in part.index else np.nan for s in steps]
            ax.bar(np.arange(len(steps)) + j * width, values, width, label=f"{model} / {split}")
        ax.set_xticks(np.arange(len(steps)) + 0.4 - width / 2)
        ax.set_xticklabels(
            [f"{i + 1}. {s.replace('_', ' ')}" for i, s in enumerate(steps)],
            rotation=35,
            ha="right",
            fontsize=7,
        )
        ax.set_xlabel("cumulative correction")
        name = f"hit@{k}" if setting == "zsl" else f"unseen u@{k}"
        ax.set_ylabel(f"{name} (%)")
        ax.set_title(
            f"{'ZSL' if setting == 'zsl' else 'GZSL'}: {name} under cumulative corrections", fontsize=9
        )
    axes[0][0].legend(fontsize=6)
    save_figure(fig, path)


@dataclass
class LadderOptions:
    """``imagenet-zsl analyze ladder`` settings (see the module docstring for the steps)."""

    run_dir: Path
    out: Path | None = None
    filter_dir: Path | None = None
    labels_dir: Path | None = None
    graph: str = "wordnet"
    counts: str | None = None
    relation: str = "parent-child"
    min_images: int = DEFAULT_MIN_IMAGES
    ks: Sequence[int] = DEFAULT_KS
    allow_feature_mismatch: bool = False

    @property
    def out_dir(self) -> Path:
        """``--out``, by default ``RUN_DIR-ladder`` next to the run (the run itself stays untouched)."""
        return Path(self.out) if self.out is not None else Path(f"{Path(self.run_dir)}-ladder")


def _check_options(opts: LadderOptions) -> tuple[int, ...]:
    ks = M.hit_ks(opts.ks)
    if opts.min_images < 0:
        raise UserInputError(f"--min-images must be >= 0, got {opts.min_images}")
    if opts.relation not in RELATIONS:
        raise UserInputError(f"--relation must be one of {', '.join(RELATIONS)}, got {opts.relation!r}")
    return ks


def run_ladder(opts: LadderOptions) -> pd.DataFrame:
    """Compute the ladder of every cell of a run and write table (md, csv), plot and manifest."""
    ks = _check_options(opts)
    cells = read_cells(opts.run_dir)
    overrides = check_cell_features(cells, opts.allow_feature_mismatch)
    too_short = [c.path for c in cells if c.ids.shape[1] < ks[-1]]
    if too_short:
        raise UserInputError(f"{too_short[0]}: its top-k lists are shorter than --k {ks[-1]}")
    graph = resolve_graph(opts.graph)
    if graph is None:
        raise UserInputError("--graph: the structure step needs a graph (wordnet, imagenet or an edge file)")
    counts = resolve_counts(opts.counts)
    kept = kept_image_ids(opts.filter_dir) if opts.filter_dir is not None else None
    wnids = sorted({w for c in cells for w in c.classes})
    labels = read_label_tables(opts.labels_dir, wnids) if opts.labels_dir else label_properties(wnids)
    rows = []
    for cell in cells:
        mask = None if kept is None else np.isin(cell.image_ids(), sorted(kept))
        flags = flags_for(cell.classes, labels, counts)
        related = related_keys(graph, cell.classes, opts.relation)
        part = cell_ladder(cell, related, flags, mask, ks, opts.min_images)
        if cell.gzsl is not None:
            joint = related_keys(graph, cell.classes + cell.gzsl.seen_classes, opts.relation)
            part += gzsl_cell_ladder(cell, joint, flags, mask, ks, opts.min_images)
        rows += [{**row, "backbone": cell_backbone(cell)} for row in part]
    table = ladder_table(rows, ks)
    table.attrs["feature_mismatch"] = overrides
    table.attrs["features_note"] = features_note(cells)
    _write_ladder(opts, table, ks, [str(c.path) for c in cells])
    return table


def _write_ladder(opts: LadderOptions, table: pd.DataFrame, ks: Sequence[int], cells: list[str]) -> None:
    """``--out``: ladder.md, ladder.csv, ladder.png, then the manifest (one atomic directory)."""
    overrides = table.attrs["feature_mismatch"]
    inputs = [opts.run_dir, opts.filter_dir, opts.labels_dir]
    with atomic_directory(opts.out_dir, tool=LADDER_TOOL, inputs=inputs) as tmp:
        head = table.attrs.get("features_note", "")
        atomic_write_text(tmp / "ladder.md", head + render_markdown(table, ks) + mismatch_note(overrides))
        atomic_write_text(
            tmp / "ladder.csv", table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        )
        plot_ladder(table, tmp / "ladder.png", ks)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
        write_manifest(
            tmp,
            format=LADDER_FORMAT,
            tool=LADDER_TOOL,
            inputs={"run_dir": str(opts.run_dir), "cells": cells},
            parameters={**settings, "ks": ks, "out": str(opts.out_dir)},
            fields={
                "steps": [{"step": s, "correction": a} for s, a in STEPS],
                "tie_rule": {
                    "headline": "expected",
                    **M.TIE_RULE_TEXT,
                    "bounds": "where the stored lists cannot decide a hit, hit@K is the lower bound, "
                    "hit@K_upper the upper bound and undetermined@K counts those images",
                },
                "feature_mismatch": overrides,
            },
        )
