"""A seeded, paired, class-clustered bootstrap of flat hit@K for the models of one split.

Why clustered by class: a split's test images come in classes, and images of one class succeed or
fail together (the class's prototype is good or bad), so resampling images would understate the
uncertainty. Each resample draws the split's C test classes with replacement (multinomial counts
``w`` (C,)) and recomputes the headline as the headline is defined, flat over images:
``Σ_c w_c · credit_c / Σ_c w_c · n_c`` (``credit_c``: the class's summed per-image credit under the
expected tie rule, ``n_c``: its test images, count-as-miss images included with no credit).

Why paired: every model of a split is scored on the same images and classes, so all models are
evaluated on the same resamples; the difference of two models then has its own percentile
interval, and a pair whose 95% interval of the difference contains 0 is not significantly
different. Percentile intervals (``numpy.quantile``, linear interpolation) of
:data:`RESAMPLES` resamples drawn from ``numpy.random.default_rng(seed)`` :data:`BLOCK` at a
time: the same seed gives the same intervals on any machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
SEED = 0
LEVEL = 0.95
#: resamples drawn per block: bounds the (BLOCK, C) weights (C = 20,842 on "all": 17 MB)
BLOCK = 100


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
    """``estimate`` (M,) flat hit@K of each model; ``low``/``high`` (M,) its interval;
    ``diff_low``/``diff_high`` (M, M) the interval of model i minus model j."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    diff_low: np.ndarray
    diff_high: np.ndarray
    resamples: int
    seed: int
    level: float

    def not_significant(self, i: int, j: int) -> bool:
        """The interval of the difference of models i and j contains 0."""
        return bool(self.diff_low[i, j] <= 0.0 <= self.diff_high[i, j])


def paired_bootstrap(
    credit: np.ndarray,
    counts: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> PairedBootstrap:
    """The paired class bootstrap of M models on the same C classes.

    credit: (M, C) summed per-image credit of each model on each class; counts: (C,) test images
    per class (each ≥ 1)."""
    credit = np.asarray(credit, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if credit.ndim != 2 or credit.shape[1] != len(counts) or len(counts) == 0:
        raise ValueError(f"credit must be (models, {len(counts)}) with classes, got {credit.shape}")
    if (counts < 1).any():
        raise ValueError("every class of the bootstrap needs test images")
    # (B, M) flat hit@K of each model on each resample; the weights never exist whole
    values = np.concatenate(
        [(w @ credit.T) / (w @ counts)[:, None] for w in _weight_blocks(len(counts), resamples, seed)]
    )
    tails = [(1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0]
    low, high = np.quantile(values, tails, axis=0)
    diffs = values[:, :, None] - values[:, None, :]  # (B, M, M)
    diff_low, diff_high = np.quantile(diffs, tails, axis=0)
    estimate = credit.sum(axis=1) / counts.sum()
    return PairedBootstrap(estimate, low, high, diff_low, diff_high, resamples, seed, level)
