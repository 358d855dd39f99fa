"""Hascoet et al.'s correction ladder (CVPR 2019, Fig. 6), recomputed from a run's stored top-k lists.

hit@K of a finished run under cumulative corrections, with no new search:

1. ``evaluated``  — as evaluated (ties count against the model, as ``evaluate`` does);
2. ``structure``  — a prediction of a class related to the true class (its parent or child by
   default; any ancestor or descendant with ``relation="ancestor-descendant"``) also counts as
   correct: the structural flaws of the split no longer cost the model;
3. ``rare_labels`` — test classes whose label is rare are dropped;
4. ``secondary_meaning`` — classes whose label is used in a secondary meaning are dropped;
5. ``few_images`` — classes with fewer than ``min_images`` images (fall11 counts) are dropped;
6. ``ambiguous_images`` — only test images the ambiguous-image filter kept remain (when given).

A dropped class leaves the test set *and* the label space: it is removed from every image's
top-m list and the true class's rank is recounted among the remaining classes. The stored list is
the top ``m = max(K) + 1`` of the full label space, so a listed true class keeps an exact rank;
a true class that is not listed ranks below every remaining listed class. When fewer than K
listed classes remain (possible only after many drops) the hit cannot be decided without a new
search: it counts as a miss and the image is reported in ``undetermined@K``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.properties import label_properties, read_label_tables
from imagenet_zsl.analysis.runs import RunCell, read_cells
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.image_filter.outputs import kept_image_ids
from imagenet_zsl.io import atomic_directory, atomic_write_json, atomic_write_text, command_line, file_record
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.splits.build import resolve_counts

#: (step name, what it corrects), in ladder order
STEPS = (
    ("evaluated", "as evaluated"),
    ("structure", "related prediction counts as correct"),
    ("rare_labels", "drop classes with rare labels"),
    ("secondary_meaning", "drop classes named by a secondary meaning"),
    ("few_images", "drop classes with few images"),
    ("ambiguous_images", "keep only images the filter kept"),
)
RELATIONS = ("parent-child", "ancestor-descendant")
DEFAULT_KS = (1, 5)
DEFAULT_MIN_IMAGES = 301


@dataclass
class ClassFlags:
    """Per test class (aligned with the cell's class list): rare label, secondary meaning, images."""

    rare: np.ndarray
    secondary: np.ndarray
    images: np.ndarray


def related_keys(graph: ClassGraph, classes: Sequence[str], relation: str = "parent-child") -> np.ndarray:
    """Sorted int64 keys ``a * C + b`` of ordered pairs (a, b) of split classes where b is a or b is
    related to a (``RELATIONS``); classes absent from the graph relate only to themselves."""
    if relation not in RELATIONS:
        raise UserInputError(f"--relation must be one of {', '.join(RELATIONS)}, got {relation!r}")
    n = len(classes)
    position = {w: i for i, w in enumerate(classes)}
    keys = [i * n + i for i in range(n)]
    for i, wnid in enumerate(classes):
        if wnid not in graph:
            continue
        if relation == "parent-child":
            near = set(graph.parents(wnid)) | set(graph.children(wnid))
        else:
            near = graph.ancestors(wnid) | graph.descendants(wnid)
        keys.extend(i * n + position[w] for w in near if w in position)
    return np.unique(np.asarray(keys, dtype=np.int64))


def corrected_ranks(
    cell: RunCell, active: np.ndarray, related: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank of the first correct class among the active classes, from the stored lists.

    ``active`` (C,) bool: classes still in the label space. ``related``: keys of
    :func:`related_keys` (None: only the true class is correct). Returns ranks (n,) int64 (ties
    against the model), ``listed`` (n,) the number of active classes in each list, and ``found``
    (n,) whether a correct class is listed.
    """
    ids, scores, labels = cell.ids, cell.scores, cell.labels
    valid = ids >= 0
    safe = np.where(valid, ids, 0)
    listed = valid & active[safe]
    if related is None:
        correct = listed & (ids == labels[:, None])
    else:
        correct = listed & np.isin(labels[:, None] * len(cell.classes) + safe, related)
    best = np.where(correct, scores, -np.inf).max(axis=1, initial=-np.inf)
    found = correct.any(axis=1)
    ranks = (listed & ~correct & (scores >= best[:, None])).sum(axis=1).astype(np.int64)
    n_listed = listed.sum(axis=1).astype(np.int64)
    ranks[~found] = n_listed[~found]
    return ranks, n_listed, found


def _hits(
    cell: RunCell, keep: np.ndarray, ranks: np.ndarray, undecided: np.ndarray, ks: Sequence[int]
) -> dict:
    labels = cell.labels[keep]
    ranks = np.where(undecided[keep], np.iinfo(np.int64).max, ranks[keep])
    row: dict = {"classes": int(len(np.unique(labels))), "images": int(keep.sum())}
    if not keep.any():
        row.update({f"hit@{k}": float("nan") for k in ks})
        row.update({f"per_class_hit@{k}": float("nan") for k in ks})
        return row
    flat = M.hit_at_k(ranks, labels, ks)
    per_class = M.hit_at_k(ranks, labels, ks, num_classes=len(cell.classes), per_class=True)
    row.update({f"hit@{k}": float(flat[k]) for k in ks})
    row.update({f"per_class_hit@{k}": float(per_class[k]) for k in ks})
    return row


def cell_ladder(
    cell: RunCell,
    related: np.ndarray,
    flags: ClassFlags,
    kept_images: np.ndarray | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    min_images: int = DEFAULT_MIN_IMAGES,
) -> list[dict]:
    """One row per ladder step (``STEPS``; the last only with ``kept_images``, (n,) bool)."""
    n_classes = len(cell.classes)
    active = np.ones(n_classes, dtype=bool)
    drops = {
        "rare_labels": flags.rare,
        "secondary_meaning": flags.secondary,
        "few_images": flags.images < min_images,
    }
    image_mask = np.ones(len(cell.labels), dtype=bool)
    rows = []
    for step, about in STEPS:
        if step == "ambiguous_images":
            if kept_images is None:
                continue
            image_mask &= kept_images
        if step in drops:
            active &= ~np.asarray(drops[step], dtype=bool)
        ranks, n_listed, found = corrected_ranks(cell, active, None if step == "evaluated" else related)
        keep = image_mask & active[cell.labels]
        full = (cell.ids >= 0).all(axis=1)
        row = {"model": cell.model, "split": cell.split, "step": step, "correction": about}
        for k in ks:
            undecided = ~found & full & (n_listed < k)
            row.update(_hits(cell, keep, ranks, undecided, [k]))
            row[f"undetermined@{k}"] = int((undecided & keep).sum())
        rows.append(row)
    return rows


def flags_for(classes: Sequence[str], labels: pd.DataFrame, counts: Mapping[str, int]) -> ClassFlags:
    """Class flags from a label table (``analysis.properties.LABEL_COLUMNS``) and image counts."""
    table = labels.set_index("wnid").loc[list(classes)]
    return ClassFlags(
        rare=table["rare"].to_numpy(dtype=bool),
        secondary=~table["primary"].to_numpy(dtype=bool),
        images=np.asarray([counts.get(w, 0) for w in classes], dtype=np.int64),
    )


def ladder_table(rows: list[dict], ks: Sequence[int] = DEFAULT_KS) -> pd.DataFrame:
    """The ladder rows as a table with a fixed column order."""
    columns = ["model", "split", "step", "correction", "classes", "images"]
    columns += (
        [f"hit@{k}" for k in ks] + [f"per_class_hit@{k}" for k in ks] + [f"undetermined@{k}" for k in ks]
    )
    return pd.DataFrame(rows, columns=columns)


def render_markdown(table: pd.DataFrame, ks: Sequence[int] = DEFAULT_KS) -> str:
    """Markdown table: hit@K in percent (flat and per class), one row per (model, split, step)."""
    head = ["model", "split", "step", "classes", "images"]
    head += [f"hit@{k} %" for k in ks] + [f"per-class hit@{k} %" for k in ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for values in table.to_dict("records"):
        cells = [str(values["model"]), str(values["split"]), str(values["step"])]
        cells += [f"{values['classes']:,}", f"{values['images']:,}"]
        cells += [_pct(values[f"hit@{k}"]) for k in ks]
        cells += [_pct(values[f"per_class_hit@{k}"]) for k in ks]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.2f}"


def plot_ladder(table: pd.DataFrame, path: str | Path, ks: Sequence[int] = DEFAULT_KS) -> None:
    """Grouped bars: one panel per K, one group per step, one bar per (model, split)."""
    steps = list(dict.fromkeys(table["step"]))
    cells = list(dict.fromkeys(zip(table["model"], table["split"], strict=True)))
    fig, axes = subplots(1, len(ks), figsize=(4.5 * len(ks), 3.6), squeeze=False)
    width = 0.8 / max(len(cells), 1)
    for ax, k in zip(axes[0], ks, strict=True):
        for j, (model, split) in enumerate(cells):
            part = table[(table["model"] == model) & (table["split"] == split)].set_index("step")
            values = [100 * part.loc[s, f"hit@{k}"] if s in part.index else np.nan for s in steps]
            ax.bar(np.arange(len(steps)) + j * width, values, width, label=f"{model} / {split}")
        ax.set_xticks(np.arange(len(steps)) + 0.4 - width / 2)
        ax.set_xticklabels([f"{i + 1}" for i in range(len(steps))])
        ax.set_xlabel(
            "correction step (" + ", ".join(f"{i + 1} {s}" for i, s in enumerate(steps)) + ")", fontsize=6
        )
        ax.set_ylabel(f"hit@{k} (%)")
        ax.set_title(f"hit@{k} under cumulative corrections", fontsize=9)
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
    ks: Sequence[int] = field(default_factory=lambda: list(DEFAULT_KS))

    @property
    def out_dir(self) -> Path:
        """``--out``, by default ``RUN_DIR-ladder`` next to the run (the run itself stays untouched)."""
        return Path(self.out) if self.out is not None else Path(f"{Path(self.run_dir)}-ladder")


def _check_options(opts: LadderOptions) -> list[int]:
    ks = sorted({int(k) for k in opts.ks})
    if not ks or ks[0] < 1:
        raise UserInputError(f"--k values must be positive integers, got {list(opts.ks)}")
    if opts.min_images < 0:
        raise UserInputError(f"--min-images must be >= 0, got {opts.min_images}")
    if opts.relation not in RELATIONS:
        raise UserInputError(f"--relation must be one of {', '.join(RELATIONS)}, got {opts.relation!r}")
    return ks


def run_ladder(opts: LadderOptions) -> pd.DataFrame:
    """Compute the ladder of every cell of a run and write table (md, csv), plot and manifest."""
    ks = _check_options(opts)
    cells = read_cells(opts.run_dir)
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
        rows += cell_ladder(cell, related, flags, mask, ks, opts.min_images)
    table = ladder_table(rows, ks)
    inputs = [opts.run_dir, opts.filter_dir, opts.labels_dir]
    with atomic_directory(opts.out_dir, tool="imagenet-zsl analyze ladder", inputs=inputs) as tmp:
        atomic_write_text(tmp / "ladder.md", render_markdown(table, ks))
        atomic_write_text(
            tmp / "ladder.csv", table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        )
        plot_ladder(table, tmp / "ladder.png", ks)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
        atomic_write_json(
            tmp / "manifest.json",
            {
                "format": "imagenet-zsl/ladder-v1",
                "tool": "imagenet-zsl analyze ladder",
                "command": command_line(),
                "settings": {**settings, "ks": ks, "out": str(opts.out_dir)},
                "steps": [{"step": s, "correction": a} for s, a in STEPS],
                "cells": [str(c.path) for c in cells],
                "outputs": [file_record(p, tmp) for p in sorted(tmp.glob("*")) if p.is_file()],
            },
        )
    return table
