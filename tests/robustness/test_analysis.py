"""Bad inputs to `splits factor`, `analyze ladder` and `analyze factor`: one error line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagenet_zsl.analysis.factor_splits import FORMAT
from tests.analysis.test_factor_analysis import fake_cell


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
    manifest = {"format": FORMAT, "factor": "depth", "splits": {"depth_1": {"bin": 1, "means": {"depth": 1}}}}
    (splits / "manifest.json").write_text(json.dumps(manifest))
    run = tmp_path / "run"
    fake_cell(run, splits / "depth_1.txt", [1.0, 0.0])  # per_class.csv written before the tie rules
    cli_error(
        ["analyze", "factor", run, "--k", "1"],
        "hit@1_strict",
        inputs=[run],
        not_created=[Path(f"{run}-factor")],
    )
