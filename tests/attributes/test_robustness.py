"""GRAB robustness study: base (seed) variance vs split variance, per-method effects, resume."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.attributes import protocol
from imagenet_zsl.attributes.dataset import load_dataset
from imagenet_zsl.attributes.outputs import ROBUSTNESS_FORMAT, work_dir
from imagenet_zsl.attributes.robustness import (
    StudyOptions,
    generalizability,
    render_measures,
    robustness,
    run_study,
    study_parts,
    study_to_directory,
    summarise,
    variants,
    write_summary,
)
from imagenet_zsl.attributes.xlsa17 import load_att_splits
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import read_manifest_verified


def test_study_summarises_seed_and_split_variance(tmp_path, apy_root, monkeypatch):
    ds = load_dataset("APY", apy_root)
    out = tmp_path / "study"
    runs = run_study(
        ds,
        "ridge",
        ["random", "gcs", "mas"],
        seeds=2,
        work=out,
        options=StudyOptions(inverse=True, k=16),
        params={"alpha": 1.0},
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

    stats, measures = summarise(runs)
    base_h = runs.loc[runs.method == "base", "H"].to_numpy()
    gen = measures["generalizability"]
    assert gen["seed"]["H"] == pytest.approx(np.std(base_h, ddof=1))
    # the split sample: the random splits plus the base run of seed 0 (GRAB Table 2)
    assert gen["split"]["H"] == pytest.approx(np.std([base_h[0], *h_random], ddof=1))
    gcs_h = runs.loc[runs.method == "gcs", "H"].mean()
    assert stats.loc["gcs", "delta_H"] == pytest.approx(gcs_h - base_h.mean())
    assert stats.loc["base", "delta_H"] == 0 and stats.loc["mas_inv", "runs"] == 2
    rob = measures["robustness"]
    assert rob["sigma_prime"] == ["gcs", "gcs_inv", "mas", "mas_inv"]
    worst = min(runs.loc[runs.method == m, "zsl"].mean() for m in rob["sigma_prime"])
    assert rob["zsl"]["rob"] == pytest.approx(runs.loc[runs.method == "random", "zsl"].mean() - worst)

    text = write_summary(runs, out, "APY ridge")
    assert "Rob(m, Σ′), Eq. 10" in text and "Gen(m, split), Eq. 9" in text and "gcs_inv" in text
    assert json.loads((out / "measures.json").read_text())["robustness"]["H"]["rob"] == pytest.approx(
        rob["H"]["rob"]
    )
    assert (out / "robustness.png").read_bytes()[:4] == b"\x89PNG"
    assert pd.read_csv(out / "runs.csv").shape[0] == 12

    # resume: finished runs in the work folder are kept
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: pytest.fail("recomputed"))
    again = run_study(
        ds,
        "ridge",
        ["random", "gcs", "mas"],
        seeds=2,
        work=out,
        options=StudyOptions(inverse=True, k=16),
        params={"alpha": 1.0},
    )
    pd.testing.assert_frame_equal(again, runs)


def test_study_directory_is_atomic_verified_and_resumes(tmp_path, apy_root, monkeypatch):
    """``OUT`` appears whole with a manifest listing every file; an interrupted study leaves no
    ``OUT`` but keeps its finished runs in the work folder; re-running on a finished ``OUT``
    recomputes nothing and rewrites it."""
    ds = load_dataset("APY", apy_root)
    out = tmp_path / "study"
    study = dict(options=StudyOptions(), params={"alpha": 1.0})
    real = protocol.run_protocol
    calls = []

    def interrupted(*args, **kwargs):
        if len(calls) == 3:  # base seed0, base seed1, random seed0 finish; random seed1 is cut
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(protocol, "run_protocol", interrupted)
    with pytest.raises(KeyboardInterrupt):
        study_to_directory(ds, "ridge", ["random"], 2, out, **study)
    assert not out.exists()
    kept = sorted(p.parent.relative_to(work_dir(out)).as_posix() for p in work_dir(out).rglob("results.json"))
    assert kept == ["runs/base/seed0", "runs/base/seed1", "runs/random/seed0"]

    calls.clear()
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: calls.append(1) or real(*a, **k))
    text = study_to_directory(ds, "ridge", ["random"], 2, out, **study)
    assert len(calls) == 1 and not work_dir(out).exists()  # only random seed1 ran
    assert "Gen(m, split), Eq. 9" in text
    manifest = read_manifest_verified(out, ROBUSTNESS_FORMAT)
    assert manifest["tool"] == "imagenet-zsl attributes robustness"
    assert manifest["parameters"]["methods"] == ["random"] and manifest["parameters"]["seeds"] == 2
    listed = {r["path"] for r in manifest["files"]}
    assert {"runs.csv", "robustness.md", "measures.json", "robustness.png"} <= listed
    assert {f"{part}/results.json" for part in study_parts(["random"], 2, False) if "runs/" in part} <= listed
    assert "splits/random/seed1/att_splits.mat" in listed and "runs/random/seed1/manifest.json" in listed

    # a finished study: nothing is recomputed; the output is replaced by an identical one
    before = (out / "runs.csv").read_bytes()
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: pytest.fail("recomputed"))
    study_to_directory(ds, "ridge", ["random"], 2, out, **study)
    assert (out / "runs.csv").read_bytes() == before and not work_dir(out).exists()
    read_manifest_verified(out, ROBUSTNESS_FORMAT)


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


def _runs(rows: list[tuple[str, int, float, float]]) -> pd.DataFrame:
    """(method, seed, zsl, H) rows; seen/unseen follow zsl so every metric is set."""
    return pd.DataFrame(
        [
            {"method": m, "seed": s, "zsl": z, "seen": z, "unseen": z / 2, "H": h, "H_cs": h}
            for m, s, z, h in rows
        ]
    )


HAND = _runs(
    [
        ("base", 0, 0.40, 0.30),
        ("base", 1, 0.50, 0.30),
        ("base", 2, 0.60, 0.30),
        ("random", 0, 0.70, 0.50),
        ("random", 1, 0.50, 0.30),
        ("gcs", 0, 0.30, 0.10),
        ("gcs", 1, 0.50, 0.10),
        ("ccs", 0, 0.35, 0.20),
        ("ccs", 1, 0.35, 0.20),
        ("mas_inv", 0, 0.55, 0.05),
        ("mas_inv", 1, 0.55, 0.15),
    ]
)


def test_generalizability_eq9_by_hand():
    """GRAB Eq. 9: the unbiased standard deviation over seeds (PS runs) and over splits (the random
    splits plus the base run, as GRAB Table 2 counts its 6 runs)."""
    gen = generalizability(HAND)
    # seeds: zsl 0.4, 0.5, 0.6 → mean 0.5, squares 0.01 + 0 + 0.01 over 2 → std 0.1
    assert gen["seed"]["runs"] == 3 and gen["seed"]["zsl"] == pytest.approx(0.1)
    assert gen["seed"]["H"] == pytest.approx(0.0)
    # splits: zsl 0.4 (base seed 0), 0.7, 0.5 → mean 1.6/3; squares (0.1333², 0.1667², 0.0333²)
    # sum 0.046667 over 2 → 0.023333 → std 0.152753
    assert gen["split"]["runs"] == 3 and gen["split"]["zsl"] == pytest.approx(0.1527525, abs=1e-7)
    # u = zsl / 2: the std halves
    assert gen["split"]["unseen"] == pytest.approx(0.1527525 / 2, abs=1e-7)
    assert "split" not in generalizability(HAND[HAND.method != "random"])


def test_robustness_eq10_by_hand():
    """GRAB Eq. 10: Rob = mean over random splits − min over Σ′ of a split's mean over seeds."""
    rob = robustness(HAND)
    assert rob["sigma_prime"] == ["gcs", "ccs", "mas_inv"]
    # ZSL: E = (0.7 + 0.5) / 2 = 0.6; split means gcs 0.40, ccs 0.35, mas_inv 0.55 → min 0.35 (ccs)
    assert rob["zsl"] == pytest.approx({"expected": 0.6, "worst": 0.35, "worst_split": "ccs", "rob": 0.25})
    # H: E = 0.4; gcs 0.10, ccs 0.20, mas_inv 0.10 → min 0.10, tie → the first in Σ′ order (gcs)
    assert rob["H"] == pytest.approx({"expected": 0.4, "worst": 0.1, "worst_split": "gcs", "rob": 0.3})
    text = render_measures({"generalizability": generalizability(HAND), "robustness": rob})
    assert "| Rob(m, Σ′), Eq. 10 | 25.0 | 12.5 | 25.0 | 30.0 |" in text
    assert "35.0 (ccs)" in text and "Σ′ = {gcs, ccs, mas_inv}" in text
    # no random splits: the expectation, hence Rob, is undefined (never 0)
    alone = robustness(HAND[HAND.method != "random"])
    assert alone["zsl"]["rob"] is None and alone["zsl"]["worst"] == pytest.approx(0.35)
    assert robustness(HAND[HAND.method.isin(["base", "random"])])["H"]["rob"] is None


def test_robustness_cli_prints_eq9_and_eq10(apy_root, tmp_path, capsys):
    out = tmp_path / "study"
    argv = ["attributes", "robustness", "--dataset", "APY", "--root", str(apy_root), "--model", "ridge"]
    argv += ["--param", "alpha=1.0", "--methods", "random", "gcs", "--seeds", "2", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    runs = pd.read_csv(out / "runs.csv")
    expected = runs.loc[runs.method == "random", "zsl"].mean()
    rob = expected - runs.loc[runs.method == "gcs", "zsl"].mean()
    line = next(row for row in printed.splitlines() if row.startswith("| Rob(m, Σ′), Eq. 10 |"))
    assert line.split("|")[2].strip() == f"{rob * 100:.1f}"
    assert json.loads((out / "measures.json").read_text())["robustness"]["zsl"]["rob"] == pytest.approx(
        rob, abs=1e-5
    )  # runs.csv keeps 6 significant digits


def test_a_finished_study_is_not_reused_for_other_split_settings(tmp_path, apy_root, monkeypatch):
    """The runs name their split files by path only: a study re-run on the same ``OUT`` with
    another ``k`` (which rewrites the MAS/PAS split files) must recompute, never reuse."""
    ds = load_dataset("APY", apy_root)
    out = tmp_path / "study"
    study_to_directory(ds, "ridge", ["pas"], 2, out, options=StudyOptions(k=2), params={"alpha": 1.0})
    real = protocol.run_protocol
    calls = []
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: calls.append(1) or real(*a, **k))
    study_to_directory(ds, "ridge", ["pas"], 2, out, options=StudyOptions(k=3), params={"alpha": 1.0})
    assert len(calls) == 4  # base and pas, two seeds each: all made again
    assert read_manifest_verified(out, ROBUSTNESS_FORMAT)["parameters"]["k"] == 3
