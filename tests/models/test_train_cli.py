"""``imagenet-zsl train`` and ``imagenet-zsl models`` end to end on a small feature directory."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, MODEL_SEMANTICS_KEY
from imagenet_zsl.features.shard_files import write_manifest, write_shard
from imagenet_zsl.models.base import MODELS
from imagenet_zsl.models.persistence import load_model
from imagenet_zsl.models.training import load_seen_data
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import Problem


@pytest.fixture()
def workspace(tmp_path):
    problem = Problem(groups=4, leaves=6)
    features, labels = problem.draw(problem.seen)
    feature_dir = tmp_path / "features"
    feature_dir.mkdir()
    ids = [f"{problem.seen[c]}/{i}" for i, c in enumerate(labels)]
    half = len(labels) // 2
    shards = [
        write_shard(feature_dir, "r000-s000000", features[:half], labels[:half], ids[:half]),
        write_shard(feature_dir, "r000-s000001", features[half:], labels[half:], ids[half:]),
    ]
    write_manifest(feature_dir, {"classes": problem.seen, "dim": features.shape[1], "shards": shards})
    # one seen class lacks a vector: it must be reported, not silently kept or zero-filled
    keep = [w for w in problem.wnids if w != problem.seen[0]]
    ClassVectors(keep, problem.semantics.get(keep), missing=[problem.seen[0]], source="test").save(
        tmp_path / "vectors.npz"
    )
    return problem, tmp_path


def test_train_with_selection_writes_a_loadable_model(workspace, capsys):
    problem, root = workspace
    config = root / "eszsl.yaml"
    config.write_text(
        "model: eszsl\nparams: {features: standard}\n"
        f"semantics: {root / 'vectors.npz'}\n"
        "select: {grid: {gamma: [0.1, 10.0], lam: [1.0]}, val_fraction: 0.25, seed: 0}\n"
    )
    code = main(
        [
            "train",
            "--config",
            str(config),
            "--features",
            str(root / "features"),
            "--out",
            str(root / "model"),
            "--set",
            "semantic_norm=l2",
        ]
    )
    assert code == 0
    assert "saved eszsl" in capsys.readouterr().out
    manifest = json.loads((root / "model" / "manifest.json").read_text())
    assert manifest["inputs"]["seen_classes_without_vector"] == [problem.seen[0]]
    assert manifest["inputs"]["seen_classes"] == len(problem.seen) - 1
    selection = manifest["selection"]
    assert len(selection["grid"]) == 2 and problem.seen[0] not in selection["val_classes"]
    assert manifest["params"]["gamma"] == selection["best_params"]["gamma"]
    model = load_model(root / "model")
    features, labels = problem.draw(problem.unseen)
    scores = model.embed_images(features) @ model.class_prototypes(problem.unseen).T
    assert np.mean(scores.argmax(axis=1) == labels) > 0.5  # chance: 1/4


def test_bad_configs_exit_with_one_clear_line(workspace, capsys):
    _, root = workspace
    config = root / "bad.yaml"
    config.write_text("model: eszsl\nparms: {}\n")
    assert (
        main(
            ["train", "--config", str(config), "--features", str(root / "features"), "--out", str(root / "m")]
        )
        == 2
    )
    assert "unknown key 'parms'" in capsys.readouterr().err  # with "did you mean 'params'?"
    config.write_text("model: eszsl\nparams: {gamma: -3}\n")
    assert (
        main(
            ["train", "--config", str(config), "--features", str(root / "features"), "--out", str(root / "m")]
        )
        == 2
    )
    assert "params.gamma = -3): Input should be greater than or equal to 0" in capsys.readouterr().err
    assert not (root / "m").exists()


def test_models_command_lists_names_and_hyperparameters(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("trivial", "conse", "eszsl", "sgcn", "dgp", "gcnz"):
        assert f"\n{name} " in "\n" + out
    assert "grid:" in out
    # each hyper-parameter with its type, range or choices, and default
    assert re.search(r"\n +gamma +float >= 0 +default 1\.0\n", out)
    assert re.search(r"\n +direction +choice v2s \| s2v +default 'v2s'\n", out)
    assert re.search(r"\n +dropout +float >= 0, < 1 +default 0\.5\n", out)
    assert re.search(r"\n +device +device cpu \| cuda \| cuda:N \| auto +default 'cpu'\n", out)
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["conse"]["defaults"]["top"] == 10
    assert listed["conse"]["params"]["top"] == {"type": "int", "range": ">= 1", "default": 10}
    assert listed["sae"]["params"]["direction"]["range"] == "v2s | s2v"
    assert listed["gcnz"]["params"]["dropout_layers"] == {"type": "all | int >= 0", "range": "", "default": 2}


def test_train_killed_with_sigkill_leaves_nothing_and_resumes_to_the_same_bytes(workspace, tmp_path):
    """kill -9 a real `imagenet-zsl train` process mid-run: no --out appears (only a temp sibling
    may), and the rerun removes leftovers and writes the bytes of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    _, root = workspace
    config = root / "devise.yaml"
    config.write_text(
        f"model: devise\nparams: {{epochs: 120, batch_size: 16}}\nsemantics: {root / 'vectors.npz'}\n"
    )
    argv = ["train", "--config", str(config), "--features", str(root / "features")]
    assert main([*argv, "--out", str(root / "whole")]) == 0
    killed = root / "killed"
    repo = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "imagenet_zsl.cli", *argv, "--out", str(killed)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # killed while it works: the warning about the class without a vector is logged once the data
    # are loaded, seconds before the model's imports and 3,000 steps end (a fixed 5 s sleep came
    # after the end on a fast machine); a kill while writing is the leftover planted below
    for line in process.stderr:
        if "left out of training" in line:
            break
    time.sleep(0.5)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not killed.exists()
    (root / ".killed.leftover.tmp").mkdir()  # as if killed while writing
    assert main([*argv, "--out", str(killed)]) == 0
    assert not list(root.glob(".killed.*.tmp"))
    for name in ("config.json", "state.json", "weights.npz"):
        assert (killed / name).read_bytes() == (root / "whole" / name).read_bytes()


def test_only_models_with_a_seen_classifier_get_the_training_logits(tmp_path):
    """#16 memory: the N x 1000 training logits are loaded only for models that read them. The
    flag must agree with the models' parameters: a model with a seen classifier (``classifier``
    hyper-parameter) that were not flagged would silently train a softmax instead of using the
    backbone's head."""
    flagged = {name for name in MODELS.names() if MODELS.get(name).uses_training_logits}
    with_classifier = {name for name in MODELS.names() if "classifier" in MODELS.get(name).defaults}
    assert flagged == with_classifier
    assert {"conse", "trivial", "gcnz", "sgcn", "dgp"} <= flagged and "eszsl" not in flagged

    rng = np.random.default_rng(0)
    features, labels = rng.normal(size=(6, 4)).astype(np.float32), np.array([0, 0, 1, 1, 2, 2])
    logits = rng.normal(size=(6, 3)).astype(np.float32)
    shard = write_shard(tmp_path, "r000-s000000", features, labels, [str(i) for i in range(6)], logits)
    seen = ["n00000001", "n00000002", "n00000003"]
    write_manifest(tmp_path, {"classes": seen, "dim": 4, "shards": [shard], "logits": {"classes": seen}})
    full = load_seen_data(tmp_path)
    light = load_seen_data(tmp_path, with_logits=False)
    np.testing.assert_allclose(full.logits, logits, atol=1e-3)
    assert light.logits is None
    np.testing.assert_array_equal(light.features, full.features)
    np.testing.assert_array_equal(light.labels, full.labels)


def test_the_model_records_the_identity_of_its_features_and_class_vectors(workspace):
    """Issue 23 §1: `train` stores which features (backbone, weights, preprocessing, layer, dim)
    and which class vectors (source, file sha256) the model was fitted on."""
    _, root = workspace
    manifest_path = root / "features" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["backbone"] = {"name": "tf_efficientnet_lite0", "weights": {"sha256": "ab" * 32}}
    manifest["preprocessing"] = {"resize": 256, "crop": 224}
    manifest_path.write_text(json.dumps(manifest))
    config = root / "ridge.yaml"
    config.write_text(f"model: ridge\nsemantics: {root / 'vectors.npz'}\n")
    assert (
        main(
            ["train", "--config", str(config), "--features", str(root / "features"), "--out", str(root / "m")]
        )
        == 0
    )
    saved = json.loads((root / "m" / "manifest.json").read_text())
    identity = saved[MODEL_FEATURES_KEY]
    assert identity == FeatureDir(root / "features").identity
    assert identity["backbone"] == "tf_efficientnet_lite0" and identity["weights_sha256"] == "ab" * 32
    assert identity["dim"] == manifest["dim"]
    semantics = saved[MODEL_SEMANTICS_KEY]
    assert semantics["sha256"] == hashlib.sha256((root / "vectors.npz").read_bytes()).hexdigest()
    assert semantics["source"] == "test" and semantics["file"] == "vectors.npz"
    # a model without class vectors records none
    config.write_text("model: hascoet_trivial\ngraph: " + str(_edge_file(root)) + "\n")
    assert (
        main(
            ["train", "--config", str(config), "--features", str(root / "features"), "--out", str(root / "t")]
        )
        == 0
    )
    saved = json.loads((root / "t" / "manifest.json").read_text())
    assert saved[MODEL_SEMANTICS_KEY] is None and saved[MODEL_FEATURES_KEY] == identity


def _edge_file(root):
    problem = Problem(groups=4, leaves=6)
    path = root / "graph.tsv"
    path.write_text("".join(f"{p}\t{c}\n" for c in problem.wnids for p in problem.graph.parents(c)))
    return path
