"""A structurally consistent test set of maximal structural ratio (Hascoet et al., CVPR 2019).

Objective: choose N classes T from a pool so that no member is an ancestor/descendant of another
member or of a training class, maximising R(T) = mean_c d(c, train) / d(c, T \\ {c}).

Two optimisers (``optimizer:`` in a benchmark split's config):

* ``exact`` (default): the mixed-integer program of :mod:`imagenet_zsl.splits.milp`, solved by
  HiGHS to proven optimality; the selection carries the solver's upper bound on R and the gap.
* ``local_search``: the earlier heuristic, kept for comparison (its upper bound is unknown).

Local search (seeded, deterministic):
1. shortlists: the pool classes farthest from the training set (numerators are fixed, so far
   classes are where high ratios live), ties broken by a seeded permutation. Steps 3-4 run on
   nested shortlists of ``shortlist_factors`` x N classes and the best exact R wins: on the real
   graph a tighter shortlist often beats a wider one, because single swaps cannot seed a new
   cluster of close test classes far from the training set.
2. one BFS per shortlisted class, stopped at radius ``horizon``, gives their pairwise distances D
   (uint8, K x K). A member with no other member within the horizon counts as ratio 0 while
   optimising (conservative); the reported R is always recomputed exactly on the whole graph.
3. greedy construction: repeatedly add the allowed class with the largest gain in sum of ratios,
   all candidates scored at once from D and the members' nearest-member distances.
4. local search: (a) single swaps: for members in order of increasing ratio, the best
   replacement among all allowed candidates (one vectorised evaluation per member, using each
   node's nearest and second-nearest member so that removing a member is O(1) per node);
   (b) pair moves: two of the weakest members out, the best close pair of candidates in (this
   seeds a new cluster, which no single swap can). Improving moves are accepted until a full
   pass finds none or ``max_passes`` is reached.
If no shortlist can hold N consistent classes, the whole pool is used.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.milp import (
    ExactProblem,
    ExactSolution,
    ExactTimeout,
    branch_arrays,
    prefer_low_positions,
    solve_exact,
)
from imagenet_zsl.splits.structure import structural_ratio

log = logging.getLogger(__name__)
FAR = 255  # uint8 "no other member"
#: the most distance levels the exact model uses (lcm(2..13) keeps coefficients exact in floats)
MAX_LEVELS = 12


@dataclass
class BenchmarkSelection:
    """The chosen classes (sorted) with the optimiser's account of itself."""

    wnids: list[str]
    ratio: float
    greedy_ratio: float
    swaps: int
    passes: int
    shortlist: int
    dropped_related_to_train: int
    branch_counts: dict[str, int] = field(default_factory=dict)
    optimizer: str = "local_search"
    upper_bound: float | None = None  # proven upper bound on R over the whole pool (exact only)
    status: str = "heuristic"  # "optimal" | "time_limit" | "heuristic"
    seconds: float = 0.0
    tie_break: str | None = None  # exact: "min_positions" | "solver_order" (see splits.milp)

    @property
    def gap(self) -> float | None:
        """upper_bound - ratio (0 for a certified optimum; None when no bound is known)."""
        return None if self.upper_bound is None else max(0.0, self.upper_bound - self.ratio)


class _State:
    """Members plus, for every shortlisted node, its nearest and second-nearest member distance."""

    def __init__(self, dist: np.ndarray, numer: np.ndarray):
        self.dist = dist
        self.numer = numer
        self.members: list[int] = []
        k = len(numer)
        self.m1 = np.full(k, FAR, dtype=np.int16)
        self.m1_arg = np.full(k, -1, dtype=np.int64)
        self.m2 = np.full(k, FAR, dtype=np.int16)

    def refresh(self) -> None:
        k = len(self.numer)
        if not self.members:
            self.m1[:] = FAR
            self.m1_arg[:] = -1
            self.m2[:] = FAR
            return
        cols = np.asarray(self.members)
        sub = self.dist[:, cols].astype(np.int16)  # (K, t)
        if len(cols) == 1:
            self.m1 = sub[:, 0].copy()
            self.m1_arg = np.full(k, cols[0])
            self.m2 = np.full(k, FAR, dtype=np.int16)
            return
        part = np.argpartition(sub, 1, axis=1)[:, :2]
        first = np.take_along_axis(sub, part, axis=1)
        swap = first[:, 1] < first[:, 0]
        part[swap] = part[swap][:, ::-1]
        first[swap] = first[swap][:, ::-1]
        self.m1, self.m2 = first[:, 0].copy(), first[:, 1].copy()
        self.m1_arg = cols[part[:, 0]]

    def add(self, y: int) -> None:
        """Incremental update for a new member (removals call ``refresh``)."""
        self.members.append(y)
        d = self.dist[:, y].astype(np.int16)
        d[y] = FAR
        closer = d < self.m1
        self.m2 = np.where(closer, self.m1, np.minimum(self.m2, d))
        self.m1_arg = np.where(closer, y, self.m1_arg)
        self.m1 = np.where(closer, d, self.m1)

    def ratios(self) -> np.ndarray:
        m = np.asarray(self.members)
        return self.numer[m] * INVERSE[self.m1[m]]


#: 1 / distance, with "no other member within the horizon" (FAR) and 0 contributing nothing
INVERSE = np.concatenate([[0.0], 1.0 / np.arange(1, FAR), [0.0]])


def _ratio_sum(numer: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise numer / b via the reciprocal table (b are small integers)."""
    return numer * INVERSE[b]


def select_max_ratio(  # noqa: C901, PLR0913 - one entry point for both optimisers' knobs
    graph: ClassGraph,
    pool: Sequence[str],
    train: Sequence[str],
    size: int,
    seed: int = 0,
    shortlist_factors: Sequence[float] = (2.0, 2.5, 3.0),
    max_passes: int = 4,
    horizon: int = 10,
    branch_of: Mapping[str, str] | None = None,
    branch_quota: Mapping[str, int] | None = None,
    max_branch_share: float | None = None,
    progress: bool = True,
    optimizer: str = "exact",
    include: Sequence[str] = (),
    time_limit: float = 120.0,
    levels: int = 4,
    shortlist_factor: float = 2.0,
) -> BenchmarkSelection:
    """Choose ``size`` classes from ``pool``: structurally consistent, maximal ratio R.

    ``optimizer="exact"`` solves the MILP (``levels``, ``time_limit``, ``shortlist_factor``; see
    :mod:`imagenet_zsl.splits.milp`); ``"local_search"`` runs the heuristic (``seed``,
    ``shortlist_factors``, ``max_passes``, ``horizon``). ``include`` wnids must be chosen (exact).
    """
    if optimizer not in ("exact", "local_search"):
        raise UserInputError(f"benchmark: optimizer must be 'exact' or 'local_search', got {optimizer!r}")
    if size < 2:
        raise UserInputError(f"benchmark size must be >= 2, got {size}")
    pool = sorted(set(pool) - set(train))
    if not pool:
        raise UserInputError("benchmark: the candidate pool is empty; loosen the pool filters")
    # structural consistency with the training set is part of the definition: enforce it here
    train_idx = graph.indices(train, "training classes")
    related = np.zeros(len(graph), dtype=bool)
    related[graph.ancestor_matrix[train_idx].indices] = True
    related[graph.descendant_matrix[train_idx].indices] = True
    to_train = graph.distances_from(train)
    pool_idx = graph.indices(pool)
    keep = ~related[pool_idx] & np.isfinite(to_train[pool_idx])
    dropped = int((~keep).sum())
    pool = [w for w, k in zip(pool, keep, strict=True) if k]
    if len(pool) < size:
        raise UserInputError(
            f"benchmark: asks for {size} classes but the pool holds only {len(pool)} classes "
            "unrelated to the training set; lower 'size' or loosen the pool filters"
        )
    numer_all = to_train[graph.indices(pool)]
    quota = _quota(size, branch_of, branch_quota, max_branch_share)
    missing = sorted(set(include) - set(pool))
    if missing:
        raise UserInputError(
            f"benchmark: include lists {len(missing)} classes that are not in the final pool "
            f"(filtered out, training classes or related to them): {', '.join(missing[:5])}"
        )
    if len(set(include)) > size:
        raise UserInputError(f"benchmark: include lists {len(set(include))} classes but size is {size}")
    if optimizer == "exact":
        return _exact(
            graph,
            pool,
            train,
            numer_all,
            size,
            branch_of,
            quota,
            include,
            dropped,
            time_limit,
            levels,
            shortlist_factor,
        )
    if include:
        raise UserInputError("benchmark: 'include' needs optimizer: exact")
    rng = np.random.default_rng(seed)
    tiebreak = rng.permutation(len(pool))
    order = np.lexsort((tiebreak, -numer_all))  # far from train first, seeded ties

    def best_over(sizes: list[int]) -> BenchmarkSelection | None:
        """Optimise on each nested shortlist (one distance matrix for all); keep the best R."""
        top = [pool[i] for i in order[: sizes[-1]]]
        dist = graph.pairwise_distances(top, limit=horizon)
        np.fill_diagonal(dist, FAR)
        best: BenchmarkSelection | None = None
        for k in sizes:
            result = _optimise(
                graph,
                top[:k],
                dist[:k, :k],
                numer_all[order[:k]],
                size,
                branch_of,
                quota,
                max_passes,
                progress,
            )
            if result is None:
                continue
            wnids, greedy_ratio, swaps, passes = result
            ratio = structural_ratio(graph, wnids, train)
            if best is None or ratio > best.ratio:
                branches: dict[str, int] = {}
                for w in wnids:
                    name = branch_of.get(w, "?") if branch_of is not None else "?"
                    branches[name] = branches.get(name, 0) + 1
                best = BenchmarkSelection(
                    sorted(wnids),
                    ratio,
                    greedy_ratio,
                    swaps,
                    passes,
                    k,
                    dropped,
                    dict(sorted(branches.items())),
                )
        return best

    shortlists = sorted({int(f * size) for f in shortlist_factors if int(f * size) < len(pool)})
    best = best_over(shortlists) if shortlists else None
    if best is None:
        if shortlists:
            log.info("no shortlist holds %d consistent classes; using the whole pool", size)
        best = best_over([len(pool)])
    if best is not None:
        return best
    raise UserInputError(
        f"benchmark: no structurally consistent set of {size} classes exists in this pool of "
        f"{len(pool)} (ancestor/descendant conflicts{' or branch quotas' if quota else ''}); "
        "lower 'size' or loosen the pool filters/quotas"
    )


def _branch_counts(wnids: Sequence[str], branch_of: Mapping[str, str] | None) -> dict[str, int]:
    branches: dict[str, int] = {}
    for w in wnids:
        name = branch_of.get(w, "?") if branch_of is not None else "?"
        branches[name] = branches.get(name, 0) + 1
    return dict(sorted(branches.items()))


def _heuristic_fallback(  # noqa: PLR0913
    graph: ClassGraph,
    pool: list[str],
    train: Sequence[str],
    size: int,
    branch_of: Mapping[str, str] | None,
    quota: dict[str, int] | None,
    dropped: int,
    started: float,
) -> BenchmarkSelection:
    """The exact model found no feasible set in time (very large N): the local-search heuristic's
    set, reported with no proven bound (``status: heuristic (exact timed out)``, gap unknown)."""
    log.warning("exact: no feasible set within the time limit; falling back to local search (no bound)")
    caps = None if quota is None else dict(quota)
    best = select_max_ratio(
        graph,
        pool,
        train,
        size,
        branch_of=branch_of,
        branch_quota=caps,
        progress=False,
        optimizer="local_search",
    )
    best.dropped_related_to_train = dropped
    best.status = "heuristic (exact timed out)"
    best.seconds = round(time.perf_counter() - started, 3)
    return best


def _exact(  # noqa: PLR0913
    graph: ClassGraph,
    pool: list[str],
    train: Sequence[str],
    numer: np.ndarray,
    size: int,
    branch_of: Mapping[str, str] | None,
    quota: dict[str, int] | None,
    include: Sequence[str],
    dropped: int,
    time_limit: float,
    levels: int,
    shortlist_factor: float,
) -> BenchmarkSelection:
    """Solve the MILP; if the bound is not met, retry with more distance levels, then report the gap."""
    branch_id, caps = branch_arrays(pool, size, branch_of, quota)
    position = {w: i for i, w in enumerate(pool)}
    problem = ExactProblem(
        graph,
        pool,
        numer.astype(np.int64),
        size,
        branch_id,
        caps,
        np.array(sorted(position[w] for w in set(include)), dtype=np.int64),
    )
    started = time.perf_counter()
    best: BenchmarkSelection | None = None
    best_solution: ExactSolution | None = None
    k = levels
    out_of_time = False
    while True:
        remaining = time_limit - (time.perf_counter() - started)
        if remaining <= 0 and best is not None:  # the first solve always runs (HiGHS gets >= 1 s)
            out_of_time = True
            break
        try:
            solution = solve_exact(problem, levels=k, time_limit=remaining, shortlist_factor=shortlist_factor)
        except ExactTimeout:
            if best is None:
                return _heuristic_fallback(graph, pool, train, size, branch_of, quota, dropped, started)
            log.warning("exact: time limit reached while widening the levels; keeping R %.6f", best.ratio)
            best.status = "time_limit"
            break
        if solution.status == "infeasible":
            raise UserInputError(
                f"benchmark: no structurally consistent set of {size} classes exists in this pool of "
                f"{len(pool)} (ancestor/descendant conflicts{' or branch quotas' if quota else ''}"
                f"{' or the include list' if include else ''}); lower 'size' or loosen the pool "
                "filters/quotas"
            )
        wnids = sorted(pool[i] for i in solution.chosen)
        ratio = structural_ratio(graph, wnids, train)
        bound = solution.upper_total / size
        upper = bound if best is None or best.upper_bound is None else min(bound, best.upper_bound)
        if best is None or ratio > best.ratio:
            best = BenchmarkSelection(
                wnids,
                ratio,
                ratio,
                0,
                solution.rounds,
                solution.shortlist,
                dropped,
                _branch_counts(wnids, branch_of),
                "exact",
                upper,
                solution.status,
                0.0,
            )
            best_solution = solution
        best.upper_bound = upper
        if (best.gap is not None and best.gap <= 1e-6) or k >= MAX_LEVELS or solution.status != "optimal":
            break
        # members farther than k from every other member were valued at num/(k+1): widen the levels
        far = graph.nearest_other_distance(wnids)
        k = int(min(MAX_LEVELS, max(k + 2, np.nanmax(np.where(np.isfinite(far), far, 0)))))
        log.info("exact: R %.6f, bound %.6f; retrying with %d distance levels", ratio, bound, k)
    assert best is not None and best_solution is not None
    if best.gap is None or best.gap > 1e-6:
        # never silent: a set that the time budget cut short says so (it may differ on a faster machine)
        best.status = "time_limit" if best.status == "time_limit" or out_of_time else "gap"
        if best.status == "time_limit":
            log.warning(
                "exact: the time limit (%.0f s) stopped the optimiser at R %.6f, bound %.6f: the set is "
                "not certified and may differ on a faster machine; raise optimiser.time_limit",
                time_limit,
                best.ratio,
                best.upper_bound,
            )
    else:
        best.status = "optimal"  # certified: R equals the proven bound, however the solves ended
        _break_ties(best, best_solution, graph, pool, train, branch_of)
    best.seconds = round(time.perf_counter() - started, 3)
    return best


def _break_ties(  # noqa: PLR0913
    best: BenchmarkSelection,
    solution: ExactSolution,
    graph: ClassGraph,
    pool: list[str],
    train: Sequence[str],
    branch_of: Mapping[str, str] | None,
) -> None:
    """Apply the documented tie rule to a certified optimum in place (see :mod:`splits.milp`).

    Bounded by a node limit, not by the time left: the set written must not depend on how fast
    the machine is (``tie_break: solver_order`` only when the work limit is reached, on any machine).
    """
    best.tie_break = "solver_order"
    chosen = prefer_low_positions(solution, best.ratio * len(best.wnids))
    if chosen is None:
        return
    wnids = sorted(pool[i] for i in chosen)
    ratio = structural_ratio(graph, wnids, train)
    if ratio < best.ratio - 1e-9:  # an over-valued set reached the objective: keep the first optimum
        log.info("exact: the tie-break set has R %.6f < %.6f; keeping the first optimum", ratio, best.ratio)
        return
    best.wnids, best.ratio, best.greedy_ratio = wnids, ratio, ratio
    best.branch_counts = _branch_counts(wnids, branch_of)
    best.tie_break = "min_positions"


def _quota(
    size: int,
    branch_of: Mapping[str, str] | None,
    branch_quota: Mapping[str, int] | None,
    max_branch_share: float | None,
) -> dict[str, int] | None:
    if branch_of is None or (not branch_quota and max_branch_share is None):
        return None
    caps: dict[str, int] = {}
    if max_branch_share is not None:
        if not 0 < max_branch_share <= 1:
            raise UserInputError(f"max_branch_share must be in (0, 1], got {max_branch_share}")
        cap = math.ceil(max_branch_share * size)
        caps = {b: cap for b in set(branch_of.values())}
    caps.update({str(b): int(n) for b, n in (branch_quota or {}).items()})
    return caps


def _optimise(  # noqa: PLR0913
    graph: ClassGraph,
    chosen: list[str],
    dist: np.ndarray,
    numer: np.ndarray,
    size: int,
    branch_of: Mapping[str, str] | None,
    quota: dict[str, int] | None,
    max_passes: int,
    progress: bool,
) -> tuple[list[str], float, int, int] | None:
    k = len(chosen)
    idx = graph.indices(chosen)
    anc = graph.ancestor_matrix[idx][:, idx]
    rel = (anc + anc.T).astype(bool).toarray()
    numer = numer.astype(np.float64)
    branch_names = sorted({branch_of.get(w, "?") for w in chosen}) if quota else []
    branch_id = (
        np.array([branch_names.index(branch_of.get(w, "?")) for w in chosen])
        if quota
        else np.zeros(k, dtype=np.int64)
    )
    caps = np.array([quota.get(b, size) for b in branch_names]) if quota else np.array([size])
    state = _State(dist, numer)
    in_set = np.zeros(k, dtype=bool)
    conflicts = np.zeros(k, dtype=np.int64)
    counts = np.zeros(len(caps), dtype=np.int64)

    def add(y: int) -> None:
        state.add(y)
        in_set[y] = True
        conflicts[:] += rel[y]
        counts[branch_id[y]] += 1

    def remove(x: int) -> None:
        state.members.remove(x)
        in_set[x] = False
        conflicts[:] -= rel[x]
        counts[branch_id[x]] -= 1

    bar = tqdm(total=size, desc="benchmark: greedy", disable=not progress, leave=False)
    while len(state.members) < size:
        cand = np.flatnonzero(~in_set & (conflicts == 0) & (counts[branch_id] < caps[branch_id]))
        if len(cand) == 0:
            bar.close()
            return None
        m = np.asarray(state.members, dtype=np.int64)
        current = _ratio_sum(numer[m], state.m1[m]).sum() if len(m) else 0.0
        if len(m):
            new_b = np.minimum(state.m1[m][:, None], dist[np.ix_(m, cand)])
            members_sum = numer[m] @ INVERSE[new_b]
        else:
            members_sum = np.zeros(len(cand))
        gain = members_sum + _ratio_sum(numer[cand], state.m1[cand]) - current
        # ties: larger numerator, then shortlist order (already seeded)
        best = cand[np.lexsort((cand, -numer[cand], -gain))[0]]
        add(int(best))
        bar.update(1)
    bar.close()
    greedy_ratio = float(state.ratios().mean())

    swaps = passes = 0
    total = state.ratios().sum()
    for passes in range(1, max_passes + 1):
        improved = False
        members_by_ratio = [state.members[i] for i in np.argsort(state.ratios(), kind="stable")]
        for x in tqdm(
            members_by_ratio, desc=f"benchmark: swap pass {passes}", disable=not progress, leave=False
        ):
            if x not in state.members:
                continue
            others = np.asarray([c for c in state.members if c != x], dtype=np.int64)
            branch_free = counts[branch_id] - (branch_id == branch_id[x]) < caps[branch_id]
            allowed = (~in_set) & (conflicts - rel[x] == 0) & branch_free
            cand = np.flatnonzero(allowed)
            if len(cand) == 0:
                continue
            b_wo_x = np.where(state.m1_arg == x, state.m2, state.m1)
            new_b = np.minimum(b_wo_x[others][:, None], dist[np.ix_(others, cand)])
            totals = numer[others] @ INVERSE[new_b] + _ratio_sum(numer[cand], b_wo_x[cand])
            j = int(np.argmax(totals))
            if totals[j] > total + 1e-9:
                remove(x)
                state.refresh()
                add(int(cand[j]))
                total = state.ratios().sum()
                swaps += 1
                improved = True
        # pair move: two weak members out, a close pair of candidates in (seeds a new cluster,
        # which no single swap can do)
        while True:
            move = _best_pair_move(state, dist, numer, rel, in_set, conflicts, counts, caps, branch_id, total)
            if move is None:
                break
            (x1, x2), (y1, y2) = move
            remove(x1)
            remove(x2)
            state.refresh()
            add(y1)
            add(y2)
            total = state.ratios().sum()
            swaps += 1
            improved = True
        if not improved:
            break
    return [chosen[i] for i in state.members], greedy_ratio, swaps, passes


def _best_pair_move(  # noqa: PLR0913
    state: _State,
    dist: np.ndarray,
    numer: np.ndarray,
    rel: np.ndarray,
    in_set: np.ndarray,
    conflicts: np.ndarray,
    counts: np.ndarray,
    caps: np.ndarray,
    branch_id: np.ndarray,
    total: float,
    weakest: int = 4,
    pair_radius: int = 4,
    top_pairs: int = 256,
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The best improving (remove two of the ``weakest`` members, add a close candidate pair)."""
    members = np.asarray(state.members, dtype=np.int64)
    weak = members[np.argsort(state.ratios(), kind="stable")[:weakest]]
    best_total, best_move = total + 1e-9, None
    for i in range(len(weak)):
        for j in range(i + 1, len(weak)):
            x1, x2 = int(weak[i]), int(weak[j])
            others = members[(members != x1) & (members != x2)]
            b_others = (
                dist[:, others].min(axis=1).astype(np.int16)
                if len(others)
                else np.full(len(numer), FAR, dtype=np.int16)
            )
            free = (conflicts - rel[x1] - rel[x2] == 0) & ~in_set
            removed = np.zeros(len(caps), dtype=np.int64)
            np.add.at(removed, branch_id[[x1, x2]], 1)
            room = caps - counts + removed  # free slots per branch after the removal
            free &= room[branch_id] >= 1
            cand = np.flatnonzero(free)
            if len(cand) < 2:
                continue
            sub = dist[np.ix_(cand, cand)]
            y1, y2 = np.nonzero(np.triu(sub <= pair_radius, k=1))
            y1, y2 = cand[y1], cand[y2]
            ok = ~rel[y1, y2]
            same = branch_id[y1] == branch_id[y2]
            ok &= ~same | (room[branch_id[y1]] >= 2)
            y1, y2 = y1[ok], y2[ok]
            if len(y1) == 0:
                continue
            d12 = dist[y1, y2].astype(np.int16)
            # only the most promising pairs: their own ratios bound what they can add
            potential = (numer[y1] + numer[y2]) * INVERSE[d12]
            if len(potential) > top_pairs:
                keep = np.argsort(-potential, kind="stable")[:top_pairs]
                y1, y2, d12 = y1[keep], y2[keep], d12[keep]
            new_b = np.minimum(
                b_others[others][:, None], np.minimum(dist[np.ix_(others, y1)], dist[np.ix_(others, y2)])
            )
            totals = (
                numer[others] @ INVERSE[new_b]
                + numer[y1] * INVERSE[np.minimum(b_others[y1], d12)]
                + numer[y2] * INVERSE[np.minimum(b_others[y2], d12)]
            )
            k = int(np.argmax(totals))
            if totals[k] > best_total:
                best_total, best_move = totals[k], ((x1, x2), (int(y1[k]), int(y2[k])))
    return best_move
