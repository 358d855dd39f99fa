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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.local_search import LocalSearch, LocalSearchOptions
from imagenet_zsl.splits.milp import (
    MAX_LEVELS,
    ExactModels,
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
from imagenet_zsl.splits.structure import exact_ratio_sum, structural_ratio

log = logging.getLogger(__name__)
#: model refinements the tie rule may make when its set was over-valued (a work limit, not a time limit)
TIE_BREAK_REFINEMENTS = 8


@dataclass(frozen=True)
class ExactOptions:
    """``levels``: K, the largest distance level of every class in the first model (indicators for
    d = 2..K, or from the class's nearest unrelated pool class on, see :mod:`splits.milp`; raised
    per class while the bound is not met, see :func:`refine_levels`). K = 3 (two distance levels)
    is the default: on the default pool at N = 500 / 1,000 / 5,000 it took 0.4 / 1.1 / 8.6 s CPU,
    K = 2 0.5 / 1.0 / 7.1 s and K = 4 0.8 / 1.9 / 27 s, same sets;
    ``time_limit``: seconds for the optimum (never for the tie-break, see :mod:`splits.milp`);
    ``shortlist_factor``: x N classes get level variables in the first model."""

    levels: int = 3
    time_limit: float = 120.0
    shortlist_factor: float = 2.0


@dataclass
class _Search:
    """The exact search so far: the models (with the levels given so far), the best set, the last
    model solve (the tightest model: the tie rule starts there), and whether the time budget ended
    the search."""

    models: ExactModels
    best: BenchmarkSolution | None = None
    solution: ExactSolution | None = None
    out_of_time: bool = False
    solves: int = 0  # model solves of the optimum, over every refinement


class Exact:
    """Solve the MILP; while the bound is not met, give the over-valued chosen classes more
    distance levels and solve again; a gap that remains is reported.

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
        search = self._search(problem, ExactModels(_exact_problem(problem), self.options.levels), started)
        if search is None:
            return _heuristic_fallback(problem, started)
        best = search.best
        assert best is not None and search.solution is not None
        # the whole search's account: every model solve, the last shortlist, the refined classes
        best.rounds, best.shortlist = search.solves, search.solution.shortlist
        best.refined_levels = len(search.models.class_levels)
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
            tie_started = time.process_time()
            _break_ties(problem, best, search)
            best.tie_break_cpu = time.process_time() - tie_started
        best.seconds = round(time.perf_counter() - started, 3)
        return best

    def _search(self, problem: BenchmarkProblem, models: ExactModels, started: float) -> _Search | None:
        """Solve, then give more distance levels to the chosen classes the model over-valued,
        until the bound is met; None when the first solve found nothing."""
        search = _Search(models)
        shortlist: np.ndarray | None = None  # the last solve's, kept: a refined solve starts there
        while True:
            remaining = self.options.time_limit - (time.perf_counter() - started)
            if remaining <= 0 and search.best is not None:  # the first solve always runs (HiGHS: >= 1 s)
                search.out_of_time = True
                return search
            try:
                solution = solve_exact(
                    models,
                    time_limit=remaining,
                    shortlist_factor=self.options.shortlist_factor,
                    shortlist=shortlist,
                )
            except ExactTimeout:
                if search.best is None:
                    if problem.include:  # no heuristic set honours the include list
                        raise
                    return None
                log.warning(
                    "exact: time limit reached while refining the levels; keeping R %.6f", search.best.ratio
                )
                search.best.status = "time_limit"
                return search
            if solution.status == "infeasible":
                raise infeasible_error(problem)
            shortlist = solution.members
            search.solves += solution.rounds
            _keep_best(problem, search, solution)
            best = search.best
            assert best is not None and best.gap is not None
            if best.gap <= PROVEN_GAP or solution.status != "optimal":
                return search
            refined = refine_levels(
                problem, solution.chosen, models.class_levels, models.levels, models.anchor_levels
            )
            if not refined:  # every over-valued member already has MAX_LEVELS
                return search
            log.info(
                "exact: R %.6f, bound %.6f; %d chosen classes have no other member within their "
                "levels: giving them more (up to %d)",
                best.ratio,
                solution.upper_total / problem.size,
                refined,
                models.top(),
            )


def refine_levels(
    problem: BenchmarkProblem,
    chosen: np.ndarray,
    class_levels: dict[int, int],
    levels: int,
    anchors: Mapping[int, int] | None = None,
) -> int:
    """Raise K_c in ``class_levels`` (in place) to d_c for each chosen class c (pool index) whose
    nearest other chosen class lies beyond K_c + 1, where the model valued it at num_c / (K_c + 1)
    instead of num_c / d_c; capped at :data:`MAX_LEVELS`. Returns how many classes were raised.

    Only these classes get more levels: the model stays a relaxation (every K_c gives an upper
    bound) and grows by a few rows, instead of widening every shortlisted class's balls.
    """
    wnids = [problem.pool[i] for i in chosen]
    far = problem.graph.nearest_other_distance(wnids)
    far = np.where(np.isfinite(far), far, MAX_LEVELS)
    raised = 0
    for i, d in zip(chosen.tolist(), far.tolist(), strict=True):
        current = max(class_levels.get(i, levels), (anchors or {}).get(i, 0))
        if d > current + 1 and current < MAX_LEVELS:
            class_levels[i] = int(min(MAX_LEVELS, d))
            raised += 1
    return raised


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


def _keep_best(problem: BenchmarkProblem, search: _Search, solution: ExactSolution) -> None:
    """Record a solve: its set replaces the best when its exact R is higher; the bound is the
    tightest seen."""
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
        )
    search.solution = solution
    search.best.upper_bound = upper


def _heuristic_fallback(problem: BenchmarkProblem, started: float) -> BenchmarkSolution:
    """The exact model found no feasible set in time (very large N): the local-search heuristic's
    set, reported with no proven bound (``status: heuristic (exact timed out)``, gap unknown)."""
    log.warning("exact: no feasible set within the time limit; falling back to local search (no bound)")
    best = LocalSearch(LocalSearchOptions(progress=False)).solve(problem)
    best.status = "heuristic (exact timed out)"
    best.seconds = round(time.perf_counter() - started, 3)
    return best


def _break_ties(problem: BenchmarkProblem, best: BenchmarkSolution, search: _Search) -> None:
    """Apply the documented tie rule to a certified optimum in place (see :mod:`splits.milp`).

    The last model over-values some sets; when the tie-break set is one of them (its exact R is
    below R*), its far members get their levels and its outside classes join the shortlist, and
    the tie-break is solved again, at most :data:`TIE_BREAK_REFINEMENTS` times. Every optimal set
    stays feasible in every refined model, so a set with R = R* is the rule's set.

    Bounded by node limits and a fixed number of refinements, not by the time left: the set written
    must not depend on how fast the machine is (``tie_break: solver_order`` only when the work limit
    is reached, on any machine).
    """
    best.tie_break = "solver_order"
    solution, models = search.solution, search.models
    assert solution is not None and solution.model is not None
    model = solution.model
    short = np.zeros(len(problem.pool), dtype=bool)
    short[solution.members] = True
    for _ in range(TIE_BREAK_REFINEMENTS + 1):
        total = exact_ratio_sum(problem.graph, best.wnids, problem.train)
        chosen = prefer_low_positions(model, total, problem.size)
        if chosen is None:
            return
        wnids = sorted(problem.pool[i] for i in chosen)
        ratio = structural_ratio(problem.graph, wnids, problem.train)
        # exact fractions: two sets' float R may agree to 1e-9 while the exact sums differ
        if exact_ratio_sum(problem.graph, wnids, problem.train) >= total:
            best.wnids, best.ratio = wnids, ratio
            best.branch_counts = branch_counts(wnids, problem.branch_of)
            best.tie_break = "min_positions"
            return
        # an over-valued set reached the objective: value it exactly and solve again
        raised = refine_levels(problem, chosen, models.class_levels, models.levels, models.anchor_levels)
        outside = int((~short[chosen]).sum())
        if not raised and not outside:
            break
        log.info(
            "exact: the tie-break set has R %.6f < %.6f; refining its %d classes",
            ratio,
            best.ratio,
            raised + outside,
        )
        short[chosen] = True
        model = models.build(short)
    log.info(
        "exact: no tie-break set with R %.6f within the refinements; keeping the first optimum", best.ratio
    )


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
