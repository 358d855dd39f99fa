"""`imagenet-zsl run` under bad recipes and faults (issue 26): a tampered or truncated finished
cell is computed again, two runs on one --out, recipe mistakes caught before the first model is
trained, the first failing cell's cause in the `error:` line, a full disk, and the README's first
`run` before the factor splits exist (issue 23 §9)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import filelock
import pytest

from imagenet_zsl.batch import cells
from imagenet_zsl.cli import main
from imagenet_zsl.models.trivial import Trivial
from imagenet_zsl.splits.io import read_wnid_list
from tests.batch.conftest import demo_inputs, demo_run

#: the reduced demo's inputs and run (tests/batch/conftest.py), shared with this module
SHARED_FIXTURES = (demo_inputs, demo_run)

REPO = Path(__file__).resolve().parents[2]
CELL = "trivial__benchmark"


def _small_recipe(demo_inputs, demo_run, name: str, **changes: object) -> Path:
    """One fitted model on one split of the reduced demo's features: one cheap cell."""
    features = demo_run / "features"
    data = {
        "features": {
            "train": str(features / "train"),
            "test": str(features / "test"),
            "seen": str(features / "seen_test"),
        },
        "models": {"trivial": str(demo_run / "models" / "trivial")},
        "splits": ["benchmark"],
        "plots": False,
        "label_frequency": False,
        **changes,
    }
    return demo_inputs.write_recipe(name, **data)


def _run(recipe: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["run", str(recipe), "--out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out + captured.err


@pytest.mark.parametrize("tamper", ["edit", "truncate"])
def test_a_tampered_finished_cell_is_computed_again(demo_inputs, demo_run, tmp_path, capsys, tamper):
    recipe = _small_recipe(demo_inputs, demo_run, f"tamper_{tamper}.yaml")
    out = tmp_path / "run"
    assert _run(recipe, out, capsys)[0] == 0
    metrics = out / "cells" / CELL / "metrics.json"
    original = metrics.read_bytes()
    table = (out / "summary.md").read_text()
    data = json.loads(original)
    if tamper == "edit":  # a hand-edited headline number
        data["zsl"]["flat"]["1"] = 0.99
        metrics.write_text(json.dumps(data))
    else:
        metrics.write_bytes(original[: len(original) // 2])
    code, printed = _run(recipe, out, capsys)
    assert code == 0
    again = [line for line in printed.splitlines() if line.startswith(f"cell {CELL}: computing it again: ")]
    assert len(again) == 1 and again[0].startswith(f"cell {CELL}: computing it again: {metrics}: changed")
    assert "differs from the manifest)" in again[0] and "re-run" not in again[0]  # run re-runs it
    assert "1 cells: 0 already done, 1 to evaluate" in printed
    assert metrics.read_bytes() == original and (out / "summary.md").read_text() == table
    # and a third run trusts it again
    assert "1 cells: 1 already done, 0 to evaluate" in _run(recipe, out, capsys)[1]


def test_a_second_run_on_the_same_out_refuses(demo_inputs, demo_run, tmp_path, cli_error):
    recipe = _small_recipe(demo_inputs, demo_run, "locked.yaml")
    out = tmp_path / "run"
    with filelock.FileLock(str(tmp_path / ".run.lock"), timeout=0):  # what a running `run` holds
        message = cli_error(["run", recipe, "--out", out], culprit=[str(out), "another 'imagenet-zsl run'"])
    assert not out.exists()
    assert "lock" in message


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"semantics": "glove-6b-51d"}, "semantics"),
        ({"semantics": "nowhere/vectors.npz"}, "semantics"),
        ({"graph": "nosuchgraph"}, "graph"),
        ({"models": {"g": {"model": "sgcn", "graph": "nosuchgraph"}}}, "models.g.graph"),
        (
            {"models": {"e": {"model": "eszsl", "semantics": "glove-6b-51d"}}, "semantics": None},
            "models.e.semantics",
        ),
        ({"calibration": {"classes": "TEST_CLASSES"}}, "calibration.classes"),
        ({"calibration": {"classes": "OVERLAP"}}, "calibration.classes"),
    ],
)
def test_recipe_mistakes_are_caught_before_any_training(demo_inputs, tmp_path, cli_error, change, key):
    calibration = change.get("calibration")
    if calibration is not None:  # the test classes themselves, or a list sharing one of them
        benchmark = read_wnid_list(demo_inputs.root / "benchmark.txt")
        path = demo_inputs.root / "benchmark.txt"
        if calibration["classes"] == "OVERLAP":
            path = tmp_path / "val.txt"
            path.write_text(f"n00000001\n{benchmark[3]}\n")
        change = {"calibration": {"classes": str(path)}}
    recipe = demo_inputs.write_recipe(f"early_{key}.yaml", **change)
    out = tmp_path / "out"  # not even created: nothing was simulated or trained
    cli_error(["run", recipe, "--out", out], culprit=[f"{recipe}: {key}"], inputs=[recipe], not_created=[out])


def test_a_model_config_with_unknown_semantics_names_that_file(demo_inputs, tmp_path, cli_error):
    config = tmp_path / "bad_semantics_model.yaml"
    config.write_text("model: eszsl\nsemantics: glove-6b-51d\n")
    recipe = demo_inputs.write_recipe("bad_config_semantics.yaml", models={"e": str(config)}, semantics=None)
    out = tmp_path / "out"
    cli_error(
        ["run", recipe, "--out", out], culprit=[f"{config}: semantics", "glove-6b-51d"], not_created=[out]
    )


def test_the_error_line_carries_the_first_cell_cause(demo_inputs, demo_run, tmp_path, monkeypatch, capsys):
    def broken(self, features, logits=None):  # noqa: ANN001, ANN202
        raise RuntimeError("planted failure")

    monkeypatch.setattr(Trivial, "embed_images", broken)
    recipe = _small_recipe(demo_inputs, demo_run, "failing.yaml")
    code, printed = _run(recipe, tmp_path / "run", capsys)
    assert code == 1
    errors = [line for line in printed.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: 1 cells failed: {CELL}; first, {CELL}: ")
    assert "planted failure" in errors[0]


@pytest.mark.parametrize("filename", [None, "cells/x/metrics.json"])
def test_a_full_disk_stops_the_run_naming_the_file(
    demo_inputs, demo_run, tmp_path, monkeypatch, cli_error, filename
):
    out = tmp_path / "run"
    named = out / "cells" / CELL if filename is None else out / filename

    def full(cfg, progress=True):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, "No space left on device", None if filename is None else str(named))

    monkeypatch.setattr(cells, "evaluate", full)
    recipe = _small_recipe(demo_inputs, demo_run, "full.yaml")
    message = cli_error(["run", recipe, "--out", out], culprit=["No space left on device", str(named)])
    assert "re-run the same command" in message
    assert not (out / "cells" / f"{CELL}.json").exists()  # no cell recorded as failed


def test_the_readme_run_before_the_factor_splits_says_how_to_write_them(tmp_path, monkeypatch, cli_error):
    monkeypatch.chdir(tmp_path)  # a fresh clone before `make demo` step 5
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "features: {simulate: sim.yaml}\nmodels: {t: {model: eszsl}}\n"
        f"splits: [hop1, out/factor-frequency/frequency_1.txt]\nsplits_dir: {REPO / 'splits'}\n"
    )
    message = cli_error(
        ["run", recipe, "--out", tmp_path / "out"],
        culprit=[
            "split file out/factor-frequency/frequency_1.txt not found",
            "imagenet-zsl splits factor configs/default.yaml --factor frequency --bins 3 --size 30 "
            "--out out/factor-frequency",
        ],
    )
    assert ".txt.txt" not in message
