"""`imagenet-zsl run` gives the same bytes for the same recipe and leaves nothing behind (issue 44
§4): two uninterrupted runs write byte-identical directories but for ``timings.json`` (the one
file of timings, which the manifest does not hash), and the lock ``.OUT.lock`` beside ``--out``
is gone after a run that succeeded and after one that failed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from imagenet_zsl.batch import plan as plan_module
from imagenet_zsl.batch.plan import run_lock
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import TIMINGS_NAME, read_manifest_verified
from tests.batch.conftest import demo_inputs

#: the reduced demo's inputs (tests/batch/conftest.py), shared with this module
SHARED_FIXTURES = (demo_inputs,)

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _run(recipe: Path, out: Path) -> int:
    return main(["run", str(recipe), "--out", str(out), "--no-progress"])


def test_two_runs_of_one_recipe_give_the_same_bytes(demo_inputs, tmp_path):
    # one trained model with its carved GZSL calibration copy: every file that held a fit's
    # seconds (cells/*.json, models|calibration/*.key.json, the manifest) is written
    recipe = demo_inputs.write_recipe(
        "same_bytes.yaml",
        models={"eszsl": {"model": "eszsl", "params": {"gamma": 1.0, "lam": 1.0}}},
        splits=["benchmark"],
        graph="none",
        plots=False,
    )
    out = tmp_path / "run"
    assert _run(recipe, out) == 0
    out.rename(tmp_path / "first")  # the same --out path: paths are recorded, as inputs are
    assert _run(recipe, out) == 0
    first, second = _files(tmp_path / "first"), _files(out)
    assert {"calibration/eszsl.key.json", "models/eszsl.key.json", "cells/eszsl__benchmark.json"} <= set(
        first
    )
    assert set(first) == set(second)
    assert [name for name in first if first[name] != second[name]] == [TIMINGS_NAME]
    # the seconds are in timings.json, and nowhere a manifest hashes
    timings = json.loads(second[TIMINGS_NAME])["fit_seconds"]
    assert set(timings) == {"models/eszsl", "calibration/eszsl"} and min(timings.values()) >= 0
    manifest = read_manifest_verified(out, "imagenet-zsl/run-v2")
    assert TIMINGS_NAME not in {record["path"] for record in manifest["files"]}
    assert all(b"fit_seconds" not in data for name, data in second.items() if name != TIMINGS_NAME)
    # no lock left beside --out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "run"]


def test_a_failed_run_leaves_no_lock(demo_inputs, tmp_path):
    # trivial needs the class graph: its training fails, the run reports it and exits 1
    recipe = demo_inputs.write_recipe(
        "failing.yaml",
        models={"trivial": {"config": str(REPO / "configs/models/trivial.yaml"), "graph": "none"}},
        splits=["benchmark"],
        graph="none",
        plots=False,
        gzsl=False,
    )
    assert _run(recipe, tmp_path / "run") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_the_lock_goes_after_an_error_inside_the_run(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(UserInputError), run_lock(out) as path:
        assert path.is_file()
        raise UserInputError("a recipe mistake found after the lock was taken")
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_a_lock_file_removed_before_it_was_locked_is_not_the_lock(tmp_path, monkeypatch):
    # the race of removing a lock file: this process opens .run.lock, the run holding it ends
    # (removes it, unlocks it), then this process locks the removed file: it must not count as
    # the lock, or a third run could take the name's new file at the same time
    path = tmp_path / ".run.lock"
    path.write_bytes(b"")
    opened: list[int] = []
    real_open = os.open

    def open_then_lose_the_name(name, flags, mode=0o777):
        fd = real_open(name, flags, mode)
        if not opened:
            os.unlink(name)  # the previous holder removes it between our open and our flock
        opened.append(fd)
        return fd

    monkeypatch.setattr(plan_module.os, "open", open_then_lose_the_name)
    with run_lock(tmp_path / "run") as held:
        assert len(opened) == 2  # the removed file was let go and the name opened again
        assert os.path.samestat(os.fstat(opened[1]), os.stat(held))
    assert not path.exists()
