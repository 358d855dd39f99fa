"""DGP's second stage (`finetune-dgp`): the last block trains under the GCN's fixed classifiers.

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
from imagenet_zsl.features.backbones import create_backbone, last_block
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.image_filter.feature_data import load_features
from imagenet_zsl.image_filter.finetune import FinetuneParams
from imagenet_zsl.models.base import SeenData
from imagenet_zsl.models.dgp_finetune import CHECKPOINT_NAME, DGPFinetuner, finetune_dgp, fixed_classifiers
from imagenet_zsl.models.registry import create, load_model, save_model
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.image_filter.test_finetune import CLASSES, COLOURS, colour_jpeg

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
    assert manifest["format"] == "imagenet-zsl/finetuned-backbone"
    assert manifest["outputs"][0]["path"] == CHECKPOINT_NAME
