"""Matched sampling on a toy universe: the factor moves, the others stay balanced, no related pairs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from imagenet_zsl.analysis.factor_splits import FactorSplitConfig, pool_steps
from imagenet_zsl.analysis.factors import (
    _swap_ratios,
    balance_table,
    covariates,
    factor_bins,
    match_split_ratio,
    matched_sample,
    split_ratio,
    standardized_differences,
)
from imagenet_zsl.config import load_config
from imagenet_zsl.errors import UserInputError


def toy_universe(n: int = 600, seed: int = 1) -> pd.DataFrame:
    """Frequency correlated with population and depth, as in ImageNet (rare labels: deep, few images)."""
    rng = np.random.default_rng(seed)
    frequency = rng.normal(3, 1, n)
    return pd.DataFrame(
        {
            "wnid": [f"n{i:08d}" for i in range(n)],
            "frequency": frequency,
            "meaning": (rng.random(n) < 0.8).astype(float),
            "population": 2.5 + 0.2 * frequency + rng.normal(0, 0.5, n),
            "ratio": rng.gamma(2, 1.5, n),
            "depth": np.round(12 - 0.5 * frequency + rng.normal(0, 1.5, n)),
        }
    )


def test_matched_sampling_balances_the_other_factors() -> None:
    table = toy_universe()
    bins = factor_bins(table["frequency"].to_numpy(), "frequency", 4, seed=0)
    assert np.bincount(bins).tolist() == [150] * 4
    members = matched_sample(covariates(table, "frequency"), bins, 30, seed=0)
    assert [len(m) for m in members] == [30] * 4
    assert len(set(np.concatenate(members))) == 120  # no class twice
    means = balance_table(table, members)
    assert means["frequency"].is_monotonic_increasing  # the factor moves ...
    assert means["frequency"].iloc[-1] - means["frequency"].iloc[0] > 2.0
    gaps = standardized_differences(table, members, "frequency")
    assert max(gaps.values()) < 0.25  # ... the others are held (pool SDs)
    # unmatched (random) samples of the same bins are far less balanced on the correlated factors
    rng = np.random.default_rng(0)
    random = [rng.choice(np.flatnonzero(bins == b), 30, replace=False) for b in range(4)]
    naive = standardized_differences(table, random, "frequency")
    assert naive["population"] > 2 * gaps["population"] and naive["depth"] > 2 * gaps["depth"]


def test_matched_sampling_is_seeded_and_deterministic() -> None:
    table = toy_universe()
    x = covariates(table, "depth")
    bins = factor_bins(table["depth"].to_numpy(), "depth", 3, seed=5)
    first = matched_sample(x, bins, 20, seed=5)
    assert all((a == b).all() for a, b in zip(first, matched_sample(x, bins, 20, seed=5), strict=True))
    other = matched_sample(x, bins, 20, seed=6)
    assert any(set(a) != set(b) for a, b in zip(first, other, strict=True))


def test_related_classes_never_share_a_split() -> None:
    table = toy_universe(200)
    pairs = np.array([(i, i + 1) for i in range(0, 200, 2)])  # every even class is related to the next
    rel = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(200, 200))
    rel = ((rel + rel.T) > 0).tocsr()
    bins = factor_bins(table["ratio"].to_numpy(), "ratio", 2, seed=0)
    for idx in matched_sample(covariates(table, "ratio"), bins, 40, seed=0, related=rel):
        chosen = set(idx.tolist())
        assert not any(a in chosen and b in chosen for a, b in pairs)


def test_meaning_has_two_levels_and_bins_must_fit() -> None:
    table = toy_universe()
    bins = factor_bins(table["meaning"].to_numpy(), "meaning", 2)
    assert set(bins) == {0, 1}
    with pytest.raises(UserInputError, match="--bins"):
        factor_bins(table["meaning"].to_numpy(), "meaning", 3)
    with pytest.raises(UserInputError, match="--size"):
        matched_sample(covariates(table, "meaning"), bins, 500)


def test_the_factor_config_is_the_documented_default() -> None:
    cfg = load_config(Path(__file__).parents[2] / "configs" / "factors.yaml", FactorSplitConfig)
    assert cfg == FactorSplitConfig()


def test_split_ratio_by_hand() -> None:
    # three classes at distance 2 from train; pairwise distances 1 (0-1), 3 (0-2), 2 (1-2)
    dist = np.array([[0, 1, 3], [1, 0, 2], [3, 2, 0]], dtype=float)
    # r = 2/1, 2/1, 2/2  -> R = 5/3
    assert split_ratio(np.array([2.0, 2.0, 2.0]), dist) == pytest.approx(5 / 3)


def _toy_ratio_problem() -> tuple[np.ndarray, np.ndarray]:
    # nodes 0, 1 in the split; node 2 may replace node 1. d(0,1) = 2, d(0,2) = 1, d(1,2) = 3
    dist = np.array([[0, 2, 1], [2, 0, 3], [1, 3, 0]], dtype=float)
    return np.array([2.0, 2.0, 2.0]), dist


def test_swap_moves_r_towards_the_target() -> None:
    to_train, dist = _toy_ratio_problem()
    # as is: r = 2/2, 2/2 -> R = 1; with 2 for 1: r = 2/1, 2/1 -> R = 2
    assert match_split_ratio(
        to_train, dist, np.array([0, 1]), [np.array([]), np.array([2])], None, 2.0, 0.1
    ).tolist() == [0, 2]
    # already within the tolerance of the target: nothing moves
    assert match_split_ratio(
        to_train, dist, np.array([0, 1]), [np.array([]), np.array([2])], None, 1.0, 0.1
    ).tolist() == [0, 1]
    # a swap that would put two related classes in one split is never made
    related = sp.csr_matrix(np.array([[0, 0, 1], [0, 0, 0], [1, 0, 0]], dtype=bool))
    assert match_split_ratio(
        to_train, dist, np.array([0, 1]), [np.array([]), np.array([2])], related, 2.0, 0.1
    ).tolist() == [0, 1]


def test_swap_ratios_equal_a_recomputation() -> None:
    rng = np.random.default_rng(3)
    n = 12
    dist = rng.integers(1, 9, (n, n)).astype(float)
    dist = np.minimum(dist, dist.T)
    np.fill_diagonal(dist, 0)
    to_train = rng.integers(1, 6, n).astype(float)
    members, options = np.arange(6), np.arange(6, 12)
    got = _swap_ratios(to_train, dist, members, options)
    for i in range(6):
        for k, j in enumerate(options):
            new = np.r_[np.delete(members, i), j]
            assert got[i, k] == pytest.approx(split_ratio(to_train[new], dist[np.ix_(new, new)]))


def test_pool_requires_a_class_vector_by_default() -> None:
    steps = pool_steps(FactorSplitConfig().factor)
    assert steps[-1] == {"filter": "has_vector", "vectors": "glove-6b-50d"}
    assert FactorSplitConfig().factor.ratio_tolerance == 0.05
    off = FactorSplitConfig.model_validate({"factor": {"require_vector": None}}).factor
    assert all(s["filter"] != "has_vector" for s in pool_steps(off))
