"""True-class ranks under both tie rules (:class:`TieRanks`, :func:`true_ranks`), hit@K, and the
documented sort order of top-k lists (:func:`sort_topk`). See :mod:`imagenet_zsl.scoring`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError

DEFAULT_KS = (1, 2, 5, 10, 20)
#: images per block when merging or sorting top-k lists row by row: bounds the temporaries (the
#: GZSL breakdown peaks at about 200 MB over its inputs for m = 21, tools/bench_gzsl_memory.py)
SORT_BLOCK = 65_536


def sort_block(block: int | None = None) -> int:
    """``block``, or :data:`SORT_BLOCK` read now (one knob for every blocked pass; tests set it
    to a few images to check that blocks do not change results)."""
    return check_block(SORT_BLOCK if block is None else block)


#: the two tie rules; ``expected`` is the headline number everywhere
TIE_RULES = ("expected", "strict")
TIE_RULE_TEXT = {
    "expected": "expected value under uniform random tie-breaking: a true class with r classes "
    "strictly above it and t others tied with it earns min(1, max(0, (K - r) / (t + 1))) at hit@K; "
    "classes with identical prototypes always tie",
    "strict": "ties count against the model: hit@K iff r + t < K (keys ending in _strict)",
}


# ----------------------------------------------------------------------------- ranks & hit@K


def check_labels(labels: np.ndarray, n: int, num_classes: int | None = None) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
    if n == 0:
        raise UserInputError("no images to evaluate (empty label array)")
    labels = labels.astype(np.int64, copy=False)
    if labels.min() < 0 or (num_classes is not None and labels.max() >= num_classes):
        raise UserInputError(
            f"labels outside the label space [0, {num_classes}): min {labels.min()}, max {labels.max()}"
        )
    return labels


def check_rule(tie_rule: str) -> str:
    if tie_rule not in TIE_RULES:
        raise ValueError(f"tie_rule must be one of {TIE_RULES}, got {tie_rule!r}")
    return tie_rule


def check_scores_finite(scores: np.ndarray, what: str = "scores") -> None:
    """Raise a one-line error when scores hold ±inf (an overflow: the ranking is meaningless)."""
    if np.isinf(scores).any():
        raise UserInputError(
            f"{what} overflow to inf; rescale the features or prototypes (e.g. --l2-normalize)"
        )


@dataclass(frozen=True)
class TieRanks:
    """Where each image's true class stands: ``above`` (N,) classes scoring strictly higher,
    ``tied`` (N,) other classes scoring exactly the same. ``above`` = m (list length) marks a
    true class outside the list (no credit for any K < m)."""

    above: np.ndarray
    tied: np.ndarray

    @classmethod
    def from_strict(cls, ranks: np.ndarray) -> TieRanks:
        """Plain 0-based ranks (no tie information): both rules then agree."""
        ranks = np.asarray(ranks, dtype=np.int64)
        return cls(ranks, np.zeros_like(ranks))

    @property
    def strict(self) -> np.ndarray:
        """(N,) rank under the strict rule: r + t."""
        return self.above + self.tied

    def credit(self, k: int, tie_rule: str = "expected") -> np.ndarray:
        """(N,) float64 hit@k credit in [0, 1] of each image under ``tie_rule``."""
        if check_rule(tie_rule) == "strict":
            return (self.strict < k).astype(np.float64)
        return np.clip((k - self.above) / (self.tied + 1.0), 0.0, 1.0)

    def __len__(self) -> int:
        return len(self.above)

    def take(self, rows: np.ndarray) -> TieRanks:
        return TieRanks(self.above[rows], self.tied[rows])


def _complete(topk_ids: np.ndarray, num_classes: int | None) -> bool:
    """A list is complete when it holds every class (padding present or m >= C)."""
    if num_classes is not None and topk_ids.shape[1] >= num_classes:
        return True
    return bool(topk_ids.shape[1] and (topk_ids[:, -1] < 0).all())


def hit_ks(values: Iterable[int | str]) -> tuple[int, ...]:
    """The K values of hit@K, checked once where they come in (``--k``, a config file, an API
    call): ints, sorted, each once, at least one, all >= 1; else the one UserInputError."""
    given = list(values)
    try:
        ks = tuple(sorted({int(k) for k in given}))
    except (TypeError, ValueError):
        ks = ()
    if not ks or ks[0] < 1:
        raise UserInputError(f"--k values must be positive integers, got {given}")
    return ks


def ks_of(block: Mapping[str, Any]) -> tuple[int, ...]:
    """The K values of a hit@K block as metrics.json stores it (``{"1": ..., "5": ...}``: JSON keys
    are strings), as ints, sorted: the one reader of those keys (read a value as ``block[str(k)]``)."""
    return tuple(sorted(int(k) for k in block))


def check_ks(ks: Iterable[int], m: int, exact_limit: bool) -> tuple[int, ...]:
    """:func:`hit_ks` of ``ks``; with ``exact_limit`` K must be < m (see module doc)."""
    ks = hit_ks(ks)
    limit = m - 1 if exact_limit else m
    if ks[-1] > limit:
        raise UserInputError(
            f"hit@{ks[-1]} needs top-{ks[-1] + 1} lists to judge ties exactly; these hold {m}: "
            "search one more class than the largest K"
        )
    return ks


def true_ranks(
    labels: np.ndarray,
    *,
    scores: np.ndarray | None = None,
    topk_ids: np.ndarray | None = None,
    topk_scores: np.ndarray | None = None,
    tail_ties: np.ndarray | None = None,
    checked: bool = False,
) -> TieRanks:
    """Where each image's true class ranks: the one function for it, from either source.

    - ``scores`` (N, C): a full score matrix; the ranks are exact. A NaN true-class score ranks
      last (never a hit); other NaN scores rank below every class; ±inf anywhere is an error.
      ``checked``: the caller has already checked the scores (the search's overflow check on its
      tile), so they are not scanned again, and a label may be -1, an image whose class is not
      among these columns (ranked last: ``above`` = C, ``tied`` = 0).
    - ``topk_ids`` (N, m) with ``topk_scores`` (N, m): top-m lists; ``tail_ties`` (N,) counts
      classes outside the list that tie with its last score (0 when omitted: a tie group reaching
      the end of the list is assumed to end there). Without ``topk_scores`` the list order is the
      ranking (no ties). A true class absent from its list gets ``above = m``.

    ``.strict`` of the result is the plain 0-based rank (ties counted against the model).
    """
    if (scores is None) == (topk_ids is None):
        raise ValueError("true_ranks: give either scores or topk_ids")
    if scores is not None:
        scores = np.asarray(scores)
        if not checked:
            labels = check_labels(labels, len(scores), scores.shape[1])
            check_scores_finite(scores)
        return _ranks_in_matrix(scores, np.asarray(labels, dtype=np.int64))
    topk_ids = np.asarray(topk_ids)
    if topk_scores is None:
        n, m = topk_ids.shape
        labels = check_labels(labels, n)
        is_true = topk_ids == labels[:, None]
        rank = is_true.argmax(axis=1).astype(np.int64)
        rank[~is_true.any(axis=1)] = m
        return TieRanks.from_strict(rank)
    return _ranks_in_lists(topk_ids, labels, np.asarray(topk_scores), tail_ties)


def _ranks_in_lists(
    topk_ids: np.ndarray, labels: np.ndarray, scores: np.ndarray, tail_ties: np.ndarray | None
) -> TieRanks:
    n, m = topk_ids.shape
    labels = check_labels(labels, n)
    check_scores_finite(scores[topk_ids >= 0], "top-k scores")
    scores = np.where(np.isnan(scores), -np.inf, scores)
    is_true = topk_ids == labels[:, None]
    present = is_true.any(axis=1)
    true_score = scores[np.arange(n), is_true.argmax(axis=1)]
    listed = topk_ids >= 0
    above = (listed & (scores > true_score[:, None])).sum(axis=1).astype(np.int64)
    tied = (listed & (scores == true_score[:, None]) & ~is_true).sum(axis=1).astype(np.int64)
    if tail_ties is not None and m:
        at_end = scores[:, -1] == true_score
        tied = tied + np.where(at_end, np.asarray(tail_ties, dtype=np.int64), 0)
    # a NaN (now -inf) true score is a miss whatever else is listed
    nan_true = present & np.isneginf(true_score)
    above = np.where(present & ~nan_true, above, m)
    tied = np.where(present & ~nan_true, tied, 0)
    return TieRanks(above, tied)


def _ranks_in_matrix(scores: np.ndarray, labels: np.ndarray) -> TieRanks:
    """Count, row by row, the classes above and tied with each row's true class (label -1 or a
    NaN true score: ``above`` = C, ``tied`` = 0).

    Both comparisons of a row run while it sits in the cache, into one reused mask counted by
    ``count_nonzero``: about 3x faster than comparing the whole matrix twice and summing the
    boolean matrices along rows (8 instead of 27 us per image at 21,842 classes, against about
    530 us of CPU for the search's product itself). Sharing the rows among threads was measured
    slower (7 -> 12 ms per 768-row tile on 2 cores): the rows' short numpy calls make the threads
    take turns at the GIL."""
    n, c = scores.shape
    above = np.full(n, c, np.int64)
    tied = np.zeros(n, np.int64)
    rows = np.flatnonzero(labels >= 0)
    mask = np.empty(c, bool)
    greater, equal, count = np.greater, np.equal, np.count_nonzero
    for i, label in zip(rows.tolist(), labels[rows].tolist(), strict=True):
        row = scores[i]
        true = row[label]
        if true != true:  # NaN: never a hit
            continue
        greater(row, true, out=mask)
        above[i] = count(mask)
        equal(row, true, out=mask)
        tied[i] = count(mask) - 1
    return TieRanks(above, tied)


def _as_tie_ranks(ranks: TieRanks | np.ndarray) -> TieRanks:
    return ranks if isinstance(ranks, TieRanks) else TieRanks.from_strict(ranks)


def _flat_rates(ranks: TieRanks, ks: Sequence[int], tie_rule: str) -> dict[int, float]:
    """Flat hit@K: the mean credit over images."""
    if len(ranks) == 0:
        raise UserInputError("no images to evaluate")
    return {int(k): float(np.mean(ranks.credit(k, tie_rule))) for k in ks}


def _class_rates(
    ranks: TieRanks, labels: np.ndarray, ks: Sequence[int], tie_rule: str, num_classes: int | None = None
) -> dict[int, np.ndarray]:
    """Per-class hit@K rates {K: (C,)}; NaN for classes without images."""
    labels = np.asarray(labels, dtype=np.int64)
    size = int(max(num_classes or 0, labels.max() + 1 if len(labels) else 0))
    counts = np.bincount(labels, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            int(k): np.bincount(labels, weights=ranks.credit(k, tie_rule), minlength=size) / counts
            for k in ks
        }


def hit_at_k(
    ranks_or_ids: TieRanks | np.ndarray,
    labels: np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    topk_scores: np.ndarray | None = None,
    num_classes: int | None = None,
    *,
    per_class: bool = False,
    average: bool = True,
    tie_rule: str = "expected",
) -> dict[int, Any]:
    """hit@K → {K: share in [0, 1]}, like scikit-learn's ``top_k_accuracy_score``.

    ``ranks_or_ids``: :class:`TieRanks`; or (N,) 0-based true-class ranks (no tie information:
    both rules agree); or (N, m) top-m class ids. With top-m ids, pass ``topk_scores`` (N, m) so
    ties are judged from the scores (then K < m unless the lists are complete). labels: (N,)
    true classes. ``tie_rule``: "expected" (default) or "strict" (see module doc).
    ``per_class``: hit@K per class, averaged over the classes that have images (Xian et al.'s
    per-class accuracy for K=1); with ``average=False`` the (C,) per-class rates themselves
    (NaN for classes without images, C = ``num_classes`` or max label + 1).
    """
    check_rule(tie_rule)
    if isinstance(ranks_or_ids, np.ndarray | list) and np.asarray(ranks_or_ids).ndim == 2:
        ids = np.asarray(ranks_or_ids)
        exact = topk_scores is not None and not _complete(ids, num_classes)
        ks = check_ks(ks, ids.shape[1], exact)
        labels = check_labels(labels, len(ids), num_classes)
        ranks = true_ranks(labels, topk_ids=ids, topk_scores=topk_scores)
    else:
        ks = hit_ks(ks)
        ranks = _as_tie_ranks(ranks_or_ids)
        labels = np.asarray(labels, dtype=np.int64)
    if not per_class:
        return _flat_rates(ranks, ks, tie_rule)
    rates = _class_rates(ranks, labels, ks, tie_rule, num_classes)
    if not average:
        return rates
    present = np.bincount(labels, minlength=len(next(iter(rates.values())))) > 0
    if not present.any():
        raise UserInputError("no images to evaluate")
    return {k: float(np.mean(rate[present])) for k, rate in rates.items()}


def harmonic_mean(seen: float, unseen: float) -> float:
    """H = 2·S·U / (S + U); 0 when both are 0."""
    total = seen + unseen
    return 0.0 if total <= 0 else float(2.0 * seen * unseen / total)


# ----------------------------------------------------------------------------- top-k order


def check_block(block: int) -> int:
    if int(block) < 1:
        raise ValueError(f"block must be a positive number of rows, got {block}")
    return int(block)


def sort_topk(scores: np.ndarray, ids: np.ndarray, block: int = SORT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by descending score, ties by ascending id; padding (-1, -inf) last.

    (N, m) scores and ids → sorted (scores, ids int64). Float64 scores stay float64 (the
    calibrated scores of :func:`calibrated_topk`); any other dtype becomes float32. Rows are
    sorted ``block`` at a time: the lexsort's (block, m) temporaries stay bounded, the result
    does not depend on the block size.
    """
    scores, ids = np.asarray(scores), np.asarray(ids)
    dtype = np.float64 if scores.dtype == np.float64 else np.float32
    n = len(scores)
    block = check_block(block)
    if n <= block:
        return _sort_rows(scores, ids, dtype)
    out_scores = np.empty(scores.shape, dtype)
    out_ids = np.empty(ids.shape, np.int64)
    for lo in range(0, n, block):
        out_scores[lo : lo + block], out_ids[lo : lo + block] = _sort_rows(
            scores[lo : lo + block], ids[lo : lo + block], dtype
        )
    return out_scores, out_ids


def _sort_rows(scores: np.ndarray, ids: np.ndarray, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """One block of :func:`sort_topk`: (B, m) scores and ids, sorted row by row."""
    scores = np.where(ids < 0, -np.inf, scores).astype(dtype, copy=False)
    tie_ids = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((tie_ids, -scores), axis=1)
    return (
        np.take_along_axis(scores, order, axis=1),
        np.take_along_axis(ids.astype(np.int64, copy=False), order, axis=1),
    )


def topk_from_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of a full (N, C) score matrix in the same tie order as the evaluation search.

    For small label spaces (attribute datasets, C in the hundreds) where the caller already
    holds every score. Padded with (-inf, -1) when ``k > C``.
    """
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2:
        raise ValueError(f"scores must be (N, C), got {scores.shape}")
    n, c = scores.shape
    take = min(k, c)
    # a stable sort of -scores puts equal scores in ascending column order: the documented rule
    order = np.argsort(-scores, axis=1, kind="stable")[:, :take]
    top_scores = np.take_along_axis(scores, order, axis=1)
    if take < k:
        top_scores = np.hstack([top_scores, np.full((n, k - take), -np.inf, np.float32)])
        order = np.hstack([order, np.full((n, k - take), -1, np.int64)])
    return top_scores, order.astype(np.int64)
