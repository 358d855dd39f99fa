"""Chao et al.'s upper bound (all classes supervised) on generated res101.mat of the real aPY layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.attributes.dataset import load_dataset, packaged_dir
from imagenet_zsl.attributes.outputs import load_results
from imagenet_zsl.attributes.synthetic import save_res101, synthetic_labels
from imagenet_zsl.attributes.table import render
from imagenet_zsl.attributes.upper_bound import (
    UPPER_BOUND_LABEL,
    UpperBoundConfig,
    split_images,
    upper_bound,
    upper_bound_to_directory,
)
from imagenet_zsl.attributes.xlsa17 import Res101, load_att_splits, read_class_lists
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError


def _separable_root(root: Path, name: str = "APY") -> Path:
    """Real class layout; feature of an image = 10 × one-hot of its class + small noise: a linear
    classifier that saw every class is right on every image, a hand-checkable 1.0."""
    folder = packaged_dir(name)
    split = load_att_splits(folder / "att_splits.mat")
    labels = synthetic_labels(split, read_class_lists(folder, split.class_names), seed=0)
    rng = np.random.default_rng(0)
    noise = 0.1 * rng.standard_normal((labels.size, split.num_classes))
    features = 10.0 * np.eye(split.num_classes)[labels] + noise
    save_res101(root / name / "res101.mat", Res101(features=features.astype(np.float32), labels=labels))
    return root


@pytest.fixture(scope="module")
def separable(tmp_path_factory):
    return load_dataset("APY", _separable_root(tmp_path_factory.mktemp("separable")))


def test_perfectly_separable_classes_reach_one(separable):
    results = upper_bound(separable, UpperBoundConfig("APY"))
    assert results["model"] == UPPER_BOUND_LABEL
    assert results["zsl"]["top1_per_class"] == 1.0 and results["zsl"]["top1_flat"] == 1.0
    gz = results["gzsl"]
    assert (gz["seen"], gz["unseen"], gz["H"]) == (1.0, 1.0, 1.0)
    assert gz["ausuc"] == pytest.approx(1.0, abs=1e-12)  # area under a curve: trapezoid rounding
    assert gz["H_cs"] == gz["H"] and gz["gamma"] == 0.0  # no calibration: all classes were trained


def test_unseen_images_split_between_training_and_testing(separable):
    task = separable.task("ps")
    parts = split_images(separable, task, seed=0)
    labels = separable.images.labels
    assert not set(parts.train.tolist()) & set(parts.test_unseen.tolist())
    assert set(task.train.tolist()) <= set(parts.train.tolist())
    np.testing.assert_array_equal(parts.test_seen, task.test_seen)
    train_unseen = np.setdiff1d(parts.train, task.train)
    np.testing.assert_array_equal(np.union1d(train_unseen, parts.test_unseen), task.test_unseen)
    # every unseen class trains and tests; about the dataset's seen-test share is held out
    for c in task.unseen:
        assert (labels[train_unseen] == c).any() and (labels[parts.test_unseen] == c).any()
    share = parts.test_unseen.size / task.test_unseen.size
    assert share == pytest.approx(separable.seen_test_fraction(), abs=0.01)
    other = split_images(separable, task, seed=1)
    assert not np.array_equal(other.test_unseen, parts.test_unseen)


def test_same_seed_same_bytes_and_a_table_row(tmp_path, apy_root, capsys):
    ds = load_dataset("APY", apy_root)
    first = upper_bound_to_directory(ds, UpperBoundConfig("APY"), tmp_path / "a" / "ub")
    upper_bound_to_directory(ds, UpperBoundConfig("APY"), tmp_path / "b" / "ub")
    assert (tmp_path / "a/ub/results.json").read_bytes() == (tmp_path / "b/ub/results.json").read_bytes()
    manifest = json.loads((tmp_path / "a/ub/manifest.json").read_text())
    assert manifest["tool"] == "imagenet-zsl attributes upper-bound"
    assert manifest["format"] == "imagenet-zsl/attribute-upper-bound-v1"
    assert [record["path"] for record in manifest["files"]] == ["results.json"]
    assert 0.5 < first["zsl"]["top1_per_class"] <= 1.0 and first["gzsl"]["H"] > 0.5

    # the CLI writes the same run; `attributes table` shows the row, outside the ranking matrices
    common = ["--dataset", "APY", "--root", str(apy_root)]
    assert main(["attributes", "upper-bound", *common, "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli/results.json").read_bytes() == (tmp_path / "a/ub/results.json").read_bytes()
    ridge = ["--model", "ridge", "--grid", "alpha=1.0", "--out", str(tmp_path / "ridge")]
    assert main(["attributes", "run", *common, *ridge]) == 0
    capsys.readouterr()
    text, tables = render(load_results([tmp_path / "cli", tmp_path / "ridge"]))
    assert UPPER_BOUND_LABEL in tables["zsl"].index and UPPER_BOUND_LABEL in tables["gzsl"].index
    assert list(tables["ranking_zsl"].index) == ["ridge"]
    assert tables["zsl"].loc[UPPER_BOUND_LABEL, "APY PS"] > tables["zsl"].loc["ridge", "APY PS"]


def test_bad_regularisation_is_a_user_error(separable, tmp_path):
    with pytest.raises(UserInputError, match="--reg"):
        upper_bound_to_directory(separable, UpperBoundConfig("APY", reg=-1.0), tmp_path / "out")
    assert not (tmp_path / "out").exists()
