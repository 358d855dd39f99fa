"""Issue 15's completeness check: ``attributes run`` runs every registered model through the full
GBU protocol on generated ``res101.mat`` data with the real aPY class structure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.models.base import MODELS

#: hyper-parameters that bound a model's training time, set tiny (the check is "runs end to end",
#: not "converges"; each model's own tests check what it learns)
TINY = {"epochs": 2, "max_iter": 3, "classifier_iter": 3, "batch_size": 256}


def _cases() -> list:
    cases = []
    for name, cls in MODELS.items():
        marks = []
        if getattr(cls, "needs_graph", False):
            reason = f"{name} needs a class graph; attribute datasets have none (fit raises UserInputError)"
            marks.append(pytest.mark.skip(reason=reason))
        elif not getattr(cls, "learns_from_images", True):
            reason = f"{name} learns nothing: its class vectors must live in the image space, not attributes"
            marks.append(pytest.mark.skip(reason=reason))
        cases.append(pytest.param(name, marks=marks, id=name))
    return cases


def test_every_model_is_covered():
    assert len(MODELS.names()) >= 19


@pytest.mark.parametrize("name", _cases())
def test_attributes_run_runs_every_model(name, tmp_path, apy_root, capsys):
    cls = MODELS.get(name)
    params = [f"--param={key}={value}" for key, value in TINY.items() if key in cls.defaults]
    out = tmp_path / name
    argv = ["attributes", "run", "--dataset", "APY", "--root", str(apy_root), "--model", name]
    assert main([*argv, *params, "--grid", f"{_first_grid_key(cls)}", "--out", str(out)]) == 0, (
        capsys.readouterr()
    )
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == name and 0 <= results["zsl"]["top1_per_class"] <= 1
    gz = results["gzsl"]
    assert all(np.isfinite(gz[k]) for k in ("seen", "unseen", "H", "H_cs", "ausuc"))
    assert (out / "model" / "manifest.json").is_file()


def _first_grid_key(cls: type) -> str:
    """One grid point only: the first grid value of the model's first grid key (or its default)."""
    grid = getattr(cls, "grid", {}) or {}
    for key in sorted(grid):
        if key not in TINY:
            return f"{key}={grid[key][0]}"
    key = sorted(
        k for k in cls.defaults if k not in TINY and isinstance(cls.defaults[k], bool | int | float | str)
    )[0]
    return f"{key}={cls.defaults[key]}"


def test_a_model_that_learns_nothing_is_a_user_error_on_attributes(tmp_path, apy_root, capsys):
    """vlm_zero_shot compares image features with class vectors directly: on res101 features and
    attribute vectors that is one error line, not a number."""
    if "vlm_zero_shot" not in MODELS.names():
        pytest.skip("no vlm_zero_shot in this registry")
    argv = ["attributes", "run", "--dataset", "APY", "--root", str(apy_root), "--model", "vlm_zero_shot"]
    assert main([*argv, "--out", str(tmp_path / "vlm")]) == 2
    assert "vlm_zero_shot" in capsys.readouterr().err and not (tmp_path / "vlm").exists()
