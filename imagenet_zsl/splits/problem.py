"""The benchmark-selection problem and its answer, shared by both optimisers.

:class:`BenchmarkProblem` is built once (:meth:`BenchmarkProblem.create` checks the user's inputs
and drops the pool classes that no consistent set may hold); a solver (``benchmark.Exact`` or
``local_search.LocalSearch``) turns it into a :class:`BenchmarkSolution` with ``solve(problem)``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph

#: a gap this small is a certified optimum (R and the bound agree to float precision)
PROVEN_GAP = 1e-6


@dataclass(frozen=True)
class Constraints:
    """What a set must satisfy beyond structural consistency.

    ``branch_of`` maps a pool class to its branch (WordNet lexicographer file); ``branch_quota``
    caps single branches and ``max_branch_share`` every branch (a share of N, rounded up);
    ``include`` lists classes that must be chosen (exact optimiser only).
    """

    branch_of: Mapping[str, str] | None = None
    branch_quota: Mapping[str, int] | None = None
    max_branch_share: float | None = None
    include: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class BenchmarkProblem:
    """Choose ``size`` classes of ``pool`` with no ancestor/descendant pair among them or with
    ``train``, maximising R = mean_c numer_c / d(c, T \\ {c}).

    ``pool`` is sorted and already holds only classes unrelated to, and connected with, the
    training set; ``numer`` (P,) is each pool class's distance to the nearest training class;
    ``quota`` the per-branch caps (None: uncapped); ``dropped`` the candidates removed as related
    to (or unreachable from) the training set.
    """

    graph: ClassGraph
    pool: tuple[str, ...]
    train: tuple[str, ...]
    size: int
    constraints: Constraints
    numer: np.ndarray
    quota: dict[str, int] | None
    dropped: int

    @property
    def branch_of(self) -> Mapping[str, str] | None:
        return self.constraints.branch_of

    @property
    def include(self) -> tuple[str, ...]:
        return self.constraints.include

    @classmethod
    def create(
        cls,
        graph: ClassGraph,
        pool: Sequence[str],
        train: Sequence[str],
        size: int,
        constraints: Constraints | None = None,
    ) -> BenchmarkProblem:
        """The problem of ``size`` classes from ``pool`` (training classes removed); one-line
        UserInputError when it cannot have an answer (pool too small, include outside the pool)."""
        constraints = constraints or Constraints()
        if size < 2:
            raise UserInputError(f"benchmark size must be >= 2, got {size}")
        candidates = sorted(set(pool) - set(train))
        if not candidates:
            raise UserInputError("benchmark: the candidate pool is empty; loosen the pool filters")
        kept, numer = _consistent_with_train(graph, candidates, train)
        if len(kept) < size:
            raise UserInputError(
                f"benchmark: asks for {size} classes but the pool holds only {len(kept)} classes "
                "unrelated to the training set; lower 'size' or loosen the pool filters"
            )
        quota = branch_caps(size, constraints)
        _check_include(constraints.include, kept, size)
        return cls(
            graph=graph,
            pool=tuple(kept),
            train=tuple(train),
            size=size,
            constraints=constraints,
            numer=numer,
            quota=quota,
            dropped=len(candidates) - len(kept),
        )


def _consistent_with_train(
    graph: ClassGraph, candidates: list[str], train: Sequence[str]
) -> tuple[list[str], np.ndarray]:
    """The candidates that are no ancestor/descendant of a training class and reach one, with
    their (P,) distances to the nearest training class: consistency is part of the definition."""
    train_idx = graph.indices(train, "training classes")
    related = np.zeros(len(graph), dtype=bool)
    related[graph.ancestor_matrix[train_idx].indices] = True
    related[graph.descendant_matrix[train_idx].indices] = True
    to_train = graph.distances_from(train)
    pool_idx = graph.indices(candidates)
    keep = ~related[pool_idx] & np.isfinite(to_train[pool_idx])
    kept = [w for w, k in zip(candidates, keep, strict=True) if k]
    return kept, to_train[graph.indices(kept)]


def _check_include(include: Sequence[str], pool: list[str], size: int) -> None:
    missing = sorted(set(include) - set(pool))
    if missing:
        raise UserInputError(
            f"benchmark: include lists {len(missing)} classes that are not in the final pool "
            f"(filtered out, training classes or related to them): {', '.join(missing[:5])}"
        )
    if len(set(include)) > size:
        raise UserInputError(f"benchmark: include lists {len(set(include))} classes but size is {size}")


def branch_caps(size: int, constraints: Constraints) -> dict[str, int] | None:
    """Per-branch caps: ceil(max_branch_share x N) for every branch, then ``branch_quota``."""
    branch_of, quota, share = constraints.branch_of, constraints.branch_quota, constraints.max_branch_share
    if branch_of is None or (not quota and share is None):
        return None
    caps: dict[str, int] = {}
    if share is not None:
        if not 0 < share <= 1:
            raise UserInputError(f"max_branch_share must be in (0, 1], got {share}")
        cap = math.ceil(share * size)
        caps = {b: cap for b in set(branch_of.values())}
    caps.update({str(b): int(n) for b, n in (quota or {}).items()})
    return caps


def infeasible_error(problem: BenchmarkProblem) -> UserInputError:
    """No consistent set of N classes exists under the problem's constraints."""
    causes = "ancestor/descendant conflicts"
    causes += " or branch quotas" if problem.quota else ""
    causes += " or the include list" if problem.include else ""
    return UserInputError(
        f"benchmark: no structurally consistent set of {problem.size} classes exists in this pool of "
        f"{len(problem.pool)} ({causes}); lower 'size' or loosen the pool filters/quotas"
    )


def branch_counts(wnids: Sequence[str], branch_of: Mapping[str, str] | None) -> dict[str, int]:
    """Members per branch ("?" for a class without one), sorted by branch name."""
    found = Counter(branch_of.get(w, "?") if branch_of is not None else "?" for w in wnids)
    return dict(sorted(found.items()))


@dataclass
class BenchmarkSolution:
    """The chosen classes (sorted) with the optimiser's account of itself.

    ``status``: ``optimal`` (certified: R meets the proven bound), ``time_limit``, ``gap``,
    ``heuristic`` (local search, no bound) or ``heuristic (exact timed out)``. Exact only:
    ``upper_bound`` (proven bound on R over the whole pool), ``rounds`` (model solves of the
    optimum: shortlist rounds over every refinement), ``shortlist`` (classes with level variables
    in the last model), ``refined_levels`` (classes given more distance levels than the rest),
    ``tie_break``, ``tie_break_cpu`` (CPU seconds of the tie rule alone, part of ``seconds``'s
    work; never written to a manifest). Local search only: ``greedy_ratio``, ``swaps``, ``passes``.
    """

    wnids: list[str]
    ratio: float
    optimizer: str
    status: str
    shortlist: int
    dropped_related_to_train: int
    branch_counts: dict[str, int] = field(default_factory=dict)
    upper_bound: float | None = None
    rounds: int = 0
    refined_levels: int = 0
    tie_break: str | None = None  # exact: "min_positions" | "solver_order" (see splits.milp)
    greedy_ratio: float | None = None
    swaps: int = 0
    passes: int = 0
    seconds: float = 0.0
    tie_break_cpu: float = 0.0

    @property
    def gap(self) -> float | None:
        """upper_bound - ratio (0 for a certified optimum; None when no bound is known). A proven
        bound below the R reached (by more than the manifests' rounding to 6 decimals) is a bug,
        never reported as a gap of 0."""
        if self.upper_bound is None:
            return None
        gap = self.upper_bound - self.ratio
        if gap < -1e-6:
            raise RuntimeError(f"bug: the proven upper bound {self.upper_bound!r} is below R {self.ratio!r}")
        return max(0.0, gap)

    @property
    def proven(self) -> bool:
        """R is certified optimal: the solver said so and R meets the proven bound."""
        return self.status == "optimal" and self.gap is not None and self.gap <= PROVEN_GAP


class BenchmarkSolver(Protocol):
    """``Exact`` or ``LocalSearch``: each holds its options and solves any problem."""

    name: str

    def solve(self, problem: BenchmarkProblem) -> BenchmarkSolution: ...
