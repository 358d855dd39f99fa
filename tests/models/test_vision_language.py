"""The vision-language zero-shot model (issue 23 §6): no training, the score is the cosine of the
image features and the class text embeddings, and its leakage column says "unknown (web data)"."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.batch.summary import seen_in_pretraining
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.models.base import SeenData, create
from imagenet_zsl.models.persistence import load_model, save_model
from imagenet_zsl.models.vision_language import tower_pair_problem
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.test_backbone_head import write_features

A, B, C = "n00000001", "n00000002", "n00000003"
#: text embeddings of different lengths: cosine and dot product rank differently
TEXT = ClassVectors(
    [A, B, C],
    np.array([[1, 0, 0, 0], [0, 10, 0, 0], [0, 0, 2, 2]], float),
    source="clip:ViT-B-32/laion2b_s34b_b79k; templates ['a photo of a {}.']",
)
#: the image tower _web_features records: the text tower above is the same model's
IMAGE_TOWER = "open_clip:ViT-B-32/laion2b_s34b_b79k"


def fitted(features: np.ndarray | None = None):
    features = np.zeros((0, 4), np.float32) if features is None else features
    data = SeenData(features, np.zeros(len(features), np.int64), [A] if len(features) else [])
    return create("vlm_zero_shot").fit(data, TEXT)


def test_the_score_is_the_cosine_of_image_features_and_text_embeddings():
    model = fitted()
    images = np.array([[1, 0.5, 0, 0], [3, 4, 0, 0], [0, 0, 0, 7]], np.float32)
    scores = model.scores(images, [A, B, C])
    # by hand: |[1, .5, 0, 0]| = √1.25; |[3, 4, 0, 0]| = 5; [0, 0, 2, 2] / |.| = [0, 0, .5√2, .5√2]
    expected = np.array(
        [
            [1 / np.sqrt(1.25), 0.5 / np.sqrt(1.25), 0],
            [0.6, 0.8, 0],
            [0, 0, np.sqrt(0.5)],
        ]
    )
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-7)
    assert scores[0].argmax() == 0  # a dot product would pick B (5 > 1): the lengths do not count
    assert model.fit_info_ == {"training": "none", "class_vectors": TEXT.source}


def test_features_and_class_vectors_of_different_models_are_a_one_line_error():
    with pytest.raises(
        UserInputError,
        match=r"image features have 6 dimensions but the class vectors \(clip:ViT-B-32.*\) have 4",
    ):
        fitted(np.zeros((2, 6), np.float32))
    with pytest.raises(UserInputError, match="expects"):
        fitted().embed_images(np.zeros((1, 5), np.float32))


def _web_features(
    path: Path, classes: list[str], features: np.ndarray, labels: np.ndarray, backbone: str = IMAGE_TOWER
) -> Path:
    """A feature directory as `extract --backbone open_clip:...` writes it: web-data pretraining."""
    write_features(path, classes, features, labels)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["backbone"] = {"name": backbone, "weights": {"sha256": "cd" * 32}}
    manifest["pretraining"] = {"model": "ViT-B-32/laion2b_s34b_b79k", "label_sets": [], "web_data": True}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_train_reads_no_image_and_evaluate_reports_web_data_leakage_as_unknown(tmp_path):
    train = _web_features(
        tmp_path / "train", ["n00000009"], np.ones((2, 4), np.float32), np.zeros(2, np.int64)
    )
    TEXT.save(tmp_path / "text.npz")
    config = tmp_path / "vlm.yaml"
    config.write_text(f"model: vlm_zero_shot\nsemantics: {tmp_path / 'text.npz'}\n")
    argv = ["train", "--config", config, "--features", train, "--out", tmp_path / "model"]
    assert main([str(a) for a in argv]) == 0
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    assert manifest["inputs"]["images"] == 0 and manifest["model"] == "vlm_zero_shot"
    assert manifest["semantics_identity"]["source"] == TEXT.source
    model = load_model(tmp_path / "model")
    np.testing.assert_allclose(
        model.scores(np.array([[3, 4, 0, 0]], np.float32), [A, B]), [[0.6, 0.8]], rtol=1e-6
    )

    # test images: A's image is nearer B by dot product, nearer A by cosine; B's and C's are plain
    images = np.array([[1, 0.5, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1]], np.float32)
    test = _web_features(tmp_path / "test", [A, B, C], images, np.arange(3))
    (tmp_path / "split.txt").write_text(f"{A}\n{B}\n{C}\n")
    metrics = evaluate(
        EvaluationConfig(
            features=test,
            split=tmp_path / "split.txt",
            out=tmp_path / "run",
            model=tmp_path / "model",
            ks=[1],
            label_frequency=False,
            plots=False,
        ),
        graph="none",
        progress=False,
    )
    assert metrics["zsl"]["flat"]["1"] == pytest.approx(1.0)
    assert metrics["pretraining"]["test_classes_seen"] == "unknown (web data)"
    assert seen_in_pretraining(metrics) == "unknown (web data)"  # the `run` table's column


def test_usable_in_a_run_recipe_beside_a_classic_baseline(tmp_path):
    """One `run` table: the vision-language row and a ridge row on the same (web-pretrained)
    features, each with its class vectors; the leakage column says "unknown (web data)"."""
    rng = np.random.default_rng(0)
    seen = [f"n0000001{i}" for i in range(6)]
    test = [f"n0000002{i}" for i in range(4)]
    wnids = seen + test
    vectors = rng.normal(size=(len(wnids), 8))
    ClassVectors(wnids, vectors, source="clip:ViT-B-32/laion2b_s34b_b79k").save(tmp_path / "text.npz")
    for name, classes in (("train", seen), ("test", test)):
        labels = np.repeat(np.arange(len(classes)), 5)
        means = vectors[[wnids.index(w) for w in classes]]
        images = (means[labels] + 0.3 * rng.normal(size=(len(labels), 8))).astype(np.float32)
        _web_features(tmp_path / name, classes, images, labels)
    (tmp_path / "split.txt").write_text("".join(f"{w}\n" for w in test))
    (tmp_path / "recipe.yaml").write_text(
        f"features: {{train: {tmp_path}/train, test: {tmp_path}/test}}\n"
        "models:\n"
        f"  vlm: {{model: vlm_zero_shot, semantics: {tmp_path}/text.npz}}\n"
        f"  ridge: {{model: ridge, semantics: {tmp_path}/text.npz}}\n"
        f"splits: [{tmp_path}/split.txt]\n"
        "ks: [1]\ngzsl: false\ngraph: none\nplots: false\nlabel_frequency: false\n"
    )
    assert main(["run", str(tmp_path / "recipe.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    with (tmp_path / "out" / "summary.csv").open() as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    assert rows["vlm"]["seen in pretraining"] == rows["ridge"]["seen in pretraining"] == "unknown (web data)"
    legend = (tmp_path / "out" / "summary.md").read_text()  # the paper table says it below
    assert "- vlm on split: test classes seen in pretraining: unknown (web data)" in legend
    metrics = json.loads((tmp_path / "out" / "cells" / "vlm__split" / "metrics.json").read_text())
    assert metrics["pretraining"]["test_classes_seen"] == "unknown (web data)"


MINILM = "sentence:all-MiniLM-L6-v2; templates ['a photo of a {}.']"
SHA_A, SHA_B = "ab" * 32, "cd" * 32


@pytest.mark.parametrize(
    ("backbone", "sha", "text", "expected"),
    [
        # paired: one model's towers (and the same checkpoint when both record its sha256)
        ("open_clip:ViT-B-32/openai", SHA_A, "clip:ViT-B-32/openai; templates [...]", (False, False)),
        ("open_clip:ViT-B-32/openai", SHA_A, f"clip:ViT-B-32; weights sha256 {SHA_A}", (False, False)),
        # certainly two models: an error
        ("timm:vit_small_patch16_224", SHA_A, MINILM, (True, True)),  # both 384-d
        ("open_clip:ViT-B-32/openai", SHA_A, "clip:ViT-B-16/openai", (True, True)),
        ("open_clip:ViT-B-32/openai", SHA_A, "clip:ViT-B-32/laion2b_s34b_b79k", (True, True)),
        ("open_clip:ViT-B-32/openai", SHA_A, MINILM, (True, True)),
        ("open_clip:ViT-B-32/openai", SHA_A, f"clip:ViT-B-32/openai; weights sha256 {SHA_B}", (True, True)),
        # too little recorded to tell: a warning
        ("open_clip:ViT-B-32/openai", SHA_A, "clip:ViT-B-32; templates [...]", (True, False)),
        ("open_clip:ViT-B-32/openai", SHA_A, "/data/my_vectors.npz", (True, False)),
        ("tiny-test", SHA_A, "glove-6b-50d", (True, False)),
        # nothing to compare
        ("SIMULATED", None, MINILM, (False, False)),
        (None, None, MINILM, (False, False)),
    ],
)
def test_towers_are_paired_by_identity_not_by_dimension(backbone, sha, text, expected):
    image = {"backbone": backbone, "weights_sha256": sha}
    problem, certain = tower_pair_problem(image, text)
    assert (problem is not None, certain) == expected


def test_check_inputs_refuses_two_models_and_warns_on_too_little(caplog):
    model = fitted()
    model.check_inputs({"backbone": IMAGE_TOWER, "weights_sha256": SHA_A}, TEXT)  # paired: silent
    assert not caplog.records
    minilm = ClassVectors([A], np.ones((1, 4)), source=MINILM)
    with pytest.raises(
        UserInputError, match=r"vlm_zero_shot: the image tower is open_clip:ViT-B-32.*sentence:"
    ):
        model.check_inputs({"backbone": IMAGE_TOWER, "weights_sha256": SHA_A}, minilm)
    model.check_inputs({"backbone": IMAGE_TOWER}, ClassVectors([A], np.ones((1, 4)), source="x.npz"))
    assert "cannot check" in caplog.text


def test_evaluate_refuses_vit_features_with_minilm_vectors_unless_allowed(tmp_path, capsys):
    """Issue 33 §6: timm ViT-S features and MiniLM sentence vectors have equal dimensions. The model
    directory is written as `train` writes it (fitted without a training image)."""
    vit = "timm:vit_small_patch16_224.augreg_in21k"
    test = _web_features(tmp_path / "test", [A, B, C], np.eye(3, 4, dtype=np.float32), np.arange(3), vit)
    minilm = ClassVectors([A, B, C], np.random.default_rng(0).normal(size=(3, 4)), source=MINILM)
    extra = {
        "feature_identity": FeatureDir(test).identity,  # the same backbone: only the towers differ
        "semantics_identity": {"source": MINILM, "dim": 4},
    }
    save_model(fitted_on(minilm), tmp_path / "model", extra)
    (tmp_path / "split.txt").write_text(f"{A}\n{B}\n{C}\n")
    argv = ["evaluate", "--features", test, "--split", tmp_path / "split.txt", "--model", tmp_path / "model"]
    argv = [str(a) for a in [*argv, "--out", tmp_path / "run", "--no-plots", "--k", "1"]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "tower mismatch" in err and vit in err and "sentence:all-MiniLM-L6-v2" in err and err.count("\n") == 1
    )
    assert not (tmp_path / "run").exists()
    assert main([*argv, "--allow-feature-mismatch"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    (record,) = metrics["provenance"]["feature_mismatch"]
    assert record["allowed"] and record["differ"] == ["text tower"]


def fitted_on(vectors: ClassVectors):
    return create("vlm_zero_shot").fit(
        SeenData(np.zeros((0, 4), np.float32), np.zeros(0, np.int64), []), vectors
    )


def test_train_refuses_vit_features_with_minilm_vectors(tmp_path, capsys):
    """Issue 33 §6 at `train` time: equal dimensions (4 here, 384 in life), unrelated spaces."""
    vit = "timm:vit_small_patch16_224.augreg_in21k"
    train = _web_features(
        tmp_path / "train", ["n00000009"], np.ones((2, 4), np.float32), np.zeros(2, np.int64), vit
    )
    ClassVectors([A, B, C], np.eye(3, 4), source=MINILM).save(tmp_path / "minilm.npz")
    config = tmp_path / "vlm.yaml"
    config.write_text(f"model: vlm_zero_shot\nsemantics: {tmp_path / 'minilm.npz'}\n")
    argv = ["train", "--config", config, "--features", train, "--out", tmp_path / "model"]
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert vit in err and "sentence:all-MiniLM-L6-v2" in err and err.count("\n") == 1
    assert not (tmp_path / "model").exists()
