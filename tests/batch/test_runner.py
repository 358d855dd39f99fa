"""`imagenet-zsl run`: missing-semantics policy, failure isolation, resumability, recipe mistakes.

(The model cache, a re-run training nothing, is tested in test_demo_recipe.py.)
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagenet_zsl.batch.runner import run
from imagenet_zsl.cli import main
from imagenet_zsl.models.trivial import Trivial


def _fitted_recipe(demo_inputs, demo_run, name: str, **changes: object) -> Path:
    """The reduced recipe on the demo run's features and fitted models (nothing to train)."""
    features = demo_run / "features"
    data = {
        "features": {
            "train": str(features / "train"),
            "test": str(features / "test"),
            "seen": str(features / "seen_test"),
        },
        "models": {m: str(demo_run / "models" / m) for m in ("trivial", "eszsl")},
    }
    data.update(splits=["hop1", "benchmark"])  # not the factor splits
    data.update(plots=False, label_frequency=False, **changes)  # cheaper cells: only their count matters
    return demo_inputs.write_recipe(name, **data)


def test_drop_reports_evaluated_over_total_and_the_excluded_wnids(demo_run):
    record = json.loads((demo_run / "cells" / "eszsl__hop1.json").read_text())
    assert record["classes"]["in_split"] == 15 and record["classes"]["evaluated"] == 12
    assert len(record["classes"]["excluded"]) == 3
    trivial = json.loads((demo_run / "cells" / "trivial__hop1.json").read_text())
    assert trivial["classes"]["evaluated"] == 15 and trivial["classes"]["excluded"] == []
    table = (demo_run / "summary.md").read_text()
    assert "| eszsl | hop1 | 12/15 |" in table and "| trivial | hop1 | 15/15 |" in table
    kept = (demo_run / "classes" / "eszsl" / "hop1.txt").read_text().split()
    assert len(kept) == 12 and not set(kept) & set(record["classes"]["excluded"])


def test_missing_semantics_error_is_one_line(demo_inputs, demo_run, tmp_path, cli_error):
    recipe = _fitted_recipe(demo_inputs, demo_run, "strict.yaml", missing_semantics="error")
    message = cli_error(["run", recipe, "--out", tmp_path / "strict"], culprit=["missing_semantics", "eszsl"])
    assert "hop1" in message


def test_a_failing_cell_is_reported_and_the_others_run(demo_inputs, demo_run, tmp_path, monkeypatch, capsys):
    def broken(self, features, logits=None):  # noqa: ANN001, ANN202
        raise RuntimeError("planted failure")

    monkeypatch.setattr(Trivial, "embed_images", broken)
    recipe = _fitted_recipe(demo_inputs, demo_run, "broken.yaml")
    out = tmp_path / "broken"
    assert main(["run", str(recipe), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "error: 2 cells failed: trivial__hop1, trivial__benchmark" in err
    table = (out / "summary.md").read_text()
    assert "| trivial | hop1 |" in table and "failed:" in table and "planted failure" in table
    assert "| eszsl | hop1 | 12/15 |" in table
    statuses = {c["run"]: c["status"] for c in json.loads((out / "manifest.json").read_text())["cells"]}
    assert statuses["cells/eszsl__benchmark"] == "ok" and statuses["cells/trivial__hop1"] == "failed"


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def test_killed_run_resumes_and_keeps_finished_cells(demo_inputs, demo_run, tmp_path):
    recipe = _fitted_recipe(demo_inputs, demo_run, "resume.yaml")
    out = tmp_path / "resume"
    command = [
        sys.executable,
        "-c",
        "import sys; from imagenet_zsl.cli import main; sys.exit(main(sys.argv[1:]))",
    ]
    proc = subprocess.Popen(
        [*command, "run", str(recipe), "--out", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            not list((out / "cells").glob("*.json")) and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        proc.kill()  # SIGKILL, mid-run
    finally:
        proc.wait()
    finished = sorted(p.with_suffix("").name for p in (out / "cells").glob("*.json"))
    assert finished, "the run was killed before finishing a cell"
    before = {c: _hashes(out / "cells" / c) for c in finished}
    result = run(recipe, out, progress=False, echo=lambda _: None)
    assert set(finished) <= set(result.skipped) and not result.failed
    assert len(result.skipped) + len(result.evaluated) == 4
    assert {c: _hashes(out / "cells" / c) for c in finished} == before


@pytest.mark.parametrize(
    ("change", "culprit"),
    [
        ({"modles": {}}, "modles"),
        ({"models": {"x": {"model": "no_such_model"}}}, "no_such_model"),
        ({"models": {"x": {"model": "eszsl", "params": {"gama": 1}}}}, "gama"),
        ({"splits": ["no_such_split"]}, "no_such_split"),
        ({"ks": [0]}, "ks[0]"),
        ({"missing_semantics": "ignore"}, "missing_semantics"),
        ({"calibration": {"classes": "nowhere.txt"}}, "calibration.classes"),
        (
            {"models": {"x": {"model": "eszsl", "select": {"val_frction": 0.2}}}},
            "models.x.select.val_frction",
        ),
        (
            {"models": {"x": {"model": "eszsl", "select": {"val_fraction": 1.5}}}},
            "models.x.select.val_fraction",
        ),
        ({"models": {"x": {"model": "eszsl", "select": {"mode": "gszl"}}}}, "models.x.select.mode"),
        ({"models": {"x": {"model": "eszsl", "select": {"grid": "defualt"}}}}, "models.x.select.grid"),
        (
            {"models": {"x": {"model": "eszsl", "select": {"grid": {"gama": [1]}}}}},
            "models.x.select.grid.gama",
        ),
        ({"models": {"x": {"model": "eszsl", "select": {"grid": {"lam": []}}}}}, "models.x.select.grid.lam"),
        ({"models": {"x": {"model": "eszsl", "splits": ["hop2"]}}}, "models.x.splits"),
        ({"models": {"x": {"model": "eszsl", "splits": []}}}, "models.x.splits"),
    ],
)
def test_recipe_mistakes_are_one_line(demo_inputs, tmp_path, cli_error, change, culprit):
    recipe = demo_inputs.write_recipe("bad.yaml", **change)
    out = tmp_path / "out"
    cli_error(["run", recipe, "--out", out], culprit=culprit, inputs=[recipe], not_created=[out])


def test_out_overlapping_an_input_is_refused(demo_inputs, cli_error):
    # --out = the directory holding the recipe and its split files
    cli_error(
        ["run", demo_inputs.recipe, "--out", demo_inputs.root], culprit="--out", inputs=[demo_inputs.root]
    )


def test_a_bad_grid_in_a_model_config_names_that_file(demo_inputs, tmp_path, cli_error):
    config = tmp_path / "eszsl.yaml"
    config.write_text("model: eszsl\nselect: {grid: {gama: [1.0]}}\n")
    recipe = demo_inputs.write_recipe("bad_grid.yaml", models={"x": str(config)})
    out = tmp_path / "out"
    cli_error(
        ["run", recipe, "--out", out],
        culprit=[str(config), "select.grid.gama"],
        inputs=[recipe, config],
        not_created=[out],
    )
