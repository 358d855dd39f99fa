"""Controlled factor splits: test splits where one factor moves and the others are held equal.

Hascoet et al. (CVPR 2019, Figs. 3, 5, 9) relate zero-shot accuracy to one property of the test
classes at a time. Taken from the whole pool, a bin of rare labels is also a bin of poorly
populated, deep classes; here the other factors are balanced across bins by **matched sampling**:

1. Every pool class gets the five factors (``FACTORS``) and falls into one of B bins of the
   chosen factor: equal-count quantile bins of its value (ties broken by a seeded shuffle), or
   the two levels secondary / primary for ``meaning``.
2. The other factors are z-scored over the pool (their covariate space).
3. Anchors are drawn in seeded random order from the smallest bin (ties: the middle bin). For
   each anchor, every other bin contributes its unused class nearest to the anchor in covariate
   space (Euclidean): a matched B-tuple. Tuples are taken until each split has ``size`` classes.
4. Structure: a class related (ancestor/descendant) to a class already in its bin's split is
   never picked, so each split is structurally consistent inside; consistency with the training
   classes comes from the pool (``not_related_to_training``).

The balance (each factor's mean per bin) is part of the output; perfect balance is impossible
where factors are strongly tied (e.g. the deepest classes have few images), and the table shows
how close the matching came.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from imagenet_zsl.errors import UserInputError

#: factor → what the column holds
FACTORS = {
    "frequency": "Zipf frequency of the class label (wordfreq; log10 occurrences per 10⁹ words)",
    "meaning": "1 if the class is its label's primary meaning, 0 if a secondary one",
    "population": "log10(1 + images) of the class in fall11",
    "ratio": "structural ratio r(c) = d(c, train) / d(c, other pool classes)",
    "depth": "length of the shortest is-a path from the WordNet root",
}


def factor_bins(values: np.ndarray, factor: str, bins: int, seed: int = 0) -> np.ndarray:
    """(n,) int bin of each class, 0 = lowest values (``meaning``: 0 secondary, 1 primary)."""
    values = np.asarray(values, dtype=np.float64)
    if factor == "meaning":
        if bins != 2:
            raise UserInputError(f"--bins: the meaning factor has 2 levels (secondary, primary), got {bins}")
        return (values > 0.5).astype(np.int64)
    if bins < 2:
        raise UserInputError(f"--bins must be at least 2, got {bins}")
    tiebreak = np.random.default_rng(seed).random(len(values))
    order = np.lexsort((tiebreak, values))
    out = np.empty(len(values), dtype=np.int64)
    out[order] = np.arange(len(values)) * bins // max(len(values), 1)
    return out


def covariates(table: pd.DataFrame, factor: str) -> np.ndarray:
    """(n, F-1) z-scored other factors (columns of ``table`` named in ``FACTORS``)."""
    others = [f for f in FACTORS if f != factor and f in table.columns]
    x = table[others].to_numpy(dtype=np.float64)
    std = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)


def _anchor_bin(sizes: np.ndarray) -> int:
    smallest = np.flatnonzero(sizes == sizes.min())
    middle = (len(sizes) - 1) / 2
    return int(smallest[np.argmin(np.abs(smallest - middle))])


def matched_sample(
    x: np.ndarray,
    bins: np.ndarray,
    size: int,
    seed: int = 0,
    related: sp.csr_matrix | None = None,
) -> list[np.ndarray]:
    """Indices of ``size`` classes per bin, matched on ``x`` (see the module docstring).

    ``x`` (n, d) covariates, ``bins`` (n,) int in [0, B), ``related`` (n, n) boolean sparse
    relation (ancestor/descendant) among the n classes, or None. Returns B index arrays (pick
    order). Deterministic for a given seed.
    """
    n_bins = int(bins.max()) + 1 if len(bins) else 0
    sizes = np.bincount(bins, minlength=n_bins)
    if n_bins < 2 or sizes.min() < size:
        raise UserInputError(
            f"--size {size}: a bin holds only {int(sizes.min()) if len(sizes) else 0} pool classes; "
            "lower --size or --bins, or widen the pool"
        )
    rng = np.random.default_rng(seed)
    anchor_bin = _anchor_bin(sizes)
    anchors = rng.permutation(np.flatnonzero(bins == anchor_bin))
    free = np.ones((n_bins, len(bins)), dtype=bool)
    free &= bins[None, :] == np.arange(n_bins)[:, None]
    picked: list[list[int]] = [[] for _ in range(n_bins)]
    for anchor in anchors:
        if not free[anchor_bin, anchor]:
            continue
        match = {anchor_bin: int(anchor)}
        for b in range(n_bins):
            if b == anchor_bin:
                continue
            options = np.flatnonzero(free[b])
            if len(options) == 0:
                break
            distance = ((x[options] - x[anchor]) ** 2).sum(axis=1)
            match[b] = int(options[np.argmin(distance)])
        if len(match) < n_bins:
            continue
        for b, i in match.items():
            picked[b].append(i)
            free[:, i] = False
            if related is not None:
                free[b, related[i].indices] = False
        if len(picked[0]) == size:
            return [np.asarray(p, dtype=np.int64) for p in picked]
    raise UserInputError(
        f"--size {size}: only {len(picked[0])} matched, structurally consistent tuples could be "
        "drawn from the pool; lower --size or --bins, or widen the pool"
    )


def balance_table(table: pd.DataFrame, members: Sequence[np.ndarray]) -> pd.DataFrame:
    """Each factor's mean per bin (rows: bins; columns: ``FACTORS`` present in ``table``)."""
    columns = [f for f in FACTORS if f in table.columns]
    rows = [table.iloc[idx][columns].mean().to_dict() for idx in members]
    return pd.DataFrame(rows, columns=columns)


def standardized_differences(
    table: pd.DataFrame, members: Sequence[np.ndarray], factor: str
) -> dict[str, float]:
    """Largest gap between two bins' means of each other factor, in pool standard deviations."""
    out = {}
    for name in FACTORS:
        if name == factor or name not in table.columns:
            continue
        std = float(table[name].std()) or 1.0
        means = [float(table.iloc[idx][name].mean()) for idx in members]
        out[name] = (max(means) - min(means)) / std
    return out


def split_ratio(to_train: np.ndarray, dist: np.ndarray) -> float:
    """R of a split from (n,) distances to the training set and its (n, n) pairwise distances."""
    d = dist.astype(np.float64).copy()
    np.fill_diagonal(d, np.inf)
    nearest = d.min(axis=1)
    with np.errstate(divide="ignore"):
        r = to_train / nearest
    r = r[np.isfinite(r)]
    return float(r.mean()) if len(r) else float("nan")


def _swap_ratios(
    to_train: np.ndarray, dist: np.ndarray, members: np.ndarray, options: np.ndarray
) -> np.ndarray:
    """(len(members), len(options)) R after swapping member i out and option j in (exact for the
    given distances). ``dist`` (N, N) over local nodes; members/options index it."""
    n = len(members)
    d = dist[np.ix_(members, members)].astype(np.float64)
    np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1)
    first, second = d[np.arange(n), order[:, 0]], d[np.arange(n), order[:, 1]]
    to_opt = dist[np.ix_(members, options)].astype(np.float64)  # (n, J)
    out = np.empty((n, len(options)))
    for i in range(n):
        # nearest other member of each c once i is gone, then with option j added
        base = np.where(order[:, 0] == i, second, first)  # (n,)
        near = np.minimum(base[:, None], to_opt)  # (n, J)
        keep = np.arange(n) != i
        with np.errstate(divide="ignore"):
            rest = (to_train[members][keep, None] / near[keep]).sum(axis=0)
            own = to_train[options] / to_opt[keep].min(axis=0)
        out[i] = (rest + own) / n
    return out


def match_split_ratio(
    to_train: np.ndarray,
    dist: np.ndarray,
    members: np.ndarray,
    candidates: Sequence[np.ndarray],
    related: sp.csr_matrix | None,
    target: float,
    tolerance: float,
) -> np.ndarray:
    """Swap members for their covariate neighbours until the split's R is within ``tolerance``
    of ``target`` (or no swap brings it closer). Deterministic.

    Local node indices throughout: ``to_train`` (N,) distance of each node to the training set,
    ``dist`` (N, N) pairwise is-a distances, ``members`` (n,) the split, ``candidates[i]`` the
    nodes that may replace member i (same factor bin, nearest in covariate space), ``related``
    (N, N) ancestor/descendant relation (a swap never makes the split inconsistent). Returns the
    new (n,) members.
    """
    members = np.asarray(members, dtype=np.int64).copy()
    ratio = split_ratio(to_train[members], dist[np.ix_(members, members)])
    for _ in range(len(members)):
        if abs(ratio - target) <= tolerance:
            break
        in_split = set(members.tolist())
        options = np.unique(np.concatenate([np.asarray(c, dtype=np.int64) for c in candidates]))
        options = np.asarray([j for j in options if j not in in_split], dtype=np.int64)
        if len(options) == 0:
            break
        new = _swap_ratios(to_train, dist, members, options)
        allowed = np.zeros_like(new, dtype=bool)
        position = {int(j): k for k, j in enumerate(options)}
        for i, cand in enumerate(candidates):
            for j in cand:
                k = position.get(int(j))
                if k is None:
                    continue
                others = in_split - {int(members[i])}
                if related is not None and others & set(related[int(j)].indices.tolist()):
                    continue
                allowed[i, k] = True
        gain = np.where(allowed, np.abs(new - target), np.inf)
        i, k = np.unravel_index(int(np.argmin(gain)), gain.shape)
        if not np.isfinite(gain[i, k]) or gain[i, k] >= abs(ratio - target):
            break
        members[i] = options[k]
        ratio = float(new[i, k])
    return members
