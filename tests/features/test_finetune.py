"""`images filter --finetune-last-block`: fine-tune the last block on the images, cross-fitted.

Store: 4 classes x 10 JPEGs (tree layout), each class a solid, clearly distinct colour plus noise,
so the tiny random-initialised test backbone learns them in a few steps. One image of class 0's
colour is planted in class 1's folder (a mislabelled image): the filter must reject it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from imagenet_zsl.cli import build_parser, handler_config
from imagenet_zsl.cli_types import CommandTree
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import finetune as module
from imagenet_zsl.features.backbones import create_backbone, last_block
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.finetune import FinetuneParams
from imagenet_zsl.features.in_memory import load_features
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.image_filter import cli as filter_cli
from imagenet_zsl.image_filter.params import FilterParams
from imagenet_zsl.image_filter.quality import filter_feature_dir
from imagenet_zsl.images import cli as images_cli
from imagenet_zsl.models import commands as model_commands
from imagenet_zsl.registry import load_target
from imagenet_zsl.splits import cli as splits_cli

CLASSES = ["n01440764", "n01443537", "n01484850", "n01491361"]
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 50, 220), (230, 220, 40)]
PER_CLASS = 10
PLANTED = f"{CLASSES[1]}/planted_from_{CLASSES[0]}.JPEG"
FAST = {"epochs": 10, "batch_size": 8, "lr": 0.1}  # tiny random net: small features, high lr


def colour_jpeg(rng: np.random.Generator, colour: tuple[int, int, int]) -> bytes:
    pixels = np.clip(np.array(colour)[None, None, :] + rng.integers(-20, 21, (40, 40, 3)), 0, 255)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> dict[str, Path]:
    """A colour store with one planted image, and its features extracted with tiny-test."""
    root = tmp_path_factory.mktemp("finetune")
    store = root / "store"
    rng = np.random.default_rng(0)
    for wnid, colour in zip(CLASSES, COLOURS, strict=True):
        (store / wnid).mkdir(parents=True)
        for k in range(PER_CLASS):
            (store / wnid / f"{wnid}_{k}.JPEG").write_bytes(colour_jpeg(rng, colour))
    (store / PLANTED).write_bytes(colour_jpeg(rng, COLOURS[0]))
    classes = root / "classes.txt"
    classes.write_text("".join(f"{w}\n" for w in CLASSES))
    features = root / "features"
    mp = pytest.MonkeyPatch()
    mp.setenv("IMAGENET_ZSL_CACHE", str(root / "index-cache"))
    run_extraction(
        ExtractConfig(
            store=str(store),
            classes_file=str(classes),
            backbone="tiny-test",
            out=str(features),
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
    return {"store": store, "features": features, "root": root}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def run(dataset, out: Path, seed: int = 0, **finetune) -> dict:
    params = FinetuneParams(images=str(dataset["store"]), **{**FAST, **finetune})
    return filter_feature_dir(
        dataset["features"], out, FilterParams(folds=5, seed=seed, device="cpu"), finetune=params
    )


def test_last_block_of_the_test_backbone_and_resnet():
    net, _ = create_backbone("tiny-test", "random")
    block = last_block(net)
    assert isinstance(block[0], torch.nn.Conv2d) and block[0].out_channels == 32
    assert block[0] is [m for m in net.model if isinstance(m, torch.nn.Conv2d)][-1]
    resnet, _ = create_backbone("resnet18", "random")
    assert last_block(resnet) is resnet.model.layer4


def test_finetune_rejects_the_planted_image_and_judges_every_image_out_of_fold(dataset, tmp_path):
    calls = []
    original = module.LastBlockFinetuner.__call__

    def spy(self, train_rows, test_rows, seed):
        calls.append((set(train_rows.tolist()), set(test_rows.tolist())))
        return original(self, train_rows, test_rows, seed)

    mp = pytest.MonkeyPatch()
    mp.setattr(module.LastBlockFinetuner, "__call__", spy)
    try:
        summary = run(dataset, tmp_path / "out")
    finally:
        mp.undo()
    n = len(CLASSES) * PER_CLASS + 1
    assert len(calls) == 5
    judged = [row for _, test in calls for row in test]
    assert sorted(judged) == list(range(n))  # every image judged exactly once
    assert all(not (train & test) for train, test in calls)  # never by a model that saw it
    rejected = read_csv(tmp_path / "out" / "rejected.csv")
    assert [r["image_id"] for r in rejected] == [PLANTED]
    assert rejected[0]["predicted_wnid"] == CLASSES[0]
    kept = {r["image_id"] for r in read_csv(tmp_path / "out" / "kept.csv")}
    assert len(kept) == n - 1 and PLANTED not in kept
    assert summary["images_after"] == n - 1
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["parameters"]["classifier"] == "finetune-last-block"
    assert manifest["parameters"]["finetune"]["backbone"] == "tiny-test"
    assert manifest["parameters"]["finetune"]["weights"]["source"] == "random"
    assert "fine-tuned last block of tiny-test" in (tmp_path / "out" / "report.md").read_text()


def test_same_seed_same_bytes_and_resume(dataset, tmp_path):
    run(dataset, tmp_path / "a", epochs=2)
    run(dataset, tmp_path / "b", epochs=2)
    for name in ("kept.csv", "rejected.csv", "classes.csv", "manifest.json", "report.md"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # resume: per-fold results of an interrupted run are reused (same key), not retrained
    work = tmp_path / ".c.work"
    mp = pytest.MonkeyPatch()
    original = module.LastBlockFinetuner.__call__
    calls = []

    def fail_after_two(self, train_rows, test_rows, seed):
        calls.append(seed)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, train_rows, test_rows, seed)

    mp.setattr(module.LastBlockFinetuner, "__call__", fail_after_two)
    with pytest.raises(KeyboardInterrupt):
        run(dataset, tmp_path / "c", epochs=2)
    mp.undo()
    assert len(list(work.glob("seed0-fold*.npy"))) == 2 and not (tmp_path / "c").exists()
    calls.clear()
    mp.setattr(
        module.LastBlockFinetuner, "__call__", lambda self, *a: (calls.append(a[2]), original(self, *a))[1]
    )
    run(dataset, tmp_path / "c", epochs=2)
    mp.undo()
    assert len(calls) == 3
    assert (tmp_path / "c" / "kept.csv").read_bytes() == (tmp_path / "a" / "kept.csv").read_bytes()


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="imagenet-zsl")
    tree = CommandTree(top)
    splits_cli.register(tree)  # the stages register in flow order: images joins the 'splits' group
    images_cli.register(tree)  # the stage that owns the 'images' group creates it first
    filter_cli.register(tree)
    return top


def test_cli_runs_the_finetune_path(dataset, tmp_path, capsys):
    out = tmp_path / "out"
    args = parser().parse_args(
        [
            "images",
            "filter",
            "--features",
            str(dataset["features"]),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--finetune-last-block",
            "--images",
            str(dataset["store"]),
            "--backbone",
            "tiny-test",
            "--weights",
            "random",
            "--finetune-epochs",
            "1",
            "--finetune-batch-size",
            "16",
            "--no-progress",
            "--threads",
            "1",
        ]
    )
    assert load_target(args.func)(args) == 0
    assert "images and" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["images"] == str(dataset["store"])
    assert manifest["parameters"]["finetune"]["epochs"] == 1


def cli_error(dataset, tmp_path, *extra: str) -> str:
    args = parser().parse_args(
        [
            "images",
            "filter",
            "--features",
            str(dataset["features"]),
            "--out",
            str(tmp_path / "out"),
            "--device",
            "cpu",
            *extra,
        ]
    )
    with pytest.raises(UserInputError) as caught:
        load_target(args.func)(args)
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.work").exists()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_input_gives_one_clear_line(dataset, tmp_path):
    assert "needs --images STORE" in cli_error(dataset, tmp_path, "--finetune-last-block")
    assert "only used with --finetune-last-block" in cli_error(
        dataset, tmp_path, "--images", str(dataset["store"])
    )
    assert "--allow-incomplete: only used with" in cli_error(dataset, tmp_path, "--allow-incomplete")
    assert "--backbone 'nope' is unknown" in cli_error(
        dataset, tmp_path, "--finetune-last-block", "--images", str(dataset["store"]), "--backbone", "nope"
    )
    assert "image store not found" in cli_error(
        dataset, tmp_path, "--finetune-last-block", "--images", str(tmp_path / "nowhere")
    )
    # a store that lacks some of the features' images (here: the planted one)
    partial = tmp_path / "partial"
    for wnid in CLASSES:
        (partial / wnid).mkdir(parents=True)
        for image in (dataset["store"] / wnid).glob(f"{wnid}_*.JPEG"):
            (partial / wnid / image.name).write_bytes(image.read_bytes())
    message = cli_error(dataset, tmp_path, "--finetune-last-block", "--images", str(partial))
    assert "1 of the 41 images of the features are not in this store" in message
    assert PLANTED in message


def test_finetune_reads_ids_and_labels_but_never_the_feature_array(dataset, tmp_path):
    """#16 memory: the fine-tuning filter trains on the images, so it must not hold the (N, D)
    features in memory; ids, labels and D come from the same directory."""
    full = load_features(dataset["features"])
    light = load_features(dataset["features"], features=False)
    assert light.features.shape == (len(full.labels), 0)
    assert light.dim == full.dim == 32
    np.testing.assert_array_equal(light.ids, full.ids)
    np.testing.assert_array_equal(light.labels, full.labels)
    assert light.classes == full.classes and light.manifest_record == full.manifest_record

    kinds = []
    original = FeatureDir.array

    def spy(self, name, kind, mmap=True):
        kinds.append(kind)
        return original(self, name, kind, mmap)

    mp = pytest.MonkeyPatch()
    mp.setattr(FeatureDir, "array", spy)
    try:
        summary = run(dataset, tmp_path / "out")
    finally:
        mp.undo()
    assert "features" not in kinds
    assert summary["images_after"] == len(CLASSES) * PER_CLASS  # the planted image still goes


@pytest.fixture
def gapped_wds(tmp_path, monkeypatch) -> dict[str, Path]:
    """A webdataset store missing the middle of its numbered series (-0000, -0002: -0001 never
    arrived), and the features extract read from it with --allow-incomplete."""
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "index-cache"))
    store = make_store(tmp_path / "wds", "wds", dict.fromkeys(CLASSES, 4), size=(40, 32), oddities=False)
    (store.root / "imagenet22k-train-0001.tar").rename(store.root / "imagenet22k-train-0002.tar")
    (tmp_path / "classes.txt").write_text("".join(f"{w}\n" for w in CLASSES))
    config = {
        "store": str(store.root),
        "classes_file": str(tmp_path / "classes.txt"),
        "backbone": "tiny-test",
    }
    config.update(weights="random", batch_size=8, workers=0, device="cpu", progress=False, resize=40, crop=32)
    run_extraction(ExtractConfig(**config, out=str(tmp_path / "features"), allow_incomplete=True))
    return {"store": store.root, "features": tmp_path / "features"}


def test_finetune_takes_allow_incomplete_as_extract_does(gapped_wds, tmp_path):
    """Issue 44 §1 follow-up: the fine-tuner opens the store itself; an incomplete one is one line
    naming the gap and the flag, which the command now has: with it the store is read as it is and
    the manifest records it as extract's does (``store_ledger``'s ``incomplete``)."""
    argv = ["images", "filter", "--features", gapped_wds["features"], "--out", tmp_path / "out", "--device"]
    argv += ["cpu", "--folds", "2", "--finetune-last-block", "--images", gapped_wds["store"], "--backbone"]
    argv += ["tiny-test", "--weights", "random", "--finetune-epochs", "1", "--finetune-batch-size", "8"]
    argv += ["--no-progress", "--threads", "1"]
    args = parser().parse_args([str(a) for a in argv])
    with pytest.raises(UserInputError) as caught:
        load_target(args.func)(args)
    message = str(caught.value)
    assert "imagenet22k-train-0001.tar is missing" in message and "--allow-incomplete" in message
    assert not (tmp_path / "out").exists()
    args = parser().parse_args([str(a) for a in [*argv, "--allow-incomplete"]])
    assert load_target(args.func)(args) == 0
    finetune = json.loads((tmp_path / "out" / "manifest.json").read_text())["parameters"]["finetune"]
    assert finetune["allow_incomplete"] is True
    (missing,) = finetune["store_ledger"]["incomplete"]
    assert "imagenet22k-train-0001.tar is missing" in missing["detail"]
    extracted = json.loads((gapped_wds["features"] / "manifest.json").read_text())["store_ledger"]
    assert finetune["store_ledger"]["incomplete"] == extracted["incomplete"]


def test_allow_incomplete_is_one_flag_for_extract_and_both_finetune_commands(monkeypatch, tmp_path):
    """One definition (``cli_types.allow_incomplete_flag``): the same help on ``extract``, ``images
    filter`` and ``finetune-dgp``; finetune-dgp hands it to the fine-tuner."""

    def subcommand(*names: str) -> argparse.ArgumentParser:
        found = build_parser()
        for name in names:
            found = next(a for a in found._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        return found

    helps = set()
    for names in (("extract",), ("images", "filter"), ("finetune-dgp",)):
        (action,) = [a for a in subcommand(*names)._actions if "--allow-incomplete" in a.option_strings]
        helps.add(action.help)
    assert len(helps) == 1
    seen = []
    monkeypatch.setattr(model_commands.devices, "tune_process_for_image_pipeline", lambda: None)
    monkeypatch.setattr(model_commands, "run_finetune_dgp", lambda *a, **k: seen.append(a[3]) or {})
    argv = ["finetune-dgp", "m", "--features", "f", "--images", "s", "--out", str(tmp_path / "o")]
    for extra, want in (([], False), (["--allow-incomplete"], True)):
        args = build_parser().parse_args([*argv, *extra])
        handler = load_target(args.func)
        with pytest.raises(KeyError):  # the stand-in returns no manifest: stop after the call
            handler(handler_config(handler, args))
        assert seen.pop().allow_incomplete is want
