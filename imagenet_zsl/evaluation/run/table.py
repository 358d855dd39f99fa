"""The per-class table of a run (per_class.csv) and metrics.json's ``class_properties``: a pure
function of the inputs and the ZSL/GZSL results.

The table is a :class:`ClassTable` (named numpy columns), written by :meth:`ClassTable.to_csv`
with the bytes pandas' ``DataFrame.to_csv(index=False, float_format="%.6g")`` writes, and the
Spearman ρ of metrics.json are pandas' ``Series.rank().corr()`` to the bit (:func:`_spearman`),
both in numpy: importing pandas (and the pyarrow it loads) cost ``evaluate`` 0.5-1 s of start-up
for one rank correlation.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.evaluation.properties import PROPERTY_COLUMNS, property_columns
from imagenet_zsl.hierarchy.universe import training_wnids
from imagenet_zsl.splits.io import read_wnid_list

if TYPE_CHECKING:
    from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs
    from imagenet_zsl.evaluation.run.gzsl import GZSLResult
    from imagenet_zsl.evaluation.run.zsl import ZSLResult

#: how per_class.csv writes floating-point cells (NaN: an empty cell)
FLOAT_FORMAT = "%.6g"


def _csv_cells(values: Any) -> list:
    """One column's cells as pandas' ``to_csv`` writes them: floats with :data:`FLOAT_FORMAT` and
    NaN empty (inf stays ``inf``), anything else (str, int, bool) as ``str()`` of its Python value."""
    array = np.asarray(values)
    if array.dtype.kind != "f":
        return array.tolist()
    if np.isnan(array).all():
        return [""] * len(array)
    return ["" if v != v else FLOAT_FORMAT % v for v in array.tolist()]


@dataclass(frozen=True, eq=False)
class ClassTable:
    """The per-class table: ``columns`` maps each column's name to its values (equal lengths), in
    order."""

    columns: dict[str, Any]

    def to_csv(self) -> str:
        """per_class.csv: the same bytes as ``pandas.DataFrame(self.columns).to_csv(index=False,
        float_format="%.6g")`` (the csv module quoting minimally, pandas' line ends)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator=os.linesep)
        writer.writerow(list(self.columns))
        writer.writerows(zip(*(_csv_cells(values) for values in self.columns.values()), strict=True))
        return buffer.getvalue()


def average_ranks(values: np.ndarray) -> np.ndarray:
    """(N,) float64 1-based ranks, tied values sharing the average of their ranks (pandas'
    ``Series.rank()``, scipy's ``rankdata``): exact half-integers."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r as pandas' ``Series.corr`` computes it (centred, scaled by the largest
    magnitude, clipped to [-1, 1]), so a ρ is pandas' to the bit; NaN when either is constant."""
    if len(a) < 2:
        return float("nan")
    a = a - a.mean()
    b = b - b.mean()
    a_scale, b_scale = np.max(np.abs(a)), np.max(np.abs(b))
    if a_scale == 0 or b_scale == 0:
        return float("nan")
    a, b = a / a_scale, b / b_scale
    fact = len(a) - 1
    a_norm, b_norm = np.sqrt(np.dot(a, a) / fact), np.sqrt(np.dot(b, b) / fact)
    if a_norm == 0 or b_norm == 0:
        return float("nan")
    return float(np.clip(np.dot(a, b) / fact / a_norm / b_norm, -1.0, 1.0))


def _spearman(columns: dict[str, Any], ks: list[int]) -> dict[str, dict[str, Any]]:
    """Spearman ρ between unseen classes' hit@1 (or the smallest K) and each class property, over
    the classes where both are finite, when there are at least 3 and both vary: the Pearson r of
    their average ranks."""
    spearman = {}
    unseen = np.asarray(columns["role"]) == "unseen"
    hits = np.asarray(columns["hit@1" if 1 in ks else f"hit@{ks[0]}"], dtype=np.float64)[unseen]
    for prop in ("structural_ratio", "population", "label_frequency", "depth"):
        values = np.asarray(columns[prop], dtype=np.float64)[unseen]
        keep = np.isfinite(hits) & np.isfinite(values)  # inf counts as missing, as NaN
        x, y = hits[keep], values[keep]
        if len(x) >= 3 and (y != y[0]).any() and (x != x[0]).any():
            rho = pearson(average_ranks(x), average_ranks(y))
            spearman[prop] = {"rho": rho, "classes": int(len(x))}
    return spearman


def _training_wnids(inp: EvaluationInputs) -> list[str] | None:
    """The training set of the structural ratio column: the one the split's R is defined against,
    whatever ``--gzsl`` (turning GZSL on never changes a ZSL column): ILSVRC-2012's 1,000 classes
    when the graph holds them all (as ``splits build`` computes R), else the model's recorded
    training classes, else the run's (``training_classes``); never the GZSL seen classes (a
    different set: e.g. without the classes that lack a word vector)."""
    if inp.graph is None:
        return None
    candidates = training_wnids()
    if all(w in inp.graph for w in candidates):
        return candidates
    recorded = inp.source.seen_wnids()
    if recorded:
        return list(recorded)
    if inp.cfg.training_classes is not None:
        return read_wnid_list(inp.cfg.training_classes)
    return None


def class_table(
    inp: EvaluationInputs, zsl: ZSLResult, gzsl: GZSLResult | None
) -> tuple[ClassTable, dict[str, Any]]:
    """The per-class table (classes with test images, then seen classes with --gzsl) with class
    properties, and metrics.json's ``class_properties`` (Spearman ρ of hit@1 with each property)."""
    ks = inp.ks
    # rows: the classes with test images (label space, then count-as-miss), then the seen classes
    present = np.flatnonzero(zsl.counts > 0)
    eval_wnids = inp.eval_wnids
    seen = list(inp.seen_wnids) if gzsl is not None else []
    n_test, n_seen = len(present), len(seen)
    all_wnids = [eval_wnids[i] for i in present] + seen  # distinct: seen classes are never test classes
    props = property_columns(
        all_wnids,
        inp.graph,
        _training_wnids(inp),
        label_frequency=inp.cfg.label_frequency,
        test_wnids=inp.split_wnids,
    )
    table: dict[str, Any] = {"wnid": all_wnids, "role": ["unseen"] * n_test + ["seen"] * n_seen}
    seen_rows = len(eval_wnids) + np.arange(n_seen)
    table["images"] = np.r_[zsl.counts[present], gzsl.counts[seen_rows] if gzsl is not None else []]
    if len(inp.space.miss):
        table["count_as_miss"] = [i >= len(inp.space_wnids) for i in present] + [False] * n_seen
    for k in ks:
        table[f"hit@{k}"] = np.r_[zsl.class_hits[k][present], np.full(n_seen, np.nan)]
    for k in ks:
        table[f"hit@{k}_strict"] = np.r_[zsl.class_hits_strict[k][present], np.full(n_seen, np.nan)]
    if inp.pretraining_wnids is not None:
        table["seen_in_pretraining"] = [w in inp.pretraining_wnids for w in all_wnids]
    if gzsl is not None:
        for k in ks:
            table[f"gzsl_hit@{k}"] = gzsl.class_hits[k][np.r_[present, seen_rows]]
    table.update(props)  # the property columns, row for row (they were computed for all_wnids)
    block = {"columns": list(PROPERTY_COLUMNS), "spearman_hit1": _spearman(table, ks)}
    return ClassTable(table), block
