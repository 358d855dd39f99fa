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

Tie rules (as the hit@K metrics, :mod:`imagenet_zsl.scoring`). :func:`error_breakdown` takes one
top-1 prediction per image: the strict rule, where a true class tied at the top is an error (the
next listed class is "the" prediction). :func:`expected_error_breakdown` is the expected value
under uniform random tie-breaking: a top-1 tie group of ``G`` classes is ``G`` predictions of
weight ``1/G``, each put in its own category, so the counts are expected image counts (floats)
and ``strict_top1`` (the ``correct`` share; "strict" as opposed to the semantic bounds) equals the
expected hit@1. It is exact when the whole tie group is in the stored top-m list. When the group
runs past the list (``m`` or more classes tie for first), the true class's exact tie ranks (the
search's ``TieRanks``) still give its exact share ``1/(t + 1)``; the remaining share is split evenly
over the listed wrong members of the group, i.e. the unlisted members are assumed to fall in the
categories of the listed ones in the same proportions (an approximation, not a bound).

All lookups are binary searches in sorted pair keys (the graph's edges, the ancestor sets of the
label space's classes), over a block of images at once (no Python per image, no sparse matrix).
:func:`expected_error_breakdown` (ZSL) and :func:`gzsl_error_breakdowns` (calibrated merge
of the seen and unseen lists, then the top-1 categories) run one block of images at a time:
O(block · m) memory over their inputs whatever the number of images, with the counts of one pass
over all images bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl.scoring import GZSLTopK, TieRanks, calibrated_topk_block, release_pages
from imagenet_zsl.scoring.ranks import sort_block

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
    """Counts and shares per category; bounds. Strict rule (:func:`error_breakdown`): one
    prediction per image, ``category`` (N,) int8 index into CATEGORIES of each, integer counts.
    Expected rule (streamed): the counts are expected image counts (floats) over ``images``
    images, ``category`` is empty and ``image`` / ``weight`` are None (not kept)."""

    category: np.ndarray
    counts: dict[str, int] | dict[str, float]
    image: np.ndarray | None = None
    weight: np.ndarray | None = None
    images: int | None = None
    tie_rule: str = "strict"

    @property
    def total(self) -> int:
        """Number of images."""
        return int(self.images if self.images is not None else len(self.category))

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
            "tie_rule": self.tie_rule,
            "images": self.total,
            "counts": self.counts,
            "shares": self.shares,
            "error_shares": self.error_shares,
            "strict_top1": self.strict,
            "semantic_lower_bound": self.lower_bound,
            "semantic_upper_bound": self.upper_bound,
        }


def _member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(len(keys),) bool: each int64 key is in ``sorted_keys`` (one vectorised binary search)."""
    if len(sorted_keys) == 0 or len(keys) == 0:
        return np.zeros(len(keys), bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys


class _Relations:
    """The graph lookups of :func:`_categories`, built once per label space: ``node`` (C,) graph
    node of each class (-1: not in the graph); the sorted ``child * n + parent`` keys of the edges
    and ``node * n + ancestor`` keys of the ancestor sets of the label space's classes only (what
    a (true, predicted) pair can ask), numpy arrays queried by binary search: no sparse matrix
    and no closure of the whole graph."""

    def __init__(self, graph: ClassGraph, classes: Sequence[str]) -> None:
        self.n = len(graph)
        self.node = np.array([graph.index.get(w, -1) for w in classes], dtype=np.int64)
        self.parent = graph.edge_keys
        self.ancestor = graph.ancestor_keys(self.node[self.node >= 0])

    def _related(self, keys: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(P,) bool: ``cols[i]`` is a parent (``keys`` the edges) or an ancestor of ``rows[i]``."""
        return _member(keys, rows * self.n + cols)

    def categories(self, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
        """(P,) int8 category (index into CATEGORIES) of each (true, predicted) pair of indices."""
        true_node = self.node[labels]
        pred_node = self.node[np.clip(predictions, 0, None)]
        pred_node[predictions < 0] = -1
        category = np.full(len(labels), CATEGORIES.index("unrelated"), dtype=np.int8)
        missing = (true_node < 0) | (pred_node < 0)
        category[missing] = CATEGORIES.index("not_in_graph")
        correct = predictions == labels
        category[correct] = CATEGORIES.index("correct")
        wrong = ~correct & ~missing
        t, p = true_node[wrong], pred_node[wrong]
        sub = np.full(len(t), CATEGORIES.index("unrelated"), dtype=np.int8)
        # assign from the weakest to the strongest relation, so the most specific one wins
        sub[self._related(self.ancestor, p, t)] = CATEGORIES.index("descendant")
        sub[self._related(self.ancestor, t, p)] = CATEGORIES.index("ancestor")
        sub[self._related(self.parent, p, t)] = CATEGORIES.index("child")
        sub[self._related(self.parent, t, p)] = CATEGORIES.index("parent")
        category[wrong] = sub
        return category


def _categories(
    graph: ClassGraph, classes: Sequence[str], labels: np.ndarray, predictions: np.ndarray
) -> np.ndarray:
    """(P,) int8 category (index into CATEGORIES) of each (true, predicted) pair of indices."""
    return _Relations(graph, classes).categories(labels, predictions)


def error_breakdown(
    graph: ClassGraph,
    classes: Sequence[str],
    labels: np.ndarray,
    predictions: np.ndarray,
) -> ErrorBreakdown:
    """Categorise each top-1 prediction relative to the true class (strict tie rule: the caller
    picks one prediction per image).

    classes: the label space (wnids); labels, predictions: (N,) int indices into ``classes``.
    """
    labels = np.asarray(labels, dtype=np.int64)
    predictions = np.asarray(predictions, dtype=np.int64)
    if labels.shape != predictions.shape:
        raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} differ")
    category = _categories(graph, classes, labels, predictions)
    counts = np.bincount(category, minlength=len(CATEGORIES))
    return ErrorBreakdown(category, {name: int(c) for name, c in zip(CATEGORIES, counts, strict=True)})


def top1_shares(
    topk_ids: np.ndarray, topk_scores: np.ndarray, labels: np.ndarray, ranks: TieRanks | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top-1 tie group of each image as weighted predictions (see the module docstring).

    topk_ids, topk_scores: (N, m) lists (-1 padding); labels (N,); ``ranks``: the true class's
    exact tie ranks over the whole label space (None: judged from the lists alone). Returns
    ``image`` (P,), ``prediction`` (P,) class indices and ``weight`` (P,) float64, 1 per image.
    """
    ids = np.asarray(topk_ids, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    scores = np.asarray(topk_scores, dtype=np.float64)
    scores = np.where(np.isnan(scores) | (ids < 0), -np.inf, scores)
    in_group = (ids >= 0) & (scores == scores[:, :1])
    is_true = in_group & (ids == labels[:, None])
    listed_true = is_true.any(axis=1)
    if ranks is None:
        true_first = listed_true
        group = in_group.sum(axis=1)
    else:
        true_first = np.asarray(ranks.above) == 0
        group = np.where(true_first, np.asarray(ranks.tied) + 1, in_group.sum(axis=1))
    true_share = np.where(true_first, 1.0 / np.maximum(group, 1), 0.0)
    n_wrong = (in_group & ~is_true).sum(axis=1)
    wrong_share = np.where(n_wrong > 0, (1.0 - true_share) / np.maximum(n_wrong, 1), 0.0)
    weight = np.where(is_true, true_share[:, None], wrong_share[:, None]) * in_group
    # a true class tied first but outside the list (the group ran past it) still gets its share
    unlisted = true_first & ~listed_true
    keep = weight > 0
    image = np.r_[np.nonzero(keep)[0], np.nonzero(unlisted)[0]]
    prediction = np.r_[ids[keep], labels[unlisted]]
    weights = np.r_[weight[keep], true_share[unlisted]]
    order = np.argsort(image, kind="stable")
    return image[order], prediction[order], weights[order]


def expected_error_breakdown(
    graph: ClassGraph,
    classes: Sequence[str],
    labels: np.ndarray,
    topk_ids: np.ndarray,
    topk_scores: np.ndarray,
    ranks: TieRanks | None = None,
    block: int | None = None,
) -> ErrorBreakdown:
    """The breakdown under the expected tie rule: each image's top-1 tie group split uniformly
    over its classes' categories (:func:`top1_shares`); counts are expected image counts.

    classes: the label space (wnids); labels (N,), topk_ids / topk_scores (N, m) index it
    (memory maps welcome: they are read ``block`` images at a time, ``SORT_BLOCK`` by default,
    so the temporaries stay O(block · m) whatever N). The per-prediction arrays are not kept
    (``category`` is empty, ``image`` and ``weight`` are None); the counts are those of one pass
    over all images, bit for bit (see :func:`_add_counts`).
    """
    labels = np.asarray(labels)
    n = len(labels)
    if len(topk_ids) != n:
        raise ValueError(f"labels {labels.shape} and top-k lists {np.shape(topk_ids)} differ")
    relations = _Relations(graph, classes)
    counts = np.zeros(len(CATEGORIES))
    block = sort_block(block)
    for lo in range(0, n, block):
        rows = slice(lo, lo + block)
        block_ranks = None if ranks is None else TieRanks(ranks.above[rows], ranks.tied[rows])
        _, category, weight = _block_predictions(
            relations, labels[rows], topk_ids[rows], topk_scores[rows], block_ranks
        )
        _add_counts(counts, category, weight)
        release_pages(topk_ids, topk_scores)  # read once: not kept resident
    return _counts_only(counts, n)


def _block_predictions(
    relations: _Relations, labels: np.ndarray, ids: np.ndarray, scores: np.ndarray, ranks: TieRanks | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One block's weighted top-1 predictions → (image (P,) index in the block, category (P,)
    int8, weight (P,) float64), in image order."""
    labels = np.asarray(labels, dtype=np.int64)
    image, prediction, weight = top1_shares(ids, scores, labels, ranks)
    return image, relations.categories(labels[image], prediction), weight


def _add_counts(counts: np.ndarray, category: np.ndarray, weight: np.ndarray) -> None:
    """Add each prediction's weight to its category's count, one by one in order.

    Why ``np.add.at``: it adds sequentially, as one ``np.bincount(category, weights=weight)`` over
    all predictions does, so block after block gives the same floats bit for bit (summing
    per-block bincounts would not)."""
    np.add.at(counts, category, weight)


def _counts_only(counts: np.ndarray, images: int) -> ErrorBreakdown:
    return ErrorBreakdown(
        np.zeros(0, np.int8),
        {name: float(c) for name, c in zip(CATEGORIES, counts, strict=True)},
        images=images,
        tie_rule="expected",
    )


#: the three GZSL breakdowns: every searched image, unseen-class images, seen-class images
GZSL_PARTS = ("all", "unseen_images", "seen_images")


def gzsl_error_breakdowns(
    graph: ClassGraph, classes: Sequence[str], gz: GZSLTopK, gamma: float, block: int | None = None
) -> dict[str, ErrorBreakdown]:
    """Expected-rule breakdowns of the GZSL top-1 at calibration ``gamma``, streamed.

    classes: the joint label space (wnids) that ``gz``'s ids and labels index. Returns
    {"all", "unseen_images", "seen_images"} (:data:`GZSL_PARTS`) with the counts of
    :func:`expected_error_breakdown` applied to :func:`calibrated_topk` of those images, bit for
    bit, but merging ``block`` images at a time (:meth:`GZSLTopK.blocks`): memory is
    O(block · m), not O(N · m). The per-prediction arrays are not kept.
    """
    relations = _Relations(graph, classes)
    seen_img = gz.seen_images
    counts = {part: np.zeros(len(CATEGORIES)) for part in GZSL_PARTS}
    for lo, hi, lists in gz.blocks(block):
        scores, ids = calibrated_topk_block(lists, gamma, gz.m)
        image, category, weight = _block_predictions(relations, gz.labels[lo:hi], ids, scores, None)
        seen = seen_img[lo:hi][image]
        for part, keep in (("all", slice(None)), ("unseen_images", ~seen), ("seen_images", seen)):
            _add_counts(counts[part], category[keep], weight[keep])
    images = {
        "all": len(gz.labels),
        "unseen_images": int((~seen_img).sum()),
        "seen_images": int(seen_img.sum()),
    }
    return {part: _counts_only(counts[part], images[part]) for part in GZSL_PARTS}
