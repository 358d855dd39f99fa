"""`imagenet-zsl analyze factor` on a hand-made batch run over two factor splits."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.analysis.factor_analysis import bootstrap_ci
from imagenet_zsl.analysis.factor_splits import FORMAT, TOOL
from imagenet_zsl.analysis.runs import cell_backbone, features_note
from imagenet_zsl.cli import main
from imagenet_zsl.evaluation.run.verify import EVALUATION_FORMAT
from imagenet_zsl.manifests import read_manifest_verified, write_manifest

HITS = {"depth_1": [1.0, 1.0, 0.0, 1.0], "depth_2": [0.0, 0.5, 0.0, float("nan")]}
# per class hit@1 under the strict rule: in depth_2 the 0.5 class is a tie (expected 1/2, strict 0);
# depth_2's last class was not evaluated (e.g. no word vector): NaN
STRICT = {"depth_1": [1.0, 1.0, 0.0, 1.0], "depth_2": [0.0, 0.0, 0.0, float("nan")]}
# each class's depth in classes.csv: depth_2's mean is 9 over the split, 8 over the 3 evaluated
DEPTHS = {"depth_1": [5.0, 5.0, 5.0, 5.0], "depth_2": [7.0, 8.0, 9.0, 12.0]}


def fake_cell(root: Path, split_file: Path, hits: list[float], strict: list[float] | None = None) -> None:
    """A cell as `evaluate` lays it out (only what the analyses read)."""
    cell = root / "cells" / f"toy__{split_file.stem}"
    (cell / "topk").mkdir(parents=True)
    classes = [f"n0000000{i}" for i in range(len(hits))]
    metrics = {
        "model": {"name": "toy"},
        "inputs": {"split": {"name": split_file.stem, "path": str(split_file)}},
    }
    (cell / "metrics.json").write_text(json.dumps(metrics))
    (cell / "topk" / "classes.json").write_text(json.dumps({"unseen": classes}))
    labels = np.arange(len(hits))
    np.save(cell / "topk" / "test.labels.npy", labels.astype(np.int32))
    np.save(cell / "topk" / "test.rows.npy", labels.astype(np.int64))
    np.save(
        cell / "topk" / "test.unseen.ids.npy", np.tile(np.arange(len(hits)), (len(hits), 1)).astype(np.int32)
    )
    np.save(cell / "topk" / "test.unseen.scores.npy", np.zeros((len(hits), len(hits)), np.float32))
    table = pd.DataFrame({"wnid": classes, "role": "unseen", "hit@1": hits})
    if strict is not None:
        table["hit@1_strict"] = strict
    table.to_csv(cell / "per_class.csv", index=False)
    write_cell_manifest(cell)


def write_cell_manifest(cell: Path) -> None:
    """The manifest `evaluate` writes, through the one writer: every file with its size and sha256
    (what the analyses verify)."""
    write_manifest(cell, format=EVALUATION_FORMAT, tool="imagenet-zsl evaluate")


def write_factor_manifest(splits: Path, factor: str, bins: dict[str, dict]) -> None:
    """The manifest `splits factor` writes (only the fields the factor analysis reads)."""
    write_manifest(splits, format=FORMAT, tool=TOOL, fields={"factor": factor, "splits": bins})


@pytest.fixture
def factor_run(tmp_path: Path) -> Path:
    splits = tmp_path / "factor_splits"
    splits.mkdir()
    bins = {}
    for b, name in enumerate(HITS):
        (splits / f"{name}.txt").write_text("n00000000\n")
        bins[name] = {"bin": b + 1, "means": {"depth": float(np.mean(DEPTHS[name]))}}
        fake_cell(tmp_path / "run", splits / f"{name}.txt", HITS[name], STRICT[name])
    rows = [(name, f"n0000000{i}", DEPTHS[name][i]) for name in HITS for i in range(4)]
    pd.DataFrame(rows, columns=["split", "wnid", "depth"]).to_csv(splits / "classes.csv", index=False)
    write_factor_manifest(splits, "depth", bins)
    return tmp_path / "run"


def test_factor_table_and_plot(factor_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = factor_run.parent / "fa"
    assert (
        main(["analyze", "factor", str(factor_run), "--k", "1", "--out", str(out), "--resamples", "200"]) == 0
    )
    printed = capsys.readouterr().out
    assert "| depth | toy | 1 | 1 | 5.000 | 4 / 4 | 75.00 |" in printed
    assert "| depth | toy | 1 | 2 | 8.000 | 3 / 4 | 16.67 |" in printed
    table = pd.read_csv(out / "factor.csv")
    assert table["hit"].tolist() == pytest.approx([0.75, 0.5 / 3], abs=1e-6)  # expected tie rule (headline)
    assert table["hit_strict"].tolist() == pytest.approx([0.75, 0.0])
    assert table["x_split"].tolist() == [5.0, 9.0]  # the full split's mean is kept beside it
    assert table["ci_low_strict"][1] == table["ci_high_strict"][1] == 0.0
    assert (table["ci_low_strict"] <= table["ci_low"]).all()  # same resamples, strict <= expected
    assert table["x"].tolist() == [5.0, 8.0]  # mean depth of the evaluated classes (7, 8, 9)
    assert (table["ci_low"] <= table["hit"]).all() and (table["hit"] <= table["ci_high"]).all()
    assert (out / "factor.png").stat().st_size > 0
    assert table["backbone"].tolist() == ["unknown", "unknown"]  # the fake cells record no identity
    assert (out / "factor.md").read_text().startswith("Features: unknown (backbone of the test features")
    manifest = read_manifest_verified(out, "imagenet-zsl/factor-analysis-v2")
    assert [r["path"] for r in manifest["files"]] == ["factor.csv", "factor.md", "factor.png"]
    assert manifest["parameters"]["resamples"] == 200 and manifest["feature_mismatch"] == []
    first = (out / "factor.csv").read_bytes()
    assert (
        main(["analyze", "factor", str(factor_run), "--k", "1", "--out", str(out), "--resamples", "200"]) == 0
    )
    assert (out / "factor.csv").read_bytes() == first  # seeded


def test_bootstrap_interval_brackets_the_mean() -> None:
    values = np.r_[np.ones(30), np.zeros(70)]
    low, high = bootstrap_ci(values, 2000, 0.95, np.random.default_rng(0))
    assert low < 0.3 < high and high - low == pytest.approx(2 * 1.96 * np.sqrt(0.21 / 100), abs=0.03)


def test_features_note_names_the_backbone_and_marks_simulated_features() -> None:
    real = SimpleNamespace(feature_identity={"backbone": "resnet50", "weights_sha256": "1a2b3c4d5e6f"})
    fake = SimpleNamespace(feature_identity={"backbone": "SIMULATED", "simulation": "99887766aa"})
    expected = "Features: resnet50 @1a2b3c4d (backbone of the test features @ weights sha256 prefix).\n\n"
    assert features_note([real]) == expected
    note = features_note([fake, real])
    assert note.startswith("Features: SIMULATED @99887766, resnet50 @1a2b3c4d")
    assert "**SIMULATED features**" in note and "not results of any backbone" in note
    assert cell_backbone(fake) == "SIMULATED @99887766"
