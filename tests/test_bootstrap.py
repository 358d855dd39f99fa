"""The paired class bootstrap of hit@1 (scoring.bootstrap): hand-made cases, a two-class case
checked against the enumerated bootstrap distribution, and a fixed seed's exact resamples."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.scoring.bootstrap import paired_bootstrap, resample_weights


def test_identical_models_are_not_significantly_different():
    credit = np.array([[2.0, 0.5, 3.0, 0.0], [2.0, 0.5, 3.0, 0.0]])
    boot = paired_bootstrap(credit, np.array([3, 1, 4, 2]))
    assert boot.estimate.tolist() == pytest.approx([5.5 / 10, 5.5 / 10])
    assert boot.low[0] == boot.low[1] and boot.high[0] == boot.high[1]
    assert boot.low[0] < 0.55 < boot.high[0]
    assert boot.not_significant(0, 1) and boot.diff_low[0, 1] == boot.diff_high[0, 1] == 0.0


def test_always_right_against_always_wrong_is_significant():
    counts = np.array([3, 1, 4, 2])
    boot = paired_bootstrap(np.vstack([counts, np.zeros(4)]), counts)
    assert boot.estimate.tolist() == [1.0, 0.0]
    assert (boot.low.tolist(), boot.high.tolist()) == ([1.0, 0.0], [1.0, 0.0])
    assert not boot.not_significant(0, 1) and boot.diff_low[0, 1] == 1.0 and boot.diff_low[1, 0] == -1.0


def test_two_classes_against_the_enumerated_distribution():
    # class 0: 1 image, right; class 1: 3 images, wrong. Resamples of 2 classes: (2, 0) → 1,
    # (1, 1) → 1/4, (0, 2) → 0 with probabilities 1/4, 1/2, 1/4: the 2.5% and 97.5% quantiles
    # are the extremes 0 and 1
    credit, counts = np.array([[1.0, 0.0]]), np.array([1, 3])
    boot = paired_bootstrap(credit, counts, resamples=1000, seed=7)
    assert (boot.low[0], boot.high[0]) == (0.0, 1.0) and boot.estimate[0] == 0.25
    weights = resample_weights(2, 1000, seed=7)
    assert (weights.sum(axis=1) == 2).all()
    share = [np.mean(weights[:, 0] == n) for n in (2, 1, 0)]
    assert share == pytest.approx([0.25, 0.5, 0.25], abs=0.06)  # ~4 binomial sd


def test_a_fixed_seed_gives_these_exact_resamples():
    credit = np.array([[1.0, 2.0, 0.0], [0.0, 2.0, 1.0]])
    counts = np.array([1, 2, 2])
    weights = resample_weights(3, 10, seed=5)
    assert np.array_equal(weights, resample_weights(3, 10, seed=5)) and weights.shape == (10, 3)
    by_hand = np.array([[w @ c / (w @ counts) for c in credit] for w in weights])
    boot = paired_bootstrap(credit, counts, resamples=10, seed=5)
    assert boot.low == pytest.approx(np.quantile(by_hand, 0.025, axis=0))
    assert boot.high == pytest.approx(np.quantile(by_hand, 0.975, axis=0))
    diff = by_hand[:, 0] - by_hand[:, 1]
    assert boot.diff_low[0, 1] == pytest.approx(np.quantile(diff, 0.025))
    assert boot.diff_high[0, 1] == pytest.approx(np.quantile(diff, 0.975))


def test_classes_without_images_are_refused():
    with pytest.raises(ValueError, match="needs test images"):
        paired_bootstrap(np.zeros((1, 2)), np.array([1, 0]))
