"""Hierarchy-aware error breakdown (Hascoet et al. 2019, Fig. 2): how wrong is a wrong top-1?

Each image's top-1 prediction is put in exactly one category, checked in this order:

* ``correct``     — the true class;
* ``parent``      — a direct is-a parent of the true class ("dalmatian" predicted as "dog");
* ``child``       — a direct child of the true class ("dog" predicted as "dalmatian");
* ``ancestor``    — another proper ancestor (two or more is-a steps up);
* ``descendant``  — another proper descendant;
* ``unrelated``   — none of these (siblings, cousins, other branches);
* ``not_in_graph``— the true or predicted class is not a node of the graph.

Bounds of "semantically correct" top-1 accuracy:

* ``lower_bound`` = correct + parent + ancestor: the predicted label is a true (only coarser)
  statement about the image, since the true class *is a* kind of the predicted one;
* ``upper_bound`` = lower_bound + child + descendant: a finer label that may also be right,
  because ImageNet images labelled with a general class often show one of its subclasses.

All lookups are sparse-matrix fancy indexing over the images at once (no Python per image).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

CATEGORIES = (
    "correct",
    "parent",
    "child",
    "ancestor",
    "descendant",
    "unrelated",
    "not_in_graph",
)


@dataclass
class ErrorBreakdown:
    """``category`` (N,) int8 index into CATEGORIES; counts and shares per category; bounds."""

    category: np.ndarray
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return int(len(self.category))

    @property
    def shares(self) -> dict[str, float]:
        return {name: count / self.total for name, count in self.counts.items()}

    @property
    def error_shares(self) -> dict[str, float]:
        """Share of each category among misclassified images only (the paper's Fig. 2)."""
        errors = self.total - self.counts["correct"]
        return {
            name: (count / errors if errors else 0.0)
            for name, count in self.counts.items()
            if name != "correct"
        }

    @property
    def strict(self) -> float:
        return self.counts["correct"] / self.total

    @property
    def lower_bound(self) -> float:
        c = self.counts
        return (c["correct"] + c["parent"] + c["ancestor"]) / self.total

    @property
    def upper_bound(self) -> float:
        c = self.counts
        return (c["correct"] + c["parent"] + c["ancestor"] + c["child"] + c["descendant"]) / self.total

    def to_dict(self) -> dict:
        return {
            "images": self.total,
            "counts": self.counts,
            "shares": self.shares,
            "error_shares": self.error_shares,
            "strict_top1": self.strict,
            "semantic_lower_bound": self.lower_bound,
            "semantic_upper_bound": self.upper_bound,
        }


def _lookup(matrix: Any, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """matrix[rows[i], cols[i]] for all i as a bool array (vectorised sparse lookup)."""
    if len(rows) == 0:
        return np.zeros(0, bool)
    return np.asarray(matrix[rows, cols]).ravel().astype(bool)


def error_breakdown(
    graph: ClassGraph,
    classes: Sequence[str],
    labels: np.ndarray,
    predictions: np.ndarray,
) -> ErrorBreakdown:
    """Categorise each top-1 prediction relative to the true class.

    classes: the label space (wnids); labels, predictions: (N,) int indices into ``classes``.
    """
    labels = np.asarray(labels, dtype=np.int64)
    predictions = np.asarray(predictions, dtype=np.int64)
    if labels.shape != predictions.shape:
        raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} differ")
    node = np.array([graph.index.get(w, -1) for w in classes], dtype=np.int64)
    true_node = node[labels]
    pred_node = node[np.clip(predictions, 0, None)]
    pred_node[predictions < 0] = -1
    category = np.full(len(labels), CATEGORIES.index("unrelated"), dtype=np.int8)
    missing = (true_node < 0) | (pred_node < 0)
    category[missing] = CATEGORIES.index("not_in_graph")
    correct = predictions == labels
    category[correct] = CATEGORIES.index("correct")
    wrong = ~correct & ~missing
    t, p = true_node[wrong], pred_node[wrong]
    parent = graph.child_to_parent.astype(bool)
    ancestor = graph.ancestor_matrix
    sub = np.full(len(t), CATEGORIES.index("unrelated"), dtype=np.int8)
    # assign from the weakest to the strongest relation, so the most specific one wins
    sub[_lookup(ancestor, p, t)] = CATEGORIES.index("descendant")
    sub[_lookup(ancestor, t, p)] = CATEGORIES.index("ancestor")
    sub[_lookup(parent, p, t)] = CATEGORIES.index("child")
    sub[_lookup(parent, t, p)] = CATEGORIES.index("parent")
    category[wrong] = sub
    counts = np.bincount(category, minlength=len(CATEGORIES))
    return ErrorBreakdown(category, {name: int(c) for name, c in zip(CATEGORIES, counts, strict=True)})
