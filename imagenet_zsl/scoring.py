"""ZSL and generalized-ZSL metrics computed from per-image top-k lists, without searching again.

Tie rule (ties count against the model): the rank of the true class is the number of *other*
classes whose score is greater than **or equal to** the true class's score. hit@K means rank < K.
A model that gives every class the same score therefore scores 0, never 1/C.

Exactness: a top-m list decides hit@K exactly for every K < m (if the true class is absent
from the list, or sits at its last place, at least m-1 >= K other classes score >= it). The
evaluate command therefore searches ``max(K) + 1`` classes. A list that holds every class of its
label space (padded with id -1) is exact for all K.

GZSL (Chao et al. 2016, calibrated stacking): seen-class scores are lowered by γ. Per image we keep
the top-m among seen classes and the top-m among unseen classes separately; whether an image is
a hit@K is then a threshold test on γ (``γ > θ`` for unseen-class images, ``γ < φ`` for
seen-class images, strict because ties count against the model). Accuracies at any γ, the whole
Seen-Unseen accuracy Curve, its area (AUSUC) and the γ maximising H all follow exactly from
these thresholds — one sort over the breakpoints, no grid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError

DEFAULT_KS = (1, 2, 5, 10, 20)


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


def true_rank(topk_ids: np.ndarray, labels: np.ndarray, topk_scores: np.ndarray | None = None) -> np.ndarray:
    """0-based rank of each image's true class; ``m`` (the list length) when it is not listed.

    With ``topk_scores`` the tie rule applies (other listed classes with an equal score rank
    ahead); without them the list order is the ranking.
    """
    topk_ids = np.asarray(topk_ids)
    n, m = topk_ids.shape
    labels = _check_labels(labels, n)
    is_true = topk_ids == labels[:, None]
    present = is_true.any(axis=1)
    position = is_true.argmax(axis=1)
    if topk_scores is None:
        rank = position.astype(np.int64)
    else:
        topk_scores = np.asarray(topk_scores)
        true_score = topk_scores[np.arange(n), position]
        rank = ((topk_scores >= true_score[:, None]) & ~is_true).sum(axis=1).astype(np.int64)
    rank[~present] = m
    return rank


def ranks_from_scores(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Exact tie-against-model rank of the true class from a full (N, C) score matrix."""
    scores = np.asarray(scores)
    labels = _check_labels(labels, len(scores), scores.shape[1])
    true_score = scores[np.arange(len(scores)), labels]
    return (scores >= true_score[:, None]).sum(axis=1).astype(np.int64) - 1


def _flat_rates(ranks: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    """Flat hit@K: the share of images whose true-class rank is < K."""
    ranks = np.asarray(ranks)
    if len(ranks) == 0:
        raise UserInputError("no images to evaluate")
    return {int(k): float(np.mean(ranks < k)) for k in ks}


def _class_rates(
    ranks: np.ndarray, labels: np.ndarray, ks: Sequence[int], num_classes: int | None = None
) -> dict[int, np.ndarray]:
    """Per-class hit@K rates {K: (C,)}; NaN for classes without images."""
    labels = np.asarray(labels, dtype=np.int64)
    size = int(max(num_classes or 0, labels.max() + 1 if len(labels) else 0))
    counts = np.bincount(labels, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {int(k): np.bincount(labels, weights=(ranks < k), minlength=size) / counts for k in ks}


def hit_at_k(
    ranks_or_ids: np.ndarray,
    labels: np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    topk_scores: np.ndarray | None = None,
    num_classes: int | None = None,
    *,
    per_class: bool = False,
    average: bool = True,
) -> dict[int, Any]:
    """hit@K → {K: share in [0, 1]}, like scikit-learn's ``top_k_accuracy_score``.

    ``ranks_or_ids``: either (N,) 0-based true-class ranks (:func:`ranks_from_scores`,
    :func:`true_rank`) or (N, m) top-m class ids; labels: (N,) true classes. With top-m ids, pass
    ``topk_scores`` (N, m) to apply the tie rule (then K < m unless the lists are complete).
    ``per_class``: hit@K per class, averaged over the classes that have images (Xian et al.'s
    per-class accuracy for K=1); with ``average=False`` the (C,) per-class rates themselves
    (NaN for classes without images, C = ``num_classes`` or max label + 1).
    """
    ranks_or_ids = np.asarray(ranks_or_ids)
    if ranks_or_ids.ndim == 2:
        exact = topk_scores is not None and not _complete(ranks_or_ids, num_classes)
        ks = check_ks(ks, ranks_or_ids.shape[1], exact)
        labels = _check_labels(labels, len(ranks_or_ids), num_classes)
        ranks = true_rank(ranks_or_ids, labels, topk_scores)
    else:
        ks = sorted({int(k) for k in ks})
        ranks = ranks_or_ids
        labels = np.asarray(labels, dtype=np.int64)
    if not per_class:
        return _flat_rates(ranks, ks)
    rates = _class_rates(ranks, labels, ks, num_classes)
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
    tie order (padding id -1, score -inf); labels: (N,) int64 joint indices.
    """

    seen_scores: np.ndarray
    seen_ids: np.ndarray
    unseen_scores: np.ndarray
    unseen_ids: np.ndarray
    labels: np.ndarray
    seen_mask: np.ndarray

    def __post_init__(self) -> None:
        self.seen_mask = np.asarray(self.seen_mask, dtype=bool)
        n = len(self.labels)
        shapes = {a.shape for a in (self.seen_scores, self.seen_ids, self.unseen_scores, self.unseen_ids)}
        if len(shapes) != 1 or next(iter(shapes))[0] != n:
            raise ValueError(f"GZSL top-k lists must share one (N, m) shape with N={n}: {shapes}")
        self.labels = _check_labels(self.labels, n, len(self.seen_mask))
        for name, ids, want in (("seen", self.seen_ids, True), ("unseen", self.unseen_ids, False)):
            listed = ids[ids >= 0]
            if len(listed) and (
                listed.max() >= len(self.seen_mask) or (self.seen_mask[listed] != want).any()
            ):
                raise ValueError(f"{name}_ids hold classes outside the {name} label space")
        if self.seen_mask.all() or not self.seen_mask.any():
            raise UserInputError("GZSL needs both seen and unseen classes in the label space")

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
        )

    @classmethod
    def concat(cls, parts: Sequence[GZSLTopK]) -> GZSLTopK:
        return cls(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("seen_scores", "seen_ids", "unseen_scores", "unseen_ids", "labels")
            ),
            parts[0].seen_mask,
        )


def gzsl_thresholds(gz: GZSLTopK, k: int) -> np.ndarray:
    """Per image the γ threshold that decides hit@k under calibrated stacking (float64, ±inf).

    Unseen-class image: hit iff γ > θ, θ = (q+1)-th best seen score − true score, with
    q = k − 1 − (rank among unseen classes). Seen-class image: hit iff γ < φ, φ = true score −
    (q+1)-th best unseen score, q = k − 1 − (rank among seen classes). +inf/−inf encode
    always/never (or never/always).
    """
    check_ks([k], gz.m, True)
    n = len(gz.labels)
    seen_img = gz.seen_images
    own_scores = np.where(seen_img[:, None], gz.seen_scores, gz.unseen_scores)
    own_ids = np.where(seen_img[:, None], gz.seen_ids, gz.unseen_ids)
    other_scores = np.where(seen_img[:, None], gz.unseen_scores, gz.seen_scores)
    rank = true_rank(own_ids, gz.labels, own_scores)
    is_true = own_ids == gz.labels[:, None]
    true_score = own_scores[np.arange(n), is_true.argmax(axis=1)].astype(np.float64)
    q = k - 1 - rank
    never = q < 0
    other = other_scores[np.arange(n), np.clip(q, 0, gz.m - 1)].astype(np.float64)
    with np.errstate(invalid="ignore"):
        theta = np.where(seen_img, true_score - other, other - true_score)
    # other == -inf (fewer competitors than q+1): unseen image always a hit, seen image too
    theta = np.where(np.isneginf(other), np.where(seen_img, np.inf, -np.inf), theta)
    theta = np.where(never, np.where(seen_img, -np.inf, np.inf), theta)
    return theta


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


@dataclass
class SeenUnseenCurve:
    """The exact Seen-Unseen accuracy Curve for one K.

    Interval j covers γ in (breakpoints[j-1], breakpoints[j]) (open, with ±inf at the ends);
    ``seen[j]``/``unseen[j]`` are the accuracies there (len(breakpoints) + 1 values). Along j the
    unseen accuracy never falls and the seen accuracy never rises.
    """

    k: int
    per_class: bool
    breakpoints: np.ndarray
    seen: np.ndarray
    unseen: np.ndarray
    thresholds: np.ndarray
    seen_images: np.ndarray
    weights: np.ndarray

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
        return seen, unseen

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
    gz: GZSLTopK, k: int = 1, per_class: bool = True, thresholds: np.ndarray | None = None
) -> SeenUnseenCurve:
    """Sweep every breakpoint of calibrated stacking for hit@k, vectorised (one sort).

    ``thresholds`` may pass ``gzsl_thresholds(gz, k)`` when the caller already has them.
    """
    seen_img = gz.seen_images
    if not seen_img.any() or seen_img.all():
        raise UserInputError("GZSL needs test images of both seen and unseen classes")
    theta = gzsl_thresholds(gz, k) if thresholds is None else thresholds
    weights = _group_weights(gz.labels, seen_img, per_class) + _group_weights(gz.labels, ~seen_img, per_class)
    breakpoints, index = _breakpoint_index(theta)
    nb = len(breakpoints)
    # unseen image with θ = b_i is a hit in intervals j >= i+1; −inf: all; +inf: none
    start = np.where(np.isneginf(theta), 0, np.where(np.isposinf(theta), nb + 1, index + 1))
    unseen_w = np.where(seen_img, 0.0, weights)
    unseen = np.cumsum(np.bincount(start, weights=unseen_w, minlength=nb + 2))[: nb + 1]
    # seen image with φ = b_i is a hit in intervals j <= i; +inf: all; −inf: none
    end = np.where(np.isposinf(theta), nb, np.where(np.isneginf(theta), -1, index))
    seen_w = np.where(seen_img, weights, 0.0)
    per_end = np.bincount(end + 1, weights=seen_w, minlength=nb + 2)
    seen = np.cumsum(per_end[::-1])[::-1][1 : nb + 2]
    # cumulative sums of 1/n weights can overshoot 1 by an ulp or two
    seen, unseen = np.clip(seen, 0.0, 1.0), np.clip(unseen, 0.0, 1.0)
    return SeenUnseenCurve(k, per_class, breakpoints, seen, unseen, theta, seen_img, weights)


def ausuc(gz: GZSLTopK, k: int = 1, per_class: bool = True) -> float:
    """Area under the Seen-Unseen accuracy Curve (Chao et al. 2016), exact."""
    return seen_unseen_curve(gz, k, per_class).ausuc


def choose_gamma(
    gz_val: GZSLTopK | SeenUnseenCurve, k: int = 1, per_class: bool = True
) -> tuple[float, float]:
    """γ maximising H on a validation set (Le Cacheux et al. 2019) → (γ, validation H).

    Every γ inside the best interval of the exact curve gives the same validation H; we take 0
    when 0 is inside it (calibration does not help), else the interval's midpoint (for an
    unbounded interval: its finite end moved by the median breakpoint gap). Among equally good
    intervals the one closest to 0 wins.
    """
    curve = gz_val if isinstance(gz_val, SeenUnseenCurve) else seen_unseen_curve(gz_val, k, per_class)
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


def gzsl_accuracies(gz: GZSLTopK, k: int, gamma: float, per_class: bool) -> dict[str, float]:
    """{'seen', 'unseen', 'H'} hit@k accuracies at calibration ``gamma`` (0 = direct stacking)."""
    seen_img = gz.seen_images
    theta = gzsl_thresholds(gz, k)
    hit = np.where(seen_img, gamma < theta, gamma > theta)
    seen_w = _group_weights(gz.labels, seen_img, per_class)
    unseen_w = _group_weights(gz.labels, ~seen_img, per_class)
    seen = float(np.sum(seen_w[hit]))
    unseen = float(np.sum(unseen_w[hit]))
    return {"seen": seen, "unseen": unseen, "H": harmonic_mean(seen, unseen)}


def gzsl_metrics(
    gz: GZSLTopK,
    ks: Sequence[int] = DEFAULT_KS,
    gamma: float | None = None,
) -> dict:
    """Every GZSL figure for each K: seen/unseen/H under direct stacking (γ = 0) and AUSUC,
    per class (Xian et al., the default) and flat; plus seen/unseen/H at ``gamma`` if given.

    Returns {"per_class": {K: {...}}, "flat": {K: {...}}, "calibrated": {...} | absent}.
    """
    ks = check_ks(ks, gz.m, True)
    seen_img = gz.seen_images
    if not seen_img.any() or seen_img.all():
        raise UserInputError("GZSL needs test images of both seen and unseen classes")
    out: dict = {"per_class": {}, "flat": {}}
    for k in ks:
        thresholds = gzsl_thresholds(gz, k)
        for mode, per_class in (("per_class", True), ("flat", False)):
            curve = seen_unseen_curve(gz, k, per_class, thresholds)
            seen, unseen = curve.at(0.0)
            out[mode][k] = {
                "seen": seen,
                "unseen": unseen,
                "H": harmonic_mean(seen, unseen),
                "ausuc": curve.ausuc,
            }
    if gamma is not None:
        out["calibrated"] = {"gamma": float(gamma)}
        for mode, per_class in (("per_class", True), ("flat", False)):
            out["calibrated"][mode] = {k: gzsl_accuracies(gz, k, gamma, per_class) for k in ks}
    return out


def calibrated_topk(gz: GZSLTopK, gamma: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merged top-k over the joint label space after subtracting γ from seen scores.

    Returns (scores float64 (N, k), ids (N, k)); ties by ascending class index.
    """
    scores = np.hstack([gz.seen_scores.astype(np.float64) - gamma, gz.unseen_scores.astype(np.float64)])
    scores, ids = sort_topk(scores, np.hstack([gz.seen_ids, gz.unseen_ids]))
    return scores[:, :k], ids[:, :k]


# ----------------------------------------------------------------------------- full score matrices


def gzsl_from_scores(scores: np.ndarray, labels: np.ndarray, seen_mask: np.ndarray, m: int) -> GZSLTopK:
    """GZSL top-m lists from a full (N, C) score matrix and a (C,) seen-class mask."""

    scores = np.asarray(scores, dtype=np.float32)
    seen_mask = np.asarray(seen_mask, dtype=bool)
    if seen_mask.shape != (scores.shape[1],):
        raise ValueError(f"seen_mask must have shape ({scores.shape[1]},), got {seen_mask.shape}")
    lists = []
    for mask in (seen_mask, ~seen_mask):
        columns = np.flatnonzero(mask)
        top_scores, top = topk_from_scores(scores[:, columns], m)
        lists += [top_scores, np.where(top >= 0, columns[np.maximum(top, 0)], -1)]
    return GZSLTopK(*lists, labels=labels, seen_mask=seen_mask)


def metrics_from_scores(
    scores: np.ndarray,
    labels: np.ndarray,
    ks: Sequence[int] = (1,),
    seen_mask: np.ndarray | None = None,
    gamma: float | None = None,
) -> dict:
    """All metrics of a full (N, C) score matrix (small label spaces, e.g. 717 SUN classes).

    Without ``seen_mask``: ZSL {"flat": {K: hit}, "per_class": {K: hit}} over all C columns.
    With it: the :func:`gzsl_metrics` dict (labels index the same C columns).
    """
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2:
        raise ValueError(f"scores must be (N, C), got {scores.shape}")
    if seen_mask is None:
        ranks = ranks_from_scores(scores, labels)
        ks = check_ks(ks, scores.shape[1], False)
        labels = np.asarray(labels, dtype=np.int64)
        return {
            "flat": hit_at_k(ranks, labels, ks),
            "per_class": hit_at_k(ranks, labels, ks, num_classes=scores.shape[1], per_class=True),
        }
    ks = sorted({int(k) for k in ks})
    gz = gzsl_from_scores(scores, labels, seen_mask, max(ks) + 1)
    return gzsl_metrics(gz, ks, gamma)


# ----------------------------------------------------------------------------- top-k order


def sort_topk(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by descending score, ties by ascending id; padding (-1, -inf) last.

    (N, m) scores and ids → sorted (scores, ids int64). Float64 scores stay float64 (the
    calibrated scores of :func:`calibrated_topk`); any other dtype becomes float32.
    """
    dtype = np.float64 if np.asarray(scores).dtype == np.float64 else np.float32
    scores = np.where(ids < 0, -np.inf, scores).astype(dtype, copy=False)
    tie_ids = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((tie_ids, -scores), axis=1)
    return (
        np.take_along_axis(scores, order, axis=1),
        np.take_along_axis(ids.astype(np.int64, copy=False), order, axis=1),
    )


def topk_from_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of a full (N, C) score matrix in the same tie order as the faiss search.

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
