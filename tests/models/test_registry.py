"""The registry: every model by name, saved and loaded bit-for-bit, reproducible bytes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import MODELS, NotFittedError, check_is_fitted, create
from imagenet_zsl.models.persistence import load_model, save_model
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import QUICK


def test_registry_lists_every_baseline():
    expected = {
        "trivial",
        "conse",
        "devise",
        "eszsl",
        "sae",
        "ale",
        "sync",
        "ridge",
        "ridge_s2v",
        "gcnz",
        "sgcn",
        "dgp",
        "dap",
        "iap",
        "vlm_zero_shot",
    }
    assert expected <= set(MODELS)
    for name, cls in MODELS.items():
        assert cls.name == name
        create(name)  # defaults are valid


def test_unknown_models_and_parameters_are_user_errors():
    with pytest.raises(UserInputError, match="unknown model 'nope'"):
        create("nope")
    with pytest.raises(UserInputError, match="unknown key 'topp'.*did you mean 'top'"):
        create("conse", topp=3)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_round_trips_through_a_directory(problem, tmp_path, name):
    data = problem.seen_data(logits=name in ("trivial", "conse"))
    semantics = problem.semantics
    if name == "vlm_zero_shot":  # class vectors in the image space: the class means
        semantics = ClassVectors(problem.wnids, np.array([problem.means[w] for w in problem.wnids]))
    model = create(name, **QUICK.get(name, {})).fit(data, semantics, problem.graph)
    saved = save_model(model, tmp_path / name)
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["model"] == name and manifest["params"] == json.loads(json.dumps(model.params))
    assert {r["path"] for r in manifest["files"]} == {"config.json", "state.json", "weights.npz"}
    loaded = load_model(saved)
    assert type(loaded) is type(model) and loaded.params == model.params
    features, _ = problem.draw(problem.unseen + problem.seen[:2], images=3)
    logits = problem.bayes_logits(features) if data.logits is not None else None
    wnids = problem.unseen + problem.seen
    expected = model.scores(features, wnids, logits)
    np.testing.assert_array_equal(loaded.scores(features, wnids, logits), expected)
    np.testing.assert_array_equal(loaded.embed_images(features, logits), model.embed_images(features, logits))
    assert loaded.score_maps() == model.score_maps()


def test_same_fit_gives_the_same_bytes_and_tampering_is_detected(problem, tmp_path):
    data = problem.seen_data()
    for target in ("a", "b"):
        save_model(create("eszsl").fit(data, problem.semantics), tmp_path / target)
    for name in ("config.json", "state.json", "weights.npz", "manifest.json"):
        assert sha256_file(tmp_path / "a" / name) == sha256_file(tmp_path / "b" / name), name
    with open(tmp_path / "a" / "weights.npz", "r+b") as handle:
        handle.seek(-20, 2)
        handle.write(b"x" * 8)
    with pytest.raises(UserInputError, match="weights.npz"):
        load_model(tmp_path / "a")
    with pytest.raises(UserInputError, match="manifest.json: missing.*retrain the model"):
        load_model(tmp_path / "missing")


def test_trivial_model_keeps_its_graph_for_unseen_classes_after_loading(problem, tmp_path):
    model = create("trivial", classifier="softmax").fit(problem.seen_data(), None, problem.graph)
    loaded = load_model(save_model(model, tmp_path / "trivial"))
    np.testing.assert_array_equal(
        loaded.class_prototypes(["g0c3", "root"]), model.class_prototypes(["g0c3", "root"])
    )


def test_fitted_state_ends_in_an_underscore_and_unfitted_models_are_refused(problem, tmp_path):
    model = create("eszsl")
    with pytest.raises(NotFittedError, match="call fit"):
        check_is_fitted(model)
    with pytest.raises(NotFittedError):
        save_model(model, tmp_path / "unfitted")
    model.fit(problem.seen_data(), problem.semantics)
    assert model.fitted_attributes() == ["fit_info_", "map_", "prep_", "semantics_"]
    check_is_fitted(model)
