"""Issue 23 §1/§4, issue 24 (ten-crop), issue 26 (one-line errors) on the extraction side:
feature identity in every manifest, the stored backbone head, ``--ten-crop``, and the argument
and weights-file mistakes that must be one ``error:`` line."""

from __future__ import annotations

import hashlib
import io
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from imagenet_zsl.cli import main
from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.backbones import create_backbone
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.head import HEAD_FILE
from imagenet_zsl.features.identity import DEFAULT_LAYER, describe_identity, identity_differences
from imagenet_zsl.features.synthetic_store import make_store

CLASSES = {"n01440764": 5, "n01443537": 3}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("store"), "tree", CLASSES)


def test_identity_is_stable_for_one_command_and_changes_with_the_weights(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "a")
    fx.extract(store, classes, tmp_path / "b")  # the same command again, another directory
    fx.extract(store, classes, tmp_path / "seed1", seed=1)  # other random weights
    net, _ = create_backbone("tiny-test", "random", seed=0)
    torch.save(net.state_dict(), tmp_path / "w.pth")  # the seed-0 weights, now as a file
    fx.extract(store, classes, tmp_path / "file", weights=str(tmp_path / "w.pth"))
    a, b, seed1, from_file = (FeatureDir(tmp_path / n) for n in ("a", "b", "seed1", "file"))
    assert a.identity == b.identity
    assert a.manifest["feature_layer"] == DEFAULT_LAYER == a.identity["feature_layer"]
    assert a.identity["backbone"] == "tiny-test" and a.identity["dim"] == 32
    assert a.identity["weights_sha256"] and a.identity["preprocessing"]
    assert seed1.identity["weights_sha256"] != a.identity["weights_sha256"]
    differ = [k for k in a.identity if a.identity[k] != seed1.identity[k]]
    assert differ == ["weights_sha256", "weights_tensors"]
    assert identity_differences(a.identity, seed1.identity) == ["weights_tensors"]
    # the file's sha256 is recorded, but the weights are identified by their tensors: the seed-0
    # weights saved as a file are the same features as the seeded ones (issue 45 §1)
    sha = hashlib.sha256((tmp_path / "w.pth").read_bytes()).hexdigest()
    assert from_file.identity["weights_sha256"] == sha != a.identity["weights_sha256"]
    assert from_file.identity["weights_tensors"] == a.identity["weights_tensors"]
    assert identity_differences(from_file.identity, a.identity) == []
    np.testing.assert_array_equal(from_file.load().features, a.load().features)
    # random weights are flagged in the identity and in every table's label; the file is not
    assert a.identity["random_weights"] is True and "random_weights" not in from_file.identity
    assert describe_identity(a.identity).startswith("tiny-test (RANDOM weights) @")
    assert describe_identity(from_file.identity) == f"tiny-test @{a.identity['weights_tensors'][:8]}"


def test_stored_head_reproduces_the_stored_logits_and_is_verified(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "out", logits=True)
    fx.extract(store, classes, tmp_path / "plain")  # no --logits: the head is stored all the same
    features = FeatureDir(tmp_path / "out")
    head = features.head()
    net, _ = create_backbone("tiny-test", "random", seed=0)
    np.testing.assert_array_equal(head.weight, net.head.weight.detach().numpy())
    np.testing.assert_array_equal(head.bias, net.head.bias.detach().numpy())
    assert head.classes == sorted(ilsvrc2012_wnids()) == features.logit_classes
    block = features.load(with_logits=True)
    # logits = features @ W.T + b, up to the fp16 rounding of the stored features and logits
    np.testing.assert_allclose(head.logits(block.features), block.logits, rtol=2e-3, atol=5e-4)
    record = features.manifest["head"]
    assert record["sha256"] == hashlib.sha256((tmp_path / "out" / HEAD_FILE).read_bytes()).hexdigest()
    assert (tmp_path / "plain" / HEAD_FILE).read_bytes() == (tmp_path / "out" / HEAD_FILE).read_bytes()
    assert not FeatureDir(tmp_path / "plain").has_logits and FeatureDir(tmp_path / "plain").head() is not None

    path = tmp_path / "out" / HEAD_FILE
    buffer = io.BytesIO()
    np.savez(buffer, weight=head.weight * 2, bias=head.bias, classes=np.asarray(head.classes))
    path.write_bytes(buffer.getvalue())
    with pytest.raises(UserInputError, match=r"head.npz: sha256 does not match the manifest") as caught:
        FeatureDir(tmp_path / "out").head()
    assert "\n" not in str(caught.value)
    path.unlink()  # the manifest lists every file: a directory without its head does not open
    with pytest.raises(UserInputError, match=r"head.npz: missing, though the manifest lists it"):
        FeatureDir(tmp_path / "out")


def test_torchrun_ranks_merge_a_manifest_with_the_verified_head(tmp_path, store, fx, monkeypatch):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    for rank in (1, 0):  # 8 images in shards of 6: rank 1 writes shard 1, rank 0 shard 0 and merges
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        fx.extract(store, classes, out)
    features = FeatureDir(out)
    assert len(features.shards) == 2 and features.head() is not None
    single = tmp_path / "single"
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    fx.extract(store, classes, single)
    assert features.manifest["head"] == FeatureDir(single).manifest["head"]
    (out / HEAD_FILE).write_bytes(b"changed")
    assert main(["extract", "--merge", str(out)]) == 2


def test_ten_crop_feature_is_the_mean_over_torchvisions_ten_crops(tmp_path, fx):
    from torchvision import transforms

    one = make_store(tmp_path / "store", "tree", {"n01440764": 1})
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])
    fx.extract(one, classes, tmp_path / "ten", ten_crop=True, logits=True)
    fx.extract(one, classes, tmp_path / "centre")
    ten, centre = FeatureDir(tmp_path / "ten"), FeatureDir(tmp_path / "centre")
    block = ten.load(with_logits=True)
    # by hand: torchvision's Resize + TenCrop, each crop normalised, one forward, mean of the 10
    image = Image.open(io.BytesIO(fx.image_bytes(one, block.ids[0]))).convert("RGB")
    crops = transforms.TenCrop(56)(transforms.Resize(64)(image))
    assert len(crops) == 10
    normalise = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    )
    net, _ = create_backbone("tiny-test", "random", seed=0)
    with torch.no_grad():
        features, logits = net(torch.stack([normalise(c) for c in crops]))
    expected = features.mean(dim=0).numpy()
    np.testing.assert_allclose(block.features[0], expected, rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(block.logits[0], logits.mean(dim=0).numpy(), rtol=2e-3, atol=5e-4)
    assert not np.allclose(centre.load().features[0], expected, atol=1e-3)  # not the centre crop
    # recorded in the preprocessing, so in the identity; centre-crop records keep their old form
    assert ten.manifest["preprocessing"]["ten_crop"] is True
    assert "ten_crop" not in centre.manifest["preprocessing"]
    assert ten.identity["preprocessing"] != centre.identity["preprocessing"]
    # and in the resume identity: the same --out without --ten-crop is another extraction
    with pytest.raises(UserInputError, match=r"holds a different extraction \(preprocessing differ\)"):
        fx.extract(one, classes, tmp_path / "ten", logits=True)


def test_crop_larger_than_resize_is_one_error_line(tmp_path, store, fx, capsys):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    argv = fx.extract_argv(store, classes, tmp_path / "out")
    argv[argv.index("--resize") + 1], argv[argv.index("--crop") + 1] = "32", "512"
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --crop 512 is larger than --resize 32") and "\n" not in err
    assert "zero-padded" in err


def _evil_checkpoint(path, marker):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"weight": Evil()}, path)


@pytest.mark.parametrize("kind", ["malicious", "module", "garbage"])
def test_unreadable_weights_are_one_error_line_and_never_run_code(tmp_path, store, fx, capsys, kind):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    weights, marker = tmp_path / "w.pth", tmp_path / "PWNED"
    if kind == "malicious":
        _evil_checkpoint(weights, marker)
    elif kind == "module":
        torch.save(torch.nn.Linear(2, 2), weights)  # a whole pickled module, not a state_dict
    else:
        weights.write_bytes(b"certainly not a checkpoint")
    argv = fx.extract_argv(store, classes, tmp_path / "out")
    argv[argv.index("--weights") + 1] = str(weights)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {weights}: cannot read weights")
    expected = {
        "malicious": "it pickles posix.system, not only tensors",
        "module": "it pickles torch.nn.modules.linear.Linear",
        "garbage": "not a torch checkpoint",
    }[kind]
    assert expected in err and "state_dict" in err
    assert not marker.exists()


def test_feature_manifest_records_the_provenance_fields(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    weights = manifest["backbone"]["weights"]
    assert weights["source"] == "random" and len(weights["sha256"]) == 64
    assert manifest["feature_layer"] == DEFAULT_LAYER and manifest["dim"] == manifest["backbone"]["dim"]


def test_extraction_numerics_are_in_the_identity_and_shown(tmp_path, store, fx):
    """Issue 33 §6: precision and decoder are recorded in the identity (not compared by it)."""
    from imagenet_zsl.features.identity import describe_identity, identity_differences, numerics

    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "fp32")
    fx.extract(store, classes, tmp_path / "bf16", precision="bf16")
    fp32, bf16 = FeatureDir(tmp_path / "fp32").identity, FeatureDir(tmp_path / "bf16").identity
    assert numerics(fp32) == {"precision": "fp32", "decode": "pil", "mode": "deterministic"}
    assert numerics(bf16) == {"precision": "bf16", "decode": "pil", "mode": "deterministic"}
    assert identity_differences(fp32, bf16) == []  # the same network: a warning, not an error
    assert describe_identity(bf16) == describe_identity(fp32) + " [bf16]"


def test_a_timm_name_with_its_tag_and_the_same_weights_file_is_one_identity(tmp_path, store, fx):
    """Issue 33 §6: timm:tf_efficientnet_lite0 and timm:tf_efficientnet_lite0.in1k with one weights
    file give byte-identical features, so they must not be refused as "backbones differ"."""
    import timm

    from imagenet_zsl.features.identity import check_same_features, identity_differences

    torch.save(timm.create_model("tf_efficientnet_lite0", pretrained=False).state_dict(), tmp_path / "w.pth")
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    for name, out in (("timm:tf_efficientnet_lite0", "plain"), ("timm:tf_efficientnet_lite0.in1k", "tagged")):
        fx.extract(store, classes, tmp_path / out, backbone=name, weights=str(tmp_path / "w.pth"))
    plain, tagged = FeatureDir(tmp_path / "plain"), FeatureDir(tmp_path / "tagged")
    np.testing.assert_array_equal(plain.load().features, tagged.load().features)
    assert plain.identity["backbone"] != tagged.identity["backbone"]  # the names stay as given
    assert identity_differences(plain.identity, tagged.identity) == []
    assert check_same_features(plain.identity, tagged.identity, "model", "--features") is None
