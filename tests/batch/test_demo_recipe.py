"""CI guard of `make demo`: the demo recipe validates, and its reduced version runs end to end
through the command line; a re-run skips every cell and leaves every byte as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from imagenet_zsl.batch.recipe import load_recipe, model_specs, split_paths
from imagenet_zsl.cli import main
from imagenet_zsl.features.simulate import load_simulation_config

REPO = Path(__file__).resolve().parents[2]


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_demo_recipe_itself_is_valid(monkeypatch):
    monkeypatch.chdir(REPO)
    recipe = load_recipe("configs/demo.yaml")
    names = [spec.name for spec in model_specs(recipe, "configs/demo.yaml")]
    assert {"trivial", "conse", "eszsl", "sae", "devise", "sgcn"} <= set(names)
    assert set(split_paths(recipe, "configs/demo.yaml")) == {"hop1", "hop2", "mp500", "benchmark"}
    assert recipe.gzsl
    load_simulation_config(recipe.features.simulate)


def test_reduced_demo_runs_and_writes_the_table(demo_run):
    manifest = json.loads((demo_run / "manifest.json").read_text())
    assert manifest["format"] == "imagenet-zsl/run-v1" and manifest["tool"] == "imagenet-zsl run"
    assert [c["status"] for c in manifest["cells"]] == ["ok"] * 6
    table = (demo_run / "summary.md").read_text()
    for name in ("trivial", "eszsl", "conse", "hop1", "benchmark", "hit@20", "strict hit@1", "GZSL H"):
        assert name in table
    assert (demo_run / "summary.csv").exists() and (demo_run / "summary.tex").exists()
    assert (demo_run / "hit_at_k.png").stat().st_size > 1000
    for cell in ("trivial__hop1", "eszsl__benchmark"):
        run_manifest = json.loads((demo_run / "cells" / cell / "manifest.json").read_text())
        assert run_manifest["tool"] == "imagenet-zsl evaluate"  # exactly what `evaluate` writes
        assert (demo_run / "cells" / cell / "metrics.json").exists()


def test_rerun_skips_every_cell_with_the_same_bytes(demo_inputs, demo_run, capsys):
    before = _hashes(demo_run)
    capsys.readouterr()
    assert main(["run", str(demo_inputs.recipe), "--out", str(demo_run), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trained 0 models; evaluated 0 cells, skipped 6 finished, 0 failed" in out
    assert "files written:" in out and "summary.md" in out
    assert _hashes(demo_run) == before  # models not trained again: their bytes and keys unchanged
