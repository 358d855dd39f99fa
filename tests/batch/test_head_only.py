"""``run`` on test features alone (issue 47 §1): ConSE and the trivial model fit on the backbone's
own head stored with the test features, no seen-class image, with the shipped
``configs/models/conse.yaml`` and ``trivial.yaml``; a recipe that cannot run so is one line naming
the model and the key before any work.

The features are made by hand: two ILSVRC-2012 head classes, tabby (A) and sports car (B), an
identity head (logits = the 2-d features), and two test classes one WordNet hop above them,
domestic cat (X, tabby's hypernym) and car (Y, sports car's). Each X image scores A far above B and
each Y image B above A, so both models put every image's own class first: ConSE's embedding is
(almost) A's GloVe vector, closer to X's (cosine 0.63) than to Y's (0.09), and B's to Y's (0.78
against 0.31); the trivial model sends A's posterior to its nearest test class in the graph."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.batch.runner import run
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.shard_files import encode_head, write_manifest, write_shard
from imagenet_zsl.splits.io import read_wnid_list

REPO = Path(__file__).resolve().parents[2]
TABBY, SPORTS_CAR = "n02123045", "n04285008"  # the head's classes (ILSVRC-2012)
CAT, CAR = "n02121808", "n02958343"  # test classes: domestic cat, car (not ILSVRC-2012 classes)


def _test_features(directory: Path, head: bool = True) -> Path:
    """Two images of each test class; an identity head over (tabby, sports car) when ``head``."""
    directory.mkdir(parents=True)
    features = np.array([[4, 0], [3, 1], [0, 4], [1, 3]], dtype=np.float32)
    labels = np.array([0, 0, 1, 1])
    ids = [f"{[CAT, CAR][c]}/{i}.jpg" for i, c in enumerate(labels)]
    shard = write_shard(directory, "r000-s000000", features, labels, ids)
    manifest = {"classes": [CAT, CAR], "dim": 2, "shards": [shard]}
    if head:
        data = encode_head(BackboneHead(np.eye(2), np.zeros(2), [TABBY, SPORTS_CAR]))
        (directory / HEAD_FILE).write_bytes(data)
        manifest["head"] = {"file": HEAD_FILE, "sha256": sha256_file(directory / HEAD_FILE)}
    write_manifest(directory, manifest)
    return directory


def _recipe(root: Path, models: str, features: str, extra: str = "") -> Path:
    split = root / "cat_car.txt"
    split.write_text(f"{CAT}\n{CAR}\n")
    path = root / "recipe.yaml"
    path.write_text(
        f"features: {features}\nmodels: {models}\nsplits: [{split}]\ngraph: none\n"
        f"label_frequency: false\nplots: false\n{extra}"
    )
    return path


def test_conse_and_trivial_run_on_test_features_alone(tmp_path):
    test = _test_features(tmp_path / "test")
    models = (
        f"{{conse: {REPO / 'configs/models/conse.yaml'}, trivial: {REPO / 'configs/models/trivial.yaml'}}}"
    )
    out = tmp_path / "out"
    result = run(_recipe(tmp_path, models, f"{{test: {test}}}"), out, progress=False, echo=print)
    assert result.failed == [] and result.trained == ["conse", "trivial"]
    for model in ("conse", "trivial"):
        metrics = json.loads((out / "cells" / f"{model}__cat_car" / "metrics.json").read_text())
        assert metrics["zsl"]["images"] == 4
        assert metrics["zsl"]["flat"]["1"] == 1.0  # every image's own class first (see the docstring)
        manifest = json.loads((out / "models" / model / "manifest.json").read_text())
        assert manifest["inputs"]["images"] == 0 and manifest["inputs"]["backbone_head"]["file"] == HEAD_FILE
        assert manifest["inputs"]["seen_classes"] == 2
    # the models' training classes are the head's; the test classes never are
    assert read_wnid_list(out / "classes" / "training.txt") == [TABBY, SPORTS_CAR]
    head_only = json.loads((out / "head-only" / "manifest.json").read_text())
    assert head_only["shards"] == [] and head_only["classes"] == []
    listed = {f["path"] for f in json.loads((out / "manifest.json").read_text())["files"]}
    assert "head-only/manifest.json" in listed


@pytest.mark.parametrize(
    ("models", "extra", "culprit"),
    [
        (
            f"{{conse: {REPO / 'configs/models/conse_select.yaml'}}}",
            "",
            [f"{REPO / 'configs/models/conse_select.yaml'}: select (models.conse)", "test features only"],
        ),
        ("{c: {model: conse, select: {grid: {top: [1, 2]}}}}", "", ["models.c.select"]),
        ("{e: {model: eszsl}}", "", ["model 'e' (eszsl) learns from seen-class images", "models.e)"]),
        ("{h: {model: hascoet_trivial}}", "", ["(hascoet_trivial) learns from seen-class images"]),
        ("{c: {model: conse, params: {classifier: softmax}}}", "", ["classifier: softmax"]),
    ],
    ids=["select-in-config", "select-inline", "eszsl", "hascoet-trivial", "softmax-classifier"],
)
def test_a_model_that_cannot_fit_on_the_head_is_refused_before_any_work(
    tmp_path, cli_error, models, extra, culprit
):
    test = _test_features(tmp_path / "test")
    recipe = _recipe(tmp_path, models, f"{{test: {test}}}", extra)
    out = tmp_path / "out"
    cli_error(["run", recipe, "--out", out], culprit, inputs=[test], not_created=[out])


def test_test_features_without_a_head_or_as_training_features_are_refused(tmp_path, cli_error):
    out = tmp_path / "out"
    bare = _test_features(tmp_path / "bare", head=False)
    recipe = _recipe(tmp_path, "{t: {model: trivial}}", f"{{test: {bare}}}")
    cli_error(["run", recipe, "--out", out], [f"{bare} stores no backbone head", "features.test"])
    test = _test_features(tmp_path / "test")
    recipe = _recipe(tmp_path, "{t: {model: trivial}}", f"{{train: {test}, test: {test}}}")
    cli_error(["run", recipe, "--out", out], ["both the training and the test features", "leave 'train' out"])
    seen = _test_features(tmp_path / "seen")
    recipe = _recipe(tmp_path, "{t: {model: trivial}}", f"{{test: {test}, seen: {seen}}}", "gzsl: true\n")
    culprit = ["default calibration carves", "calibration: false"]
    cli_error(["run", recipe, "--out", out], culprit, not_created=[out])
