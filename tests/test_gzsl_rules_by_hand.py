"""Two calibrated-stacking rules worked out by hand on tiny score matrices: AUSUC's left area and
the choice of γ among tied intervals.

Why a file of its own: both rules survived every test but the sha256 snapshots when planted as
one-line bugs (tools/mutation_check.py). The score matrices are full (N, C) matrices given to
``gzsl_from_scores``; each row comment gives the thresholds read off by hand (Chao et al. 2016,
calibrated stacking: a seen class's score is lowered by γ). An unseen-class image is a hit@k iff
γ > θ, θ = (q+1)-th best seen score − true score; a seen-class image iff γ < φ, φ = true score −
(q+1)-th best unseen score, with q = k − 1 − (rank of the true class in its own space).
"""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.scoring import ausuc, choose_gamma, gzsl_from_scores, seen_unseen_curve

# ------------------------------------------------------------------ AUSUC's left area
# joint classes: u0, u1 unseen; s2 seen (one seen class only). Rows [u0, u1, s2]:
LEFT = np.array(
    [
        [6, 0, 1],  # A, class u0: unseen rank 0 -> at k=2 its rival is the 2nd seen score: none (-inf)
        [5, 2, 4],  # B, class u1: unseen rank 1 -> k=2: θ = best seen 4 − 2 = 2;   k=1: never
        [3, 1, 4],  # C, class s2: k=2: φ = 4 − 2nd unseen 1 = 3;   k=1: φ = 4 − 3 = 1
        [3, 2, 3],  # D, class s2: k=2: φ = 3 − 2nd unseen 2 = 1;   k=1: φ = 3 − 3 = 0
    ],
    np.float32,
)
LEFT_LABELS = np.array([0, 1, 2, 2])
LEFT_SEEN = np.array([False, False, True])


def _left_example():
    return gzsl_from_scores(LEFT, LEFT_LABELS, LEFT_SEEN, m=3)


@pytest.mark.parametrize("per_class", [True, False])
def test_ausuc_counts_the_area_left_of_the_first_point(per_class: bool):
    """hit@2 with one seen class: image A is a hit at every γ (only one seen class can outrank it),
    so the curve's first point already has unseen accuracy 1/2. The area to its left, under the
    first seen accuracy, is achieved too: the curve starts at (0, seen[0]).

    Intervals of γ, (seen, unseen) per class (each class's images weigh equally; the flat
    weights are the same here, two images per side):
      (-inf, 1): C, D hit; A      -> (1,   1/2)
      (1, 2):    C hit;    A      -> (1/2, 1/2)
      (2, 3):    C hit;    A, B   -> (1/2, 1)
      (3, inf):  none;     A, B   -> (0,   1)
    Points (x = unseen, y = seen): (0, 1) (1/2, 1) (1/2, 1/2) (1, 1/2) (1, 0):
    area = 1/2 · 1 (the left part) + 1/2 · 1/2 = 3/4; without the left part it would be 1/4.
    """
    curve = seen_unseen_curve(_left_example(), k=2, per_class=per_class)
    assert curve.breakpoints.tolist() == [1, 2, 3]
    assert curve.unseen.tolist() == [0.5, 0.5, 1, 1]
    assert curve.seen.tolist() == [1, 0.5, 0.5, 0]
    assert curve.ausuc == 0.75
    assert ausuc(_left_example(), k=2, per_class=per_class) == 0.75


def test_ausuc_at_k1_is_chao_et_al_s_area():
    """hit@1 on the same scores: the curve starts at unseen accuracy 0 (γ → −inf ranks the seen
    class first for every image), the ordinary case, where the area is Chao et al.'s.
      (-inf, -5): C, D           -> (1, 0)        A: θ = 1 − 6 = −5
      (-5, 0):    C, D; A        -> (1, 1/2)      B: never (u0 outranks it among unseen)
      (0, 1):     C; A           -> (1/2, 1/2)
      (1, inf):   A              -> (0, 1/2)
    Points (0, 1) (0, 1) (1/2, 1) (1/2, 1/2) (1/2, 0): area = 1/2 · 1 = 1/2.
    """
    curve = seen_unseen_curve(_left_example(), k=1)
    assert curve.breakpoints.tolist() == [-5, 0, 1]
    assert curve.unseen.tolist() == [0, 0.5, 0.5, 0.5]
    assert curve.seen.tolist() == [1, 1, 0.5, 0]
    assert curve.ausuc == 0.5


# ------------------------------------------------------------------ γ among tied intervals
SEEN_2 = np.array([False, False, True, True])  # u0, u1 unseen; s2, s3 seen; one image per class


def _tied(scores: list[list[float]]):
    return gzsl_from_scores(np.array(scores, np.float32), np.arange(4), SEEN_2, m=2)


def test_choose_gamma_takes_the_tied_interval_nearest_zero():
    """Two intervals share the best H = 2/3: (1, 3) with (seen, unseen) = (1, 1/2) and (5, 9)
    with (1/2, 1). Each interval's γ is its midpoint, 2 and 7: the one nearer 0 wins.
      (-inf,1) (1, 0)   H 0        θ_A = 6 − 5 = 1, θ_B = 6 − 1 = 5
      (1, 3)   (1, 1/2) H 2/3      φ_C = 3 − 0 = 3, φ_D = 9 − 0 = 9
      (3, 5)   (1/2, 1/2) H 1/2
      (5, 9)   (1/2, 1) H 2/3
      (9, inf) (0, 1)   H 0
    """
    gz = _tied([[5, 0, 6, 0], [0, 1, 6, 0], [0, -1, 3, 1], [0, -1, 1, 9]])
    curve = seen_unseen_curve(gz, 1)
    assert curve.breakpoints.tolist() == [1, 3, 5, 9]
    np.testing.assert_allclose(curve.harmonic, [0, 2 / 3, 1 / 2, 2 / 3, 0])
    gamma, h = choose_gamma(gz)
    assert gamma == 2.0
    assert h == pytest.approx(2 / 3)
    assert choose_gamma(curve) == (gamma, h)  # a curve given directly: the same choice


def test_choose_gamma_breaks_an_equal_distance_tie_towards_the_lower_gamma():
    """The same H pattern mirrored around 0: best intervals (−3, −1) and (1, 3), midpoints −2 and
    2, equally far from 0: the lower γ (−2) is taken, so the choice never depends on order.
    θ_A = 0 − 3 = −3, φ_C = 3 − 4 = −1, θ_B = 3 − 2 = 1, φ_D = 4 − 1 = 3; the middle interval
    (−1, 1), which holds 0, has only H = 1/2."""
    gz = _tied([[3, 0, 0, -5], [0, 2, 3, -5], [4, 0, 3, 1], [0, 1, -5, 4]])
    assert seen_unseen_curve(gz, 1).breakpoints.tolist() == [-3, -1, 1, 3]
    gamma, h = choose_gamma(gz)
    assert gamma == -2.0
    assert h == pytest.approx(2 / 3)


def test_choose_gamma_keeps_zero_inside_a_lopsided_best_interval():
    """The best interval (−1, 5) holds 0: γ = 0 (no calibration), not its midpoint 2.
    θ_A = 1 − 2 = −1, θ_B = 1 − 2 = −1 (unseen u0, u1), φ_C = 6 − 1 = 5 (seen s2):
      (-inf, -1) (1, 0) H 0;   (-1, 5) (1, 1) H 1;   (5, inf) (0, 1) H 0."""
    scores = np.array([[2, 0, 1], [0, 2, 1], [0, 1, 6]], np.float32)
    gz = gzsl_from_scores(scores, np.array([0, 1, 2]), np.array([False, False, True]), m=2)
    assert seen_unseen_curve(gz, 1).breakpoints.tolist() == [-1, 5]
    assert choose_gamma(gz) == (0.0, 1.0)
