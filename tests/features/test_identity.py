"""Feature identity: what must match between the features a model was fitted on and tested on."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.run.provenance import provenance_block
from imagenet_zsl.features.identity import (
    architecture_of,
    check_same_features,
    describe_identity,
    feature_identity,
    identity_differences,
    numerics,
)


def _extracted(
    name: str = "timm:tf_efficientnet_lite0", sha: str | None = "ab" * 32, crop: int = 224, **parameters: str
) -> dict:
    return {
        "backbone": {"name": name, "dim": 1280, "weights": {"source": "file", "sha256": sha}},
        "parameters": {"batch_size": 64, **parameters},  # the numerics only when given
        "preprocessing": {"resize": 256, "crop": crop},
        "dim": 1280,
        "classes": ["n00000001"],  # not part of the identity: train and test features differ here
        "inputs": {"store": {"path": "/data/a"}},
    }


def test_extracted_identity_ignores_store_and_classes() -> None:
    a = _extracted()
    b = {**_extracted(), "classes": ["n00000002"], "inputs": {"store": {"path": "/data/b"}}}
    assert feature_identity(a) == feature_identity(b)
    assert feature_identity(a)["feature_layer"] == "pooled pre-logits"
    assert describe_identity(feature_identity(a)) == "timm:tf_efficientnet_lite0 @abababab"


@pytest.mark.parametrize(
    ("other", "key"),
    [
        (_extracted(name="timm:efficientnet_lite0"), "backbone"),
        (_extracted(sha="cd" * 32), "weights_sha256"),
        (_extracted(crop=288), "preprocessing"),
    ],
)
def test_each_difference_is_named(other: dict, key: str) -> None:
    assert identity_differences(feature_identity(_extracted()), feature_identity(other)) == [key]


def test_simulated_parts_of_one_simulation_agree() -> None:
    config = {"seed": 0, "dim": 64, "noise": 1.0, "train": {"images_per_class": 10}}
    train = {"simulated": True, "dim": 64, "simulation": config}
    test = {"simulated": True, "dim": 64, "simulation": {**config, "train": {"images_per_class": 2}}}
    other_seed = {"simulated": True, "dim": 64, "simulation": {**config, "seed": 1}}
    assert feature_identity(train) == feature_identity(test)
    assert identity_differences(feature_identity(train), feature_identity(other_seed)) == ["simulation"]
    assert describe_identity(feature_identity(train)).startswith("SIMULATED @")


def test_check_same_features_errors_names_both_or_records_the_override() -> None:
    a, b = feature_identity(_extracted()), feature_identity(_extracted(sha="cd" * 32))
    assert check_same_features(a, dict(a), "model", "test features") is None
    assert check_same_features(None, b, "model", "test features") is None  # older directories
    with pytest.raises(UserInputError) as err:
        check_same_features(a, b, "model m1", "test features t1")
    text = str(err.value)
    assert "\n" not in text and "model m1" in text and "test features t1" in text
    assert "@abababab" in text and "@cdcdcdcd" in text and "--allow-feature-mismatch" in text
    record = check_same_features(a, b, "model", "test features", allow_mismatch=True)
    assert record == {
        "allowed": True,
        "differ": ["weights_sha256"],
        "model": "timm:tf_efficientnet_lite0 @abababab",
        "test features": "timm:tf_efficientnet_lite0 @cdcdcdcd",
    }


@pytest.mark.parametrize(
    ("name", "architecture"),
    [
        ("timm:tf_efficientnet_lite0", "tf_efficientnet_lite0"),
        ("timm:tf_efficientnet_lite0.in1k", "tf_efficientnet_lite0"),
        ("vit_small_patch16_224.augreg_in21k", "vit_small_patch16_224"),
        ("open_clip:ViT-B-32/openai", "open_clip:ViT-B-32"),
        ("timm:hf-hub:org/repo.v1", "timm:hf-hub:org/repo.v1"),
        ("tiny-test", "tiny-test"),
    ],
)
def test_architecture_is_the_name_less_its_pretrained_tag(name: str, architecture: str) -> None:
    assert architecture_of(name) == architecture


def test_a_tag_spelled_out_with_the_same_weights_is_the_same_features() -> None:
    """Issue 33 §6: timm:tf_efficientnet_lite0 and its .in1k spelling load the same weights file."""
    plain = feature_identity(_extracted("timm:tf_efficientnet_lite0"))
    tagged = feature_identity(_extracted("timm:tf_efficientnet_lite0.in1k"))
    assert identity_differences(plain, tagged) == []
    assert check_same_features(plain, tagged, "model", "test features") is None
    # other weights behind the same architecture: only the weights differ
    other = feature_identity(_extracted("timm:tf_efficientnet_lite0.in1k", sha="cd" * 32))
    assert identity_differences(plain, other) == ["weights_sha256"]
    # without a recorded sha256 the name is all there is: a different name is a different backbone
    unknown = feature_identity(_extracted("timm:tf_efficientnet_lite0.in1k", sha=None))
    nameless = feature_identity(_extracted("timm:tf_efficientnet_lite0", sha=None))
    assert identity_differences(nameless, unknown) == ["backbone"]


def test_numerics_are_recorded_shown_and_warned_about_but_not_refused(caplog) -> None:
    fp32 = feature_identity(_extracted(precision="fp32", decode="pil", mode="deterministic"))
    bf16 = feature_identity(_extracted(precision="bf16", decode="torchvision", mode="fast"))
    assert numerics(fp32) == {"precision": "fp32", "decode": "pil", "mode": "deterministic"}
    assert numerics(feature_identity(_extracted())) == {}  # written before numerics were recorded
    assert describe_identity(fp32) == "timm:tf_efficientnet_lite0 @abababab"  # the defaults: no tag
    assert describe_identity(bf16) == "timm:tf_efficientnet_lite0 @abababab [bf16, decode torchvision, fast]"
    assert identity_differences(fp32, bf16) == []
    with caplog.at_level(logging.WARNING, logger="imagenet_zsl.features.identity"):
        assert check_same_features(fp32, bf16, "model m", "--features t") is None
    (warning,) = caplog.records
    text = warning.getMessage()
    assert "model m and --features t" in text and "precision fp32 vs bf16" in text
    assert "decode pil vs torchvision" in text and "mode deterministic vs fast" in text
    caplog.clear()
    check_same_features(fp32, feature_identity(_extracted()), "a", "b")  # unknown numerics: silent
    assert not caplog.records


def _inputs(test: dict, model: dict | None) -> SimpleNamespace:
    fd = SimpleNamespace(identity=test)
    source = SimpleNamespace(feature_identity=model, class_vectors="glove-6b-50d")
    return SimpleNamespace(fd=fd, source=source, feature_checks=[])


def test_provenance_shows_both_sides_numerics_and_what_differs() -> None:
    fp32 = feature_identity(_extracted(precision="fp32", decode="pil", mode="deterministic"))
    bf16 = feature_identity(_extracted(precision="bf16", decode="pil", mode="deterministic"))
    block = provenance_block(_inputs(bf16, fp32))
    assert block["numerics"] == {
        "features": {"precision": "bf16", "decode": "pil", "mode": "deterministic"},
        "model_features": {"precision": "fp32", "decode": "pil", "mode": "deterministic"},
        "differ": ["precision"],
    }
    assert block["features"]["backbone"].endswith("[bf16]")
    assert "numerics" not in provenance_block(_inputs(feature_identity(_extracted()), None))


def _with_tensors(sha: str, tensors: str | None, source: str = "file") -> dict:
    manifest = _extracted(sha=sha)
    weights = {"source": source, "sha256": sha}
    if tensors is not None:
        weights["tensors_sha256"] = tensors
    manifest["backbone"]["weights"] = weights
    return feature_identity(manifest)


def test_weights_are_compared_by_their_tensors_not_their_file() -> None:
    """Issue 45 §1: the same tensors in two files (.pth, .safetensors) are the same features; other
    tensors in one file format are not. The label shows the tensors' digest."""
    pth, safetensors = _with_tensors("ab" * 32, "11" * 32), _with_tensors("cd" * 32, "11" * 32)
    assert identity_differences(pth, safetensors) == []
    assert check_same_features(pth, safetensors, "model", "test features") is None
    assert describe_identity(pth) == describe_identity(safetensors) == "timm:tf_efficientnet_lite0 @11111111"
    other = _with_tensors("ab" * 32, "22" * 32)  # same file bytes recorded, other tensors: refused
    assert identity_differences(pth, other) == ["weights_tensors"]
    with pytest.raises(UserInputError, match=r"@11111111 features but test features has .*@22222222"):
        check_same_features(pth, other, "model", "test features")


def test_a_manifest_without_tensor_digest_is_compared_by_file_as_before_and_says_so() -> None:
    old = feature_identity(_extracted(sha="ab" * 32))  # written before tensor digests
    assert "weights_tensors" not in old
    same_file = _with_tensors("ab" * 32, "11" * 32)
    assert identity_differences(old, same_file) == []  # the same file: the same features
    other_file = _with_tensors("cd" * 32, "11" * 32)
    assert identity_differences(old, other_file) == ["weights_sha256"]
    with pytest.raises(UserInputError) as caught:
        check_same_features(old, other_file, "model m", "--features t")
    text = str(caught.value)
    assert "\n" not in text and "@abababab" in text and "@cdcdcdcd" in text  # both by file
    assert "model m records only its weights file's sha256 (written before tensor digests)" in text
    # two old manifests: the comparison and the message of before
    with pytest.raises(UserInputError) as caught:
        check_same_features(old, feature_identity(_extracted(sha="cd" * 32)), "model", "--features")
    assert "tensor digests" not in str(caught.value)


def test_random_weights_are_flagged_in_the_identity_and_the_label() -> None:
    """Issue 47 §1: as SIMULATED features are, in the one label every table prints."""
    random = _with_tensors("ab" * 32, "11" * 32, source="random")
    assert random["random_weights"] is True
    assert describe_identity(random) == "timm:tf_efficientnet_lite0 (RANDOM weights) @11111111"
    pretrained = _with_tensors("ab" * 32, "11" * 32)
    assert "random_weights" not in pretrained and "RANDOM" not in describe_identity(pretrained)
    record = check_same_features(
        random, _with_tensors("ab" * 32, "22" * 32), "model", "t", allow_mismatch=True
    )
    assert record["model"] == "timm:tf_efficientnet_lite0 (RANDOM weights) @11111111"
