"""Reduced-cost fixing for the exact optimiser's MILPs: shrink a model before HiGHS sees it.

The models of :mod:`imagenet_zsl.splits.milp` have a nearly integral LP relaxation (on the
default pool at N = 500 it *is* integral, at N = 5,000 its bound lies 8 units of about 170,000
above the optimum). One LP solve gives multipliers y >= 0 for the rows; for *any* such y,
``c x <= y b + sum_j max(r_j lb_j, r_j ub_j)`` with r = c - A^T y holds for every x within the
bounds that satisfies the rows (weak duality), so the bound is valid whatever the LP solver's
tolerances were (it is recomputed here from y in float64). Flipping variable j away from the bound
that r_j favours costs at least |r_j| (ub_j - lb_j): when the bound minus that cost falls below
the value every wanted solution reaches, j is fixed at its favoured bound. Only solutions below
that value are lost, so the fixed model has the same optimum (and, with the objective as a
constraint, the same tie-break set) as the full one.

Why here, not in HiGHS: scipy's ``milp`` gives neither the root LP's duals nor a way to hand over
an incumbent, and HiGHS without presolve carries the fixed columns through every LP; fixing most
columns first and letting presolve drop them made the tie-break solve 5-10x cheaper at N = 500 and
1,000 on the default pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

#: slack below the wanted value before a column is fixed: float64 rounding of the recomputed
#: bound is below 1e-4 on objectives up to 1e10; whole solutions differ by integers
MARGIN = 0.25
#: a row left without free columns must hold within this (its coefficients and bounds are integers)
FEASIBILITY = 1e-6


@dataclass(frozen=True)
class Relaxation:
    """The LP relaxation of a maximisation model, solved once.

    ``bound``: a valid upper bound of the objective over the model (weak duality, recomputed);
    ``reduced``: (n_var,) reduced costs r = c - A^T y; ``x``: (n_var,) the LP solution.
    """

    bound: float
    reduced: np.ndarray
    x: np.ndarray


def solve_relaxation(
    objective: np.ndarray, constraints: list[LinearConstraint], bounds: Bounds
) -> Relaxation | None:
    """Maximise ``objective`` over the LP relaxation; None when the LP is infeasible or fails."""
    rows = sp.vstack([sp.csr_matrix(c.A) for c in constraints]).tocsr()
    low = np.concatenate([np.broadcast_to(np.asarray(c.lb, float), (c.A.shape[0],)) for c in constraints])
    high = np.concatenate([np.broadcast_to(np.asarray(c.ub, float), (c.A.shape[0],)) for c in constraints])
    equal = low == high
    upper_rows = np.flatnonzero(~equal & np.isfinite(high))
    lower_rows = np.flatnonzero(~equal & np.isfinite(low))
    a_ub = sp.vstack([rows[upper_rows], -rows[lower_rows]]).tocsr()
    b_ub = np.concatenate([high[upper_rows], -low[lower_rows]])
    eq_rows = np.flatnonzero(equal)
    a_eq, b_eq = rows[eq_rows], high[eq_rows]
    lp = linprog(
        -objective,
        A_ub=a_ub if a_ub.shape[0] else None,
        b_ub=b_ub if a_ub.shape[0] else None,
        A_eq=a_eq if len(eq_rows) else None,
        b_eq=b_eq if len(eq_rows) else None,
        bounds=np.stack([bounds.lb, bounds.ub], axis=1),
        method="highs-ds",
    )
    if lp.status != 0 or lp.x is None:
        return None
    y_ub = np.maximum(-lp.ineqlin.marginals, 0.0) if a_ub.shape[0] else np.zeros(0)  # >= 0 for a max
    y_eq = -lp.eqlin.marginals if len(eq_rows) else np.zeros(0)
    reduced = objective - (a_ub.T @ y_ub if len(y_ub) else 0.0) - (a_eq.T @ y_eq if len(y_eq) else 0.0)
    reduced = np.asarray(reduced, dtype=np.float64)
    best = np.where(reduced > 0, reduced * bounds.ub, reduced * bounds.lb)
    bound = float(y_ub @ b_ub + y_eq @ b_eq + best.sum())
    if not np.isfinite(bound):  # an unbounded column: no bound to fix by
        return None
    return Relaxation(bound, reduced, np.asarray(lp.x, dtype=np.float64))


def fix_below(relaxation: Relaxation, bounds: Bounds, wanted: float) -> tuple[Bounds, int]:
    """(tightened bounds, columns fixed): every column whose move away from its LP-favoured bound
    would take the objective below ``wanted`` is fixed there (see the module docstring)."""
    cost = np.abs(relaxation.reduced) * (bounds.ub - bounds.lb)
    fixed = (relaxation.bound - cost < wanted - MARGIN) & (bounds.ub > bounds.lb)
    low, high = bounds.lb.copy(), bounds.ub.copy()
    up = fixed & (relaxation.reduced > 0)
    down = fixed & (relaxation.reduced < 0)
    low[up] = high[up]
    high[down] = low[down]
    return Bounds(low, high), int((up | down).sum())


@dataclass(frozen=True)
class Solved:
    """A MILP solved with its fixed columns taken out: ``x`` (n_var,) the whole solution (None when
    HiGHS found none), ``value`` and ``dual`` (the objective as given, fixed columns included),
    scipy's ``status`` and ``message``."""

    x: np.ndarray | None
    value: float
    dual: float
    status: int
    message: str


def solve_fixed(
    objective: np.ndarray,
    constraints: list[LinearConstraint],
    bounds: Bounds,
    integrality: np.ndarray,
    options: dict,
) -> Solved:
    """Minimise ``objective`` with HiGHS over the columns that ``bounds`` leaves free: the fixed
    ones move to the row bounds and rows left empty are dropped (HiGHS's presolve would do the same,
    at several seconds on the N = 5,000 model)."""
    fixed = bounds.lb == bounds.ub
    free = np.flatnonzero(~fixed)
    at = np.where(fixed, bounds.lb, 0.0)
    reduced = []
    free_low, free_high = bounds.lb[free], bounds.ub[free]
    for c in constraints:
        a = sp.csr_matrix(c.A)
        shift = a @ at
        rows = a[:, free]
        low = np.broadcast_to(np.asarray(c.lb, float), (a.shape[0],)) - shift
        high = np.broadcast_to(np.asarray(c.ub, float), (a.shape[0],)) - shift
        # the row's least and largest activity over the free columns' bounds: always within? drop it
        plus, minus = rows.maximum(0), rows.minimum(0)
        most = plus @ free_high + minus @ free_low
        least = plus @ free_low + minus @ free_high
        if (least > high + FEASIBILITY).any() or (most < low - FEASIBILITY).any():
            return Solved(None, np.nan, np.nan, 2, "a row cannot hold with the fixed columns")
        keep = (most > high + FEASIBILITY) | (least < low - FEASIBILITY)
        if keep.any():
            reduced.append(LinearConstraint(rows[keep], low[keep], high[keep]))
    constant = float(objective @ at)
    if len(free) == 0:
        return Solved(at, constant, constant, 0, "every column fixed")
    res = milp(
        objective[free],
        integrality=integrality[free],
        bounds=Bounds(bounds.lb[free], bounds.ub[free]),
        constraints=reduced,
        options=options,
    )
    if res.x is None:
        return Solved(None, np.nan, np.nan, res.status, res.message)
    x = at.copy()
    x[free] = res.x
    dual = res.mip_dual_bound if res.mip_dual_bound is not None else res.fun
    return Solved(x, float(res.fun) + constant, float(dual) + constant, res.status, res.message)
