"""CI guard of `make demo`: the demo recipe validates, and its reduced version runs end to end
through the command line, with the demo's analyses (factor analysis, correction ladder, leakage);
a re-run skips every cell and leaves every byte as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from imagenet_zsl.batch.recipe import check_model_splits, load_recipe, model_specs
from imagenet_zsl.cli import main
from imagenet_zsl.features.simulate import load_simulation_config
from imagenet_zsl.manifests import read_manifest_verified

REPO = Path(__file__).resolve().parents[2]
#: the factor splits that `make demo` writes before the run (configs/demo.yaml reads them)
FACTOR_SPLITS = "out/factor-frequency"


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_demo_recipe_itself_is_valid(monkeypatch):
    monkeypatch.chdir(REPO)
    recipe = load_recipe("configs/demo.yaml")
    specs = {spec.name: spec for spec in model_specs(recipe, "configs/demo.yaml")}
    assert {"trivial", "hascoet_trivial", "conse", "eszsl", "sae", "devise", "sgcn"} <= set(specs)
    committed = [s for s in recipe.splits if not s.startswith(FACTOR_SPLITS)]
    factor = [Path(s) for s in recipe.splits if s.startswith(FACTOR_SPLITS)]
    assert committed == ["hop1", "hop2", "hop3", "mp500", "benchmark"]
    assert all((REPO / "splits" / f"{name}.txt").is_file() for name in committed)
    assert [p.stem for p in factor] == ["frequency_1", "frequency_2", "frequency_3"]
    names = {name: Path(f"{name}.txt") for name in committed} | {p.stem: p for p in factor}
    check_model_splits(list(specs.values()), names, "configs/demo.yaml")
    for spec in specs.values():  # every model on the four splits of issue 12, the trivial ones on hop3
        assert {"hop1", "hop2", "mp500", "benchmark"} <= set(spec.splits or names)
    assert "hop3" in specs["trivial"].splits and "hop3" in specs["hascoet_trivial"].splits
    assert recipe.gzsl
    simulation = load_simulation_config(recipe.features.simulate)
    assert {f"{FACTOR_SPLITS}/{p.name}" for p in factor} <= set(simulation.test.classes)


def test_reduced_demo_runs_and_writes_the_table(demo_run):
    # the run's manifest vouches for every file under the run: the summary, records, cells, models
    manifest = read_manifest_verified(demo_run, "imagenet-zsl/run-v2")
    assert manifest["tool"] == "imagenet-zsl run"
    listed = {record["path"] for record in manifest["files"]}
    assert {"summary.md", "classes_dropped.csv", "cells/eszsl__hop1.json"} <= listed
    assert {"cells/eszsl__hop1/metrics.json", "models/trivial/manifest.json"} <= listed
    assert [c["status"] for c in manifest["cells"]] == ["ok"] * 10
    table = (demo_run / "summary.md").read_text()
    for name in ("trivial", "eszsl", "conse", "hop1", "benchmark", "hit@20", "hit@1 [95% CI]", "GZSL H"):
        assert name in table  # the paper table
    header = (demo_run / "summary.csv").read_text().splitlines()[0]
    assert "strict hit@1" in header and "strict GZSL H" in header and "validation H" in header  # every column
    assert header.endswith(",n.s. vs,seen in pretraining,status")
    assert "| seen in pretraining |" not in table
    assert "| conse | frequency_1 |" not in table  # a model's own `splits`
    assert (demo_run / "summary.csv").exists() and (demo_run / "summary.tex").exists()
    assert (demo_run / "hit_at_k.png").stat().st_size > 1000
    for cell in ("trivial__hop1", "eszsl__benchmark", "trivial__frequency_2"):
        run_manifest = json.loads((demo_run / "cells" / cell / "manifest.json").read_text())
        assert run_manifest["tool"] == "imagenet-zsl evaluate"  # exactly what `evaluate` writes
        assert (demo_run / "cells" / cell / "metrics.json").exists()


def test_rerun_skips_every_cell_with_the_same_bytes(demo_inputs, demo_run, capsys):
    before = _hashes(demo_run)
    capsys.readouterr()
    assert main(["run", str(demo_inputs.recipe), "--out", str(demo_run), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trained 0 models; evaluated 0 cells, skipped 10 finished, 0 failed" in out
    assert f"table, records and cells in {demo_run.resolve()}" in out  # -v lists every file
    assert _hashes(demo_run) == before  # models not trained again: their bytes and keys unchanged


def test_demo_factor_analysis_of_the_run(demo_inputs, demo_run, tmp_path, capsys):
    out = tmp_path / "factor"
    splits = demo_inputs.root / "factor-frequency"  # cells with dropped classes read a copy elsewhere
    capsys.readouterr()
    argv = ["analyze", "factor", str(demo_run), "--splits", str(splits), "--out", str(out)]
    assert main([*argv, "--resamples", "50"]) == 0
    printed = capsys.readouterr().out
    assert "frequency" in printed and "trivial" in printed and "eszsl" in printed
    assert "conse" not in printed  # not evaluated on the factor splits
    assert (out / "factor.png").is_file()


def test_demo_ladder_of_a_cell(demo_run, tmp_path, capsys):
    out = tmp_path / "ladder"
    capsys.readouterr()
    assert main(["analyze", "ladder", str(demo_run / "cells" / "eszsl__hop1"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| evaluated |" in printed and "rare_labels" in printed
    assert (out / "ladder.md").is_file()


def test_demo_leakage_of_a_committed_split(capsys):
    capsys.readouterr()
    assert main(["splits", "leakage", str(REPO / "splits" / "mp500.txt"), "--pretraining", "in12k"]) == 0
    assert "mp500.txt: 500/500 test classes (100.0%)" in capsys.readouterr().out


def test_every_directory_the_demo_writes_verifies_with_the_one_reader(demo_inputs, demo_run):
    """Each manifest under the demo's outputs (run, cells, models, simulated features, factor
    splits) comes from manifests.write_manifest: a versioned format, the standard keys, and every file
    it lists still matching."""
    from imagenet_zsl.manifests import FORMAT_PATTERN, MANIFEST_KEYS

    manifests = sorted({*demo_run.rglob("manifest.json"), *demo_inputs.root.rglob("manifest.json")})
    formats = set()
    for path in manifests:
        manifest = json.loads(path.read_text())
        assert FORMAT_PATTERN.match(manifest["format"]), path
        assert set(MANIFEST_KEYS) <= set(manifest), path
        read_manifest_verified(path.parent, manifest["format"])
        formats.add(manifest["format"].rsplit("-v", 1)[0])
    assert {
        "imagenet-zsl/run",
        "imagenet-zsl/evaluation",
        "imagenet-zsl/model",
        "imagenet-zsl/features",
        "imagenet-zsl/factor-splits",
    } <= formats, formats
