import json

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import extract_loop
from imagenet_zsl.features.extract import plan_work
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.synthetic_store import BROKEN, make_store
from imagenet_zsl.images.store import open_store
from imagenet_zsl.splits.io import read_wnid_list

CLASSES = {"n01440764": 8, "n01443537": 3, "n01484850": 4}


@pytest.fixture(scope="module")
def tar_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("tars"), "tars", CLASSES)


@pytest.mark.parametrize("layout", ["tars", "tree", "flat"])
def test_features_equal_a_direct_forward_pass_in_every_layout(tmp_path, layout, fx):
    store = make_store(tmp_path / "store", layout, CLASSES)
    # label space = the classes file in file order (deliberately not sorted)
    order = ["n01484850", "n01440764", "n01443537"]
    classes = fx.write_classes(tmp_path / "classes.txt", order)
    result = fx.extract(store, classes, tmp_path / "out", logits=True)
    features = FeatureDir(tmp_path / "out")
    block = features.load(with_logits=True)
    assert features.classes == order and features.dim == 32
    assert sorted(block.ids.tolist()) == store.good_ids and result.images == len(store.good_ids)
    wnids = [i.split("/")[0] for i in block.ids]
    assert [order[label] for label in block.labels] == wnids
    expected_f, expected_l = fx.reference_outputs(store, block.ids.tolist())
    np.testing.assert_allclose(block.features, expected_f.astype(np.float16), rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(block.logits, expected_l.astype(np.float16), rtol=2e-3, atol=2e-4)
    assert features.logit_classes == sorted(features.logit_classes)
    assert len(features.logit_classes) == 1000
    assert features.verify() == []


def test_corrupt_files_are_skipped_listed_and_logged(tmp_path, tar_store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    result = fx.extract(tar_store, classes, tmp_path / "out")
    manifest = FeatureDir(tmp_path / "out").manifest
    skipped = {s["id"]: s["reason"] for s in manifest["skipped"]}
    assert sorted(skipped) == tar_store.broken_ids and len(skipped) == 4
    for image_id, reason in skipped.items():
        assert reason.startswith(BROKEN[tar_store.kinds[image_id]])
    assert result.skipped == 4 and manifest["counts"]["skipped"] == 4
    assert manifest["counts"]["images"] == sum(CLASSES.values()) - 4
    kept = set(FeatureDir(tmp_path / "out").load().ids.tolist())
    converted = [i for i, k in tar_store.kinds.items() if k in ("cmyk", "gray", "png")]
    assert len(converted) == 3 and kept.issuperset(converted)
    log = (tmp_path / "out" / "logs" / "extract.r000.log").read_text()
    assert all(f"skipped {i}" in log for i in skipped)


def test_real_resnet50_pipeline_equals_the_plain_reference_loop(tmp_path, fx):
    store = make_store(tmp_path / "store", "tree", {"n01440764": 2}, size=(300, 240), oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])
    fx.extract(
        store, classes, tmp_path / "out", backbone="resnet50", resize=256, crop=224, logits=True, batch_size=2
    )
    block = FeatureDir(tmp_path / "out").load(with_logits=True)
    assert block.features.shape == (2, 2048)
    expected_f, expected_l = fx.reference_outputs(store, block.ids.tolist(), "resnet50", 256, 224)
    np.testing.assert_allclose(block.features, expected_f.astype(np.float16), rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(block.logits, expected_l.astype(np.float16), rtol=2e-3, atol=2e-3)


def test_killed_run_resumes_to_the_same_bytes(tmp_path, tar_store, monkeypatch, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(tar_store, classes, tmp_path / "whole")

    real_write, calls = extract_loop.write_shard, []

    def dying_write(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while the second shard is being written
        return real_write(*args, **kwargs)

    monkeypatch.setattr(extract_loop, "write_shard", dying_write)
    with pytest.raises(KeyboardInterrupt):
        fx.extract(tar_store, classes, tmp_path / "killed")
    monkeypatch.setattr(extract_loop, "write_shard", real_write)
    out = tmp_path / "killed"
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in out.glob("*.done.json")) == ["r000-s000000.done.json"]
    (out / ".r000-s000001.features.npy.junk.tmp").write_bytes(b"half a file")  # debris
    result = fx.extract(tar_store, classes, out)
    assert result.shards_already_done == 1 and result.shards_written == 2
    assert not (out / ".r000-s000001.features.npy.junk.tmp").exists()  # the merge removed the debris
    assert fx.all_files(out) == fx.all_files(tmp_path / "whole")


def test_finished_run_rerun_verifies_and_catches_tampering(tmp_path, tar_store, capsys, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    fx.extract(tar_store, classes, out)
    before = fx.all_files(out)
    result = fx.extract(tar_store, classes, out)
    assert result.verified and result.shards_written == 0 and fx.all_files(out) == before
    assert "all sha256 verified" in capsys.readouterr().out
    features = np.load(out / "r000-s000001.features.npy")
    features[0, 0] += 1
    np.save(out / "r000-s000001.features.npy", features)
    with pytest.raises(UserInputError, match=r"r000-s000001: sha256 mismatch"):
        fx.extract(tar_store, classes, out)
    assert main(["extract", "--merge", str(out)]) == 2


def test_an_output_directory_never_mixes_two_runs(tmp_path, tar_store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    fx.extract(tar_store, classes, out)
    with pytest.raises(UserInputError, match=r"holds a different extraction \(.*seed.*\)"):
        fx.extract(tar_store, classes, out, seed=1)
    with pytest.raises(UserInputError, match="batch_size"):
        fx.extract(tar_store, classes, out, batch_size=2)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(UserInputError, match="not empty and is not an extraction directory"):
        fx.extract(tar_store, classes, tmp_path / "other")


def test_per_class_sample_is_seeded_stable_and_layout_independent(tmp_path):
    counts = {"n01440764": 20, "n01443537": 3, "n01484850": 12}
    tars = open_store(make_store(tmp_path / "a", "tars", counts, oddities=False).root, progress=False)
    tree = open_store(make_store(tmp_path / "b", "tree", counts, oddities=False).root, progress=False)
    wnids = list(counts)
    first = plan_work(tars, wnids, per_class=5, seed=7)
    assert np.bincount(first.labels).tolist() == [5, 3, 5]
    assert plan_work(tars, wnids, per_class=5, seed=7).ids().tolist() == first.ids().tolist()
    assert sorted(plan_work(tree, wnids, per_class=5, seed=7).ids()) == sorted(first.ids())
    other_seed = plan_work(tars, wnids, per_class=5, seed=8)
    assert set(other_seed.ids()) != set(first.ids())
    alone = plan_work(tars, ["n01484850"], per_class=5, seed=7)
    assert set(alone.ids()) == {i for i in first.ids() if i.startswith("n01484850/")}
    assert plan_work(tars, wnids).ids().size == 35
    with pytest.raises(UserInputError, match="--per-class 0"):
        plan_work(tars, wnids, per_class=0)


def test_per_class_extraction_samples_before_decoding(tmp_path, tar_store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    result = fx.extract(tar_store, classes, tmp_path / "out", per_class=2, seed=3)
    manifest = FeatureDir(tmp_path / "out").manifest
    assert manifest["counts"]["work_items"] == 6
    assert result.images + result.skipped == 6
    assert manifest["parameters"]["per_class"] == 2 and manifest["parameters"]["seed"] == 3
    assert manifest["format"] == "imagenet-zsl/features-v2" and manifest["tool"] == "imagenet-zsl extract"


def test_classes_file_rules(tmp_path, tar_store, fx):
    path = tmp_path / "c.txt"
    path.write_text("# my split\nn01440764\n\nn01443537\textra column\n")
    assert read_wnid_list(path) == ["n01440764", "n01443537"]
    path.write_text("n01440764\nn01443537\nn01440764\n")
    with pytest.raises(UserInputError, match=r"c.txt:3: n01440764 already listed on line 1"):
        read_wnid_list(path)
    fx.write_classes(path, ["n09999999"])
    with pytest.raises(UserInputError, match="none of its 1 classes has images"):
        fx.extract(tar_store, path, tmp_path / "out")
    fx.write_classes(path, ["n01443537", "n09999999"])
    fx.extract(tar_store, path, tmp_path / "out2")
    manifest = FeatureDir(tmp_path / "out2").manifest
    assert manifest["classes"] == ["n01443537", "n09999999"]
    assert manifest["classes_without_images"] == ["n09999999"]


def test_worker_processes_give_identical_bytes(tmp_path, tar_store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(tar_store, classes, tmp_path / "w0", workers=0)
    fx.extract(tar_store, classes, tmp_path / "w2", workers=2)
    assert fx.all_files(tmp_path / "w0") == fx.all_files(tmp_path / "w2")


def test_torchvision_decoder_skips_the_same_files_and_agrees_closely(tmp_path, tar_store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(tar_store, classes, tmp_path / "pil")
    fx.extract(tar_store, classes, tmp_path / "tv", decode="torchvision")
    pil, tv = FeatureDir(tmp_path / "pil"), FeatureDir(tmp_path / "tv")
    assert tv.manifest["parameters"]["decode"] == "torchvision"
    assert tv.manifest["skipped"] == pil.manifest["skipped"]
    a, b = pil.load(), tv.load()
    assert a.ids.tolist() == b.ids.tolist()
    cosine = (a.features * b.features).sum(1) / (
        np.linalg.norm(a.features, axis=1) * np.linalg.norm(b.features, axis=1)
    )
    assert cosine.min() > 0.99  # tensor resize vs PIL resize: close, not identical


def test_truncated_tar_member_is_skipped_with_its_reason(tmp_path, fx):
    import os
    import tarfile

    store = make_store(tmp_path / "s", "tars", {"n01440764": 3}, oddities=False)
    path = store.root / "n01440764.tar"
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    os.truncate(path, last.offset_data + 100)
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])
    fx.extract(store, classes, tmp_path / "out")
    manifest = FeatureDir(tmp_path / "out").manifest  # #44: counted in the store ledger, not read
    assert manifest["skipped"] == [] and manifest["counts"]["images"] == 2
    [entry] = manifest["store_ledger"]["sources"]
    assert (
        entry["skipped"] == {"truncated": 1} and entry["bytes_unread"] == last.offset_data + 100 - last.offset
    )


def test_cli_extract_end_to_end_and_argument_errors(tmp_path, tar_store, capsys, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    argv = [
        "extract",
        "--store",
        str(tar_store.root),
        "--classes",
        str(classes),
        "--out",
        str(out),
        "--backbone",
        "tiny-test",
        "--weights",
        "random",
        "--device",
        "cpu",
        "--workers",
        "0",
        "--resize",
        "64",
        "--crop",
        "56",
        "--no-progress",
    ]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "extracted 11 images (4 skipped)" in stdout and "images/s" in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backbone"]["weights"]["source"] == "random"
    assert "RANDOM WEIGHTS" in manifest["backbone"]["weights"]["note"]
    assert main(["extract", "--store", str(tar_store.root)]) == 2
    assert "extract needs --classes, --out" in capsys.readouterr().err


def test_bf16_autocast_path_stays_close_to_fp32(tmp_path, tar_store, fx):
    """The GPU default precision, exercised on CPU autocast: same rows, features within bf16."""
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(tar_store, classes, tmp_path / "fp32")
    fx.extract(tar_store, classes, tmp_path / "bf16", precision="bf16", mode="fast")
    a, b = FeatureDir(tmp_path / "fp32"), FeatureDir(tmp_path / "bf16")
    assert b.manifest["parameters"]["precision"] == "bf16"
    x, y = a.load(), b.load()
    assert x.ids.tolist() == y.ids.tolist()
    assert not np.array_equal(x.features, y.features)
    np.testing.assert_allclose(y.features, x.features, rtol=0.05, atol=0.02)


def test_padding_short_batches_does_not_change_rows(tmp_path, tar_store, fx):
    """The CUDA fast path pads batches shortened by skipped files to one fixed shape."""
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(tar_store, classes, tmp_path / "plain", pad_batches=False)
    fx.extract(tar_store, classes, tmp_path / "padded", pad_batches=True)
    a, b = FeatureDir(tmp_path / "plain").load(), FeatureDir(tmp_path / "padded").load()
    assert a.ids.tolist() == b.ids.tolist()
    np.testing.assert_allclose(a.features, b.features, rtol=2e-3, atol=2e-4)


def test_timm_backbone_extracts_with_its_own_preprocessing_and_records_pretraining(tmp_path, tar_store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    pretrained_on = fx.write_classes(tmp_path / "pretrain.txt", ["n01440764", "n01443537"])
    fx.extract(
        tar_store,
        classes,
        tmp_path / "out",
        backbone="timm:resnet18.a1_in1k",
        pretraining_classes=str(pretrained_on),
        resize=None,
        crop=None,
        shard_size=64,
    )
    features = FeatureDir(tmp_path / "out")
    pre = features.manifest["preprocessing"]
    # timm's pretrained config of resnet18.a1_in1k: 224 crop at crop_pct 0.95, bicubic
    assert (pre["resize"], pre["crop"], pre["interpolation"]) == (235, 224, "bicubic (antialiased)")
    assert features.dim == 512 and features.num_rows == len(tar_store.good_ids)
    assert features.manifest["pretraining"]["n_classes"] == 2
    assert features.manifest["store_problems"] == []


def test_pretraining_is_recorded_from_the_backbone_name():
    from imagenet_zsl.features.extract import ExtractConfig
    from imagenet_zsl.features.extract_record import pretraining_record

    def record(backbone: str, source: str = "hf-cache") -> dict:
        cfg = ExtractConfig(store="s", classes_file="c", backbone=backbone, out="o")
        return pretraining_record(cfg, {"source": source})

    assert record("timm:vit_small_patch16_224.augreg_in21k")["label_sets"] == ["in21k"]
    assert record("resnet50", "torch-hub-cache")["label_sets"] == ["in1k"]
    assert record("open_clip:ViT-B-32/laion2b_s34b_b79k")["web_data"] is True
    assert record("tiny-test", "random")["n_classes"] == 0
