"""DGP's second stage (`finetune-dgp`): the backbone trains under the GCN's fixed classifiers.

Store: 4 colour classes x 8 JPEGs (the image filter's fine-tuning test images), features from the
random-initialised ``tiny-test`` backbone, a DGP fitted on them over a 6-node graph (the 4 classes,
an unseen sibling, the root).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.backbones import create_backbone, last_block
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.features.finetune import FinetuneParams
from imagenet_zsl.features.in_memory import load_features
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.models.base import SeenData, create
from imagenet_zsl.models.dgp_finetune import (
    CHECKPOINT_NAME,
    CROP_RATIO,
    DGPFinetuner,
    augment,
    crop_box,
    finetune_dgp,
    fixed_classifiers,
)
from imagenet_zsl.models.persistence import load_model, save_model
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.features.test_finetune import CLASSES, COLOURS, colour_jpeg

UNSEEN = "n01494475"
FAST = {"epochs": 4, "batch_size": 8, "lr": 0.05}


@pytest.fixture(scope="module")
def dgp_setup(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dgp2")
    store = root / "store"
    rng = np.random.default_rng(0)
    for wnid, colour in zip(CLASSES, COLOURS, strict=True):
        (store / wnid).mkdir(parents=True)
        for k in range(8):
            (store / wnid / f"{wnid}_{k}.JPEG").write_bytes(colour_jpeg(rng, colour))
    (root / "classes.txt").write_text("".join(f"{w}\n" for w in CLASSES))
    mp = pytest.MonkeyPatch()
    mp.setenv("IMAGENET_ZSL_CACHE", str(root / "index-cache"))
    run_extraction(
        ExtractConfig(
            store=str(store),
            classes_file=str(root / "classes.txt"),
            backbone="tiny-test",
            out=str(root / "features"),
            weights="random",
            batch_size=8,
            shard_size=16,
            workers=0,
            device="cpu",
            progress=False,
            resize=40,
            crop=32,
        )
    )
    mp.undo()
    data = load_features(root / "features")
    graph = ClassGraph.from_edges([("root", w) for w in [*CLASSES, UNSEEN]])
    vectors = np.random.default_rng(1).standard_normal((len(graph), 8)).astype(np.float32)
    semantics = ClassVectors(list(graph.wnids), vectors, source="random")
    seen = SeenData(data.features.astype(np.float32), data.labels, list(data.classes))
    model = create("dgp", epochs=30, hidden=[16], classifier="softmax", dropout=0.0).fit(
        seen, semantics, graph
    )
    save_model(model, root / "dgp")
    save_model(create("ridge").fit(seen, semantics), root / "ridge")  # predicts no classifiers
    return {"root": root, "store": store, "features": root / "features", "model": root / "dgp"}


def test_classifiers_stay_fixed_the_last_block_trains_and_the_loss_falls(dgp_setup):
    model = load_model(dgp_setup["model"])
    params = FinetuneParams(images=str(dgp_setup["store"]), **FAST)
    tuner = DGPFinetuner(model, dgp_setup["features"], params, seed=0)
    fixed = tuner.classifiers.copy()
    before = {k: v.clone() for k, v in tuner.loader.net.state_dict().items()}
    tuner.fit()
    np.testing.assert_array_equal(tuner.classifiers, fixed)  # bit-identical classifiers
    np.testing.assert_array_equal(
        fixed, fixed_classifiers(model, list(load_features(dgp_setup["features"]).classes))
    )
    block_names = {id(p) for p in last_block(tuner.net_).parameters()}
    after = tuner.net_.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    trained = {n for n, p in tuner.net_.named_parameters() if id(p) in block_names}
    assert changed and changed <= trained  # only the last block moved (BatchNorm stats frozen)
    assert tuner.loss_after_ < tuner.loss_before_
    np.testing.assert_allclose(np.linalg.norm(fixed, axis=1), 1.0, rtol=1e-6)


def test_same_seed_same_bytes_and_extract_loads_the_checkpoint(dgp_setup, tmp_path):
    params = FinetuneParams(images=str(dgp_setup["store"]), **FAST)
    a = finetune_dgp(dgp_setup["model"], dgp_setup["features"], tmp_path / "a", params, seed=0)
    finetune_dgp(dgp_setup["model"], dgp_setup["features"], tmp_path / "b", params, seed=0)
    assert (tmp_path / "a" / CHECKPOINT_NAME).read_bytes() == (tmp_path / "b" / CHECKPOINT_NAME).read_bytes()
    assert a["tool"] == "imagenet-zsl finetune-dgp" and a["backbone"] == "tiny-test"
    assert a["training"]["loss_after"] < a["training"]["loss_before"]
    net, info = create_backbone("tiny-test", str(tmp_path / "a" / CHECKPOINT_NAME))
    assert info.source == "file"
    random_net, _ = create_backbone("tiny-test", "random")
    probe = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert not torch.equal(net(probe)[0], random_net(probe)[0])


def test_cli_writes_the_checkpoint(dgp_setup, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["finetune-dgp", str(dgp_setup["model"]), "--features", str(dgp_setup["features"])]
    argv += ["--images", str(dgp_setup["store"]), "--out", str(out), "--finetune-epochs", "1"]
    argv += ["--finetune-batch-size", "8"]
    assert main(argv) == 0
    assert "re-extract with --backbone tiny-test" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "imagenet-zsl/finetuned-backbone-v1"
    assert [record["path"] for record in manifest["files"]] == [CHECKPOINT_NAME]
    assert set(manifest["inputs"]) == {"model", "features", "images"}
    assert manifest["parameters"]["scope"] == "last_block" and manifest["training"]["steps"] >= 1
    # the one reader verifies it: a changed checkpoint is refused
    read_manifest_verified(out, "imagenet-zsl/finetuned-backbone-v1")
    (out / CHECKPOINT_NAME).write_bytes((out / CHECKPOINT_NAME).read_bytes()[:-4] + b"oops")
    with pytest.raises(UserInputError, match="sha256"):
        read_manifest_verified(out, "imagenet-zsl/finetuned-backbone-v1")


def test_whole_backbone_variant_trains_outside_the_last_block_in_train_mode(dgp_setup):
    """The reference's recipe (``scope="backbone"``): weights and BatchNorm running statistics
    change outside the last block too; the classifiers stay fixed; the same seed repeats."""
    model = load_model(dgp_setup["model"])
    params = FinetuneParams(images=str(dgp_setup["store"]), epochs=1, batch_size=8, lr=0.05)
    tuner = DGPFinetuner(model, dgp_setup["features"], params, seed=0, scope="backbone")
    fixed = tuner.classifiers.copy()
    before = {k: v.clone() for k, v in tuner.loader.net.state_dict().items()}
    tuner.fit()
    assert len(tuner.losses_) == 4  # 32 images / batch 8, one epoch
    np.testing.assert_array_equal(tuner.classifiers, fixed)
    after = tuner.net_.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    block = {id(p) for p in last_block(tuner.net_).parameters()}
    outside = {n for n, p in tuner.net_.named_parameters() if id(p) not in block and n in changed}
    assert any(n.endswith("weight") for n in outside)  # an earlier conv or BN layer moved
    assert any(k.endswith("running_mean") for k in changed)  # train mode: batch statistics
    assert tuner.describe()["scope"] == "backbone" and not tuner.net_.training
    again = DGPFinetuner(model, dgp_setup["features"], params, seed=0, scope="backbone").fit()
    for key, value in again.net_.state_dict().items():
        assert torch.equal(value, after[key]), key
    with pytest.raises(UserInputError, match="scope"):
        DGPFinetuner(model, dgp_setup["features"], params, scope="layer3")


def test_random_resized_crop_boxes_and_flips():
    """torchvision's RandomResizedCrop box rule: inside the image, aspect within 3/4..4/3 (up to
    rounding), area at least 8 %; a flat image stays flat and the draws repeat for a seed."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        top, left, h, w = crop_box(32, 48, rng)
        assert 0 <= top and top + h <= 32 and 0 <= left and left + w <= 48
        assert CROP_RATIO[0] - 0.1 <= w / h <= CROP_RATIO[1] + 0.1
        assert h * w >= 0.08 * 32 * 48 * 0.8
    # an impossible aspect (1 x 40) falls back to the centre crop clamped to 3/4..4/3
    assert crop_box(1, 40, np.random.default_rng(0)) == (0, 19, 1, 1)
    flat = torch.full((2, 3, 16, 16), 77, dtype=torch.uint8)
    assert torch.equal(augment(flat, np.random.default_rng(1)), flat)
    ramp = torch.arange(16, dtype=torch.uint8).repeat(1, 3, 16, 1) * 10  # brighter to the right
    a = augment(ramp.repeat(8, 1, 1, 1), np.random.default_rng(5))
    b = augment(ramp.repeat(8, 1, 1, 1), np.random.default_rng(5))
    assert torch.equal(a, b)
    left_brighter = (a[..., :, :8].float().mean((1, 2, 3)) > a[..., :, 8:].float().mean((1, 2, 3))).tolist()
    assert True in left_brighter and False in left_brighter  # some images flipped, some not
