"""Typed hyper-parameters (``Params`` of every model): strict types and ranges, one-line errors,
grids checked before any work, bugs not disguised as user errors; and model directories of
format v1 still load."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.batch.recipe import load_recipe, model_specs
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import MODELS, ZSLModel, create
from imagenet_zsl.models.params import check_grid
from imagenet_zsl.models.persistence import MODEL_FORMAT, load_model, save_model
from imagenet_zsl.models.training import load_train_config
from imagenet_zsl.registry import Registry

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "models"


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("eszsl", {"gamma": "1.0"}, "(model eszsl: params.gamma = '1.0'): Input should be a valid number"),
        ("eszsl", {"gamma": True}, "(model eszsl: params.gamma = True): Input should be a valid number"),
        ("eszsl", {"gamma": math.nan}, "(model eszsl: params.gamma = nan): Input should be a finite number"),
        ("eszsl", {"gamma": math.inf}, "(model eszsl: params.gamma = inf): Input should be a finite number"),
        ("eszsl", {"gamma": -1.0}, "params.gamma = -1.0): Input should be greater than or equal to 0"),
        ("cmt", {"epochs": "5"}, "(model cmt: params.epochs = '5'): Input should be a valid integer"),
        ("cmt", {"epochs": 5.0}, "params.epochs = 5.0): Input should be a valid integer"),
        ("cmt", {"device": "cuda:99x"}, "params.device = 'cuda:99x'): use cpu, cuda, cuda:N or auto"),
        ("sae", {"direction": "up"}, "params.direction = 'up'): Input should be 'v2s' or 's2v'"),
        ("dgp", {"hidden": [8, 8]}, "params.hidden = [8, 8]): DGP has two layers: give one hidden size"),
        ("gcnz", {"dropout_layers": True}, "params.dropout_layers = True)"),
        ("dap", {"eps": 0.5}, "params.eps = 0.5): Input should be less than 0.5"),
    ],
)
def test_bad_hyperparameters_are_one_line_user_errors(name, params, expected):
    with pytest.raises(UserInputError) as caught:
        create(name, **params)
    message = str(caught.value)
    assert expected in message and "\n" not in message


def test_an_int_is_a_float_and_defaults_fill_in():
    model = create("eszsl", gamma=2, lam=0)
    assert model.params == {"gamma": 2.0, "lam": 0.0, "features": "standard", "semantic_norm": "l2"}
    assert isinstance(model.params["gamma"], float)
    assert create("cmt", device="cuda:1").params["device"] == "cuda:1"  # whether it exists: at fit
    assert MODELS.get("gcnz").defaults["hidden"] == [2048, 2048, 1024, 1024, 512]


def test_a_bug_in_a_models_init_is_not_turned_into_a_user_error():
    registry: Registry[type[ZSLModel]] = Registry("model")

    @registry.register
    class Buggy(ZSLModel):
        name = "buggy"

        def __init__(self, **params):
            super().__init__(**params)
            raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")  # a real bug

        def fit(self, data, semantics, graph=None):  # pragma: no cover - never reached
            return self

        def embed_images(self, features, logits=None):  # pragma: no cover
            return features

        def class_prototypes(self, wnids):  # pragma: no cover
            return np.zeros((len(wnids), 1))

    with pytest.raises(TypeError, match="unsupported operand"):
        registry.create("buggy")
    with pytest.raises(UserInputError, match="unknown key 'x'"):  # its parameters still are checked
        registry.create("buggy", x=1)


def test_a_model_with_a_plain_defaults_dict_still_works():
    """A model written before typed parameters (``defaults`` only) gets an untyped Params."""

    class Old(ZSLModel):
        name = "old"
        defaults = {"scale": 2.0}

        def fit(self, data, semantics, graph=None):  # pragma: no cover
            return self

        def embed_images(self, features, logits=None):  # pragma: no cover
            return features

        def class_prototypes(self, wnids):  # pragma: no cover
            return np.zeros((len(wnids), 1))

    assert Old().params == {"scale": 2.0} and Old(scale=3).params == {"scale": 3}
    with pytest.raises(UserInputError, match="unknown key 'scal'"):
        Old(scal=1)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_default_grid_is_valid(name):
    cls = MODELS.get(name)
    check_grid(cls.Params, getattr(cls, "grid", {}), {}, "test")


def test_a_bad_grid_value_is_refused_before_any_work():
    with pytest.raises(UserInputError, match=r"\(c.yaml: select.grid.lam = 'x'\): Input should be a valid"):
        check_grid(MODELS.get("eszsl").Params, {"gamma": [1.0], "lam": [0.1, "x"]}, {}, "c.yaml")
    with pytest.raises(UserInputError, match=r"select.grid.gamma = \[\]\): give a non-empty list"):
        check_grid(MODELS.get("eszsl").Params, {"gamma": []}, {}, "c.yaml")


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_model_config_loads(path):
    config = load_train_config(path)
    assert config.model in MODELS


def test_configs_may_write_floats_as_yaml_1_2_does(tmp_path):
    """PyYAML reads ``1e-3`` as a string; model configs and recipes read it as a number."""
    config = tmp_path / "cmt.yaml"
    config.write_text(
        "model: cmt\nparams: {lr: 1e-3, weight_decay: 5E-4}\nselect: {grid: {lr: [1e-2, 1.0e-1]}}\n"
    )
    loaded = load_train_config(config)
    assert loaded.params == {"lr": 0.001, "weight_decay": 0.0005}
    assert loaded.select["grid"] == {"lr": [0.01, 0.1]}
    split = tmp_path / "split.txt"
    split.write_text("n00007846\n")
    recipe = tmp_path / "run.yaml"
    recipe.write_text(
        f"features: {{train: a, test: b}}\nsplits: [{split}]\n"
        f"models:\n  cmt: {{config: {config}, params: {{epochs: 3, lr: 2e-3}}}}\n"
    )
    (spec,) = model_specs(load_recipe(recipe), str(recipe))
    assert spec.train.params == {"lr": 0.002, "weight_decay": 0.0005, "epochs": 3}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "{model: cmt, params: {epochs: '5'}}",
            "(R: models.m.params.epochs = '5'): Input should be a valid integer",
        ),
        ("{model: cmt, params: {device: 'cuda:99x'}}", "(R: models.m.params.device = 'cuda:99x'): use cpu"),
        (
            "{model: eszsl, params: {gamma: .nan}}",
            "(R: models.m.params.gamma = nan): Input should be a finite",
        ),
        ("{model: eszsl, select: {grid: {gamma: [1, true]}}}", "(R: models.m.select.grid.gamma = True)"),
        ("{model: eszs}", "unknown model 'eszs' (R: models.m.model): did you mean 'eszsl'?"),
    ],
)
def test_recipe_models_are_checked_with_file_key_and_value(tmp_path, entry, expected):
    split = tmp_path / "split.txt"
    split.write_text("n00007846\n")
    recipe = tmp_path / "run.yaml"
    recipe.write_text(f"features: {{train: a, test: b}}\nsplits: [{split}]\nmodels:\n  m: {entry}\n")
    with pytest.raises(UserInputError) as caught:
        model_specs(load_recipe(recipe), "R")
    assert expected in str(caught.value) and "\n" not in str(caught.value)


# ----------------------------------------------------------------------------- saved models
def _as_format_v1(directory: Path) -> None:
    """Rewrite a saved model directory as format v1 wrote it: helper objects' fitted attributes
    without the trailing ``_``, and the manifest of before the one writer."""
    state = json.loads((directory / "state.json").read_text())

    def legacy(value):
        if isinstance(value, dict) and "__object__" in value:
            return {**value, "state": {k.removesuffix("_"): legacy(v) for k, v in value["state"].items()}}
        return value

    (directory / "state.json").write_text(json.dumps({k: legacy(v) for k, v in state.items()}))
    manifest = json.loads((directory / "manifest.json").read_text())
    files = [
        {"path": name, "bytes": (directory / name).stat().st_size, "sha256": sha256_file(directory / name)}
        for name in ("config.json", "state.json", "weights.npz")
    ]
    old = {
        "format": "imagenet-zsl/model-v1",
        "tool": "imagenet-zsl train",
        "model": manifest["model"],
        "class": manifest["class"],
        "params": manifest["params"],
        "fit": manifest["fit"],
        "files": files,
        "software": manifest["software"],
    }
    (directory / "manifest.json").write_text(json.dumps(old))


def test_a_model_directory_of_format_v1_still_loads(problem, tmp_path):
    model = create("conse", top=2, classifier="softmax").fit(problem.seen_data(), problem.semantics)
    saved = save_model(model, tmp_path / "conse")
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["format"] == MODEL_FORMAT == "imagenet-zsl/model-v2"
    assert manifest["parameters"] == manifest["params"] == model.params
    state = json.loads((saved / "state.json").read_text())
    assert set(state["classifier_"]["state"]) >= {"kind_", "weights_", "columns_", "head_stored_"}
    _as_format_v1(saved)
    assert "weights" in json.loads((saved / "state.json").read_text())["classifier_"]["state"]
    loaded = load_model(saved)
    assert loaded.classifier_.kind_ == "softmax"
    features, _ = problem.draw(problem.unseen, images=2)
    np.testing.assert_array_equal(
        loaded.scores(features, problem.unseen), model.scores(features, problem.unseen)
    )


MANIFEST_DAMAGE = {
    "files-not-a-list": (lambda m: m.__setitem__("files", "weights.npz"), "'files' list"),
    "files-entry-a-string": (lambda m: m.__setitem__("files", ["weights.npz"]), "'files' list"),
    "sha256-a-number": (lambda m: m["files"][0].__setitem__("sha256", 5), "'files' list"),
    "no-model-name": (lambda m: m.pop("model"), "no 'model' name"),
    "a-file-unlisted": (lambda m: m["files"].pop(), "does not list weights.npz"),
    "unknown-format": (lambda m: m.__setitem__("format", "imagenet-zsl/model-v9"), "model-v9"),
}


@pytest.mark.parametrize("damage", sorted(MANIFEST_DAMAGE))
def test_a_damaged_model_manifest_is_one_line(problem, tmp_path, damage):
    saved = save_model(create("eszsl").fit(problem.seen_data(), problem.semantics), tmp_path / "m")
    path = saved / "manifest.json"
    manifest = json.loads(path.read_text())
    edit, expected = MANIFEST_DAMAGE[damage]
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(UserInputError, match="manifest.json") as caught:
        load_model(saved)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_set_values_are_read_as_a_recipe_reads_them():
    from imagenet_zsl.models.commands import parse_overrides

    assert parse_overrides(["lr=1e-3", "hidden=[8]", "device=cuda:1", "gamma='1.0'"]) == {
        "lr": 0.001,
        "hidden": [8],
        "device": "cuda:1",
        "gamma": "1.0",  # a string: refused by the model's Params, not silently converted
    }
    with pytest.raises(UserInputError, match=r"--set 'lr=\[1': the value is not valid YAML"):
        parse_overrides(["lr=[1"])
