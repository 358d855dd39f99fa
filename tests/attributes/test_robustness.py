"""GRAB robustness study: base (seed) variance vs split variance, per-method effects, resume."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.attributes import protocol
from imagenet_zsl.attributes.dataset import load_dataset
from imagenet_zsl.attributes.robustness import run_study, summarise, variants, write_summary
from imagenet_zsl.attributes.xlsa17 import load_att_splits
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError


def test_study_summarises_seed_and_split_variance(tmp_path, apy_root, monkeypatch):
    ds = load_dataset("APY", apy_root)
    out = tmp_path / "study"
    runs = run_study(
        ds, "ridge", ["random", "gcs", "mas"], seeds=2, out=out, inverse_k=(True, 16), params={"alpha": 1.0}
    )
    assert runs["method"].tolist() == [
        m for m in ["base", "random", "gcs", "gcs_inv", "mas", "mas_inv"] for _ in range(2)
    ]
    # every run is an ordinary run directory; random splits differ by seed, gcs only in images
    first, second = (
        load_att_splits(out / "splits" / "random" / f"seed{s}" / "att_splits.mat") for s in (0, 1)
    )
    assert not np.array_equal(first.seen_classes, second.seen_classes)
    gcs0, gcs1 = (load_att_splits(out / "splits" / "gcs" / f"seed{s}" / "att_splits.mat") for s in (0, 1))
    np.testing.assert_array_equal(gcs0.seen_classes, gcs1.seen_classes)
    assert load_att_splits(out / "splits" / "mas" / "seed0" / "att_splits.mat").att.shape == (16, 32)
    h_random = [
        json.loads((out / "runs" / "random" / f"seed{s}" / "results.json").read_text())["gzsl"]["H"]
        for s in (0, 1)
    ]

    stats, variance = summarise(runs)
    base_h = runs.loc[runs.method == "base", "H"].to_numpy()
    assert variance["base_variance_H"] == pytest.approx(np.var(base_h, ddof=1))
    assert variance["split_variance_H"] == pytest.approx(np.var(h_random, ddof=1))
    gcs_h = runs.loc[runs.method == "gcs", "H"].mean()
    assert stats.loc["gcs", "delta_H"] == pytest.approx(gcs_h - base_h.mean())
    assert stats.loc["base", "delta_H"] == 0 and stats.loc["mas_inv", "runs"] == 2

    text = write_summary(runs, out, "APY ridge", {"seeds": 2})
    assert "split variance of H" in text and "gcs_inv" in text
    assert (out / "robustness.png").read_bytes()[:4] == b"\x89PNG"
    assert pd.read_csv(out / "runs.csv").shape[0] == 12

    # resume: finished runs are kept
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: pytest.fail("recomputed"))
    again = run_study(
        ds, "ridge", ["random", "gcs", "mas"], seeds=2, out=out, inverse_k=(True, 16), params={"alpha": 1.0}
    )
    pd.testing.assert_frame_equal(again, runs)


def test_variants_and_cli_errors(apy_root, tmp_path, capsys):
    assert variants(["random", "ccs", "pas"], inverse=True) == ["random", "ccs", "ccs_inv", "pas"]
    with pytest.raises(UserInputError, match="unknown method"):
        variants(["xyz"], inverse=False)
    code = main(
        [
            "attributes",
            "robustness",
            "--dataset",
            "APY",
            "--root",
            str(apy_root),
            "--model",
            "ridge",
            "--methods",
            "random",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert code == 2 and "--seeds must be at least 2" in capsys.readouterr().err


def test_normalised_std_by_hand():
    """GRAB Table 2: the normalised standard deviation std / mean (sample std over seeds)."""
    import pandas as pd

    runs = pd.DataFrame(
        [
            {"method": m, "seed": s, "zsl": z, "seen": 0.5, "unseen": 0.5, "H": h, "H_cs": h}
            for m, s, z, h in [("base", 0, 0.4, 0.2), ("base", 1, 0.6, 0.4), ("random", 0, 0.5, 0.0)]
        ]
        + [{"method": "random", "seed": 1, "zsl": 0.5, "seen": 0.5, "unseen": 0.5, "H": 0.0, "H_cs": 0.0}]
    )
    stats, _ = summarise(runs)
    # base H: mean 0.3, sample std 0.1414 → 0.4714; zsl: mean 0.5, std 0.1414 → 0.2828
    assert stats.loc["base", "H_nstd"] == pytest.approx(np.sqrt(0.02) / 0.3)
    assert stats.loc["base", "zsl_nstd"] == pytest.approx(np.sqrt(0.02) / 0.5)
    assert stats.loc["base", "seen_nstd"] == 0
    assert np.isnan(stats.loc["random", "H_nstd"])  # mean 0: undefined, not inf
