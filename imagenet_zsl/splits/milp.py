"""The exact benchmark optimiser: a mixed-integer program solved by HiGHS, with a certificate.

Problem (Hascoet et al.): choose N pool classes T, no member an ancestor/descendant of another,
maximising R(T) = mean_c num_c / d_c with num_c = d(c, train) (fixed per class) and
d_c = d(c, T \\ {c}) (undirected is-a edges). In a consistent set d_c >= 2 (1 would be a
parent/child pair), and every distance is a small integer, so the sum of ratios is linear in
binary choices:

* x_c in {0, 1}: c is chosen;
* y_{c,k} in [0, 1] for distance levels k = 2..K_c: "c is chosen and has another member within k";
  y_{c,k} <= x_c and y_{c,k} <= y_{c,k-1} + sum_{c' : d(c, c') = k} x_{c'} (y_{c,1} = 0): the
  shells of c's neighbourhood, each listed once; by induction y_{c,k} <= sum_{d(c, c') <= k} x_{c'},
  the same LP relaxation as listing every ball in full, with about half the nonzeros;
* objective sum_c [ x_c num_c / (K_c+1) + sum_k y_{c,k} num_c (1/k - 1/(k+1)) ]: it telescopes to
  num_c / d_c when d_c <= K_c and to num_c / (K_c+1) otherwise — an *upper* bound of the true
  ratio, so the solver's dual bound is an upper bound of the true optimum whatever the K_c;
* x_a + x_b <= 1 for every ancestor/descendant pair in the pool; sum_c x_c = N;
  sum_{c in branch b} x_c <= cap_b (``max_branch_share`` / ``branch_quota``); x_c = 1 for the
  ``include`` list (exclusions are simply not in the pool).

Levels per class. Every class starts with the same K (``levels``), except that a shortlisted
class c gets levels n_c..K_c only, n_c its distance to the nearest *unrelated* pool class (the
balls below are empty; related classes are never chosen with c, so they are left out of its
balls, which tightens the LP: HiGHS's root went from 18 s to 1.5 s in the compact reference at
N = 500), and K_c >= n_c (``ExactModels.anchor_levels``): an isolated class is valued exactly from
the first model on. When the optimum of the model still holds a class c with no other member
within K_c + 1, the model valued c at num_c/(K_c+1) instead of num_c/d_c; the caller
(``benchmark.Exact``, :func:`~imagenet_zsl.splits.benchmark.refine_levels`) then gives that class
alone K_c = d_c and solves again, until the chosen set's model value is its true value
(certified) or a class reaches :data:`MAX_LEVELS`. (Raising K for every class instead multiplies
the balls' nonzeros: 11 levels for all passed 4.7 GB at N = 5,000.)

Ties between equally optimal sets (there are many: on the default pool two optimal sets found by
different solver paths differ in ~50 of 500 classes). The rule: **among the optimal sets, the one
whose members have the smallest sum of positions in the sorted pool** (position 1 = the smallest
wnid). Once the optimum S* is certified, :func:`prefer_low_positions` solves the same model once
more with the objective fixed (>= S*) and minimises sum_c position(c) x_c. Every optimal set of the
whole pool is feasible there (the model over-values, never under-values), so when the set it returns
has exact R = R* it is the rule's set. When it was over-valued instead, its classes get their levels
and the shortlist, and the tie-break is solved again (``benchmark._break_ties``, at most
``TIE_BREAK_REFINEMENTS`` times); when that runs out, or a solve stops at its node limit, the first
optimum stands (the manifest says which: ``tie_break`` = ``min_positions`` | ``solver_order``).
Sets with equal position sums (rare) are told apart by HiGHS's deterministic search order. The rule
makes the set a function of the problem, not of the model's layout.

Determinism on any machine. The tie-break solve is bounded by work, never by time: HiGHS runs
single-threaded with a branch-and-bound node limit (:data:`TIE_BREAK_NODES`) and no time limit, so
whether it succeeds (and the set it returns) is the same on a fast and on a CPU-starved machine. The
only time limit left is the caller's budget for the optimum itself; a solve it cuts short is never
silent: the status says ``time_limit`` (and the gap is reported), never ``optimal``.

Solving. Each model's LP relaxation is solved first (:mod:`imagenet_zsl.splits.fixing`); its
reduced costs fix every column that no set worth the LP bound (rounded down) can move, and HiGHS
solves what is left, with presolve (cheap once most columns are gone). A solution worth the bound
is the optimum; otherwise its value v becomes the threshold, and the columns fixed at v keep every
set worth v or more, so the second solve's optimum is the model's. The tie-break fixes at N R* the
same way from the same LP. On the default pool this took the exact optimiser from 3.1 / 6.9 / 92 s
CPU (N = 500 / 1,000 / 5,000) to about 0.4 / 1.0 / 8 s, same sets.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.fixing import MARGIN, Relaxation, Solved, fix_below, solve_fixed, solve_relaxation

log = logging.getLogger(__name__)
#: branch-and-bound nodes the tie-break solve may use: a deterministic work limit (not a time limit)
TIE_BREAK_NODES = 200
#: from this shortlist round on, a round that picks outside classes doubles their branches' shortlists
GROW_FROM_ROUND = 3
#: the most distance levels one class gets (lcm(2..13) keeps coefficients exact in floats)
MAX_LEVELS = 12


class ExactTimeout(UserInputError):
    """The time limit ran out before the solver found any feasible set (the caller may fall back)."""


@dataclass
class ExactSolution:
    """A solved model: the chosen pool indices and the certificate, in sum-of-ratios units.

    ``upper_total`` bounds sum_c r(c) over every feasible set of the whole pool; divide by N for R.
    ``model`` is the last model solved (what :func:`prefer_low_positions` re-solves).
    """

    chosen: np.ndarray  # (N,) int, indices into the pool
    upper_total: float
    status: str  # "optimal" | "time_limit" | "infeasible"
    seconds: float
    members: np.ndarray = field(repr=False)  # (M,) pool indices with level variables (the shortlist)
    levels: int
    rounds: int
    model: _Model | None = field(default=None, repr=False)

    @property
    def shortlist(self) -> int:
        """How many classes had level variables in the last model."""
        return len(self.members)


@dataclass
class _Model:
    """One MILP in scipy's terms: maximise ``objective`` (scaled integers) over x (pool) then y."""

    objective: np.ndarray  # (n_pool + n_y,)
    constraints: list[LinearConstraint]
    bounds: Bounds
    integrality: np.ndarray
    n_pool: int
    scale: int
    top: int  # the largest K_c
    relaxation: Relaxation | None = None  # its LP relaxation, once solved (the tie-break reuses it)


@dataclass
class ExactProblem:
    """The inputs of the exact model (pool-indexed arrays; see module docstring)."""

    graph: ClassGraph
    pool: list[str]
    numer: np.ndarray  # (P,) distance to the nearest training class
    size: int
    branch_id: np.ndarray  # (P,) int branch of each pool class
    caps: np.ndarray  # (B,) max members per branch
    include: np.ndarray  # (I,) pool indices that must be chosen


def related_pairs(graph: ClassGraph, pool: Sequence[str]) -> np.ndarray:
    """(M, 2) pool-index pairs (a, b) with a an ancestor or descendant of b, a < b."""
    idx = graph.indices(pool)
    anc = graph.ancestor_matrix[idx][:, idx].tocoo()
    a, b = anc.row, anc.col
    keep = a != b
    pairs = np.stack([np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])], axis=1)
    return np.unique(pairs, axis=0) if len(pairs) else np.zeros((0, 2), dtype=np.int64)


class ExactModels:
    """The exact models of one problem: every class at ``levels`` distance levels but those in
    ``class_levels`` (pool index -> K_c, raised by ``benchmark.refine_levels``), over any shortlist.

    A shortlisted class c whose nearest *unrelated* pool class lies at n_c > 2 gets levels
    k = n_c..K_c only (the balls below n_c are empty: no y there), and K_c >= n_c (capped at
    ``max_levels``): an isolated class is valued exactly from the first model on, where a plain
    2..K model over-values it and needs a refinement solve (on the default pool at N = 5,000 every
    class the first model over-valued was such a class). ``anchor_levels`` holds these K_c floors.

    Builds share what does not change between them: the related pairs, each pool class's nearest
    other pool class, and each class's ball distances (recomputed only when its K_c grows).
    """

    def __init__(self, problem: ExactProblem, levels: int, max_levels: int = MAX_LEVELS) -> None:
        self.problem = problem
        self.levels = levels
        self.max_levels = max(levels, max_levels)
        self.class_levels: dict[int, int] = {}
        self.anchor_levels: dict[int, int] = {}  # pool index -> K_c floor: its nearest unrelated class
        graph = problem.graph
        self._pool_idx = graph.indices(problem.pool)
        self._pairs = related_pairs(graph, problem.pool)
        n_pool = len(problem.pool)
        ends = np.concatenate([self._pairs, self._pairs[:, ::-1]])
        self._related = sp.csr_matrix(
            (np.ones(len(ends), dtype=bool), (ends[:, 0], ends[:, 1])), shape=(n_pool, n_pool)
        )
        dmin = graph.nearest_other_distance(problem.pool)
        self._dmin = np.clip(np.where(np.isfinite(dmin), dmin, levels + 1), 2, levels + 1).astype(np.int64)
        self._rows: dict[int, tuple[int, np.ndarray]] = {}  # pool index -> (limit, masked distances)
        self._nearest: dict[int, int] = {}  # pool index -> nearest unrelated pool class (255: none)

    def top(self) -> int:
        """The largest K_c given so far (refined or anchored)."""
        return max([self.levels, *self.class_levels.values(), *self.anchor_levels.values()])

    def upper(self, scale: int | None = None) -> np.ndarray:
        """(P,) scaled upper bound of each class's ratio: num / clip(dmin, 2, levels + 1)."""
        scale = scale or math.lcm(*range(2, self.levels + 2))
        return self.problem.numer.astype(np.int64) * scale // self._dmin  # exact: dmin divides

    def member_levels(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((M,) first level, (M,) K_c) of each member (pool indices with rows): levels n_c..K_c,
        none when no unrelated pool class lies within ``max_levels`` (then K_c = ``max_levels``)."""
        near = np.array([self._nearest[int(i)] for i in members], dtype=np.int64)
        raised = np.array([self.class_levels.get(int(i), self.levels) for i in members], dtype=np.int64)
        last = np.maximum(np.maximum(raised, self.levels), np.minimum(near, self.max_levels))
        first = np.maximum(2, np.minimum(near, last + 1))
        return first, last

    def build(self, short: np.ndarray) -> _Model:
        """The model over x (every pool class) and y (the shortlisted ``short`` (P,) bool classes)."""
        members = np.flatnonzero(short)
        self._ensure_rows(members)
        first, last = self.member_levels(members)
        top = int(max(self.levels, last.max(initial=self.levels)))
        scale = math.lcm(*range(2, top + 2))
        rows = {int(i): self._rows[int(i)][1] for i in members}
        return _build_model(self.problem, members, rows, self._pairs, self.upper(scale), scale, (first, last))

    def _ensure_rows(self, members: np.ndarray) -> None:
        """Distance rows of ``members`` out to their K_c (self and related classes masked to 255);
        a row with no unrelated class within it is searched again out to ``max_levels``."""
        need = np.array([max(self.levels, self.class_levels.get(int(i), 0)) for i in members], dtype=np.int64)
        for k in np.unique(need):
            stale = [int(i) for i in members[need == k] if self._rows.get(int(i), (0,))[0] < k]
            self._compute_rows(stale, int(k))
            empty = [i for i in stale if self._nearest[i] == 255 and k < self.max_levels]
            self._compute_rows(empty, self.max_levels)
        for i in members:
            near = self._nearest[int(i)]
            if near > self.levels:  # none within max_levels (255): its K_c is max_levels already
                self.anchor_levels[int(i)] = min(near, self.max_levels)

    def _compute_rows(self, stale: list[int], limit: int) -> None:
        if not stale:
            return
        rows = np.array(stale, dtype=np.int64)
        block = self.problem.graph.hop_distances(self._pool_idx[rows], self._pool_idx, limit)
        block[np.arange(len(rows)), rows] = 255
        related = self._related[rows].tocoo()
        block[related.row, related.col] = 255  # never chosen with the row's class: no neighbour of it
        nearest = block.min(axis=1)
        for i, row, near in zip(stale, block, nearest.tolist(), strict=True):
            self._rows[i] = (limit, row)
            self._nearest[i] = int(near)


def solve_exact(
    models: ExactModels,
    time_limit: float = 120.0,
    shortlist_factor: float = 2.0,
    max_rounds: int = 20,
    shortlist: np.ndarray | None = None,
) -> ExactSolution:
    """Solve to proven optimality (or to ``time_limit`` seconds in all), growing the shortlist.

    The classes with levels of their own (``models.class_levels``) join the shortlist, as do the
    pool indices in ``shortlist`` (an earlier solve's ``members``). ``levels`` in the answer is
    the largest K used.

    When the solver picks outside classes, they join the shortlist; when it still does so from
    round :data:`GROW_FROM_ROUND` on, the shortlist of each of their branches doubles too
    (:func:`_grow_branches`), so that a tightly capped problem takes a few rounds instead of
    dozens of a few classes each (``max_branch_share: 0.1`` on the default pool: 6 rounds, not 31).
    The rule counts rounds, never seconds: the path is the same on any machine.
    """
    started = time.perf_counter()
    problem, size = models.problem, models.problem.size
    upper = models.upper()  # ranks the classes (any scale: the same order)
    short = _initial_shortlist(problem, upper, shortlist_factor)
    short[list(models.class_levels)] = True
    if shortlist is not None:
        short[shortlist] = True
    rounds = 0
    while True:
        rounds += 1
        members = np.flatnonzero(short)
        model = models.build(short)
        # the scaled objective is an integer: a relative gap below 1/2 of its largest value proves optimality
        ceiling = float(np.sort(problem.numer)[::-1][:size].sum()) * model.scale / 2 + 1.0  # d_c >= 2
        gap = min(1e-6, 0.4 / ceiling)
        res = _run(model, gap, time_limit - (time.perf_counter() - started))
        seconds = time.perf_counter() - started
        if res is None:
            nothing = np.zeros(0, dtype=np.int64)
            return ExactSolution(nothing, math.nan, "infeasible", seconds, members, model.top, rounds)
        chosen, bound, optimal = res
        # scaled values are integers: MARGIN (not 1e-6) absorbs the float error of the bound's long sum
        upper_total = math.floor(bound + MARGIN) / model.scale
        outside = chosen[~short[chosen]]
        out_of_time = len(outside) > 0 and time_limit - seconds <= 0
        status = "optimal" if optimal and not out_of_time else "time_limit"
        if len(outside) == 0 or status != "optimal" or rounds >= max_rounds:
            return ExactSolution(chosen, upper_total, status, seconds, members, model.top, rounds, model)
        log.info("exact: %d outside classes chosen; adding them to the shortlist", len(outside))
        short[outside] = True
        if rounds >= GROW_FROM_ROUND:
            _grow_branches(problem, upper, short, outside)


def _ranking(problem: ExactProblem, upper: np.ndarray) -> np.ndarray:
    """(P,) pool indices, the order classes join a shortlist in: largest upper bound first, ties
    by larger numerator, then wnid order."""
    return np.lexsort((np.arange(len(problem.pool)), -problem.numer, -upper))


def _initial_shortlist(problem: ExactProblem, upper: np.ndarray, factor: float) -> np.ndarray:
    """(P,) bool: the ``factor`` x N classes of largest upper bound (ties: larger numerator, then
    wnid order), at most ``factor`` x cap_b of them per capped branch b, plus the include list.

    Without caps this is the plain top factor x N. With caps it skips what a capped branch cannot
    use, so the first model already holds the classes of the other branches that the optimum
    needs (otherwise each round adds a few outside classes and the model is solved again).
    """
    n_pool, size = len(problem.pool), problem.size
    order = _ranking(problem, upper)
    room = np.floor(factor * problem.caps).astype(np.int64)[problem.branch_id[order]]
    # rank of each class within its branch along the order
    rank = np.zeros(n_pool, dtype=np.int64)
    seen = np.zeros(len(problem.caps), dtype=np.int64)
    for j, b in enumerate(problem.branch_id[order]):
        rank[j] = seen[b]
        seen[b] += 1
    eligible = order[rank < room]
    short = np.zeros(n_pool, dtype=bool)
    short[eligible[: min(len(eligible), max(size, int(factor * size)))]] = True
    short[problem.include] = True
    return short


def _grow_branches(problem: ExactProblem, upper: np.ndarray, short: np.ndarray, outside: np.ndarray) -> None:
    """Double the shortlist of each branch that an outside class came from (in place): its first
    2 x (shortlisted classes of the branch) classes of the ranking join."""
    order = _ranking(problem, upper)
    ranked_branch = problem.branch_id[order]
    for b in np.unique(problem.branch_id[outside]):
        in_branch = order[ranked_branch == b]
        short[in_branch[: 2 * int(short[in_branch].sum())]] = True


def prefer_low_positions(
    model: _Model, optimum_total: Fraction, size: int, node_limit: int = TIE_BREAK_NODES
) -> np.ndarray | None:
    """The tie rule: among sets whose ``model`` objective reaches ``optimum_total`` (the certified
    optimal sum of ratios N R*, an exact fraction), the one with the smallest sum of pool
    positions; None when the solve stops at its node limit (with, then without presolve) or finds
    nothing (see the module docstring).

    No time limit is given to HiGHS here on purpose: the outcome must not depend on the machine's
    speed, and ``node_limit`` bounds the work deterministically.

    The caller must check that the returned (N,) pool indices have exact R = R*: the model
    over-values some sets, which then also reach the objective.
    """
    # every set's model value is an integer >= its true (scaled) value; exact, from whole hop counts
    # (a float N R* times a scale of 10^5-10^9 would be off by more than any tolerance)
    target = math.ceil(optimum_total * model.scale)
    n_var = len(model.objective)
    fixed = LinearConstraint(sp.csr_matrix(model.objective[None, :]), target - 0.5, np.inf)
    if model.relaxation is None:
        model.relaxation = solve_relaxation(model.objective, model.constraints, model.bounds)
    bounds = model.bounds
    if model.relaxation is not None:  # the columns no set reaching the target can move
        bounds, _fixed = fix_below(model.relaxation, model.bounds, target - 0.5)
    positions = np.zeros(n_var)
    positions[: model.n_pool] = np.arange(1, model.n_pool + 1)
    worst = float(np.sort(positions)[::-1][:size].sum()) + 1.0
    for presolve in (True, False):  # without presolve only when the first solve used up its nodes
        options = {"node_limit": node_limit, "mip_rel_gap": min(1e-6, 0.4 / worst), "presolve": presolve}
        res = solve_fixed(positions, [*model.constraints, fixed], bounds, model.integrality, options)
        if res.status == 0 and res.x is not None:
            break
    if res.status != 0 or res.x is None:
        return None
    return np.flatnonzero(res.x[: model.n_pool] > 0.5)


def _build_model(
    problem: ExactProblem,
    members: np.ndarray,
    dist_rows: dict[int, np.ndarray],
    pairs: np.ndarray,
    upper: np.ndarray,
    scale: int,
    member_levels: tuple[np.ndarray, np.ndarray],
) -> _Model:
    """The MILP over x (all pool classes) and y (k = n_c..K_c for each shortlisted class c, in
    member order); see the module docstring. ``member_levels``: ((M,) n_c, (M,) K_c)."""
    n_pool = len(problem.pool)
    first, last = member_levels
    counts = np.maximum(last - first + 1, 0)  # y variables per member
    n_y = int(counts.sum())
    n_var = n_pool + n_y
    y_start = n_pool + np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    objective = _objective(problem, members, upper, scale, member_levels)
    a_ub, ub = _inequalities(members, dist_rows, pairs, y_start, member_levels, n_var)
    constraints = [LinearConstraint(a_ub, np.full(len(ub), -np.inf), ub), *_pool_constraints(problem, n_var)]
    lower = np.zeros(n_var)
    lower[problem.include] = 1.0
    integrality = np.concatenate([np.ones(n_pool), np.zeros(n_y)])
    top = int(last.max(initial=0))
    return _Model(objective, constraints, Bounds(lower, np.ones(n_var)), integrality, n_pool, scale, top)


def _objective(
    problem: ExactProblem,
    members: np.ndarray,
    upper: np.ndarray,
    scale: int,
    member_levels: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """(n_pool + n_y,) scaled integer costs: num/(K_c+1) per shortlisted x (``upper`` for the
    rest), then num (1/k - 1/(k+1)) per y_{c,k}, k = n_c..K_c."""
    first, last = member_levels
    numer = problem.numer.astype(np.int64)
    tail = np.full(len(problem.pool), -1, dtype=np.int64)
    tail[members] = numer[members] * scale // (last + 1)
    cost = np.where(tail >= 0, tail, upper).astype(np.float64)
    counts = np.maximum(last - first + 1, 0)
    owner = np.repeat(np.arange(len(members)), counts)
    lev = (
        np.repeat(first, counts)
        + np.arange(int(counts.sum()))
        - np.repeat(np.cumsum(counts) - counts, counts)
    )
    cost_y = numer[members[owner]] * (scale // lev - scale // (lev + 1))  # num_c (1/k - 1/(k+1)), scaled
    return np.concatenate([cost, cost_y.astype(np.float64)])


def _inequalities(
    members: np.ndarray,
    dist_rows: dict[int, np.ndarray],
    pairs: np.ndarray,
    y_start: np.ndarray,
    member_levels: tuple[np.ndarray, np.ndarray],
    n_var: int,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """A x <= ub: y_{c,k} <= x_c, the shells of each shortlisted class, then x_a + x_b <= 1 for
    every related pair. ``dist_rows`` have the class itself and its related classes masked."""
    first, last = member_levels
    counts = np.maximum(last - first + 1, 0)
    n_y = int(counts.sum())
    rows, cols, vals = [], [], []
    # y_{c,k} - x_c <= 0
    r = np.arange(n_y)
    rows += [r, r]
    cols += [n_var - n_y + r, np.repeat(members, counts)]  # the y block follows the pool's x
    vals += [np.ones(n_y), -np.ones(n_y)]
    n_rows = n_y
    # y_{c,k} - y_{c,k-1} - sum_{c' at distance k from c} x_{c'} <= 0: the ball at n_c, then shells
    for j, ci in enumerate(members):
        row = dist_rows[int(ci)]
        for li in range(int(counts[j])):
            k = int(first[j]) + li
            shell = np.flatnonzero(row <= k) if li == 0 else np.flatnonzero(row == k)
            previous = [y_start[j] + li - 1] if li else []
            rows.append(np.full(len(shell) + 1 + len(previous), n_rows))
            cols.append(np.concatenate([[y_start[j] + li], previous, shell]).astype(np.int64))
            vals.append(np.concatenate([[1.0], -np.ones(len(previous) + len(shell))]))
            n_rows += 1
    upper_rows = n_rows
    # x_a + x_b <= 1 for related pairs
    r = n_rows + np.arange(len(pairs))
    rows += [r, r]
    cols += [pairs[:, 0], pairs[:, 1]]
    vals += [np.ones(len(pairs)), np.ones(len(pairs))]
    n_rows += len(pairs)
    a_ub = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, n_var)
    )
    return a_ub, np.concatenate([np.zeros(upper_rows), np.ones(len(pairs))])


def _pool_constraints(problem: ExactProblem, n_var: int) -> list[LinearConstraint]:
    """sum x = N, and sum of x over each capped branch <= its cap."""
    n_pool, size = len(problem.pool), problem.size
    total = sp.csr_matrix(
        (np.ones(n_pool), (np.zeros(n_pool, dtype=np.int64), np.arange(n_pool))), shape=(1, n_var)
    )
    constraints = [LinearConstraint(total, size, size)]
    n_branch = len(problem.caps)
    if n_branch and (problem.caps < size).any():
        branch = sp.csr_matrix(
            (np.ones(n_pool), (problem.branch_id, np.arange(n_pool))), shape=(n_branch, n_var)
        )
        constraints.append(LinearConstraint(branch, -np.inf, problem.caps.astype(np.float64)))
    return constraints


def _run(model: _Model, gap: float, time_limit: float) -> tuple[np.ndarray, float, bool] | None:
    """Maximise the model: (chosen pool indices, bound, proven optimal), None when infeasible.

    First the LP relaxation (kept on the model for the tie-break), then the model with every
    column fixed that no set worth ``wanted`` = floor(LP bound) can move (presolve drops them):
    a solution worth ``wanted`` is the optimum. Otherwise the solution found, worth v, becomes
    ``wanted``: the columns fixed at v keep every set worth v or more (v's own among them), so that
    solve's optimum is the whole model's. Any step that finds nothing (or an LP that fails) falls
    back to the whole model. On the default pool this costs 0.3-0.5x the plain solve.
    """
    started = time.perf_counter()
    model.relaxation = solve_relaxation(model.objective, model.constraints, model.bounds)
    relaxation = model.relaxation
    if relaxation is not None:
        wanted = float(math.floor(relaxation.bound + 1e-6))
        for _ in range(2):
            bounds, _fixed = fix_below(relaxation, model.bounds, wanted)
            res = _solve(model, bounds, gap, time_limit - (time.perf_counter() - started), presolve=True)
            if res.x is None:
                break  # nothing worth ``wanted`` with these columns fixed: solve the whole model
            if -res.value >= wanted - MARGIN or res.status != 0:
                # every set the fixing dropped is worth less than ``wanted``
                bound = min(relaxation.bound, max(-res.dual, wanted))
                return np.flatnonzero(res.x[: model.n_pool] > 0.5), bound, res.status == 0
            wanted = -res.value
    res = _solve(model, model.bounds, gap, time_limit - (time.perf_counter() - started), False)
    if res.x is None:
        if res.status == 2:
            return None
        if res.status == 1:  # time limit without any feasible point
            raise ExactTimeout(
                f"benchmark: the exact optimiser found no feasible set within {time_limit:.0f} s; "
                "raise optimiser.time_limit or use optimizer: local_search"
            )
        raise UserInputError(f"benchmark: the exact optimiser failed ({res.message})")
    bound = -res.dual if relaxation is None else min(-res.dual, relaxation.bound)
    return np.flatnonzero(res.x[: model.n_pool] > 0.5), bound, res.status == 0


def _solve(model: _Model, bounds: Bounds, gap: float, time_limit: float, presolve: bool) -> Solved:
    """HiGHS on the model with these column bounds, the fixed columns taken out (minimising the
    negated objective: ``value`` and ``dual`` come back negated)."""
    options = {"time_limit": max(1.0, time_limit), "mip_rel_gap": gap, "presolve": presolve}
    return solve_fixed(-model.objective, model.constraints, bounds, model.integrality, options)


def branch_arrays(
    pool: Sequence[str], size: int, branch_of: Mapping[str, str] | None, quota: Mapping[str, int] | None
) -> tuple[np.ndarray, np.ndarray]:
    """(P,) branch id per pool class and (B,) cap per branch (``size`` where uncapped)."""
    if not quota or branch_of is None:
        return np.zeros(len(pool), dtype=np.int64), np.array([size])
    names = sorted({branch_of.get(w, "?") for w in pool})
    ids = {b: i for i, b in enumerate(names)}
    branch_id = np.array([ids[branch_of.get(w, "?")] for w in pool], dtype=np.int64)
    caps = np.array([min(size, int(quota.get(b, size))) for b in names], dtype=np.int64)
    return branch_id, caps
