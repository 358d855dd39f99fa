"""Values of a ``run`` recipe (and of ``evaluate``'s flags) that parse but cannot mean anything
(#35 §2): each is one ``error:`` line naming the file and key, exit 2, before any work; and a
legal extreme (``--block-rows 1``) gives the default's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from imagenet_zsl.splits.io import read_wnid_list
from tests.batch.conftest import DemoInputs
from tests.evaluation.evaluation_fixtures import write_feature_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_inputs(tmp_path_factory: pytest.TempPathFactory) -> DemoInputs:
    """A tiny simulation (1,000 training classes, 15 hop-1 test classes) and a recipe on it."""
    root = tmp_path_factory.mktemp("values")
    hop1 = read_wnid_list(REPO / "splits" / "hop1.txt")[:15]
    (root / "hop1.txt").write_text("".join(f"{w}\n" for w in hop1))
    sim = yaml.safe_load((REPO / "configs" / "demo-simulate.yaml").read_text())
    sim.update(
        dim=8, train={"classes": ["training"], "images_per_class": 1}, seen_test={"images_per_class": 1}
    )
    sim.update(test={"classes": [str(root / "hop1.txt")], "images_per_class": 2})
    (root / "sim.yaml").write_text(yaml.safe_dump(sim))
    data = {
        "features": {"simulate": str(root / "sim.yaml")},
        "splits_dir": str(root),
        "semantics": "glove-6b-50d",
    }
    return DemoInputs(root, root / "recipe.yaml", data)


def _recipe(inputs: DemoInputs, name: str, **changes: object) -> Path:
    """The reduced demo with one cheap model on hop1, with top-level keys changed."""
    models = {"t": {"model": "trivial"}}
    base = {"models": models, "splits": ["hop1"], "plots": False, "graph": "none", "label_frequency": False}
    return inputs.write_recipe(name, **{**base, **changes})


def _argv(recipe: Path, out: Path) -> list[str]:
    return ["run", str(recipe), "--out", str(out), "--no-progress"]


def test_a_gamma_that_underflows_to_zero_is_refused(demo_inputs, tmp_path, cli_error):
    recipe = _recipe(demo_inputs, "tiny_gamma.yaml")
    recipe.write_text(
        recipe.read_text().replace("model: trivial", "model: eszsl\n    params: {gamma: 1.0e-400}")
    )
    cli_error(_argv(recipe, tmp_path / "out"), [str(recipe), "1.0e-400", "it would become 0"], [recipe])


def test_a_calibration_fraction_holding_no_class_is_refused(demo_inputs, tmp_path, cli_error):
    # 0.0001 of the 1,000 seen classes rounds to none (it used to be raised to one class silently)
    recipe = _recipe(demo_inputs, "tiny_fraction.yaml", gzsl=True, calibration={"fraction": 0.0001})
    out = tmp_path / "out"
    cli_error(_argv(recipe, out), [str(recipe), "calibration.fraction", "holds no class"], [recipe])
    assert not (out / "models").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "1"])
def test_val_seen_fraction_outside_the_open_unit_interval_is_a_usage_error(tmp_path, cli_error, value):
    argv = ["evaluate", "--features", "f", "--split", "s", "--model", "m", "--gzsl"]
    argv += [f"--val-seen-fraction={value}", "--out", str(tmp_path / "out")]
    cli_error(argv, ["--val-seen-fraction", "strictly between 0 and 1"], not_created=[tmp_path / "out"])


@pytest.mark.parametrize("value", ["2e70", "-1", str(2**40)])
def test_a_seed_outside_0_to_2_32_is_refused(demo_inputs, tmp_path, cli_error, value):
    recipe = _recipe(demo_inputs, "seed.yaml", gzsl=True, calibration={"seed": 0})
    recipe.write_text(recipe.read_text().replace("seed: 0", f"seed: {value}"))
    cli_error(_argv(recipe, tmp_path / "out"), [str(recipe), "calibration.seed"], [recipe])
    argv = ["evaluate", "--features", "f", "--split", "s", "--model", "m", "--seed", value, "--out", "o"]
    cli_error(argv, "--seed")


def test_an_unknown_key_under_features_names_it(demo_inputs, tmp_path, cli_error):
    root = demo_inputs.root
    features = {"train": str(root / "a"), "test": str(root / "b"), "seen": str(root / "c"), "sean": "d"}
    recipe = _recipe(demo_inputs, "features_typo.yaml", features=features)
    cli_error(_argv(recipe, tmp_path / "out"), [str(recipe), "features.sean", "seen"], [recipe])
    simulated = {"simulate": str(root / "sim.yaml"), "seed": 3}
    recipe = _recipe(demo_inputs, "simulate_typo.yaml", features=simulated)
    cli_error(_argv(recipe, tmp_path / "out"), [str(recipe), "features.seed"], [recipe])


def test_two_cells_sharing_a_directory_are_refused(demo_inputs, tmp_path, cli_error):
    # model 'eszsl__x' on split 'x__y' and model 'eszsl' on split 'x__x__y' are both cells/eszsl__x__x__y
    for name in ("x__y", "x__x__y"):
        (tmp_path / f"{name}.txt").write_text(
            "".join(f"{w}\n" for w in read_wnid_list(demo_inputs.root / "hop1.txt"))
        )
    models = {
        "eszsl__x": {"model": "trivial", "splits": ["x__y"]},
        "eszsl": {"model": "trivial", "splits": ["x__x__y"]},
    }
    splits = [str(tmp_path / "x__y.txt"), str(tmp_path / "x__x__y.txt")]
    recipe = _recipe(demo_inputs, "clash.yaml", models=models, splits=splits)
    out = tmp_path / "out"
    culprit = [str(recipe), "cells/eszsl__x__x__y", "'eszsl__x'", "'x__y'", "'x__x__y'"]
    cli_error(_argv(recipe, out), culprit, [recipe], not_created=[out])


def test_an_empty_split_list_is_one_tidy_line(demo_inputs, tmp_path, cli_error):
    recipe = _recipe(demo_inputs, "no_splits.yaml", splits=[])
    line = cli_error(
        _argv(recipe, tmp_path / "out"), [str(recipe), "splits", "no split to evaluate on"], [recipe]
    )
    assert "List should have" not in line


def test_a_split_holding_a_seen_class_names_the_file_and_the_wnid(demo_inputs, tmp_path, cli_error):
    split = tmp_path / "leaky.txt"
    split.write_text(
        "".join(f"{w}\n" for w in [*read_wnid_list(demo_inputs.root / "hop1.txt")[:4], "n01443537"])
    )
    recipe = _recipe(demo_inputs, "leaky.yaml", splits=[str(split)])
    cli_error(_argv(recipe, tmp_path / "out"), [str(split), "n01443537", "training class"], [recipe, split])


def test_block_rows_1_gives_the_bytes_of_the_default(tmp_path):
    import numpy as np

    from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
    from imagenet_zsl.semantics.class_vectors import ClassVectors
    from tests.evaluation.evaluation_fixtures import CLASSES, DIM, TEST, one_hot

    labels = np.repeat(np.arange(len(TEST)), 3)
    features = one_hot(labels) + 0.1 * np.random.default_rng(0).standard_normal((len(labels), DIM)).astype(
        np.float32
    )
    fd = write_feature_dir(tmp_path / "features", labels, features, shard_rows=5)
    (tmp_path / "split.txt").write_text("".join(f"{w}\n" for w in TEST))
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(tmp_path / "p.npz")
    runs = {}
    for rows in (1, 32768):
        cfg = EvaluationConfig(
            features=fd,
            split=tmp_path / "split.txt",
            out=tmp_path / f"run{rows}",
            prototypes=tmp_path / "p.npz",
            block_rows=rows,
            plots=False,
        )
        runs[rows] = evaluate(cfg, graph="none", progress=False)
    assert runs[1]["zsl"] == runs[32768]["zsl"]
    for name in (
        "test.unseen.ids.npy",
        "test.unseen.scores.npy",
        "test.true_above.npy",
        "test.true_tied.npy",
    ):
        assert (tmp_path / "run1" / "topk" / name).read_bytes() == (
            tmp_path / "run32768" / "topk" / name
        ).read_bytes()
    assert json.loads((tmp_path / "run1" / "metrics.json").read_text())["zsl"]["images"] == 18


def test_listed_calibration_classes_refuse_a_fraction_and_keep_their_seed(demo_inputs, tmp_path, cli_error):
    """A fraction carves seen classes; with listed classes it would be silently unused: an error.
    The listed protocol's seed reaches the held-out seen rows that choose γ (it was always 0)."""
    from imagenet_zsl.batch.cells import _listed_seed
    from imagenet_zsl.batch.recipe import Calibration

    classes = tmp_path / "val.txt"
    classes.write_text("n00000001\n")
    recipe = _recipe(
        demo_inputs, "listed.yaml", gzsl=True, calibration={"classes": str(classes), "fraction": 0.3}
    )
    cli_error(_argv(recipe, tmp_path / "out"), [str(recipe), "calibration", "fraction"], [recipe])
    assert _listed_seed(Calibration(classes=str(classes), seed=7)) == 7
    assert _listed_seed(None) == 0 and _listed_seed(False) == 0
