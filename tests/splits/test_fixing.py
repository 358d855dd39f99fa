"""Reduced-cost fixing (imagenet_zsl.splits.fixing) against brute force on small 0/1 programs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint

from imagenet_zsl.splits.fixing import fix_below, solve_fixed, solve_relaxation


def _random_program(seed: int, n: int = 9):
    """Maximise an integer objective over n binaries: a cardinality row (= 4), random pairs that
    exclude each other (<= 1) and one knapsack row, like the optimiser's models."""
    rng = np.random.default_rng(seed)
    objective = rng.integers(1, 20, size=n).astype(float)
    pairs = [p for p in itertools.combinations(range(n), 2) if rng.random() < 0.15]
    rows = [np.eye(n)[a] + np.eye(n)[b] for a, b in pairs]
    knapsack = rng.integers(0, 4, size=n).astype(float)
    constraints = [LinearConstraint(sp.csr_matrix(np.ones((1, n))), 4, 4)]
    if rows:
        constraints.append(LinearConstraint(sp.csr_matrix(np.array(rows)), -np.inf, 1))
    constraints.append(LinearConstraint(sp.csr_matrix(knapsack[None, :]), -np.inf, 9))
    return objective, constraints, Bounds(np.zeros(n), np.ones(n))


def _feasible(constraints, x: np.ndarray) -> bool:
    return all(np.all(c.A @ x <= c.ub + 1e-9) and np.all(c.A @ x >= c.lb - 1e-9) for c in constraints)


def _brute_force(objective, constraints, n: int) -> list[tuple[float, np.ndarray]]:
    points = (np.array(bits, dtype=float) for bits in itertools.product((0, 1), repeat=n))
    return [(float(objective @ x), x) for x in points if _feasible(constraints, x)]


@pytest.mark.parametrize("seed", range(12))
def test_fixing_keeps_every_solution_worth_the_wanted_value(seed):
    objective, constraints, bounds = _random_program(seed)
    solutions = _brute_force(objective, constraints, len(objective))
    if not solutions:
        pytest.skip("no feasible point for this seed")
    relaxation = solve_relaxation(objective, constraints, bounds)
    best = max(v for v, _ in solutions)
    assert relaxation.bound >= best - 1e-9  # weak duality, recomputed from the multipliers
    for wanted in (best, best - 3):
        fixed, _ = fix_below(relaxation, bounds, wanted)
        kept = [x for v, x in solutions if v >= wanted]
        assert all(np.all(x >= fixed.lb) and np.all(x <= fixed.ub) for x in kept)
        solved = solve_fixed(-objective, constraints, fixed, np.ones(len(objective)), {"presolve": True})
        assert solved.status == 0 and -solved.value == pytest.approx(best, abs=1e-9)
        assert _feasible(constraints, solved.x) and float(objective @ solved.x) == pytest.approx(best)


def test_a_tight_relaxation_fixes_the_optimum_by_hand():
    """max 3 x1 + x2 + x3, x1 + x2 + x3 = 1. Any multiplier w of the row in [1, 3] proves the
    bound 3 (w + max(3 - w, 0) + 2 max(1 - w, 0)); x1 away from 1 costs 3 - w, x2 or x3 away from
    0 costs w - 1: with wanted = 3 either x1 is fixed at 1 or x2 and x3 at 0 (both for 1.25 < w <
    2.75), and each way the other two solutions (worth 1) are cut off."""
    objective = np.array([3.0, 1.0, 1.0])
    constraints = [LinearConstraint(sp.csr_matrix(np.ones((1, 3))), 1, 1)]
    bounds = Bounds(np.zeros(3), np.ones(3))
    relaxation = solve_relaxation(objective, constraints, bounds)
    assert relaxation.bound == pytest.approx(3.0)
    fixed, count = fix_below(relaxation, bounds, 3.0)
    assert count >= 1
    for other in ([0.0, 1.0, 0.0], [0.0, 0.0, 1.0]):
        assert np.any(np.array(other) < fixed.lb) or np.any(np.array(other) > fixed.ub)
    solved = solve_fixed(-objective, constraints, fixed, np.ones(3), {})
    assert solved.x.tolist() == [1.0, 0.0, 0.0] and solved.value == -3.0 and solved.dual == -3.0


def test_solve_fixed_drops_rows_the_fixed_columns_settle_and_reports_a_broken_one():
    """x1 + x2 <= 1 with x1 fixed at 0 always holds (dropped); x1 + x2 + x3 = 3 with x1 fixed at
    0 cannot hold: infeasible before HiGHS is called."""
    objective = np.array([-1.0, -1.0, -1.0])
    pair = LinearConstraint(sp.csr_matrix(np.array([[1.0, 1.0, 0.0]])), -np.inf, 1)
    bounds = Bounds(np.zeros(3), np.array([0.0, 1.0, 1.0]))
    solved = solve_fixed(objective, [pair], bounds, np.ones(3), {})
    assert solved.status == 0 and solved.x.tolist() == [0.0, 1.0, 1.0] and solved.value == -2.0
    everything = LinearConstraint(sp.csr_matrix(np.ones((1, 3))), 3, 3)
    broken = solve_fixed(objective, [pair, everything], bounds, np.ones(3), {})
    assert broken.status == 2 and broken.x is None
