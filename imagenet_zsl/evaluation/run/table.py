"""The per-class table of a run (per_class.csv) and metrics.json's ``class_properties``: a pure
function of the inputs and the ZSL/GZSL results.

The table is a :class:`ClassTable` (named numpy columns), written by :meth:`ClassTable.to_csv`
with the bytes pandas' ``DataFrame.to_csv(index=False, float_format="%.6g")`` writes: importing
pandas and formatting through it cost ``evaluate`` about 0.2 s of start-up and 17 us per class.
pandas is imported only to correlate a property that varies (:func:`_spearman`).
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


def _spearman(columns: dict[str, Any], ks: list[int]) -> dict[str, dict[str, Any]]:
    """Spearman ρ between unseen classes' hit@1 (or the smallest K) and each class property, over
    the classes where both are finite, when there are at least 3 and both vary."""
    spearman = {}
    unseen = np.asarray(columns["role"]) == "unseen"
    hits = np.asarray(columns["hit@1" if 1 in ks else f"hit@{ks[0]}"], dtype=np.float64)[unseen]
    for prop in ("structural_ratio", "population", "label_frequency", "depth"):
        values = np.asarray(columns[prop], dtype=np.float64)[unseen]
        keep = np.isfinite(hits) & np.isfinite(values)  # inf counts as missing, as NaN
        x, y = hits[keep], values[keep]
        if len(x) >= 3 and len(np.unique(y)) > 1 and len(np.unique(x)) > 1:
            # deferred: only a property that varies over >= 3 classes is correlated, as pandas
            # computes it (rank, then Pearson); predict and a small evaluate never load pandas
            import pandas as pd

            rho = pd.Series(x).rank().corr(pd.Series(y).rank())
            spearman[prop] = {"rho": float(rho), "classes": int(len(x))}
    return spearman


def _training_wnids(inp: EvaluationInputs) -> list[str] | None:
    """The seen classes for the class properties: the GZSL ones, else ILSVRC-2012's when the graph
    holds them all."""
    if inp.seen_wnids is not None or inp.graph is None:
        return inp.seen_wnids
    candidates = training_wnids()
    return candidates if all(w in inp.graph for w in candidates) else None


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
