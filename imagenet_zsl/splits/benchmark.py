"""A structurally consistent test set of maximal structural ratio (Hascoet et al., CVPR 2019).

Objective: choose N classes T from a pool so that no member is an ancestor/descendant of another
member or of a training class, maximising R(T) = mean_c d(c, train) / d(c, T \\ {c}).

The problem is a :class:`~imagenet_zsl.splits.problem.BenchmarkProblem` (built and checked once);
a solver object turns it into a :class:`~imagenet_zsl.splits.problem.BenchmarkSolution`:

* :class:`Exact` (``optimizer: exact``, the default): the mixed-integer program of
  :mod:`imagenet_zsl.splits.milp`, solved by HiGHS to proven optimality; the solution carries the
  solver's upper bound on R and the gap;
* :class:`~imagenet_zsl.splits.local_search.LocalSearch` (``optimizer: local_search``): the earlier
  heuristic, kept for comparison (its upper bound is unknown).

:func:`select_max_ratio` is the one-call form: ``select_max_ratio(graph, pool, train, N,
Constraints(...), Exact(ExactOptions(levels=2)))``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.local_search import LocalSearch, LocalSearchOptions
from imagenet_zsl.splits.milp import (
    ExactProblem,
    ExactSolution,
    ExactTimeout,
    branch_arrays,
    prefer_low_positions,
    solve_exact,
)
from imagenet_zsl.splits.problem import (
    PROVEN_GAP,
    BenchmarkProblem,
    BenchmarkSolution,
    BenchmarkSolver,
    Constraints,
    branch_counts,
    infeasible_error,
)
from imagenet_zsl.splits.structure import structural_ratio

log = logging.getLogger(__name__)
#: the most distance levels the exact model uses (lcm(2..13) keeps coefficients exact in floats)
MAX_LEVELS = 12


@dataclass(frozen=True)
class ExactOptions:
    """``levels``: distance levels of the first model (widened while the bound is not met);
    ``time_limit``: seconds for the optimum (never for the tie-break, see :mod:`splits.milp`);
    ``shortlist_factor``: x N classes get level variables in the first model."""

    levels: int = 4
    time_limit: float = 120.0
    shortlist_factor: float = 2.0


@dataclass
class _Search:
    """The exact search so far: the best set, the model solve it came from, and whether the time
    budget ended the search."""

    best: BenchmarkSolution | None = None
    solution: ExactSolution | None = None
    out_of_time: bool = False


class Exact:
    """Solve the MILP; if the bound is not met, retry with more distance levels, then report the gap.

    A certified optimum gets the documented tie rule (:func:`splits.milp.prefer_low_positions`).
    When HiGHS finds no feasible set at all within the time limit (very large N), the local-search
    set is returned with no bound (``status: heuristic (exact timed out)``).
    """

    name = "exact"

    def __init__(self, options: ExactOptions | None = None) -> None:
        self.options = options or ExactOptions()

    def solve(self, problem: BenchmarkProblem) -> BenchmarkSolution:
        """The optimum with its certificate (status ``optimal``, gap 0), or the best set found with
        the reason it is not certified (``time_limit`` | ``gap``)."""
        started = time.perf_counter()
        search = self._search(problem, _exact_problem(problem), started)
        if search is None:
            return _heuristic_fallback(problem, started)
        best = search.best
        assert best is not None and search.solution is not None
        if best.gap is None or best.gap > PROVEN_GAP:
            # never silent: a set that the time budget cut short says so (it may differ on a faster machine)
            best.status = "time_limit" if best.status == "time_limit" or search.out_of_time else "gap"
            if best.status == "time_limit":
                log.warning(
                    "exact: the time limit (%.0f s) stopped the optimiser at R %.6f, bound %.6f: the set "
                    "is not certified and may differ on a faster machine; raise optimiser.time_limit",
                    self.options.time_limit,
                    best.ratio,
                    best.upper_bound,
                )
        else:
            best.status = "optimal"  # certified: R equals the proven bound, however the solves ended
            _break_ties(problem, best, search.solution)
        best.seconds = round(time.perf_counter() - started, 3)
        return best

    def _search(self, problem: BenchmarkProblem, model: ExactProblem, started: float) -> _Search | None:
        """Solve with more levels until the bound is met; None when the first solve found nothing."""
        search = _Search()
        levels = self.options.levels
        while True:
            remaining = self.options.time_limit - (time.perf_counter() - started)
            if remaining <= 0 and search.best is not None:  # the first solve always runs (HiGHS: >= 1 s)
                search.out_of_time = True
                return search
            try:
                solution = solve_exact(
                    model, levels=levels, time_limit=remaining, shortlist_factor=self.options.shortlist_factor
                )
            except ExactTimeout:
                if search.best is None:
                    if problem.include:  # no heuristic set honours the include list
                        raise
                    return None
                log.warning(
                    "exact: time limit reached while widening the levels; keeping R %.6f", search.best.ratio
                )
                search.best.status = "time_limit"
                return search
            if solution.status == "infeasible":
                raise infeasible_error(problem)
            wnids, ratio = _keep_best(problem, search, solution)
            best = search.best
            assert best is not None and best.gap is not None
            if best.gap <= PROVEN_GAP or levels >= MAX_LEVELS or solution.status != "optimal":
                return search
            # members farther than k from every other member were valued at num/(k+1): widen the levels
            far = problem.graph.nearest_other_distance(wnids)
            levels = int(min(MAX_LEVELS, max(levels + 2, np.nanmax(np.where(np.isfinite(far), far, 0)))))
            log.info(
                "exact: R %.6f, bound %.6f; retrying with %d distance levels",
                ratio,
                solution.upper_total / problem.size,
                levels,
            )


def _exact_problem(problem: BenchmarkProblem) -> ExactProblem:
    """The pool-indexed arrays of the MILP (see :mod:`splits.milp`)."""
    pool = list(problem.pool)
    branch_id, caps = branch_arrays(pool, problem.size, problem.branch_of, problem.quota)
    position = {w: i for i, w in enumerate(pool)}
    return ExactProblem(
        problem.graph,
        pool,
        problem.numer.astype(np.int64),
        problem.size,
        branch_id,
        caps,
        np.array(sorted(position[w] for w in set(problem.include)), dtype=np.int64),
    )


def _keep_best(
    problem: BenchmarkProblem, search: _Search, solution: ExactSolution
) -> tuple[list[str], float]:
    """Record a solve: its set replaces the best when its exact R is higher; the bound is the
    tightest seen. Returns the solve's set (sorted wnids) and its exact R."""
    wnids = sorted(problem.pool[i] for i in solution.chosen)
    ratio = structural_ratio(problem.graph, wnids, problem.train)
    bound = solution.upper_total / problem.size
    best = search.best
    upper = bound if best is None or best.upper_bound is None else min(bound, best.upper_bound)
    if best is None or ratio > best.ratio:
        search.best = BenchmarkSolution(
            wnids=wnids,
            ratio=ratio,
            optimizer=Exact.name,
            status=solution.status,
            shortlist=solution.shortlist,
            dropped_related_to_train=problem.dropped,
            branch_counts=branch_counts(wnids, problem.branch_of),
            rounds=solution.rounds,
        )
        search.solution = solution
    search.best.upper_bound = upper
    return wnids, ratio


def _heuristic_fallback(problem: BenchmarkProblem, started: float) -> BenchmarkSolution:
    """The exact model found no feasible set in time (very large N): the local-search heuristic's
    set, reported with no proven bound (``status: heuristic (exact timed out)``, gap unknown)."""
    log.warning("exact: no feasible set within the time limit; falling back to local search (no bound)")
    best = LocalSearch(LocalSearchOptions(progress=False)).solve(problem)
    best.status = "heuristic (exact timed out)"
    best.seconds = round(time.perf_counter() - started, 3)
    return best


def _break_ties(problem: BenchmarkProblem, best: BenchmarkSolution, solution: ExactSolution) -> None:
    """Apply the documented tie rule to a certified optimum in place (see :mod:`splits.milp`).

    Bounded by a node limit, not by the time left: the set written must not depend on how fast
    the machine is (``tie_break: solver_order`` only when the work limit is reached, on any machine).
    """
    best.tie_break = "solver_order"
    chosen = prefer_low_positions(solution, best.ratio * len(best.wnids))
    if chosen is None:
        return
    wnids = sorted(problem.pool[i] for i in chosen)
    ratio = structural_ratio(problem.graph, wnids, problem.train)
    if ratio < best.ratio - 1e-9:  # an over-valued set reached the objective: keep the first optimum
        log.info("exact: the tie-break set has R %.6f < %.6f; keeping the first optimum", ratio, best.ratio)
        return
    best.wnids, best.ratio = wnids, ratio
    best.branch_counts = branch_counts(wnids, problem.branch_of)
    best.tie_break = "min_positions"


def select_max_ratio(
    graph: ClassGraph,
    pool: Sequence[str],
    train: Sequence[str],
    size: int,
    constraints: Constraints | None = None,
    solver: BenchmarkSolver | None = None,
) -> BenchmarkSolution:
    """Choose ``size`` classes from ``pool``: structurally consistent, maximal ratio R
    (``solver``: default ``Exact()``)."""
    problem = BenchmarkProblem.create(graph, pool, train, size, constraints)
    return (solver or Exact()).solve(problem)


def solver_named(optimizer: str, exact: ExactOptions, local: LocalSearchOptions) -> BenchmarkSolver:
    """The solver a config's ``optimizer:`` names, with its options."""
    if optimizer == "exact":
        return Exact(exact)
    if optimizer == "local_search":
        return LocalSearch(local)
    raise UserInputError(f"benchmark: optimizer must be 'exact' or 'local_search', got {optimizer!r}")
