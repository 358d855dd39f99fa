"""A seeded, paired, class-clustered bootstrap of flat hit@K for the models of one split.

Why clustered by class: a split's test images come in classes, and images of one class succeed or
fail together (the class's prototype is good or bad), so resampling images would understate the
uncertainty. Each resample draws the split's C test classes with replacement (multinomial counts
``w`` (C,)) and recomputes the headline as the headline is defined, flat over images:
``Σ_c w_c · credit_c / Σ_c w_c · n_c`` (``credit_c``: the class's summed per-image credit under the
expected tie rule, ``n_c``: its test images, count-as-miss images included with no credit).

Why paired: every model of a split is scored on the same images and classes, so all models are
evaluated on the same resamples; the difference of two models then has its own interval, and a
pair whose 95% interval of the difference contains 0 is not significantly different.

Why BCa (bias-corrected and accelerated, Efron 1987), not the plain percentile interval: with few
classes and most of them scoring 0 (a weak model's hit@1), the resampled hit@1 is skewed and the
percentile interval covers less than its level (a coverage simulation, tests/test_bootstrap.py:
0.90 at 50 classes of 3 images, 0.93 at 100; BCa 0.94 at both). BCa moves the percentile levels by
the bootstrap distribution's median bias (``z0``, ties at the estimate counted half) and by its
skewness (the acceleration, from the jackknife over classes). It still covers less than 95% in the
most skewed cases below 100 classes: :data:`FEW_CLASSES_NOTE` says so (:attr:`PairedBootstrap.note`).

No interval (NaN) where there is nothing to resample: fewer than :data:`MIN_CLASSES` test classes
(one test image is one class; :attr:`PairedBootstrap.reason`), or a model whose resamples never vary
(every class the same rate: the interval would have zero width; :meth:`PairedBootstrap.why_not`).
With too few classes a pair gets no verdict (:meth:`PairedBootstrap.verdict` "n/a"), never
"significant".

:data:`RESAMPLES` resamples are drawn from ``numpy.random.default_rng(seed)`` :data:`BLOCK` at a
time: the same seed gives the same intervals on any machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

RESAMPLES = 1000
SEED = 0
LEVEL = 0.95
#: resamples drawn per block: bounds the (BLOCK, C) weights (C = 20,842 on "all": 17 MB)
BLOCK = 100
#: fewer test classes than this: no interval (the coverage simulation: below 10 classes the
#: intervals cover 0.75-0.9 of the time even where most classes score above 0)
MIN_CLASSES = 10
#: fewer test classes than this: the intervals may cover less than their level (:data:`FEW_CLASSES_NOTE`)
NOTE_BELOW = 100
#: resampled hit@K values closer than this are the same value (rounding of the weighted sums)
FLAT = 1e-12
#: what the intervals are, for a table's legend
INTERVAL_TEXT = (
    "BCa (bias-corrected and accelerated) interval of a paired, class-clustered bootstrap "
    f"({RESAMPLES} resamples of the split's test classes with replacement, seed {SEED})"
)
FEW_CLASSES_NOTE = (
    f"fewer than {NOTE_BELOW} test classes: a {LEVEL:.0%} interval may cover less than {LEVEL:.0%} "
    "when most classes score 0 (0.94 at 50 classes in the coverage simulation)"
)


def _weight_blocks(classes: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """The rows of :func:`resample_weights`, :data:`BLOCK` at a time (float64)."""
    rng = np.random.default_rng(seed)
    pvals = np.full(classes, 1.0 / classes)
    for lo in range(0, resamples, BLOCK):
        yield rng.multinomial(classes, pvals, size=min(BLOCK, resamples - lo)).astype(np.float64)


def resample_weights(classes: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, classes) int64: how often each class is drawn in each resample (rows sum to
    ``classes``), drawn :data:`BLOCK` rows at a time from ``default_rng(seed)``."""
    return np.concatenate(list(_weight_blocks(classes, resamples, seed))).astype(np.int64)


@dataclass(frozen=True)
class PairedBootstrap:
    """``estimate`` (M,) flat hit@K of each model; ``low``/``high`` (M,) its interval (NaN: none,
    see ``reason``); ``diff_low``/``diff_high`` (M, M) the interval of model i minus model j.
    ``classes``: the test classes resampled; ``reason``: why no interval exists at all (None
    where the intervals exist)."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    diff_low: np.ndarray
    diff_high: np.ndarray
    resamples: int
    seed: int
    level: float
    classes: int = 0
    reason: str | None = None

    def has_interval(self, i: int) -> bool:
        """Whether model i has an interval (not: too few classes, or no spread)."""
        return bool(np.isfinite(self.low[i]) and np.isfinite(self.high[i]))

    def why_not(self, i: int) -> str | None:
        """Why model i has no interval (None when it has one)."""
        if self.has_interval(i):
            return None
        return self.reason or f"every resample scores {self.estimate[i]:.4f}: nothing varies to resample"

    def verdict(self, i: int, j: int) -> str:
        """``"n.s."`` (the difference's interval contains 0), ``"significant"``, or ``"n/a"`` (too
        few classes: no interval). A difference that never varies is its own interval: n.s. at 0
        (the same per-class credit), significant elsewhere (one model ahead on every resample)."""
        low, high = self.diff_low[i, j], self.diff_high[i, j]
        if not (np.isfinite(low) and np.isfinite(high)):
            return "n/a"
        return "n.s." if low <= 0.0 <= high else "significant"

    def not_significant(self, i: int, j: int) -> bool:
        """No significant difference between models i and j is shown: the interval of the
        difference contains 0, or there is none (never a "significant" verdict without one)."""
        return self.verdict(i, j) != "significant"

    @property
    def note(self) -> str | None:
        """:data:`FEW_CLASSES_NOTE` where the intervals rest on fewer than :data:`NOTE_BELOW` classes."""
        return FEW_CLASSES_NOTE if self.reason is None and self.classes < NOTE_BELOW else None


_NORMAL = NormalDist()


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    return np.vectorize(_NORMAL.cdf, otypes=[np.float64])(z)


def _normal_ppf(p: np.ndarray) -> np.ndarray:
    return np.vectorize(_NORMAL.inv_cdf, otypes=[np.float64])(p)


def bca_interval(
    samples: np.ndarray, estimate: np.ndarray, accel: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """The BCa interval of each column of ``samples`` (B, ...): bootstrap values of a statistic
    whose estimate is ``estimate`` (...) and whose acceleration is ``accel`` (...,
    :func:`acceleration`). Returns (low, high) (...); a column that never varies gives [v, v].

    z0 = Φ⁻¹(share of samples below the estimate, ties counted half); the interval is the
    samples' quantiles at Φ(z0 + (z0 ± z) / (1 − a (z0 ± z))), linearly interpolated."""
    b = len(samples)
    below = (samples < estimate).mean(axis=0) + 0.5 * (samples == estimate).mean(axis=0)
    z0 = _normal_ppf(np.clip(below, 0.5 / b, 1.0 - 0.5 / b))
    z = _NORMAL.inv_cdf(1.0 - (1.0 - level) / 2.0)
    ordered = np.sort(samples, axis=0)
    bounds = []
    for sign in (-1.0, 1.0):
        shifted = z0 + sign * z
        with np.errstate(invalid="ignore", divide="ignore"):
            q = _normal_cdf(z0 + shifted / (1.0 - accel * shifted))
        bounds.append(_quantile(ordered, np.nan_to_num(q, nan=0.5)))
    return bounds[0], bounds[1]


def acceleration(cubes: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """BCa's acceleration a = Σ d³ / (6 (Σ d²)^1.5) from the sums over classes of the jackknife
    deviations' cubes and squares (0 where the jackknife does not vary)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(squares > 0, cubes / (6.0 * np.maximum(squares, 0.0) ** 1.5), 0.0)


def _pair_accelerations(jack: np.ndarray) -> np.ndarray:
    """(M, M) accelerations of the models' differences from the (C, M) leave-one-class-out values:
    the difference's deviations are u_i − u_j (u the models'), so its sums expand into (M, M)
    products and no (C, M, M) array is built (21 models on 20,842 classes would be 73 MB)."""
    u = jack.mean(axis=0) - jack  # (C, M) deviations
    s2, s3 = (u**2).sum(axis=0), (u**3).sum(axis=0)
    cross = u.T @ u  # Σ u_i u_j
    u2u = (u**2).T @ u  # Σ u_i² u_j
    squares = s2[:, None] - 2.0 * cross + s2[None, :]
    cubes = s3[:, None] - 3.0 * u2u + 3.0 * u2u.T - s3[None, :]
    return acceleration(cubes, squares)


def _quantile(ordered: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Each column's quantile ``q`` (...) of the sorted (B, ...) ``ordered``, linearly interpolated
    (numpy's default rule)."""
    position = np.clip(q, 0.0, 1.0) * (len(ordered) - 1)
    lo = np.floor(position).astype(np.int64)
    hi = np.minimum(lo + 1, len(ordered) - 1)
    frac = position - lo
    low_values = np.take_along_axis(ordered, lo[None], axis=0)[0]
    high_values = np.take_along_axis(ordered, hi[None], axis=0)[0]
    return low_values + frac * (high_values - low_values)


def _jackknife(credit: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(C, M) flat hit@K of each model with class c left out."""
    return (credit.sum(axis=1)[None, :] - credit.T) / (counts.sum() - counts)[:, None]


def _checked(credit: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    credit = np.asarray(credit, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if credit.ndim != 2 or credit.shape[1] != len(counts) or len(counts) == 0:
        raise ValueError(f"credit must be (models, {len(counts)}) with classes, got {credit.shape}")
    if (counts < 1).any():
        raise ValueError("every class of the bootstrap needs test images")
    return credit, counts


def _resampled(credit: np.ndarray, counts: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """(B, M) flat hit@K of each model on each resample; the weights never exist whole."""
    return np.concatenate(
        [(w @ credit.T) / (w @ counts)[:, None] for w in _weight_blocks(len(counts), resamples, seed)]
    )


def _too_few(classes: int, images: int) -> str | None:
    """Why ``classes`` test classes (``images`` images) give no interval (None: they do)."""
    if classes >= MIN_CLASSES:
        return None
    return (
        f"{classes} test class{'es' if classes != 1 else ''} ({images} images): too few to "
        f"resample (an interval needs at least {MIN_CLASSES} classes)"
    )


def model_intervals(
    credit: np.ndarray,
    counts: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, low, high), each (M,): each model's flat hit@K and its BCa interval alone,
    without the (M, M) differences of :func:`paired_bootstrap` (the same numbers for the same
    resamples). credit (M, C), counts (C,) as there."""
    credit, counts = _checked(credit, counts)
    estimate = credit.sum(axis=1) / counts.sum()
    if _too_few(len(counts), int(counts.sum())):
        return estimate, np.full(len(credit), np.nan), np.full(len(credit), np.nan)
    low, high = _model_bca(credit, counts, _resampled(credit, counts, resamples, seed), level)
    return estimate, low, high


def _model_bca(
    credit: np.ndarray, counts: np.ndarray, values: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) (M,): each model's BCa interval from its resampled values (B, M); NaN for a
    model whose resamples never vary (every class the same rate: a zero-width interval)."""
    u = _jackknife(credit, counts)
    u = u.mean(axis=0) - u
    accel = acceleration((u**3).sum(axis=0), (u**2).sum(axis=0))
    low, high = bca_interval(values, credit.sum(axis=1) / counts.sum(), accel, level)
    # equal up to rounding: e.g. every class credited 1/15 per image (a model scoring every class
    # alike), whose resampled sums differ in their last bits
    flat = values.max(axis=0) - values.min(axis=0) <= FLAT
    return np.where(flat, np.nan, low), np.where(flat, np.nan, high)


def paired_bootstrap(
    credit: np.ndarray,
    counts: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> PairedBootstrap:
    """The paired class bootstrap of M models on the same C classes, BCa intervals.

    credit: (M, C) summed per-image credit of each model on each class; counts: (C,) test images
    per class (each ≥ 1). Fewer than :data:`MIN_CLASSES` classes: every interval NaN, ``reason``
    says why."""
    credit, counts = _checked(credit, counts)
    m, c = credit.shape
    estimate = credit.sum(axis=1) / counts.sum()
    reason = _too_few(c, int(counts.sum()))
    if reason is not None:
        none, pairs = np.full(m, np.nan), np.full((m, m), np.nan)
        return PairedBootstrap(
            estimate, none, none.copy(), pairs, pairs.copy(), resamples, seed, level, c, reason
        )
    values = _resampled(credit, counts, resamples, seed)
    low, high = _model_bca(credit, counts, values, level)
    diffs = values[:, :, None] - values[:, None, :]  # (B, M, M)
    diff_accel = _pair_accelerations(_jackknife(credit, counts))
    diff_low, diff_high = bca_interval(diffs, estimate[:, None] - estimate[None, :], diff_accel, level)
    return PairedBootstrap(estimate, low, high, diff_low, diff_high, resamples, seed, level, c)
