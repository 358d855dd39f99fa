"""The paired class bootstrap of hit@1 (scoring.bootstrap): hand-made cases, BCa against an
independent computation from the same resamples, the rule for too few classes, and a coverage
simulation (the percentile interval under-covers with few classes, BCa holds its level)."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from imagenet_zsl.scoring.bootstrap import (
    FEW_CLASSES_NOTE,
    MIN_CLASSES,
    model_intervals,
    paired_bootstrap,
    resample_weights,
)

#: 12 classes of 1 to 4 images
COUNTS = np.array([3, 1, 4, 2, 3, 3, 1, 2, 4, 2, 3, 1])


def test_identical_models_are_not_significantly_different():
    credit = np.array([[2.0, 0.5, 3.0, 0.0, 1, 0, 1, 2, 0, 1, 3, 0]] * 2)
    boot = paired_bootstrap(credit, COUNTS)
    assert boot.estimate.tolist() == pytest.approx([13.5 / 29] * 2)
    assert boot.low[0] == boot.low[1] and boot.high[0] == boot.high[1]
    assert boot.low[0] < 13.5 / 29 < boot.high[0]
    # the difference is 0 on every resample: its interval is [0, 0], n.s.
    assert boot.verdict(0, 1) == "n.s." and boot.not_significant(0, 1)
    assert boot.diff_low[0, 1] == boot.diff_high[0, 1] == 0.0 and boot.note == FEW_CLASSES_NOTE


def test_always_right_against_always_wrong_is_significant_without_zero_width_intervals():
    boot = paired_bootstrap(np.vstack([COUNTS, np.zeros(len(COUNTS))]), COUNTS)
    assert boot.estimate.tolist() == [1.0, 0.0]
    # every class the same rate: nothing varies, no zero-width interval [100, 100] or [0, 0]
    assert np.isnan(boot.low).all() and np.isnan(boot.high).all() and not boot.has_interval(0)
    assert boot.why_not(0) == "every resample scores 1.0000: nothing varies to resample"
    # model 0 is ahead by 1 on every resample
    assert boot.verdict(0, 1) == "significant" and not boot.not_significant(0, 1)
    assert boot.diff_low[0, 1] == 1.0 and boot.diff_high[1, 0] == -1.0


def test_a_model_scoring_every_class_alike_gets_no_zero_width_interval():
    """15 classes of 3 images, each image credited 1/15 (every class tied: chance): every resample
    scores 1/15 up to the rounding of its weighted sums; no [6.67, 6.67] interval."""
    counts = np.full(15, 3)
    boot = paired_bootstrap(np.vstack([np.full(15, 3 / 15), np.arange(15) % 2]), counts)
    assert np.isnan(boot.low[0]) and np.isnan(boot.high[0]) and boot.has_interval(1)
    assert boot.why_not(0) == "every resample scores 0.0667: nothing varies to resample"


@pytest.mark.parametrize("classes", [1, 2, MIN_CLASSES - 1])
def test_too_few_classes_give_no_interval_and_no_verdict(classes):
    """A single test image is one class: no zero-width interval, no "significant" verdict."""
    counts = np.ones(classes, int)
    boot = paired_bootstrap(np.vstack([np.ones(classes), np.zeros(classes)]), counts)
    assert np.isnan(boot.low).all() and np.isnan(boot.high).all()
    assert np.isnan(boot.diff_low).all() and np.isnan(boot.diff_high).all()
    assert boot.verdict(0, 1) == "n/a" and boot.not_significant(0, 1) and boot.note is None
    noun = "class" if classes == 1 else "classes"
    assert boot.reason == (
        f"{classes} test {noun} ({classes} images): too few to resample (an interval needs at least "
        f"{MIN_CLASSES} classes)"
    )
    assert boot.why_not(0) == boot.reason


def _bca_by_hand(values: np.ndarray, estimate: float, jack: np.ndarray, level: float = 0.95):
    """Efron's BCa from its definition, one statistic at a time (numpy's quantile, stdlib normal)."""
    normal = NormalDist()
    share = np.mean(values < estimate) + 0.5 * np.mean(values == estimate)
    z0 = normal.inv_cdf(min(max(share, 0.5 / len(values)), 1 - 0.5 / len(values)))
    d = jack.mean() - jack
    a = np.sum(d**3) / (6 * np.sum(d**2) ** 1.5)
    z = normal.inv_cdf(1 - (1 - level) / 2)
    levels = [normal.cdf(z0 + (z0 + s) / (1 - a * (z0 + s))) for s in (-z, z)]
    return np.quantile(values, levels)


def test_bca_equals_its_definition_on_the_same_resamples():
    rng = np.random.default_rng(3)
    credit = rng.binomial(COUNTS, rng.beta(0.5, 2.0, (3, len(COUNTS)))).astype(float)
    weights = resample_weights(len(COUNTS), 400, seed=5)
    values = np.array([[w @ c / (w @ COUNTS) for c in credit] for w in weights])
    total = credit.sum(axis=1)
    jack = (total[None, :] - credit.T) / (COUNTS.sum() - COUNTS)[:, None]  # (C, M)
    boot = paired_bootstrap(credit, COUNTS, resamples=400, seed=5)
    for i in range(3):
        low, high = _bca_by_hand(values[:, i], total[i] / COUNTS.sum(), jack[:, i])
        assert (boot.low[i], boot.high[i]) == (pytest.approx(low), pytest.approx(high))
    low, high = _bca_by_hand(
        values[:, 0] - values[:, 2], boot.estimate[0] - boot.estimate[2], jack[:, 0] - jack[:, 2]
    )
    assert (boot.diff_low[0, 2], boot.diff_high[0, 2]) == (pytest.approx(low), pytest.approx(high))
    assert (boot.diff_low[2, 0], boot.diff_high[2, 0]) == (pytest.approx(-high), pytest.approx(-low))
    # the models alone: the same intervals
    estimate, low, high = model_intervals(credit, COUNTS, resamples=400, seed=5)
    assert np.array_equal(low, boot.low) and np.array_equal(high, boot.high)


@pytest.mark.parametrize(
    ("classes", "percentile_at_most", "bca_at_least"), [(50, 0.91, 0.93), (100, 0.93, 0.94)]
)
def test_coverage_simulation(classes, percentile_at_most, bca_at_least):
    """2,000 simulated splits of ``classes`` classes of 3 images, each class's hit rate drawn from
    Beta(0.2, 5) (a weak model: mean 0.038, most classes never hit): the share of 95% intervals
    holding the true hit@1 (0.038). The percentile interval under-covers (0.898 at 50 classes,
    0.926 at 100); BCa comes close to its level (0.939, 0.944; the simulation's error is ±0.005),
    which is why tables note intervals over fewer than 100 classes."""
    rng = np.random.default_rng(1)
    rates = rng.beta(0.2, 5.0, (2000, classes))
    counts = np.full(classes, 3)
    credit = rng.binomial(3, rates).astype(float)  # (splits, classes): each split is one "model"
    truth = 0.2 / 5.2
    _, low, high = model_intervals(credit, counts)
    defined = ~np.isnan(low)  # a split where no class was hit has no interval
    assert defined.mean() > 0.99
    bca = np.mean(defined & (low <= truth) & (truth <= high))
    weights = resample_weights(classes).astype(float)
    values = (weights @ credit.T) / (weights @ counts)[:, None]
    pct_low, pct_high = np.quantile(values, [0.025, 0.975], axis=0)
    percentile = np.mean((pct_low <= truth) & (truth <= pct_high))
    assert percentile <= percentile_at_most and bca >= bca_at_least


def test_classes_without_images_are_refused():
    with pytest.raises(ValueError, match="needs test images"):
        paired_bootstrap(np.zeros((1, 2)), np.array([1, 0]))
