"""`imagenet-zsl run`: missing-semantics policy, failure isolation, resumability, recipe mistakes.

(The model cache, a re-run training nothing, is tested in test_demo_recipe.py.)
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagenet_zsl.batch.runner import run
from imagenet_zsl.cli import main
from imagenet_zsl.evaluation.run.calibrate import CarvedCalibration, choose_carved_gamma
from imagenet_zsl.models.trivial import Trivial
from imagenet_zsl.semantics.lemma_vectors import load_class_vectors
from imagenet_zsl.splits.io import read_wnid_list

REPO = Path(__file__).resolve().parents[2]
#: the reduced demo's models on hop1 (conftest)
MODELS = ("trivial", "eszsl", "conse")


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


def _metrics(run: Path, cell: str) -> dict:
    return json.loads((run / "cells" / cell / "metrics.json").read_text())


def _dropped(run: Path) -> list[dict[str, str]]:
    with (run / "classes_dropped.csv").open() as handle:
        return list(csv.DictReader(handle))


def _summary_row(run: Path, model: str, split: str) -> dict[str, str]:
    """A cell's row of summary.csv (every column; summary.md prints the paper table)."""
    with (run / "summary.csv").open() as handle:
        return next(r for r in csv.DictReader(handle) if (r["model"], r["split"]) == (model, split))


def test_drop_scores_every_model_of_a_split_on_the_same_classes(demo_run):
    # hop1 has 3 classes without a GloVe vector (conftest): eszsl and conse cannot score them,
    # trivial can; with `drop` they leave hop1 for all three, so the rows compare
    records = {m: json.loads((demo_run / "cells" / f"{m}__hop1.json").read_text()) for m in MODELS}
    excluded = records["eszsl"]["classes"]["excluded"]
    assert len(excluded) == 3
    for record in records.values():
        assert record["classes"]["in_split"] == 15 and record["classes"]["evaluated"] == 12
        assert record["classes"]["excluded"] == excluded
    table = (demo_run / "summary.md").read_text()
    for model in MODELS:
        row = _summary_row(demo_run, model, "hop1")
        assert row["backbone"].startswith("SIMULATED @") and row["classes"] == "12/15"
        assert row["label space"] == "split−vec 12" and f"| {model} | hop1 | split−vec 12 |" in table
    # the same label space and the same GZSL seen classes in every cell of the split
    spaces = {m: _metrics(demo_run, f"{m}__hop1")["label_space"] for m in MODELS}
    assert {s["classes_in_label_space"] for s in spaces.values()} == {12}
    assert len({s["seen_classes_left_out"]["classes"] for s in spaces.values()}) == 1
    kept = (demo_run / "classes" / "hop1.txt").read_text().split()
    assert len(kept) == 12 and not set(kept) & set(excluded)
    # listed once: one row per (class, set), naming the models that cannot represent it
    rows = _dropped(demo_run)
    hop1 = [r for r in rows if r["set"] == "hop1"]
    assert sorted(r["wnid"] for r in hop1) == sorted(excluded)
    assert {r["models"] for r in hop1} == {"conse;eszsl"}
    assert {r["action"] for r in rows} == {"dropped for every model"}
    seen = {r["wnid"] for r in rows if r["set"] == "seen"}
    assert seen and not seen & set((demo_run / "classes" / "seen.txt").read_text().split())
    assert table.count("missing_semantics: drop:") == 1 and f"{len(rows)} classes" in table


def test_policy_warning_comes_once_per_run(demo_inputs, demo_run, tmp_path, capsys):
    recipe = _fitted_recipe(demo_inputs, demo_run, "once.yaml")
    capsys.readouterr()
    assert main(["run", str(recipe), "--out", str(tmp_path / "once"), "--no-progress"]) == 0
    printed = capsys.readouterr()
    lines = (printed.out + printed.err).splitlines()
    assert len([line for line in lines if "missing_semantics: drop" in line]) == 2  # warning + legend
    assert not [line for line in lines if "have no prototype" in line]  # no per-cell warning


def test_the_demo_calibrates_gzsl_on_carved_seen_classes(demo_run):
    validation = (demo_run / "classes" / "calibration.txt").read_text().split()
    trained_on = (demo_run / "classes" / "seen_training.txt").read_text().split()
    seen = (demo_run / "classes" / "seen.txt").read_text().split()
    dropped = [r for r in _dropped(demo_run) if r["set"] == "calibration"]
    assert len(validation) + len(dropped) == 200  # 20% of the 1000 seen classes, seeded
    # the calibration copies are fitted without the validation classes; the models themselves on
    # every seen class (as in a ZSL run), and the validation classes are GZSL seen classes
    assert len(trained_on) == 800 and not set(validation) & set(trained_on) and set(validation) <= set(seen)
    for model in ("trivial", "eszsl", "conse"):
        final, copy = (
            json.loads((demo_run / d / model / "manifest.json").read_text())["inputs"]["seen_classes"]
            for d in ("models", "calibration")
        )
        # (a class without a vector under a model's semantics is left out of both of its fits)
        assert final == 1000 - {"trivial": 0}.get(model, 14) and copy <= 800 and 190 <= final - copy <= 200
    with (demo_run / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(row["calibrated H"] != "" for row in rows)
    # γ is the one the calibration copy chose, applied as is to the retrained model of every cell
    chosen = json.loads((demo_run / "calibration" / "eszsl.gamma.json").read_text())["chosen"]
    record = json.loads((demo_run / "cells" / "eszsl__benchmark.json").read_text())["calibration"]
    calibration = _metrics(demo_run, "eszsl__benchmark")["gzsl"]["calibration"]
    assert calibration["gamma"] == chosen["gamma"] == record["gamma"]
    assert calibration["chosen_by"]["chosen_with"] == "calibration/eszsl"
    assert calibration["validation_H"] == chosen["validation_H"]
    # the extra fit's seconds are a timing: in timings.json, which no manifest hashes, not in the record
    assert "fit_seconds" not in calibration["chosen_by"] and "fit_seconds" not in record
    timings = json.loads((demo_run / "timings.json").read_text())["fit_seconds"]
    assert timings["calibration/eszsl"] >= 0 and timings["models/eszsl"] >= 0
    assert _metrics(demo_run, "eszsl__hop1")["gzsl"]["calibration"]["gamma"] == chosen["gamma"]
    # chosen with the scores of the copy fitted without the validation classes (Le Cacheux et
    # al.), on the seeded half of the held-out seen images
    setup = CarvedCalibration(
        demo_run / "features" / "seen_test",
        [w for w in seen if w not in set(validation)],
        validation,
        0.5,
        0,
        21,
    )
    assert choose_carved_gamma(demo_run / "calibration" / "eszsl", setup) == chosen
    legend = (demo_run / "summary.md").read_text()
    assert "carved from the 1000 seen classes (20%, seed 0)" in legend
    assert "applied to the retrained one" in legend
    assert "one more fit per model (3 calibration fits;" in legend


def test_count_as_miss_keeps_the_classes_and_counts_their_images_as_misses(demo_inputs, demo_run, tmp_path):
    recipe = _fitted_recipe(demo_inputs, demo_run, "miss.yaml", missing_semantics="count_as_miss")
    out = tmp_path / "miss"
    assert run(recipe, out, progress=False, echo=lambda _: None).failed == []
    eszsl = json.loads((out / "cells" / "eszsl__hop1.json").read_text())["classes"]
    trivial = json.loads((out / "cells" / "trivial__hop1.json").read_text())["classes"]
    assert eszsl["evaluated"] == trivial["evaluated"] == 15
    assert len(eszsl["missed"]) == 3 and trivial["missed"] == []
    metrics = _metrics(out, "eszsl__hop1")
    assert metrics["count_as_miss"]["images"] == 9  # 3 classes x 3 test images, all misses
    assert metrics["zsl"]["images"] == _metrics(out, "trivial__hop1")["zsl"]["images"] == 45
    table = (out / "summary.md").read_text()
    assert _summary_row(out, "eszsl", "hop1")["classes"] == "15/15 +3 missed"
    assert "missing_semantics: count_as_miss" in table
    hop1 = [r for r in _dropped(out) if r["set"] == "hop1"]
    assert len(hop1) == 3 and {r["action"] for r in hop1} == {"counted as miss"}


def test_a_label_space_file_is_the_same_for_every_model(demo_inputs, demo_run, tmp_path):
    vectors = load_class_vectors("glove-6b-50d")
    hop2 = read_wnid_list(REPO / "splits" / "hop2.txt")
    with_vector = [w for w in hop2 if w in vectors][:5]
    without = [w for w in hop2 if w not in vectors][:2]
    space = tmp_path / "space.txt"
    tests = read_wnid_list(demo_inputs.root / "hop1.txt") + read_wnid_list(demo_inputs.root / "benchmark.txt")
    space.write_text("".join(f"{w}\n" for w in [*tests, *with_vector, *without]))
    recipe = _fitted_recipe(demo_inputs, demo_run, "space.yaml", label_space=str(space))
    out = tmp_path / "space"
    assert run(recipe, out, progress=False, echo=lambda _: None).failed == []
    excluded = json.loads((out / "cells" / "eszsl__hop1.json").read_text())["classes"]["excluded"]
    for split in ("hop1", "benchmark"):
        spaces = [_metrics(out, f"{m}__{split}")["label_space"] for m in ("trivial", "eszsl")]
        # 12 kept hop1 + 15 benchmark classes + the 5 distractors every model can score; the 2
        # distractors without a vector and the 3 dropped hop1 classes leave for both models
        assert {space["classes_in_label_space"] for space in spaces} == {32}
        rows = [r for r in _dropped(out) if r["set"] == f"label space of {split}"]
        assert sorted(r["wnid"] for r in rows) == sorted([*without, *excluded])
        assert {r["models"] for r in rows} == {"eszsl"}


def test_a_label_space_file_missing_split_classes_is_refused_before_work(demo_inputs, tmp_path, cli_error):
    space = tmp_path / "space.txt"
    space.write_text(read_wnid_list(demo_inputs.root / "benchmark.txt")[0] + "\n")
    recipe = demo_inputs.write_recipe("short_space.yaml", label_space=str(space))
    out = tmp_path / "out"
    cli_error(["run", recipe, "--out", out], culprit=[str(space), "label_space"], not_created=[out])


def test_missing_semantics_error_is_one_line(demo_inputs, demo_run, tmp_path, cli_error):
    recipe = _fitted_recipe(demo_inputs, demo_run, "strict.yaml", missing_semantics="error")
    out = tmp_path / "strict"
    message = cli_error(["run", recipe, "--out", out], culprit=["missing_semantics", "eszsl"])
    assert "hop1" in message and not (out / "cells").exists()  # before any cell


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
    assert (
        "| trivial | hop1 |" in table and "- trivial on hop1 failed: " in table and "planted failure" in table
    )
    assert _summary_row(out, "trivial", "hop1")["status"].startswith("failed: ")
    assert "| eszsl | hop1 |" in table and _summary_row(out, "eszsl", "hop1")["classes"] == "12/15"
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
        ({"calibration": {"fraction": 1.0}}, "calibration.fraction"),
        ({"gzsl": False, "calibration": {"fraction": 0.3}}, "calibration"),
        ({"label_space": "nowhere.txt"}, "label_space"),
        ({"data_parallel": ["hop9"]}, "data_parallel"),
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


def test_a_model_fitted_on_other_features_is_refused_unless_allowed(
    demo_inputs, demo_run, tmp_path, cli_error
):
    model = tmp_path / "eszsl_other"
    shutil.copytree(demo_run / "models" / "eszsl", model)
    manifest = json.loads((model / "manifest.json").read_text())
    manifest["feature_identity"] = {
        **manifest["feature_identity"],
        "backbone": "resnet50",
        "simulation": None,
    }
    (model / "manifest.json").write_text(json.dumps(manifest))
    recipe = _fitted_recipe(demo_inputs, demo_run, "mismatch.yaml", models={"other": str(model)})
    out = tmp_path / "mismatch"
    cli_error(
        ["run", recipe, "--out", out],
        culprit=["model other", "resnet50", "--allow-feature-mismatch"],
        not_created=[out / "cells"],
    )
    assert main(["run", str(recipe), "--out", str(out), "--no-progress", "--allow-feature-mismatch"]) == 0
    table = (out / "summary.md").read_text()
    backbone = _summary_row(out, "other", "hop1")["backbone"]
    assert backbone.startswith("SIMULATED @") and backbone.endswith(
        "(MISMATCH ALLOWED: model fitted on resnet50)"
    )
    assert "(MISMATCH ALLOWED: model fitted on resnet50)" in table
    assert "FEATURE MISMATCH ALLOWED (--allow-feature-mismatch) in 2 cells" in table
    run_manifest = json.loads((out / "manifest.json").read_text())
    assert run_manifest["parameters"]["allow_feature_mismatch"] is True
    override = run_manifest["cells"][0]["provenance"]["feature_override"]
    assert override["allowed"] and "backbone" in override["differ"]


#: the files of a cell that hold its ZSL results (the test images among the label space)
ZSL_TOPK = ("labels", "rows", "true_above", "true_tied", "unseen.scores", "unseen.ids")


def _zsl_part(out: Path, cell: str) -> tuple[dict, dict[str, bytes]]:
    """A cell's ZSL blocks of metrics.json (the run's directory named OUT in its paths) and the
    bytes of its ZSL top-k files."""
    metrics = json.loads((out / "cells" / cell / "metrics.json").read_text().replace(str(out), "OUT"))
    blocks = {k: v for k, v in metrics.items() if k in ("label_space", "count_as_miss", "zsl", "hierarchy")}
    cell = out / "cells" / cell
    files = {name: (cell / "topk" / f"test.{name}.npy").read_bytes() for name in ZSL_TOPK}
    return blocks, files


@pytest.mark.parametrize("label_space", ["split", "all"])
def test_gzsl_leaves_the_zsl_numbers_byte_identical(demo_inputs, tmp_path, label_space):
    # #33 §1: with gzsl the models are still fitted on every seen class (a calibration copy
    # chooses γ), so every ZSL block and top-k file is the bytes of the ZSL-only run
    models = {k: v for k, v in demo_inputs.data["models"].items() if k in ("trivial", "eszsl")}
    models["trivial"] = {**models["trivial"], "splits": ["hop1"]}
    outs = {}
    for gzsl in (False, True):
        recipe = demo_inputs.write_recipe(
            f"gzsl_{gzsl}_{label_space}.yaml",
            models=models,
            splits=["hop1"],
            gzsl=gzsl,
            label_space=label_space,
            plots=False,
        )
        outs[gzsl] = tmp_path / f"gzsl_{gzsl}"
        assert run(recipe, outs[gzsl], progress=False, echo=lambda _: None).failed == []
    for cell in ("trivial__hop1", "eszsl__hop1"):
        off, on = (_zsl_part(outs[g], cell) for g in (False, True))
        assert off[0] == on[0]
        assert off[1] == on[1]
        metrics = _metrics(outs[True], cell)
        assert (
            metrics["gzsl"]["calibration"]["chosen_by"]["chosen_with"] == f"calibration/{cell.split('__')[0]}"
        )
    if label_space == "all":
        # the 'All' protocol, with and without GZSL: every ImageNet-21K class less the 1,000
        # ILSVRC-2012 classes (the training classes), 20,842; the distractors some model has no
        # GloVe vector for then leave it for every model (listed)
        for out in outs.values():
            kept = read_wnid_list(out / "classes" / "label_space.hop1.txt")
            gone = [r for r in _dropped(out) if r["set"] == "label space of hop1"]
            assert len(kept) + len(gone) == 20_842
            assert not set(kept) & set(read_wnid_list(out / "classes" / "training.txt"))
    # the models of both runs are the same bytes (one fit on every seen class)
    for model in ("trivial", "eszsl"):
        assert (outs[False] / "models" / model / "weights.npz").read_bytes() == (
            outs[True] / "models" / model / "weights.npz"
        ).read_bytes()
