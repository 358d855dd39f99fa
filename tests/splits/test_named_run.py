"""``run`` and ``evaluate`` take a published split by name, like ``hop1`` (the reduced demo inputs)."""

from __future__ import annotations

import json
from pathlib import Path

from imagenet_zsl.cli import main
from imagenet_zsl.splits.named import PUBLISHED_SPLITS
from tests.batch.conftest import DemoInputs, demo_inputs  # noqa: F401 - the shared session fixture


def _metrics(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


def test_run_and_evaluate_on_dgp_2hops_by_name(demo_inputs: DemoInputs, tmp_path: Path, capsys) -> None:  # noqa: F811
    models = {"trivial": {**demo_inputs.data["models"]["trivial"], "splits": ["dgp-2hops"]}}
    recipe = demo_inputs.write_recipe("dgp.yaml", splits=["dgp-2hops"], models=models, gzsl=False)
    assert main(["run", str(recipe), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    cell = _metrics(tmp_path / "run" / "cells" / "trivial__dgp-2hops")
    assert cell["inputs"]["split"]["name"] == "dgp-2hops"
    assert cell["inputs"]["split"]["path"] == str(PUBLISHED_SPLITS["dgp-2hops"].path)
    assert cell["inputs"]["split"]["classes"] == 1549
    assert cell["label_space"]["classes_in_label_space"] == 1549  # images for 15, 1,534 distractors
    argv = ["evaluate", "--features", str(tmp_path / "run" / "features" / "test"), "--split", "dgp-2hops"]
    argv += ["--model", str(tmp_path / "run" / "models" / "trivial"), "--out", str(tmp_path / "ev")]
    assert main([*argv, "--no-plots"]) == 0
    alone = _metrics(tmp_path / "ev")
    assert alone["inputs"]["split"]["classes"] == 1549
    assert alone["zsl"]["flat"] == cell["zsl"]["flat"]  # the same classes, the same numbers
    capsys.readouterr()


def test_evaluate_refuses_a_published_name_shadowed_by_a_file(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "splits").mkdir()
    (tmp_path / "splits" / "dgp-3hops.txt").write_text("n00005787\n")
    argv = ["evaluate", "--features", "f", "--split", "dgp-3hops", "--prototypes", "p.npz", "--out", "o"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "split 'dgp-3hops' is ambiguous (--split)" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()
