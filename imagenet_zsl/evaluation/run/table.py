"""The per-class table of a run (per_class.csv) and metrics.json's ``class_properties``: a pure
function of the inputs and the ZSL/GZSL results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.evaluation.properties import class_properties
from imagenet_zsl.hierarchy.universe import training_wnids

if TYPE_CHECKING:
    import pandas as pd

    from imagenet_zsl.evaluation.run.gzsl import GZSLResult
    from imagenet_zsl.evaluation.run.inputs import EvaluationInputs
    from imagenet_zsl.evaluation.run.zsl import ZSLResult


def _spearman(table: Any, ks: list[int]) -> dict[str, dict[str, Any]]:
    """Spearman ρ between unseen classes' hit@1 (or the smallest K) and each class property."""
    spearman = {}
    unseen_rows = table[table["role"] == "unseen"]
    for prop in ("structural_ratio", "population", "label_frequency", "depth"):
        pair = unseen_rows[["hit@1" if 1 in ks else f"hit@{ks[0]}", prop]]
        pair = pair.replace([np.inf, -np.inf], np.nan).dropna()
        if len(pair) >= 3 and pair[prop].nunique() > 1 and pair.iloc[:, 0].nunique() > 1:
            rho = pair.iloc[:, 0].rank().corr(pair[prop].rank())
            spearman[prop] = {"rho": float(rho), "classes": int(len(pair))}
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
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The per-class table (classes with test images, then seen classes with --gzsl) with class
    properties, and metrics.json's ``class_properties`` (Spearman ρ of hit@1 with each property)."""
    import pandas as pd  # heavy: imported when a table is built

    ks = inp.ks
    # rows: the classes with test images (label space, then count-as-miss), then the seen classes
    present = np.flatnonzero(zsl.counts > 0)
    eval_wnids = inp.eval_wnids
    seen = list(inp.seen_wnids) if gzsl is not None else []
    n_test, n_seen = len(present), len(seen)
    all_wnids = [eval_wnids[i] for i in present] + seen
    props = class_properties(
        all_wnids,
        inp.graph,
        _training_wnids(inp),
        label_frequency=inp.cfg.label_frequency,
        test_wnids=inp.split_wnids,
    )
    table = pd.DataFrame({"wnid": all_wnids, "role": ["unseen"] * n_test + ["seen"] * n_seen})
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
    table = table.merge(props, on="wnid", how="left", sort=False)
    block = {"columns": [c for c in props.columns if c != "wnid"], "spearman_hit1": _spearman(table, ks)}
    return table, block
