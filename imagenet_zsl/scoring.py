"""ZSL and generalized-ZSL metrics computed from per-image top-k lists, without searching again.

Tie rules. For each image let ``r`` be the number of classes scoring strictly above the true
class and ``t`` the number of *other* classes scoring exactly the same (its tie group).

* ``expected`` (the headline): hit@K is the expected value under uniform random tie-breaking,
  credit ``min(1, max(0, (K − r) / (t + 1)))``. A model that gives every class the same score
  scores K/C, chance, not 0.
* ``strict`` (ties count against the model): hit iff ``r + t < K``.

With continuous scores ``t = 0`` and the two coincide. Classes with exactly identical prototypes
form one tie group whatever the float rounding: the search hashes prototype rows up front and
scores each distinct row once (see :mod:`imagenet_zsl.evaluation.search`), which then reports
``r`` and ``t`` of the true class exactly (:class:`TieRanks`).

Exactness: a top-m list decides hit@K for every K < m under both rules when the true class's
tie group does not reach the end of the list (if the true class is absent from the list, at
least m > K classes score above it or tie with the last listed one). Pass ``tail_ties`` (the
number of unlisted classes tied with the last listed score) or the exact :class:`TieRanks` of the
search otherwise. The evaluate command searches ``max(K) + 1`` classes.

Non-finite scores: a NaN true-class score is never a hit (it ranks below every class); scores
that overflow to ±inf are an error.

GZSL (Chao et al. 2016, calibrated stacking): seen-class scores are lowered by γ. Per image we keep
the top-m among seen classes and the top-m among unseen classes separately. Under the strict
rule, whether an image is a hit@K is a threshold test on γ (``γ > θ`` for unseen-class images,
``γ < φ`` for seen-class images, strict at the breakpoint). Under the expected rule an image
whose true class has ``t`` tied classes in its own label space is ``t + 1`` equally weighted
entries, one per position of the true class inside its tie group (rank ``r + i``), each a
threshold test; cross-space equality at exactly a breakpoint γ counts against the model.
Accuracies at any γ, the whole Seen-Unseen accuracy Curve, its area (AUSUC) and the γ maximising
H all follow exactly from these thresholds — one sort over the breakpoints, no grid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError

DEFAULT_KS = (1, 2, 5, 10, 20)
#: images per block when merging or sorting top-k lists row by row: bounds the temporaries (the
#: GZSL breakdown peaks at about 200 MB over its inputs for m = 21, tools/bench_gzsl_memory.py)
SORT_BLOCK = 65_536
#: the two tie rules; ``expected`` is the headline number everywhere
TIE_RULES = ("expected", "strict")
TIE_RULE_TEXT = {
    "expected": "expected value under uniform random tie-breaking: a true class with r classes "
    "strictly above it and t others tied with it earns min(1, max(0, (K - r) / (t + 1))) at hit@K; "
    "classes with identical prototypes always tie",
    "strict": "ties count against the model: hit@K iff r + t < K (keys ending in _strict)",
}


# ----------------------------------------------------------------------------- ranks & hit@K


def _check_labels(labels: np.ndarray, n: int, num_classes: int | None = None) -> np.ndarray:
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


def _check_rule(tie_rule: str) -> str:
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
        if _check_rule(tie_rule) == "strict":
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


def check_ks(ks: Iterable[int], m: int, exact_limit: bool) -> list[int]:
    """Validated sorted unique K values; with ``exact_limit`` K must be < m (see module doc)."""
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise UserInputError(f"K values must be positive integers, got {ks}")
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
) -> TieRanks:
    """Where each image's true class ranks: the one function for it, from either source.

    - ``scores`` (N, C): a full score matrix; the ranks are exact. A NaN true-class score ranks
      last (never a hit); other NaN scores rank below every class; ±inf anywhere is an error.
    - ``topk_ids`` (N, m) with ``topk_scores`` (N, m): top-m lists; ``tail_ties`` (N,) counts
      classes outside the list that tie with its last score (0 when omitted: a tie group reaching
      the end of the list is assumed to end there). Without ``topk_scores`` the list order is the
      ranking (no ties). A true class absent from its list gets ``above = m``.

    ``.strict`` of the result is the plain 0-based rank (ties counted against the model).
    """
    if (scores is None) == (topk_ids is None):
        raise ValueError("true_ranks: give either scores or topk_ids")
    if scores is not None:
        return _ranks_in_matrix(np.asarray(scores), labels)
    topk_ids = np.asarray(topk_ids)
    if topk_scores is None:
        n, m = topk_ids.shape
        labels = _check_labels(labels, n)
        is_true = topk_ids == labels[:, None]
        rank = is_true.argmax(axis=1).astype(np.int64)
        rank[~is_true.any(axis=1)] = m
        return TieRanks.from_strict(rank)
    return _ranks_in_lists(topk_ids, labels, np.asarray(topk_scores), tail_ties)


def _ranks_in_lists(
    topk_ids: np.ndarray, labels: np.ndarray, scores: np.ndarray, tail_ties: np.ndarray | None
) -> TieRanks:
    n, m = topk_ids.shape
    labels = _check_labels(labels, n)
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
    labels = _check_labels(labels, len(scores), scores.shape[1])
    check_scores_finite(scores)
    true_score = scores[np.arange(len(scores)), labels]
    nan_true = np.isnan(true_score)
    above = (scores > true_score[:, None]).sum(axis=1).astype(np.int64)
    tied = (scores == true_score[:, None]).sum(axis=1).astype(np.int64) - 1
    c = scores.shape[1]
    return TieRanks(np.where(nan_true, c, above), np.where(nan_true, 0, tied))


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
    _check_rule(tie_rule)
    if isinstance(ranks_or_ids, np.ndarray | list) and np.asarray(ranks_or_ids).ndim == 2:
        ids = np.asarray(ranks_or_ids)
        exact = topk_scores is not None and not _complete(ids, num_classes)
        ks = check_ks(ks, ids.shape[1], exact)
        labels = _check_labels(labels, len(ids), num_classes)
        ranks = true_ranks(labels, topk_ids=ids, topk_scores=topk_scores)
    else:
        ks = sorted({int(k) for k in ks})
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


# ----------------------------------------------------------------------------- GZSL


@dataclass
class GZSLTopK:
    """Per image, the top-m classes among seen classes and, separately, among unseen classes.

    Class indices are into one joint label space of C classes; ``seen_mask`` (C,) bool marks the
    seen ones. seen_scores/seen_ids, unseen_scores/unseen_ids: (N, m) float32/int64 in the search
    tie order (padding id -1, score -inf); labels: (N,) int64 joint indices. ``own_ranks``: the
    exact :class:`TieRanks` of the true class within its own label space (seen classes for a
    seen-class image, unseen for an unseen-class one), e.g. from the search; derived from the
    lists when omitted.
    """

    seen_scores: np.ndarray
    seen_ids: np.ndarray
    unseen_scores: np.ndarray
    unseen_ids: np.ndarray
    labels: np.ndarray
    seen_mask: np.ndarray
    own_ranks: TieRanks | None = None

    def __post_init__(self) -> None:
        self.seen_mask = np.asarray(self.seen_mask, dtype=bool)
        n = len(self.labels)
        shapes = {a.shape for a in (self.seen_scores, self.seen_ids, self.unseen_scores, self.unseen_ids)}
        if len(shapes) != 1 or next(iter(shapes))[0] != n:
            raise ValueError(f"GZSL top-k lists must share one (N, m) shape with N={n}: {shapes}")
        self.labels = _check_labels(self.labels, n, len(self.seen_mask))
        # block by block: the checks' temporaries stay O(block · m) whatever N
        for name, ids, want in (("seen", self.seen_ids, True), ("unseen", self.unseen_ids, False)):
            for lo in range(0, n, SORT_BLOCK):
                listed = ids[lo : lo + SORT_BLOCK][ids[lo : lo + SORT_BLOCK] >= 0]
                if len(listed) and (
                    listed.max() >= len(self.seen_mask) or (self.seen_mask[listed] != want).any()
                ):
                    raise ValueError(f"{name}_ids hold classes outside the {name} label space")
        if self.seen_mask.all() or not self.seen_mask.any():
            raise UserInputError("GZSL needs both seen and unseen classes in the label space")
        if self.own_ranks is None:
            self.own_ranks = self._derive_own_ranks()
        elif len(self.own_ranks) != n:
            raise ValueError(f"own_ranks hold {len(self.own_ranks)} images, the lists {n}")

    def _derive_own_ranks(self) -> TieRanks:
        """:class:`TieRanks` of each true class within its own label space, judged from the lists
        (one block of images at a time)."""
        above, tied = [], []
        for lo in range(0, len(self.labels), SORT_BLOCK):
            rows = slice(lo, lo + SORT_BLOCK)
            seen_img = self.seen_mask[self.labels[rows]][:, None]
            own_ids = np.where(seen_img, self.seen_ids[rows], self.unseen_ids[rows])
            own_scores = np.where(seen_img, self.seen_scores[rows], self.unseen_scores[rows])
            ranks = true_ranks(self.labels[rows], topk_ids=own_ids, topk_scores=own_scores)
            above.append(ranks.above)
            tied.append(ranks.tied)
        return TieRanks(np.concatenate(above), np.concatenate(tied))

    @property
    def m(self) -> int:
        return int(self.seen_ids.shape[1])

    @property
    def seen_images(self) -> np.ndarray:
        return self.seen_mask[self.labels]

    def subset(self, rows: np.ndarray) -> GZSLTopK:
        return GZSLTopK(
            self.seen_scores[rows],
            self.seen_ids[rows],
            self.unseen_scores[rows],
            self.unseen_ids[rows],
            self.labels[rows],
            self.seen_mask,
            self.own_ranks.take(rows),
        )

    @classmethod
    def concat(cls, parts: Sequence[GZSLTopK]) -> GZSLTopK:
        ranks = TieRanks(
            np.concatenate([p.own_ranks.above for p in parts]),
            np.concatenate([p.own_ranks.tied for p in parts]),
        )
        return cls(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("seen_scores", "seen_ids", "unseen_scores", "unseen_ids", "labels")
            ),
            parts[0].seen_mask,
            ranks,
        )


def _entry_thresholds(gz: GZSLTopK, rows: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """θ of images ``rows`` when their true class sits at 0-based ``rank`` of its own space.

    Unseen-class image: hit iff γ > θ, θ = (q+1)-th best seen score − true score, with q = k −
    1 − rank (passed through ``rank`` relative to k by the caller). Seen-class image: hit iff γ <
    φ, φ = true score − (q+1)-th best unseen score. ±inf encode always/never.
    """
    m = gz.m
    seen_img = gz.seen_images[rows]
    above = gz.own_ranks.above[rows]
    present = above < m
    # sorted lists: entry ``above`` is the first of the true class's tie group (its score);
    # single elements are gathered, never an (N, m) copy of the lists
    own_col, other_col = np.minimum(above, m - 1), np.clip(rank, 0, m - 1)
    true_score = np.where(seen_img, gz.seen_scores[rows, own_col], gz.unseen_scores[rows, own_col]).astype(
        np.float64
    )
    never = (rank < 0) | ~present
    other = np.where(seen_img, gz.unseen_scores[rows, other_col], gz.seen_scores[rows, other_col]).astype(
        np.float64
    )
    with np.errstate(invalid="ignore"):
        theta = np.where(seen_img, true_score - other, other - true_score)
    # other == -inf (fewer competitors than q+1): the image is a hit at every γ
    theta = np.where(np.isneginf(other), np.where(seen_img, np.inf, -np.inf), theta)
    return np.where(never, np.where(seen_img, -np.inf, np.inf), theta)


def gzsl_entries(
    gz: GZSLTopK, k: int, tie_rule: str = "expected"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Threshold entries deciding hit@k under calibrated stacking → (rows, θ, fraction).

    ``strict``: one entry per image (rank r + t). ``expected``: one entry per position i of the
    true class inside its tie group that can still be a hit (r + i < k), weighted 1/(t + 1).
    rows (E,) index images; θ (E,) float64 as in :func:`gzsl_thresholds`; fraction (E,) the
    share of the image's weight each entry carries.
    """
    check_ks([k], gz.m, True)
    ranks = gz.own_ranks
    n = len(gz.labels)
    if _check_rule(tie_rule) == "strict":
        rows = np.arange(n)
        return rows, _entry_thresholds(gz, rows, k - 1 - ranks.strict), np.ones(n)
    # offsets i = 0 .. min(t, k - 1 - r) of each image, in image order then i (no (N, k) arrays)
    count = np.maximum(np.minimum(ranks.tied, k - 1 - ranks.above) + 1, 0).astype(np.int64)
    rows = np.repeat(np.arange(n), count)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
    theta = _entry_thresholds(gz, rows, k - 1 - (ranks.above[rows] + offset))
    return rows, theta, 1.0 / (ranks.tied[rows] + 1.0)


def gzsl_thresholds(gz: GZSLTopK, k: int) -> np.ndarray:
    """Per image the γ threshold that decides hit@k under the strict rule (float64, ±inf).

    Unseen-class image: hit iff γ > θ, θ = (q+1)-th best seen score − true score, with
    q = k − 1 − (rank among unseen classes). Seen-class image: hit iff γ < φ, φ = true score −
    (q+1)-th best unseen score, q = k − 1 − (rank among seen classes). +inf/−inf encode
    always/never (or never/always).
    """
    return gzsl_entries(gz, k, "strict")[1]


def _group_weights(labels: np.ndarray, group: np.ndarray, per_class: bool) -> np.ndarray:
    """Weights summing to 1 over ``group`` images: 1/n, or 1/(n_class · classes) per class."""
    weights = np.zeros(len(labels))
    if not group.any():
        return weights
    if per_class:
        counts = np.bincount(labels[group])
        classes = np.count_nonzero(counts)
        weights[group] = 1.0 / (counts[labels[group]] * classes)
    else:
        weights[group] = 1.0 / group.sum()
    return weights


def _image_weights(gz: GZSLTopK, per_class: bool) -> np.ndarray:
    seen_img = gz.seen_images
    return _group_weights(gz.labels, seen_img, per_class) + _group_weights(gz.labels, ~seen_img, per_class)


@dataclass
class SeenUnseenCurve:
    """The exact Seen-Unseen accuracy Curve for one K.

    Interval j covers γ in (breakpoints[j-1], breakpoints[j]) (open, with ±inf at the ends);
    ``seen[j]``/``unseen[j]`` are the accuracies there (len(breakpoints) + 1 values). Along j the
    unseen accuracy never falls and the seen accuracy never rises. thresholds, seen_images and
    weights are per threshold entry (:func:`gzsl_entries`).
    """

    k: int
    per_class: bool
    breakpoints: np.ndarray
    seen: np.ndarray
    unseen: np.ndarray
    thresholds: np.ndarray
    seen_images: np.ndarray
    weights: np.ndarray
    tie_rule: str = "expected"

    @property
    def ausuc(self) -> float:
        """Area under the curve (x = unseen accuracy, y = seen accuracy), trapezoidal.

        The curve starts at (0, seen[0]): when some unseen images are hits at every γ (K larger
        than the number of seen classes) the curve's first point has x > 0, and the area to its
        left, under seen[0], is achieved too. Chao et al.'s area in the ordinary case.
        """
        x = np.r_[0.0, self.unseen]
        y = np.r_[self.seen[0], self.seen]
        return float(np.clip(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0), 0.0, 1.0))

    def at(self, gamma: float) -> tuple[float, float]:
        """(seen, unseen) accuracy at exactly ``gamma`` (breakpoints included)."""
        hit = np.where(self.seen_images, gamma < self.thresholds, gamma > self.thresholds)
        seen = float(np.sum(self.weights[hit & self.seen_images]))
        unseen = float(np.sum(self.weights[hit & ~self.seen_images]))
        return min(seen, 1.0), min(unseen, 1.0)

    @property
    def harmonic(self) -> np.ndarray:
        total = self.seen + self.unseen
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, 2 * self.seen * self.unseen / total, 0.0)

    def interval(self, j: int) -> tuple[float, float]:
        lo = self.breakpoints[j - 1] if j > 0 else -np.inf
        hi = self.breakpoints[j] if j < len(self.breakpoints) else np.inf
        return float(lo), float(hi)


def _breakpoint_index(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique finite thresholds and each threshold's index among them (one sort)."""
    finite = np.isfinite(theta)
    breakpoints, position = np.unique(theta[finite], return_inverse=True)
    index = np.zeros(len(theta), dtype=np.int64)
    index[finite] = position.ravel()
    return breakpoints, index


def seen_unseen_curve(
    gz: GZSLTopK, k: int = 1, per_class: bool = True, tie_rule: str = "expected"
) -> SeenUnseenCurve:
    """Sweep every breakpoint of calibrated stacking for hit@k, vectorised (one sort)."""
    if not gz.seen_images.any() or gz.seen_images.all():
        raise UserInputError("GZSL needs test images of both seen and unseen classes")
    rows, theta, fraction = gzsl_entries(gz, k, tie_rule)
    seen_img = gz.seen_images[rows]
    weights = _image_weights(gz, per_class)[rows] * fraction
    breakpoints, index = _breakpoint_index(theta)
    nb = len(breakpoints)
    # unseen entry with θ = b_i is a hit in intervals j >= i+1; −inf: all; +inf: none
    start = np.where(np.isneginf(theta), 0, np.where(np.isposinf(theta), nb + 1, index + 1))
    unseen_w = np.where(seen_img, 0.0, weights)
    unseen = np.cumsum(np.bincount(start, weights=unseen_w, minlength=nb + 2))[: nb + 1]
    # seen entry with φ = b_i is a hit in intervals j <= i; +inf: all; −inf: none
    end = np.where(np.isposinf(theta), nb, np.where(np.isneginf(theta), -1, index))
    seen_w = np.where(seen_img, weights, 0.0)
    per_end = np.bincount(end + 1, weights=seen_w, minlength=nb + 2)
    seen = np.cumsum(per_end[::-1])[::-1][1 : nb + 2]
    # cumulative sums of 1/n weights can overshoot 1 by an ulp or two
    seen, unseen = np.clip(seen, 0.0, 1.0), np.clip(unseen, 0.0, 1.0)
    return SeenUnseenCurve(k, per_class, breakpoints, seen, unseen, theta, seen_img, weights, tie_rule)


def ausuc(gz: GZSLTopK, k: int = 1, per_class: bool = True, tie_rule: str = "expected") -> float:
    """Area under the Seen-Unseen accuracy Curve (Chao et al. 2016), exact."""
    return seen_unseen_curve(gz, k, per_class, tie_rule).ausuc


def choose_gamma(
    gz_val: GZSLTopK | SeenUnseenCurve, k: int = 1, per_class: bool = True, tie_rule: str = "expected"
) -> tuple[float, float]:
    """γ maximising H on a validation set (Le Cacheux et al. 2019) → (γ, validation H).

    Every γ inside the best interval of the exact curve gives the same validation H; we take 0
    when 0 is inside it (calibration does not help), else the interval's midpoint (for an
    unbounded interval: its finite end moved by the median breakpoint gap). Among equally good
    intervals the one closest to 0 wins.
    """
    curve = (
        gz_val if isinstance(gz_val, SeenUnseenCurve) else seen_unseen_curve(gz_val, k, per_class, tie_rule)
    )
    harmonic = curve.harmonic
    best = float(harmonic.max())
    candidates = np.flatnonzero(harmonic >= best - 1e-12)
    b = curve.breakpoints
    gap = float(np.median(np.diff(b))) if len(b) > 1 else 1.0
    gap = gap if gap > 0 else 1.0

    def pick(j: int) -> float:
        lo, hi = curve.interval(j)
        if lo < 0 < hi:
            return 0.0
        if np.isinf(lo) and np.isinf(hi):
            return 0.0
        if np.isinf(lo):
            return hi - gap / 2
        if np.isinf(hi):
            return lo + gap / 2
        return (lo + hi) / 2

    gammas = [pick(int(j)) for j in candidates]
    gamma = min(gammas, key=lambda g: (abs(g), g))
    return float(gamma), best


def _entry_hits(gz: GZSLTopK, k: int, gamma: float, tie_rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, credit) of the threshold entries at ``gamma``: credit = fraction where a hit."""
    rows, theta, fraction = gzsl_entries(gz, k, tie_rule)
    hit = np.where(gz.seen_images[rows], gamma < theta, gamma > theta)
    return rows, np.where(hit, fraction, 0.0)


def gzsl_accuracies(
    gz: GZSLTopK, k: int, gamma: float, per_class: bool, tie_rule: str = "expected"
) -> dict[str, float]:
    """{'seen', 'unseen', 'H'} hit@k accuracies at calibration ``gamma`` (0 = direct stacking)."""
    seen_img = gz.seen_images
    rows, credit = _entry_hits(gz, k, gamma, tie_rule)
    seen_w = _group_weights(gz.labels, seen_img, per_class)[rows]
    unseen_w = _group_weights(gz.labels, ~seen_img, per_class)[rows]
    seen = min(float(np.sum(seen_w * credit)), 1.0)
    unseen = min(float(np.sum(unseen_w * credit)), 1.0)
    return {"seen": seen, "unseen": unseen, "H": harmonic_mean(seen, unseen)}


def gzsl_class_rates(gz: GZSLTopK, k: int, gamma: float = 0.0, tie_rule: str = "expected") -> np.ndarray:
    """(C,) per-class GZSL hit@k at ``gamma`` over the joint label space (NaN: no image)."""
    rows, credit = _entry_hits(gz, k, gamma, tie_rule)
    size = len(gz.seen_mask)
    per = np.bincount(gz.labels[rows], weights=credit, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return per / np.bincount(gz.labels, minlength=size)


def _strict_key(mode: str, tie_rule: str) -> str:
    return mode if tie_rule == "expected" else f"{mode}_strict"


def gzsl_metrics(
    gz: GZSLTopK,
    ks: Sequence[int] = DEFAULT_KS,
    gamma: float | None = None,
) -> dict:
    """Every GZSL figure for each K: seen/unseen/H under direct stacking (γ = 0) and AUSUC,
    per class (Xian et al., the default) and flat; plus seen/unseen/H at ``gamma`` if given.

    Returns {"per_class": {K: {...}}, "flat": {K: {...}}, "calibrated": {...} | absent} under
    the expected tie rule, with the strict twins under "per_class_strict" and "flat_strict".
    """
    ks = check_ks(ks, gz.m, True)
    seen_img = gz.seen_images
    if not seen_img.any() or seen_img.all():
        raise UserInputError("GZSL needs test images of both seen and unseen classes")
    out: dict = {}
    modes = (("per_class", True), ("flat", False))
    for tie_rule in TIE_RULES:
        for mode, per_class in modes:
            block = out.setdefault(_strict_key(mode, tie_rule), {})
            for k in ks:
                curve = seen_unseen_curve(gz, k, per_class, tie_rule)
                seen, unseen = curve.at(0.0)
                block[k] = {
                    "seen": seen,
                    "unseen": unseen,
                    "H": harmonic_mean(seen, unseen),
                    "ausuc": curve.ausuc,
                }
    if gamma is not None:
        out["calibrated"] = {"gamma": float(gamma)}
        for tie_rule in TIE_RULES:
            for mode, per_class in modes:
                out["calibrated"][_strict_key(mode, tie_rule)] = {
                    k: gzsl_accuracies(gz, k, gamma, per_class, tie_rule) for k in ks
                }
    return out


def calibrated_topk(
    gz: GZSLTopK, gamma: float, k: int, block: int = SORT_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """Merged top-k over the joint label space after subtracting γ from seen scores.

    Returns (scores float64 (N, k), ids int64 (N, k)); ties by ascending class index. Rows are
    merged ``block`` images at a time, so the (block, 2m) float64/int64 temporaries of the merge
    stay bounded whatever N (the result is the same for any block size).
    """
    n = len(gz.labels)
    width = min(k, 2 * gz.m)
    scores = np.empty((n, width), np.float64)
    ids = np.empty((n, width), np.int64)
    for lo in range(0, n, _check_block(block)):
        part_scores, part_ids = calibrated_topk_rows(gz, gamma, k, lo, lo + block)
        scores[lo : lo + block], ids[lo : lo + block] = part_scores, part_ids
    return scores, ids


def calibrated_topk_rows(
    gz: GZSLTopK, gamma: float, k: int, start: int, stop: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`calibrated_topk` of images ``start:stop`` only → (scores (B, k), ids (B, k))."""
    rows = slice(start, stop)
    scores = np.hstack(
        [gz.seen_scores[rows].astype(np.float64) - gamma, gz.unseen_scores[rows].astype(np.float64)]
    )
    scores, ids = sort_topk(scores, np.hstack([gz.seen_ids[rows], gz.unseen_ids[rows]]))
    return scores[:, :k], ids[:, :k]


# ----------------------------------------------------------------------------- full score matrices


def _own_space_ranks(scores: np.ndarray, labels: np.ndarray, seen_mask: np.ndarray) -> TieRanks:
    """Exact TieRanks of each true class within its own label space (seen or unseen columns)."""
    check_scores_finite(scores)
    n = len(scores)
    true_score = scores[np.arange(n), labels]
    own = seen_mask[None, :] == seen_mask[labels][:, None]
    above = (own & (scores > true_score[:, None])).sum(axis=1).astype(np.int64)
    tied = (own & (scores == true_score[:, None])).sum(axis=1).astype(np.int64) - 1
    nan_true = np.isnan(true_score)
    return TieRanks(np.where(nan_true, scores.shape[1], above), np.where(nan_true, 0, tied))


def gzsl_from_scores(scores: np.ndarray, labels: np.ndarray, seen_mask: np.ndarray, m: int) -> GZSLTopK:
    """GZSL top-m lists from a full (N, C) score matrix and a (C,) seen-class mask (with the
    exact own-space tie ranks)."""

    scores = np.asarray(scores, dtype=np.float32)
    seen_mask = np.asarray(seen_mask, dtype=bool)
    if seen_mask.shape != (scores.shape[1],):
        raise ValueError(f"seen_mask must have shape ({scores.shape[1]},), got {seen_mask.shape}")
    if seen_mask.all() or not seen_mask.any():
        raise UserInputError(
            f"seen_mask marks {int(seen_mask.sum())} of {len(seen_mask)} classes as seen; GZSL needs "
            "both seen and unseen classes (drop seen_mask for plain ZSL)"
        )
    labels = _check_labels(labels, len(scores), scores.shape[1])
    ranks = _own_space_ranks(scores, labels, seen_mask)
    lists = []
    for mask in (seen_mask, ~seen_mask):
        columns = np.flatnonzero(mask)
        top_scores, top = topk_from_scores(scores[:, columns], m)
        lists += [top_scores, np.where(top >= 0, columns[np.maximum(top, 0)], -1)]
    return GZSLTopK(*lists, labels=labels, seen_mask=seen_mask, own_ranks=ranks)


def metrics_from_scores(
    scores: np.ndarray,
    labels: np.ndarray,
    ks: Sequence[int] = (1,),
    seen_mask: np.ndarray | None = None,
    gamma: float | None = None,
) -> dict:
    """All metrics of a full (N, C) score matrix (small label spaces, e.g. 717 SUN classes).

    Without ``seen_mask``: ZSL {"flat": {K: hit}, "per_class": {K: hit}} over all C columns
    (expected tie rule) plus "flat_strict"/"per_class_strict". With it: the
    :func:`gzsl_metrics` dict (labels index the same C columns).
    """
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2:
        raise ValueError(f"scores must be (N, C), got {scores.shape}")
    if seen_mask is None:
        ranks = true_ranks(labels, scores=scores)
        ks = check_ks(ks, scores.shape[1], False)
        labels = np.asarray(labels, dtype=np.int64)
        out = {}
        for tie_rule in TIE_RULES:
            out[_strict_key("flat", tie_rule)] = hit_at_k(ranks, labels, ks, tie_rule=tie_rule)
            out[_strict_key("per_class", tie_rule)] = hit_at_k(
                ranks, labels, ks, num_classes=scores.shape[1], per_class=True, tie_rule=tie_rule
            )
        return out
    ks = sorted({int(k) for k in ks})
    gz = gzsl_from_scores(scores, labels, seen_mask, max(ks) + 1)
    return gzsl_metrics(gz, ks, gamma)


# ----------------------------------------------------------------------------- top-k order


def _check_block(block: int) -> int:
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
    block = _check_block(block)
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
