"""GBU's cross-dataset paired t-test (Xian et al., Sec. 5.1, Table 4) in ``attributes table``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from imagenet_zsl.attributes.table import gbu_ttest, render

#: GBU Table 4 (ZSL top-1 %, Proposed Split): AWA1:AWA1, AWA1:AWA2, AWA2:AWA2, AWA2:AWA1
GBU_TABLE4 = {
    "DAP": (44.1, 44.2, 46.1, 46.2),
    "IAP": (35.9, 36.1, 35.9, 35.3),
    "CONSE": (45.6, 46.5, 44.5, 43.7),
    "CMT": (39.5, 40.7, 37.9, 37.7),
    "SSE": (60.1, 61.6, 61.0, 59.8),
    "LATEM": (55.1, 55.4, 55.8, 53.5),
    "ALE": (59.9, 59.9, 62.5, 60.9),
    "DEVISE": (54.2, 55.2, 59.7, 57.7),
    "SJE": (65.6, 65.5, 61.9, 62.0),
    "ESZSL": (58.2, 58.5, 58.6, 59.9),
    "SYNC": (54.0, 53.7, 46.6, 46.9),
    "SAE": (53.0, 52.4, 54.1, 53.1),
}


def _run(model: str, train: str, test: str, own: float, cross: float) -> dict:
    """A results.json as ``attributes run --test-dataset`` writes it (the keys the table reads)."""
    return {
        "dataset": train,
        "model": model,
        "split": "ps",
        "val_split": 1,
        "zsl": {"top1_per_class": own / 100},
        "cross_dataset": {
            "test_dataset": test,
            "zsl": {"top1_per_class": cross / 100},
            "ttest": {"statistic": None, "pvalue": None},
        },
    }


def _gbu_results() -> list[dict]:
    runs = []
    for model, (a_a, a_b, b_b, b_a) in GBU_TABLE4.items():
        runs.append(_run(model, "AWA1", "AWA2", a_a, a_b))
        runs.append(_run(model, "AWA2", "AWA1", b_b, b_a))
    return runs


def test_gbu_ttest_pairs_results_with_the_same_test_set():
    """24 pairs of 12 methods: (AWA1:AWA2, AWA2:AWA2) and (AWA1:AWA1, AWA2:AWA1)."""
    matrix, test = gbu_ttest(_gbu_results())
    assert test["pairs"] == 24 and test["methods"] == 12 and test["datasets"] == ["AWA1", "AWA2"]
    table = np.array(list(GBU_TABLE4.values()))
    trained_awa1 = np.r_[table[:, 1], table[:, 0]]
    trained_awa2 = np.r_[table[:, 2], table[:, 3]]
    d = (trained_awa1 - trained_awa2) / 100
    # the paired t statistic by hand: mean(d) / (std(d, ddof=1) / sqrt(24))
    assert test["statistic"] == pytest.approx(d.mean() / (d.std(ddof=1) / np.sqrt(24)))
    assert test["mean_difference"] == pytest.approx(d.mean())
    # on GBU's own Table 4 this is t = 0.952, p = 0.351 (23 df); GBU print p = 0.007
    assert test["statistic"] == pytest.approx(0.9525, abs=1e-4)
    assert test["pvalue"] == pytest.approx(0.3507, abs=1e-4)
    assert test["pvalue"] == pytest.approx(2 * stats.t.sf(abs(test["statistic"]), 23))
    assert matrix.loc["SJE", "AWA1:AWA2"] == pytest.approx(65.5)
    assert list(matrix.columns[-4:]) == ["AWA1:AWA1", "AWA1:AWA2", "AWA2:AWA2", "AWA2:AWA1"]


def test_gbu_ttest_needs_both_directions_and_is_rendered():
    runs = _gbu_results()
    one_way = [r for r in runs if r["dataset"] == "AWA1"]
    assert gbu_ttest(one_way)[1] is None  # no AWA2-trained results: nothing to pair
    # a method that ran one way only is left out of the pairs
    matrix, test = gbu_ttest(runs[:-1])
    assert test["methods"] == 11 and "SAE" not in matrix.index
    text, tables = render(runs)
    assert "GBU's paired t-test over 24 pairs" in text and "t = 0.952, p = 0.351" in text
    assert "cross_dataset_gbu" in tables and "cross_dataset" in tables  # the per-class extra stays
    # equal differences: the test is undefined, never p = 0 or NaN in the table
    flat = [_run("A", "AWA1", "AWA2", 50, 40), _run("A", "AWA2", "AWA1", 50, 60)]
    flat += [_run("B", "AWA1", "AWA2", 30, 20), _run("B", "AWA2", "AWA1", 30, 40)]
    assert gbu_ttest(flat)[1]["statistic"] is None
