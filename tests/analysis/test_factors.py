"""Matched sampling on a toy universe: the factor moves, the others stay balanced, no related pairs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from imagenet_zsl.analysis.factor_splits import FactorSplitConfig
from imagenet_zsl.analysis.factors import (
    balance_table,
    covariates,
    factor_bins,
    matched_sample,
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
