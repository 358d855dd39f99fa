"""Hascoet's structural ratio R on a disconnected graph, worked out by hand.

Why: a test class with no path to any training class has r(c) = d(c, C_tr) / d(c, C_te \\ {c}) =
inf / finite = inf; R is the mean of the *finite* ratios, so such a class is left out. Keeping it
(testing ``~isnan`` instead of ``isfinite``) turns R into inf, but only on a disconnected graph,
which the real WordNet graph never is: this test is what catches it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.structure import structural_ratio, structural_ratios, structure_stats
from tests.toy import TOY_EDGES, TOY_TRAIN

# the toy hierarchy (tests/toy.py, training classes a1 and b2), plus a second component
# r2 ── p, q with no training class, plus an isolated node z
EDGES = [*TOY_EDGES, ("r2", "p"), ("r2", "q")]
TEST = ["a31", "b11", "m", "p", "q", "z"]
# d(., train): a31-a3-A-a1 = 3; b11-b1-B-b2 = 3; m-a2-A-a1 = 3; p, q, z: no path (inf)
# d(., other test): a31-a3-A-a2-m = 4; b11-b1-m = 2; m-b1-b11 = 2; p-r2-q = 2; z: none (inf)
HAND_RATIOS = [3 / 4, 3 / 2, 3 / 2, math.inf, math.inf, math.nan]
HAND_R = (3 / 4 + 3 / 2 + 3 / 2) / 3  # = 1.25: the three finite ratios only


@pytest.fixture()
def disconnected() -> ClassGraph:
    return ClassGraph.from_edges(EDGES, nodes=["z"])


def test_per_class_ratios_by_hand(disconnected: ClassGraph):
    ratios = structural_ratios(disconnected, TEST, TOY_TRAIN)
    np.testing.assert_array_equal(ratios, HAND_RATIOS)  # NaN == NaN here


def test_unreachable_training_set_is_left_out_of_r(disconnected: ClassGraph):
    assert structural_ratio(disconnected, TEST, TOY_TRAIN) == pytest.approx(HAND_R)
    assert HAND_R == 1.25


def test_only_classes_without_a_path_to_training_give_nan_not_inf(disconnected: ClassGraph):
    """Every ratio infinite (the whole test set off the training component): R is NaN (no finite
    ratio to average), never inf."""
    assert math.isnan(structural_ratio(disconnected, ["p", "q"], TOY_TRAIN))


def test_structure_stats_carry_the_finite_mean(disconnected: ClassGraph):
    stats = structure_stats(disconnected, TEST, TOY_TRAIN)
    assert stats.n_classes == 6
    assert stats.structural_ratio == pytest.approx(1.25)
    # siblings and cousins only: no test class is an ancestor of another or of a training class
    assert (stats.pairs_within, stats.pairs_with_train, stats.consistent) == (0, 0, True)


def test_a_class_with_no_other_test_class_reachable_counts_zero(disconnected: ClassGraph):
    """r(c) = d(c, C_tr) / d(c, ∅) = 3 / inf = 0: kept (finite), so it lowers R. With m on the
    training component and p alone on the other, p's ratio is inf / inf = NaN (left out), m's 0."""
    np.testing.assert_array_equal(structural_ratios(disconnected, ["m", "p"], TOY_TRAIN), [0.0, math.nan])
    assert structural_ratio(disconnected, ["m", "p"], TOY_TRAIN) == 0.0
    assert structural_ratio(disconnected, ["a31"], TOY_TRAIN) == 0.0  # one class: R = 0, not NaN


def test_exact_ratio_sum_keeps_a_lone_class_at_zero():
    """Rule (``exact_ratio_sum``, the optimiser's tie rule): a test class with a training class
    reachable but no other test class has r = d(c, C_tr) / inf = 0, kept in the mean
    exactly as the float R keeps it. A third component r3 holds training class t3 and test class l.

    d(l, t3) = 2, d(l, other test) = inf: r(l) = 0; a31, b11, m as above (3/4, 3/2, 3/2). N R =
    (3/4 + 3/2 + 3/2 + 0) * 4/4 = 15/4 (leaving l out would give (15/4) * 4/3 = 5), R = 15/16.
    """
    from fractions import Fraction

    from imagenet_zsl.splits.structure import exact_ratio_sum

    graph = ClassGraph.from_edges([*EDGES, ("r3", "t3"), ("r3", "l")], nodes=["z"])
    test, train = ["a31", "b11", "m", "l"], [*TOY_TRAIN, "t3"]
    np.testing.assert_array_equal(structural_ratios(graph, test, train), [3 / 4, 3 / 2, 3 / 2, 0.0])
    assert exact_ratio_sum(graph, test, train) == Fraction(15, 4)
    assert structural_ratio(graph, test, train) == 15 / 16 == float(exact_ratio_sum(graph, test, train)) / 4
    # with an unreachable class (p: no training class) beside it: left out, N R scaled by N / 4
    assert exact_ratio_sum(graph, [*test, "p"], train) == Fraction(15, 4) * 5 / 4
