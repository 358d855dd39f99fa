"""Bad inputs to `splits factor`, `analyze ladder` and `analyze factor`: one error line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from tests.analysis.test_factor_analysis import fake_cell, write_cell_manifest, write_factor_manifest


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "factor.yaml"
    path.write_text("train: ilsvrc2012\nfactor: {seed: 0}\n")
    return path


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (["--factor", "meaning", "--bins", "3"], "--bins"),
        (["--factor", "depth", "--bins", "1"], "--bins"),
        (["--factor", "depth", "--size", "0"], "--size"),
    ],
)
def test_splits_factor_bad_flag(
    cli_error, config: Path, tmp_path: Path, extra: list[str], culprit: str
) -> None:
    out = tmp_path / "out"
    cli_error(["splits", "factor", config, "--out", out, *extra], culprit, inputs=[config], not_created=[out])


def test_splits_factor_unknown_config_key(cli_error, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("factor: {seeds: 3}\n")
    out = tmp_path / "out"
    argv = ["splits", "factor", config, "--factor", "depth", "--out", out]
    cli_error(argv, "seeds", inputs=[config], not_created=[out])


def test_splits_factor_missing_config(cli_error, tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = tmp_path / "nope.yaml"
    cli_error(["splits", "factor", config, "--factor", "depth", "--out", out], str(config), not_created=[out])


def test_ladder_missing_run(cli_error, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cli_error(["analyze", "ladder", run], str(run), not_created=[Path(f"{run}-ladder")])


def test_ladder_bad_k(cli_error, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    cli_error(
        ["analyze", "ladder", run, "--k", "0"], "--k", inputs=[run], not_created=[Path(f"{run}-ladder")]
    )


def test_factor_analysis_on_an_empty_run(cli_error, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "cells").mkdir(parents=True)
    cli_error(["analyze", "factor", run], str(run), inputs=[run], not_created=[Path(f"{run}-factor")])


def test_factor_analysis_on_a_run_without_strict_hits(cli_error, tmp_path: Path) -> None:
    splits = tmp_path / "splits"
    splits.mkdir()
    (splits / "depth_1.txt").write_text("n00000000\n")
    write_factor_manifest(splits, "depth", {"depth_1": {"bin": 1, "means": {"depth": 1}}})
    run = tmp_path / "run"
    fake_cell(run, splits / "depth_1.txt", [1.0, 0.0])  # per_class.csv written before the tie rules
    cli_error(
        ["analyze", "factor", run, "--k", "1"],
        "hit@1_strict",
        inputs=[run],
        not_created=[Path(f"{run}-factor")],
    )


def _factor_run(tmp_path: Path, identities: list[dict | None] | None = None) -> Path:
    """A run of two cells on two depth factor splits (per_class.csv with both tie rules)."""
    splits = tmp_path / "splits"
    splits.mkdir()
    bins = {}
    rows = []
    run = tmp_path / "run"
    for b, name in enumerate(["depth_1", "depth_2"]):
        (splits / f"{name}.txt").write_text("n00000000\n")
        bins[name] = {"bin": b + 1, "means": {"depth": 4.0 + b}}
        rows += [f"{name},n0000000{i},{4.0 + b}\n" for i in range(2)]
        fake_cell(run, splits / f"{name}.txt", [1.0, 0.0], [1.0, 0.0])
        if identities is not None and identities[b] is not None:
            cell = run / "cells" / f"toy__{name}"
            metrics = json.loads((cell / "metrics.json").read_text())
            metrics["provenance"] = {"features": {"identity": identities[b]}}
            (cell / "metrics.json").write_text(json.dumps(metrics))
            write_cell_manifest(cell)
    (splits / "classes.csv").write_text("split,wnid,depth\n" + "".join(rows))
    write_factor_manifest(splits, "depth", bins)
    return run


def _identity(backbone: str) -> dict:
    return {"backbone": backbone, "weights_sha256": backbone * 4, "preprocessing": "p", "dim": 8}


def test_ladder_refuses_an_edited_topk_list(cli_error, tmp_path: Path) -> None:
    """issue 26: `analyze ladder` read an edited topk/*.ids.npy and printed changed numbers."""
    run = _factor_run(tmp_path)
    ids = run / "cells" / "toy__depth_1" / "topk" / "test.unseen.ids.npy"
    np.save(ids, np.load(ids)[:, ::-1].copy())  # same shape and dtype: only the sha256 tells
    out = tmp_path / "ladder"
    cli_error(["analyze", "ladder", run, "--out", out], ["test.unseen.ids.npy", "sha256"], [run], [out])


def test_factor_analysis_refuses_an_edited_per_class_table(cli_error, tmp_path: Path) -> None:
    run = _factor_run(tmp_path)
    table = run / "cells" / "toy__depth_2" / "per_class.csv"
    table.write_text(table.read_text().replace("0.0", "1.0"))
    out = tmp_path / "fa"
    cli_error(["analyze", "factor", run, "--k", "1", "--out", out], ["per_class.csv", "sha256"], [run], [out])


def test_factor_analysis_refuses_an_edited_factor_split_table(cli_error, tmp_path: Path) -> None:
    run = _factor_run(tmp_path)
    classes = tmp_path / "splits" / "classes.csv"
    classes.write_text(classes.read_text().replace("4.0", "9.0"))  # a class's depth, same size
    out = tmp_path / "fa"
    argv = ["analyze", "factor", run, "--k", "1", "--out", out]
    cli_error(argv, [str(classes), "sha256", "re-run 'imagenet-zsl splits factor'"], [run], [out])


def test_factor_analysis_refuses_an_old_factor_split_directory(cli_error, tmp_path: Path) -> None:
    run = _factor_run(tmp_path)
    manifest = tmp_path / "splits" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "format": "imagenet-zsl/factor-splits-v1"}))
    out = tmp_path / "fa"
    argv = ["analyze", "factor", run, "--k", "1", "--out", out]
    cli_error(argv, [str(manifest), "factor-splits-v1", "re-run 'imagenet-zsl splits factor'"], [run], [out])


def test_analysis_refuses_a_cell_without_manifest(cli_error, tmp_path: Path) -> None:
    run = _factor_run(tmp_path)
    (run / "cells" / "toy__depth_1" / "manifest.json").unlink()
    out = tmp_path / "fa"
    cli_error(["analyze", "factor", run, "--k", "1", "--out", out], "manifest.json", [run], [out])


def test_analysis_refuses_a_malformed_manifest(cli_error, tmp_path: Path) -> None:
    run = _factor_run(tmp_path)
    manifest = run / "cells" / "toy__depth_1" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"][0]["sha256"] = 12
    manifest.write_text(json.dumps(data))
    cli_error(["analyze", "ladder", run, "--out", tmp_path / "l"], "files", [run], [tmp_path / "l"])


def test_analysis_refuses_cells_of_different_features(cli_error, tmp_path: Path) -> None:
    """issue 23 §1: cells evaluated on different backbones' features are not combined silently."""
    run = _factor_run(tmp_path, [_identity("resnet50"), _identity("vit_b16")])
    out = tmp_path / "fa"
    argv = ["analyze", "factor", run, "--k", "1", "--out", out]
    cli_error(argv, ["feature mismatch", "resnet50", "vit_b16", "--allow-feature-mismatch"], [run], [out])
    cli_error(
        ["analyze", "ladder", run, "--out", tmp_path / "l"], "feature mismatch", [run], [tmp_path / "l"]
    )
    # the override works, is recorded in the manifest and shown under the table
    assert main([str(a) for a in [*argv, "--allow-feature-mismatch", "--resamples", "50"]]) == 0
    assert "FEATURE MISMATCH allowed" in (out / "factor.md").read_text()
    record = json.loads((out / "manifest.json").read_text())["feature_mismatch"]
    assert len(record) == 1 and record[0]["allowed"] and "backbone" in record[0]["differ"]


def test_analysis_skips_the_check_when_an_identity_is_unknown(tmp_path: Path) -> None:
    run = _factor_run(tmp_path, [_identity("resnet50"), None])  # e.g. a run from before identities
    out = tmp_path / "fa"
    assert main(["analyze", "factor", str(run), "--k", "1", "--out", str(out), "--resamples", "50"]) == 0
    assert json.loads((out / "manifest.json").read_text())["feature_mismatch"] == []
