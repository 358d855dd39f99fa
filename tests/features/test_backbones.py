import hashlib

import pytest
import torch

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.backbones import create_backbone, get_spec
from imagenet_zsl.features.hub_weights import tensor_digest


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    """An empty torch hub cache, and nothing downloaded (``HF_HUB_OFFLINE`` holds for torch hub too)."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "torch"


def _outputs(net, x):
    with torch.no_grad():
        return net(x)


def test_registry_dimensions_match_the_networks():
    x = torch.rand(2, 3, 64, 64)
    for name in ("resnet18", "tiny-test"):
        features, logits = _outputs(create_backbone(name, "random")[0], x)
        assert features.shape == (2, get_spec(name).dim) and logits.shape == (2, 1000)
    assert get_spec("resnet50").dim == get_spec("resnet101").dim == 2048


def test_logits_are_the_classifier_applied_to_the_pooled_features():
    net, _ = create_backbone("resnet18", "random")
    x = torch.rand(2, 3, 64, 64)
    features, logits = _outputs(net, x)
    with torch.no_grad():
        original = net.model
        pooled = original(x)  # fc was replaced by Identity: the pooled features
        assert torch.equal(pooled, features)
        assert torch.allclose(net.head(pooled), logits)


def test_random_weights_are_seeded_and_stamped():
    a, info = create_backbone("tiny-test", "random", seed=0)
    b, _ = create_backbone("tiny-test", "random", seed=0)
    c, _ = create_backbone("tiny-test", "random", seed=1)
    x = torch.rand(1, 3, 32, 32)
    assert torch.equal(_outputs(a, x)[0], _outputs(b, x)[0])
    assert not torch.equal(_outputs(a, x)[0], _outputs(c, x)[0])
    record = info.describe()
    assert record["source"] == "random" and record["seed"] == 0
    assert "for tests and benchmarks only" in record["note"]
    # random weights have no file: their sha256 is that of the seeded state, by hand here
    digest = hashlib.sha256()
    for key, value in a.state_dict().items():
        digest.update(f"{key}:{value.dtype}:{tuple(value.shape)}\n".encode())
        digest.update(value.contiguous().numpy().tobytes())
    assert record["sha256"] == digest.hexdigest()
    assert create_backbone("tiny-test", "random", seed=0)[1].sha256 == record["sha256"]
    assert create_backbone("tiny-test", "random", seed=1)[1].sha256 != record["sha256"]


def test_missing_pretrained_weights_are_an_error_never_random(torch_home):
    with pytest.raises(UserInputError) as caught:
        create_backbone("resnet50")
    message = str(caught.value)
    assert str(torch_home / "hub" / "checkpoints" / "resnet50-0676ba61.pth") in message
    assert "https://download.pytorch.org/models/resnet50-0676ba61.pth" in message
    with pytest.raises(UserInputError, match="has no pretrained weights; pass --weights random"):
        create_backbone("tiny-test")


def test_weights_found_in_the_torch_hub_cache_are_loaded(torch_home):
    source, _ = create_backbone("resnet18", "random", seed=5)
    # a torchvision-format checkpoint: the original ResNet keys, classifier under fc.
    state = {
        **{k.removeprefix("model."): v for k, v in source.state_dict().items() if k.startswith("model.")},
        **{
            "fc." + k.removeprefix("head."): v
            for k, v in source.state_dict().items()
            if k.startswith("head.")
        },
    }
    path = torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    net, info = create_backbone("resnet18")
    assert info.source == "torch-hub-cache" and info.sha256 == sha256_file(path)
    # torchvision's own names (fc.) load into the FeatureNet (head.): the same tensors' digest
    assert info.tensors_sha256 == tensor_digest(source)
    x = torch.rand(1, 3, 64, 64)
    for mine, theirs in zip(_outputs(net, x), _outputs(source, x), strict=True):
        assert torch.equal(mine, theirs)


def test_weights_file_roundtrip_and_mismatch(tmp_path):
    source, _ = create_backbone("tiny-test", "random", seed=3)
    path = tmp_path / "tiny.pt"
    torch.save({"state_dict": {"module." + k: v for k, v in source.state_dict().items()}}, path)
    net, info = create_backbone("tiny-test", str(path))
    record = info.describe()
    assert record == {
        "source": "file",
        "path": str(path.resolve()),
        "sha256": sha256_file(path),
        "tensors_sha256": tensor_digest(source),  # the seeded weights' tensors, now from a file
    }
    x = torch.rand(1, 3, 32, 32)
    assert torch.equal(_outputs(net, x)[0], _outputs(source, x)[0])
    with pytest.raises(UserInputError, match=r"tiny.pt: weights do not fit --backbone resnet18"):
        create_backbone("resnet18", str(path))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserInputError, match="junk.pt: cannot read weights"):
        create_backbone("tiny-test", str(tmp_path / "junk.pt"))
    with pytest.raises(UserInputError, match="file not found"):
        create_backbone("tiny-test", str(tmp_path / "absent.pt"))


def test_tensor_digest_by_hand_and_whatever_file_held_the_tensors(tmp_path):
    """Issue 45 §1: the weights are identified by their tensors (sorted names, dtype, shape,
    bytes), so .pth and .safetensors, another tensor order and a FeatureNet's own names give one
    digest; a single changed value gives another."""
    from safetensors.torch import save_file

    source, info = create_backbone("tiny-test", "random", seed=3)
    state = source.state_dict()
    digest = hashlib.sha256()
    for key in sorted(state):
        value = state[key].contiguous()
        digest.update(f"{key}\0{str(value.dtype).removeprefix('torch.')}\0{tuple(value.shape)}\n".encode())
        digest.update(value.numpy().tobytes())
    assert tensor_digest(source) == info.tensors_sha256 == digest.hexdigest()
    pth, safe, reordered = tmp_path / "w.pth", tmp_path / "w.safetensors", tmp_path / "r.pth"
    torch.save(state, pth)
    save_file({k: v.contiguous() for k, v in state.items()}, str(safe))
    torch.save(dict(reversed(list(state.items()))), reordered)
    infos = [create_backbone("tiny-test", str(path))[1] for path in (pth, safe, reordered)]
    assert len({i.sha256 for i in infos}) == 3  # three files ...
    assert {i.tensors_sha256 for i in infos} == {info.tensors_sha256}  # ... one set of tensors
    changed = dict(state)
    changed["head.bias"] = state["head.bias"].clone()
    changed["head.bias"][0] += 1e-3
    torch.save(changed, tmp_path / "changed.pth")
    assert (
        create_backbone("tiny-test", str(tmp_path / "changed.pth"))[1].tensors_sha256 != info.tensors_sha256
    )


def test_a_fifo_as_weights_is_refused_unopened(tmp_path):
    import os

    os.mkfifo(tmp_path / "w.pth")
    with pytest.raises(UserInputError, match=r"w.pth: the --weights file is a FIFO \(named pipe\)"):
        create_backbone("tiny-test", str(tmp_path / "w.pth"))


def test_unknown_backbones_name_the_choices():
    with pytest.raises(UserInputError, match="choose one of resnet101, resnet18, resnet50, resnet50-v2"):
        get_spec("vgg16")
    with pytest.raises(UserInputError, match="timm has no model"):
        get_spec("timm:not_a_model_at_all")


def test_timm_backbone_pools_features_and_refuses_missing_weights(tmp_path, monkeypatch):
    import huggingface_hub.constants

    net, _ = create_backbone("timm:resnet18", "random")
    features, logits = _outputs(net, torch.rand(1, 3, 64, 64))
    assert features.shape == (1, 512) and logits.shape == (1, 1000)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserInputError, match="no pretrained weights for --backbone timm:resnet18: timm/"):
        create_backbone("timm:resnet18")


def test_timm_vit_uses_its_own_preprocessing_and_pre_logit_features():
    from imagenet_zsl.features.backbones import backbone_preprocessing

    assert get_spec("vit_tiny_patch16_224.augreg_in21k").library == "timm"  # plain tagged name
    net, _ = create_backbone("timm:vit_tiny_patch16_224.augreg_in21k", "random")
    pre = backbone_preprocessing(net)
    # the model's pretrained config: 224 input, crop_pct 0.9, bicubic, mean/std 0.5
    assert (pre.resize, pre.crop, pre.interpolation) == (248, 224, "bicubic")
    assert pre.mean == (0.5, 0.5, 0.5) and pre.std == (0.5, 0.5, 0.5)
    x = torch.rand(2, 3, 224, 224)
    features, logits = _outputs(net, x)
    assert features.shape == (2, 192) and logits.shape == (2, 21843)
    with torch.inference_mode():
        expected = net.model.forward_head(net.model.forward_features(x), pre_logits=True)
    assert torch.equal(features, expected)
    again, _ = create_backbone("timm:vit_tiny_patch16_224.augreg_in21k", "random")
    assert torch.equal(_outputs(again, x)[0], features)  # deterministic (seeded)
    assert backbone_preprocessing(net, resize=80, crop=64).crop == 64  # flags override


def test_open_clip_image_tower_is_a_backbone():
    pytest.importorskip("open_clip")
    from imagenet_zsl.features.backbones import backbone_preprocessing

    net, info = create_backbone("open_clip:RN50/openai", "random")
    pre = backbone_preprocessing(net)
    assert (pre.resize, pre.crop, pre.interpolation) == (224, 224, "bicubic")
    assert pre.mean[0] == pytest.approx(0.48145466)
    features, logits = _outputs(net, torch.rand(1, 3, 224, 224))
    assert features.shape == (1, 1024) and logits is None
    assert info.source == "random"
    with pytest.raises(UserInputError, match="open_clip has no model"):
        get_spec("open_clip:NoSuchNet/x")
