"""Issue 17: a timm ViT and an open_clip image tower extract features through the CLI (random
weights: nothing is downloaded), with their own preprocessing; the manifest says the weights saw
no pretraining."""

from __future__ import annotations

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.synthetic_store import make_store

CLASSES = {"n01440764": 2, "n01443537": 2}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("tars"), "tars", CLASSES)


def _extract(store, tmp_path, backbone: str) -> FeatureDir:
    tmp_path.mkdir(parents=True, exist_ok=True)
    classes = tmp_path / "classes.txt"
    classes.write_text("".join(f"{w}\n" for w in CLASSES))
    out = tmp_path / "feats"
    argv = [
        "extract",
        "--store",
        str(store.root),
        "--classes",
        str(classes),
        "--backbone",
        backbone,
        "--weights",
        "random",
        "--batch-size",
        "2",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return FeatureDir(out)


def test_timm_vit_through_the_cli(store, tmp_path):
    features = _extract(store, tmp_path, "timm:vit_tiny_patch16_224.augreg_in21k")
    block = features.load()
    assert block.features.shape == (len(store.good_ids), 192)  # ViT-Ti pre-logits width
    pre = features.manifest["preprocessing"]
    assert (pre["crop"], pre["interpolation"].split()[0]) == (224, "bicubic")  # from timm's config
    # random weights saw nothing; with real weights the tag's label sets are recorded (in21k here,
    # see test_pretraining_is_recorded_from_the_backbone_name)
    assert features.manifest["pretraining"]["note"] == "random weights: no pretraining"
    again = _extract(store, tmp_path / "again", "timm:vit_tiny_patch16_224.augreg_in21k")
    assert (again.load().features == block.features).all()  # deterministic


def test_open_clip_image_tower_through_the_cli(store, tmp_path):
    pytest.importorskip("open_clip")
    features = _extract(store, tmp_path, "open_clip:ViT-S-32/laion2b_s34b_b79k")
    assert features.load().features.shape == (len(store.good_ids), features.dim)
    assert features.manifest["preprocessing"]["crop"] == 224
    assert features.manifest["pretraining"]["n_classes"] == 0  # random weights
