"""GZSL top-k lists (:class:`GZSLTopK`), the γ thresholds of calibrated stacking, the
Seen-Unseen accuracy Curve, AUSUC and the γ maximising H. See :mod:`imagenet_zsl.scoring`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring.ranks import SORT_BLOCK, TieRanks, check_ks, check_labels, check_rule, true_ranks

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
        self.labels = check_labels(self.labels, n, len(self.seen_mask))
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
    if check_rule(tie_rule) == "strict":
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
    weights = image_weights(gz, per_class)[rows] * fraction
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
