"""Feature identity: what must match between the features a model was fitted on and tested on."""

from __future__ import annotations

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.identity import (
    check_same_features,
    describe_identity,
    feature_identity,
    identity_differences,
)


def _extracted(name: str = "timm:tf_efficientnet_lite0", sha: str = "ab" * 32, crop: int = 224) -> dict:
    return {
        "backbone": {"name": name, "dim": 1280, "weights": {"source": "file", "sha256": sha}},
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
