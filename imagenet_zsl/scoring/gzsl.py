"""GZSL top-k lists (:class:`GZSLTopK`), the γ thresholds of calibrated stacking, the
Seen-Unseen accuracy Curve, AUSUC and the γ maximising H. See :mod:`imagenet_zsl.scoring`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring.gzsl_lists import GZSLLists, GZSLTopK
from imagenet_zsl.scoring.ranks import TieRanks, check_ks, check_rule

# ----------------------------------------------------------------------------- GZSL


def _block_thresholds(
    gz: GZSLTopK, lo: int, lists: GZSLLists, rows: np.ndarray, rank: np.ndarray
) -> np.ndarray:
    """θ of images ``rows`` (all inside the block ``lists`` starting at image ``lo``) when their true
    class sits at 0-based ``rank`` of its own space.

    Unseen-class image: hit iff γ > θ, θ = (q+1)-th best seen score − true score, with q = k −
    1 − rank (passed through ``rank`` relative to k by the caller). Seen-class image: hit iff γ <
    φ, φ = true score − (q+1)-th best unseen score. ±inf encode always/never.
    """
    m = gz.m
    local = rows - lo
    seen_img = gz.seen_mask[gz.labels[rows]]
    above = gz.own_ranks.above[rows]
    present = above < m
    # sorted lists: entry ``above`` is the first of the true class's tie group (its score);
    # single elements are gathered, never an (N, m) copy of the lists
    own_col, other_col = np.minimum(above, m - 1), np.clip(rank, 0, m - 1)
    seen_scores, unseen_scores = lists.seen_scores, lists.unseen_scores
    true_score = np.where(seen_img, seen_scores[local, own_col], unseen_scores[local, own_col]).astype(
        np.float64
    )
    never = (rank < 0) | ~present
    other = np.where(seen_img, unseen_scores[local, other_col], seen_scores[local, other_col]).astype(
        np.float64
    )
    with np.errstate(invalid="ignore"):
        theta = np.where(seen_img, true_score - other, other - true_score)
    # other == -inf (fewer competitors than q+1): the image is a hit at every γ
    theta = np.where(np.isneginf(other), np.where(seen_img, np.inf, -np.inf), theta)
    return np.where(never, np.where(seen_img, -np.inf, np.inf), theta)


def _entry_counts(ranks: TieRanks, lo: int, hi: int, k: int) -> np.ndarray:
    """Expected rule: threshold entries of images lo:hi, min(t, k - 1 - r) + 1 (0 when r >= k)."""
    above, tied = ranks.above[lo:hi], ranks.tied[lo:hi]
    return np.maximum(np.minimum(tied, k - 1 - above) + 1, 0).astype(np.int64)


def gzsl_entries(
    gz: GZSLTopK, k: int, tie_rule: str = "expected"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Threshold entries deciding hit@k under calibrated stacking → (rows, θ, fraction).

    ``strict``: one entry per image (rank r + t). ``expected``: one entry per position i of the
    true class inside its tie group that can still be a hit (r + i < k), weighted 1/(t + 1).
    rows (E,) int32 (int64 past 2**31 images) index images, ascending; θ (E,) float64 as in
    :func:`gzsl_thresholds`; fraction (E,) the share of the image's weight each entry carries.
    Computed one block of images at a time into the (E,) outputs: the temporaries stay O(block).
    """
    check_ks([k], gz.m, True)
    ranks = gz.own_ranks
    n = len(gz.labels)
    row_dtype = np.int32 if n <= np.iinfo(np.int32).max else np.int64  # 4 bytes per entry saved
    if check_rule(tie_rule) == "strict":
        theta = np.empty(n)
        for lo, hi, lists in gz.blocks():
            rows = np.arange(lo, hi)
            strict = ranks.above[lo:hi] + ranks.tied[lo:hi]
            theta[lo:hi] = _block_thresholds(gz, lo, lists, rows, k - 1 - strict)
        return np.arange(n, dtype=row_dtype), theta, np.ones(n)
    total = sum(int(_entry_counts(ranks, lo, hi, k).sum()) for lo, hi, _ in gz.blocks())
    rows_out, theta, fraction = np.empty(total, row_dtype), np.empty(total), np.empty(total)
    at = 0
    for lo, hi, lists in gz.blocks():
        # offsets i = 0 .. min(t, k - 1 - r) of each image, in image order then i (no (N, k) arrays)
        count = _entry_counts(ranks, lo, hi, k)
        rows = np.repeat(np.arange(lo, hi), count)
        offset = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
        done = slice(at, at + len(rows))
        rows_out[done] = rows
        theta[done] = _block_thresholds(gz, lo, lists, rows, k - 1 - (ranks.above[rows] + offset))
        fraction[done] = 1.0 / (ranks.tied[rows] + 1.0)
        at += len(rows)
    return rows_out, theta, fraction


def gzsl_thresholds(gz: GZSLTopK, k: int) -> np.ndarray:
    """Per image the γ threshold that decides hit@k under the strict rule (float64, ±inf).

    Unseen-class image: hit iff γ > θ, θ = (q+1)-th best seen score − true score, with
    q = k − 1 − (rank among unseen classes). Seen-class image: hit iff γ < φ, φ = true score −
    (q+1)-th best unseen score, q = k − 1 − (rank among seen classes). +inf/−inf encode
    always/never (or never/always).
    """
    return gzsl_entries(gz, k, "strict")[1]


def _block_joint_ranks(gz: GZSLTopK, lo: int, lists: GZSLLists, gamma: float) -> TieRanks:
    """Exact joint-space :class:`TieRanks` of images lo:lo+len(lists) at calibration ``gamma``:
    the own space's exact ranks plus, from the other space's top-m list, the classes above the
    true class and those tied with it after calibration. Compared in the arithmetic of
    :func:`gzsl_thresholds` (θ = other − true for an unseen-class image, φ = true − other for a
    seen-class one, each against γ), so off a breakpoint the answer is the threshold test's.

    The true class's tie group may run past the end of the other list (every listed class above
    or tied, the last one tied): no unlisted class scores above the last listed one, so only the
    classes tied with that last score are unseen, and the list's stored tail count
    (:meth:`GZSLTopK.tails`: 0 for a list holding its whole space) adds them to the tie group.
    Where the tail is not known the image is given rank ``m`` (a miss for every k < m under both
    rules; check_ks keeps k < m). A true class outside its own list has r ≥ m: a miss either way.
    """
    m, n = gz.m, len(lists)
    seen_img = gz.seen_mask[gz.labels[lo : lo + n]]
    above = gz.own_ranks.above[lo : lo + n].astype(np.int64)
    tied = gz.own_ranks.tied[lo : lo + n].astype(np.int64)
    rows, own_col = np.arange(n), np.minimum(above, m - 1)
    own = np.where(seen_img, lists.seen_scores[rows, own_col], lists.unseen_scores[rows, own_col])
    own = own.astype(np.float64)[:, None]
    seen_side = seen_img[:, None]
    other = np.where(seen_side, lists.unseen_scores, lists.seen_scores).astype(np.float64)  # (B, m)
    with np.errstate(invalid="ignore"):
        diff = np.where(seen_side, own - other, other - own)  # padding (-inf): never above or tied
        gt = np.where(seen_side, diff < gamma, diff > gamma).sum(axis=1)
        eq = (diff == gamma).sum(axis=1)
    # the list's last entry ties the true class: its unlisted twins tie it too
    runs_past = (gt + eq >= m) & (eq > 0)
    other_tail = np.full(n, -1, np.int64)  # -1: not known
    seen_tail, unseen_tail = gz.tails(lists)
    if unseen_tail is not None:
        other_tail[seen_img] = unseen_tail[seen_img]
    if seen_tail is not None:
        other_tail[~seen_img] = seen_tail[~seen_img]
    blind = (above >= m) | (runs_past & (other_tail < 0))
    tied = tied + eq + np.where(runs_past, np.maximum(other_tail, 0), 0)
    return TieRanks(np.where(blind, m, above + gt), np.where(blind, 0, tied))


def image_credit(gz: GZSLTopK, k: int, gamma: float = 0.0, tie_rule: str = "expected") -> np.ndarray:
    """(N,) float64 hit@k credit of each image at calibration ``gamma``, exact at every γ including
    the breakpoints: a seen/unseen tie at γ is a tie of the joint ranking (credit
    min(1, max(0, (k − r)/(t + 1))) under the expected rule), not a miss on both sides.

    r and t are counted in the joint space (:func:`_block_joint_ranks`), one block of
    ``SORT_BLOCK`` images at a time: the temporaries are O(block · m).
    """
    check_ks([k], gz.m, True)
    rule = check_rule(tie_rule)
    credit = np.empty(len(gz.labels))
    for lo, hi, lists in gz.blocks():
        credit[lo:hi] = _block_joint_ranks(gz, lo, lists, gamma).credit(k, rule)
    return credit


def group_weights(labels: np.ndarray, group: np.ndarray, per_class: bool) -> np.ndarray:
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


def image_weights(gz: GZSLTopK, per_class: bool) -> np.ndarray:
    seen_img = gz.seen_images
    return group_weights(gz.labels, seen_img, per_class) + group_weights(gz.labels, ~seen_img, per_class)


def class_weights(gz: GZSLTopK, per_class: bool) -> np.ndarray:
    """(C,) the weight of one image of each joint class: ``class_weights(gz, p)[gz.labels]`` is
    :func:`image_weights` (the same floats), without its three (N,) float64 arrays per call."""
    counts = np.bincount(gz.labels, minlength=len(gz.seen_mask))
    table = np.zeros(len(gz.seen_mask))
    for side in (gz.seen_mask, ~gz.seen_mask):
        present = side & (counts > 0)
        if per_class:  # 1 / (n_class · classes of the side)
            table[present] = 1.0 / (counts[present] * np.count_nonzero(present))
        elif present.any():  # 1 / n of the side
            table[present] = 1.0 / counts[present].sum()
    return table


@dataclass
class SeenUnseenCurve:
    """The exact Seen-Unseen accuracy Curve for one K.

    Interval j covers γ in (breakpoints[j-1], breakpoints[j]) (open, with ±inf at the ends);
    ``seen[j]``/``unseen[j]`` are the accuracies there (len(breakpoints) + 1 values). Along j the
    unseen accuracy never falls and the seen accuracy never rises. thresholds, seen_images and
    weights are per threshold entry (:func:`gzsl_entries`); None in a curve kept only to draw
    (:meth:`without_entries`).
    """

    k: int
    per_class: bool
    breakpoints: np.ndarray
    seen: np.ndarray
    unseen: np.ndarray
    thresholds: np.ndarray | None
    seen_images: np.ndarray | None
    weights: np.ndarray | None
    tie_rule: str = "expected"

    def without_entries(self) -> SeenUnseenCurve:
        """The curve without its per-entry arrays (17 bytes per entry): enough to draw it and
        for :attr:`ausuc`, not for :meth:`at`."""
        return dataclasses.replace(self, thresholds=None, seen_images=None, weights=None)

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
        if self.thresholds is None:
            raise ValueError("this curve was kept without its threshold entries (without_entries)")
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
    """Sorted unique finite thresholds and each threshold's index among them (0 where not
    finite). One sort of the values, then a binary search: the index of each value is that of
    ``np.unique(..., return_inverse=True)`` without its (E,) permutation and inverse temporaries."""
    finite = np.isfinite(theta)
    values = theta[finite]
    breakpoints = np.unique(values)
    index = np.zeros(len(theta), dtype=np.int64)
    index[finite] = np.searchsorted(breakpoints, values)
    return breakpoints, index


def _swept(
    index: np.ndarray, theta: np.ndarray, weights: np.ndarray, seen_img: np.ndarray, nb: int
) -> tuple[np.ndarray, np.ndarray]:
    """(seen, unseen) accuracy in each of the ``nb + 1`` intervals: each entry's weight added
    where it is a hit (bincount over the entries of one side only: the other side's zero weights
    would add nothing, so the sums are the same floats, in the same order)."""
    unseen_side = ~seen_img
    # unseen entry with θ = b_i is a hit in intervals j >= i+1; −inf: all; +inf: none
    start = index[unseen_side] + 1
    side = theta[unseen_side]
    start[np.isneginf(side)] = 0
    start[np.isposinf(side)] = nb + 1
    del side
    unseen = np.cumsum(np.bincount(start, weights=weights[unseen_side], minlength=nb + 2))[: nb + 1]
    del start, unseen_side
    # seen entry with φ = b_i is a hit in intervals j <= i; +inf: all; −inf: none
    end = index[seen_img] + 1  # shifted by one: −inf → 0
    side = theta[seen_img]
    end[np.isposinf(side)] = nb + 1
    end[np.isneginf(side)] = 0
    del side
    per_end = np.bincount(end, weights=weights[seen_img], minlength=nb + 2)
    seen = np.cumsum(per_end[::-1])[::-1][1 : nb + 2]
    # cumulative sums of 1/n weights can overshoot 1 by an ulp or two
    return np.clip(seen, 0.0, 1.0), np.clip(unseen, 0.0, 1.0)


def seen_unseen_curve(
    gz: GZSLTopK, k: int = 1, per_class: bool = True, tie_rule: str = "expected"
) -> SeenUnseenCurve:
    """Sweep every breakpoint of calibrated stacking for hit@k, vectorised (one sort)."""
    if not gz.seen_images.any() or gz.seen_images.all():
        raise UserInputError("GZSL needs test images of both seen and unseen classes")
    rows, theta, fraction = gzsl_entries(gz, k, tie_rule)
    seen_img = gz.seen_images[rows]
    weights = class_weights(gz, per_class)[gz.labels[rows]]
    weights *= fraction  # in place: the same floats as a product, one (E,) array fewer
    del rows, fraction  # (E,) each: freed before the sort
    breakpoints, index = _breakpoint_index(theta)
    seen, unseen = _swept(index, theta, weights, seen_img, len(breakpoints))
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
