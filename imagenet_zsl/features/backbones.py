"""A registry of feature backbones over torchvision and timm, with honest weight loading.

Every backbone is wrapped as :class:`FeatureNet`: ``forward(x) -> (features (B, D), logits (B, K))``
where features are the global-average-pooled penultimate activations (2048-d for ResNet-50/101)
and logits the backbone's ImageNet-1K classifier outputs (K = 1000, in the standard sorted-wnid
class order of torchvision/timm), which ConSE and the GCN targets need.

Weights come from ``--weights PATH``, or else by name from the torch hub cache (torchvision) / the
Hugging Face hub cache (timm, open_clip), downloaded there as those libraries do unless
``HF_HUB_OFFLINE=1`` (:mod:`imagenet_zsl.features.hub_weights`). Nothing falls back silently: missing
weights raise a UserInputError naming the repository and file. ``--weights random`` (seeded, for
tests and benchmarks only) is stamped into the manifest. ``timm:hf-hub:org/repo`` and
``open_clip:hf-hub:org/repo`` build the model from the repository's own config file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.hub_weights import (
    NO_WEIGHTS_HINT,
    RANDOM,
    WeightsInfo,
    fetch_hub_file,
    hub_weights,
    quiet_logger,
    state_digest,
    tensor_digest,
    torch_hub_weights,
)
from imagenet_zsl.features.transforms import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.registry import Registry

log = logging.getLogger(__name__)

HF_HUB = "hf-hub:"


@dataclass(frozen=True)
class BackboneSpec:
    """A backbone by name: ``library`` is torchvision, timm, open_clip or builtin (tests)."""

    name: str
    library: str
    arch: str
    dim: int | None
    weights_tag: str | None
    summary: str


#: every named backbone, as timm keeps its pretrained configurations: one table of specs, each
#: under the name users type (``resnet50-v2``). ``timm:<model>`` and ``open_clip:...`` names are
#: resolved by :func:`get_spec` without registering.
BACKBONE_SPECS: tuple[BackboneSpec, ...] = (
    BackboneSpec(
        "resnet50",
        "torchvision",
        "resnet50",
        2048,
        "IMAGENET1K_V1",
        "ResNet-50, torchvision ImageNet-1K V1 weights (the ZSL literature's default)",
    ),
    BackboneSpec(
        "resnet50-v2",
        "torchvision",
        "resnet50",
        2048,
        "IMAGENET1K_V2",
        "ResNet-50, torchvision ImageNet-1K V2 (improved recipe) weights",
    ),
    BackboneSpec(
        "resnet101",
        "torchvision",
        "resnet101",
        2048,
        "IMAGENET1K_V1",
        "ResNet-101, torchvision ImageNet-1K V1 weights (xlsa17 used a ResNet-101)",
    ),
    BackboneSpec(
        "resnet18", "torchvision", "resnet18", 512, "IMAGENET1K_V1", "ResNet-18, 512-d: quick experiments"
    ),
    BackboneSpec(
        "tiny-test", "builtin", "tiny", 32, None, "4-layer CNN, 32-d, random weights only: for tests"
    ),
)
#: the named backbones' specs by name (the registry matches names case-insensitively)
BACKBONES: Registry[BackboneSpec] = Registry("backbone")
for spec_entry in BACKBONE_SPECS:
    BACKBONES.register(spec_entry)  # under its ``name``
del spec_entry


def describe_backbones() -> str:
    """One line per registered backbone, for --help."""
    lines = [f"{name}: {spec.summary}" for name, spec in BACKBONES.items()]
    lines.append(
        "timm:<model> (or a plain tagged timm name): any timm model, "
        "e.g. timm:vit_small_patch16_224.augreg_in21k, or timm:hf-hub:<org>/<repo>"
    )
    lines.append(
        "open_clip:<arch>/<pretrained> or open_clip:hf-hub:<org>/<repo>: "
        "the image tower of an open_clip model"
    )
    return "; ".join(lines)


def get_spec(name: str) -> BackboneSpec:
    """The :class:`BackboneSpec` of a registered name, ``timm:<model>`` (or a plain timm model
    name), or ``open_clip:<arch>[/<pretrained>]``."""
    if name in BACKBONES:
        return BACKBONES.get(name)  # its name the registered one (lower-case)
    if name.startswith(("timm:" + HF_HUB, "open_clip:" + HF_HUB)):
        library, _, repo = name.partition(":")
        if repo[len(HF_HUB) :].strip("/").count("/") != 1:
            raise UserInputError(f"--backbone {name}: name the repository: {library}:hf-hub:<org>/<repo>")
        return BackboneSpec(name, library, repo, None, None, f"{library} model from the Hugging Face hub")
    if name.startswith("open_clip:") and len(name) > 10:
        return _open_clip_spec(name)
    import timm  # deferred: `extract --help` lists the backbones of this module without loading timm

    if name.startswith("timm:"):
        arch = name[5:]
        if not arch or not timm.is_model(arch.split(".")[0]):
            raise UserInputError(f"--backbone {name}: timm has no model {arch!r} (see timm.list_models)")
        return BackboneSpec(name, "timm", arch, None, None, "timm model")
    if "." in name and timm.is_model(name.split(".")[0]):  # a plain tagged timm name
        return BackboneSpec(name, "timm", name, None, None, "timm model")
    raise UserInputError(
        f"--backbone {name!r} is unknown; choose one of {', '.join(BACKBONES.names())}, "
        "timm:<model> (see timm.list_models) or open_clip:<arch>/<pretrained>"
    )


def _open_clip_spec(name: str) -> BackboneSpec:
    try:
        import open_clip  # deferred: optional, and `extract --help` imports this module
    except ImportError:
        raise UserInputError(
            f"--backbone {name}: open_clip is not installed (pip install open_clip_torch)"
        ) from None
    arch, _, tag = name[len("open_clip:") :].partition("/")
    if arch not in open_clip.list_models():
        raise UserInputError(
            f"--backbone {name}: open_clip has no model {arch!r} (see open_clip.list_models)"
        )
    return BackboneSpec(name, "open_clip", arch, None, tag or None, "open_clip image tower")


def torchvision_preprocessing(arch: str, tag: str) -> Preprocessing:
    """The evaluation preprocessing torchvision ships with weights ``arch``/``tag``
    (``weights.transforms()``: ResNet-50 ``IMAGENET1K_V1`` resize 256, ``IMAGENET1K_V2`` 232; crop
    224, bilinear, ImageNet mean/std). No download: the weight enum carries it."""
    import torchvision.models as tvm  # deferred: `extract --help` and training import this module

    transform = tvm.get_model_weights(arch)[tag].transforms()
    return Preprocessing(
        resize=int(transform.resize_size[0]),
        crop=int(transform.crop_size[0]),
        mean=tuple(float(v) for v in transform.mean),
        std=tuple(float(v) for v in transform.std),
        interpolation=transform.interpolation.value,
    )


def backbone_preprocessing(
    net: Any,
    resize: int | None = None,
    crop: int | None = None,
    ten_crop: bool = False,
    jpeg_draft: bool = False,
) -> Preprocessing:
    """The preprocessing ``net`` was trained with: torchvision nets their weights' own
    ``weights.transforms()`` (:func:`torchvision_preprocessing`), the builtin net the ImageNet
    standard (resize 256, crop 224, bilinear); timm models their pretrained config
    (``timm.data.resolve_data_config``: input size, crop_pct, interpolation, mean/std); open_clip
    towers their ``preprocess_cfg`` (resize to the input size, centre crop, CLIP mean/std).
    ``resize``/``crop`` given explicitly override the backbone's own (a crop larger than the
    resize is refused: it would be zero-padded); ``ten_crop``: average the ten crops;
    ``jpeg_draft``: decode large JPEGs at reduced DCT scale (opt-in: not the exact pipeline)."""
    kind = net.kind
    if kind == "timm":
        from timm.data import resolve_data_config  # deferred: only timm backbones need timm

        config = resolve_data_config({}, model=net.model)
        size = int(config["input_size"][-1])
        own = Preprocessing(
            resize=int(math.floor(size / float(config.get("crop_pct") or 1.0))),
            crop=size,
            mean=tuple(float(v) for v in config["mean"]),
            std=tuple(float(v) for v in config["std"]),
            interpolation=config.get("interpolation", "bicubic")
            if config.get("interpolation") in ("bilinear", "bicubic", "nearest")
            else "bicubic",
        )
    elif kind == "open_clip":
        cfg = getattr(net.model, "preprocess_cfg", {}) or {}
        size = cfg.get("size", getattr(net.model, "image_size", 224))
        size = int(size[-1] if isinstance(size, list | tuple) else size)
        own = Preprocessing(
            resize=size,
            crop=size,
            mean=tuple(float(v) for v in cfg.get("mean", IMAGENET_MEAN)),
            std=tuple(float(v) for v in cfg.get("std", IMAGENET_STD)),
            interpolation=cfg.get("interpolation", "bicubic"),
        )
    elif kind == "torchvision" and net.spec.weights_tag:
        own = torchvision_preprocessing(net.spec.arch, net.spec.weights_tag)
    else:
        own = Preprocessing()
    pre = dataclasses.replace(
        own, resize=resize or own.resize, crop=crop or own.crop, ten_crop=ten_crop, jpeg_draft=jpeg_draft
    )
    if (resize or crop) and pre.crop > pre.resize:
        raise UserInputError(
            f"--crop {pre.crop} is larger than --resize {pre.resize} (the shorter side after "
            "resizing): the crop would be zero-padded; choose --crop <= --resize"
        )
    return pre


def _tiny_net():
    """The builtin test backbone: 4 strided convs → 32-d pooled features → 1000 logits."""
    from torch import nn  # deferred: `extract --help` and training import this module without torch

    layers, width = [], 3
    for out in (8, 16, 32, 32):
        layers += [nn.Conv2d(width, out, 3, stride=2, padding=1), nn.BatchNorm2d(out), nn.ReLU()]
        width = out
    body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return body, nn.Linear(32, 1000)


@functools.cache
def feature_net_class() -> type:
    """The FeatureNet wrapper class (defined lazily so importing this module does not load torch)."""
    from torch import nn  # deferred: `extract --help` and training import this module without torch

    class FeatureNet(nn.Module):
        """Backbone wrapper: ``forward(x) -> (features (B, D), logits (B, K) or None)``."""

        def __init__(self, spec: BackboneSpec, model: nn.Module, head: nn.Module | None, kind: str):
            super().__init__()
            self.spec = spec
            self.model = model
            self.head = head
            self.kind = kind
            self.want_logits = True

        @property
        def num_logits(self) -> int | None:
            return getattr(self.head, "out_features", None)

        def forward(self, x: Any) -> tuple[Any, Any]:
            if self.kind == "timm":
                features = self.model.forward_head(self.model.forward_features(x), pre_logits=True)
            else:
                features = self.model(x)
            logits = self.head(features) if self.want_logits and self.head is not None else None
            return features, logits

    return FeatureNet


_REFUSED_GLOBAL = re.compile(r"unsupported (?:global:? )?GLOBAL\s+([^\s,]+)", re.IGNORECASE)
_REFUSED_OPERAND = re.compile(r"unsupported operand\s+(\S+)", re.IGNORECASE)


def _load_failure(path: Path, err: BaseException) -> UserInputError:
    """One line for weights that cannot be read: torch's multi-line ``weights_only`` refusal
    reduced to what it refused (e.g. a pickled ``posix.system`` call, which never ran)."""
    text = str(err)
    found_global, found_operand = _REFUSED_GLOBAL.search(text), _REFUSED_OPERAND.search(text)
    if found_global and not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)+", found_global.group(1)):
        found_global, found_operand = None, found_global  # bytes that only look like a GLOBAL
    if found_global:
        cause = f"it pickles {found_global.group(1)}, not only tensors (refused, nothing was run)"
    elif found_operand:
        cause = "not a torch checkpoint (not a pickle of tensors)"
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        cause = f"{type(err).__name__}: {(lines[0] if lines else '')[:160]}"
    return UserInputError(
        f"{path}: cannot read weights: {cause}; --weights takes a plain state_dict "
        "(torch.save(model.state_dict())) or a .safetensors file"
    )


def _load_state_dict(path: Path) -> dict:
    """The tensors of a checkpoint, read without executing anything (``weights_only``)."""
    import torch  # deferred: `extract --help` and training import this module without torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file  # deferred: only .safetensors weights need it

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is a user error
        raise _load_failure(path, err) from None
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    if not isinstance(state, dict):
        raise UserInputError(f"{path}: not a state_dict (got {type(state).__name__})")
    return {k.removeprefix("module."): v for k, v in state.items()}


def _apply_state_dict(module: Any, state: dict, path: Path, name: str) -> None:
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise UserInputError(
            f"{path}: weights do not fit --backbone {name}: missing {preview(missing, 4) or 'none'}; "
            f"unexpected {preview(unexpected, 4) or 'none'}"
        )
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise UserInputError(f"{path}: weights do not fit --backbone {name}: {str(err)[:300]}") from err


@contextlib.contextmanager
def _offline() -> Any:
    """Nothing is downloaded by surprise: Hugging Face Hub calls stay offline while models are built."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def _hub_config_dir(spec: BackboneSpec, config: str) -> str:
    """``local-dir:<snapshot>`` of an ``hf-hub:`` repository whose ``config`` file is fetched (or cached)."""
    path, _ = fetch_hub_file(spec.arch[len(HF_HUB) :], (config,), spec.name, what="model config")
    return "local-dir:" + str(path.parent)


def _build_timm(spec: BackboneSpec) -> Any:
    import timm  # deferred: only timm backbones load timm (and torch)

    arch = _hub_config_dir(spec, "config.json") if spec.arch.startswith(HF_HUB) else spec.arch
    with _offline():
        return timm.create_model(arch, pretrained=False)


def _build_open_clip(spec: BackboneSpec) -> Any:
    import open_clip  # deferred: optional, only open_clip backbones need it

    if spec.arch.startswith(HF_HUB):
        source = _hub_config_dir(spec, "open_clip_config.json")
        with _offline(), quiet_logger(None):
            model = open_clip.create_model(source, load_weights=False)
        tower = model.visual
        tower.preprocess_cfg = dict(getattr(tower, "preprocess_cfg", {}) or {})
        return tower
    with _offline(), quiet_logger(None):
        tower = open_clip.create_model(spec.arch, pretrained=None).visual
    tower.preprocess_cfg = dict(getattr(tower, "preprocess_cfg", {}) or {})
    if spec.weights_tag:
        pretrained = open_clip.get_pretrained_cfg(spec.arch, spec.weights_tag) or {}
        keep = ("mean", "std", "interpolation")
        tower.preprocess_cfg.update({k: v for k, v in pretrained.items() if k in keep})
    return tower


def _build_net(spec: BackboneSpec) -> Any:
    """The FeatureNet of ``spec`` with freshly initialised weights (seed set by the caller)."""
    import torch  # deferred: `extract --help` and training import this module without torch

    FeatureNet = feature_net_class()  # noqa: N806 - a class
    if spec.library == "torchvision":
        import torchvision.models as tvm  # deferred: only torchvision backbones need it

        model = tvm.get_model(spec.arch, weights=None)
        head, model.fc = model.fc, torch.nn.Identity()
        return FeatureNet(spec, model, head, "torchvision")
    if spec.library == "timm":
        model = _build_timm(spec)
        return FeatureNet(spec, model, model.get_classifier(), "timm")
    if spec.library == "open_clip":
        return FeatureNet(spec, _build_open_clip(spec), None, "open_clip")
    body, head = _tiny_net()
    return FeatureNet(spec, body, head, "builtin")


#: the weight files of a timm / open_clip hub repository, in the order the libraries try them
TIMM_FILES = ("model.safetensors", "pytorch_model.bin")
OPEN_CLIP_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def _open_clip_repo(spec: BackboneSpec) -> tuple[str, tuple[str, ...]] | None:
    """(repository, files) of an open_clip ``arch/tag``: its ``hf_hub`` entry (``org/repo/`` or
    ``org/repo/file``), or None when its weights are not on the hub."""
    import open_clip  # deferred: optional, only open_clip backbones need it

    if spec.arch.startswith(HF_HUB):
        return spec.arch[len(HF_HUB) :], OPEN_CLIP_FILES
    if not spec.weights_tag:
        return None
    hub = (open_clip.get_pretrained_cfg(spec.arch, spec.weights_tag) or {}).get("hf_hub", "")
    parts = hub.strip().split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return None
    repo = f"{parts[0]}/{parts[1]}"
    return repo, (parts[2],) if len(parts) > 2 and parts[2] else OPEN_CLIP_FILES


def _timm_repo(spec: BackboneSpec, net: Any) -> tuple[str, tuple[str, ...]] | None:
    """(repository, files) of a timm model: the ``hf-hub:`` name, or its pretrained config's
    ``hf_hub_id`` (``hf_hub_filename`` when it names one)."""
    if spec.arch.startswith(HF_HUB):
        return spec.arch[len(HF_HUB) :], TIMM_FILES
    cfg = getattr(net.model, "pretrained_cfg", None) or {}
    repo = cfg.get("hf_hub_id")
    if not repo:
        return None
    filename = cfg.get("hf_hub_filename")
    return repo.removeprefix(HF_HUB), (filename,) if filename else TIMM_FILES


def _pretrained_weights(spec: BackboneSpec, net: Any) -> WeightsInfo:
    """The pretrained weights by name: cached, or downloaded unless ``HF_HUB_OFFLINE=1``; a
    UserInputError naming the repository and file when they cannot be had."""
    name = spec.name
    if spec.library == "torchvision":
        import torchvision.models as tvm  # deferred: only torchvision backbones need it

        return torch_hub_weights(tvm.get_model_weights(spec.arch)[spec.weights_tag].url, name)
    if spec.library in ("timm", "open_clip"):
        found = _timm_repo(spec, net) if spec.library == "timm" else _open_clip_repo(spec)
        if found is None:
            raise UserInputError(
                f"--backbone {name}: its pretrained weights are not on the Hugging Face hub; "
                f"name a tagged model (timm:<model>.<tag>, open_clip:<arch>/<tag>) {NO_WEIGHTS_HINT}"
            )
        return hub_weights(found[0], found[1], name)
    raise UserInputError(
        f"--backbone {name} has no pretrained weights; pass --weights random or --weights PATH"
    )


def _load_weights(net: Any, spec: BackboneSpec, path: Path) -> None:
    """Load a checkpoint into ``net``: a FeatureNet's own, the library's original, or a full CLIP."""
    state = _load_state_dict(path)
    if spec.library == "open_clip":
        target = net.model  # the image tower: keep the full CLIP checkpoint's visual.* part
        if any(k.startswith("visual.") for k in state):
            state = {k[len("visual.") :]: v for k, v in state.items() if k.startswith("visual.")}
    elif all(k.startswith(("model.", "head.")) for k in state):
        target = net  # saved from a FeatureNet
    elif spec.library == "torchvision":  # the original torchvision checkpoint: fc is the head
        target = net
        state = {("head." + k[3:] if k.startswith("fc.") else "model." + k): v for k, v in state.items()}
    else:
        target = net.model
    _apply_state_dict(target, state, path, spec.name)


def classifier_head(net: Any, dim: int) -> tuple[Any, Any] | None:
    """The backbone's ImageNet-1K classifier as numpy ``(weight (1000, dim) float32, bias (1000,)
    float32)``, or None when it has none: its outputs are in the sorted ILSVRC-2012 wnid order
    (torchvision, timm and the builtin test net), so it reads the pooled features directly."""
    from torch import nn  # deferred: `extract --help` and training import this module without torch

    head = net.head
    if net.kind not in ("torchvision", "timm", "builtin") or not isinstance(head, nn.Linear):
        return None
    if head.out_features != 1000 or head.in_features != dim:
        return None
    weight = head.weight.detach().float().cpu().numpy()
    if head.bias is None:
        return weight, np.zeros(head.out_features, dtype=np.float32)
    return weight, head.bias.detach().float().cpu().numpy()


def create_backbone(name: str, weights: str | None = None, seed: int = 0) -> tuple[Any, WeightsInfo]:
    """The named backbone with its weights loaded (CPU, eval mode) and a record of the weights.

    ``weights``: a file path, ``"random"`` (seeded init: tests/benchmarks only), or None for the
    pretrained weights by name (torch hub / Hugging Face hub cache, downloaded unless
    ``HF_HUB_OFFLINE=1``). Raises UserInputError when pretrained weights cannot be had.
    """
    import torch  # deferred: `extract --help` and training import this module without torch

    spec = get_spec(name)
    if weights is not None and weights != RANDOM:  # before any build: a FIFO would block the reader
        regular_input_file(Path(weights).expanduser(), "--weights file")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = _build_net(spec)
    if weights == RANDOM:
        log.warning("backbone %s uses RANDOM weights (seed %d): for tests and benchmarks only", name, seed)
        info = WeightsInfo(RANDOM, None, state_digest(net), seed)
    elif weights is not None:
        path = Path(weights).expanduser()
        info = WeightsInfo("file", str(path.resolve()), sha256_file(path))
    else:
        info = _pretrained_weights(spec, net)
    if info.path is not None:
        _load_weights(net, spec, Path(info.path))
    net.eval()
    return net, dataclasses.replace(info, tensors_sha256=tensor_digest(net))


def last_block(net: Any) -> Any:
    """The backbone's last stage, the part ``images filter --finetune-last-block`` trains.

    ResNets (torchvision): ``layer4``; the builtin test net: its last conv + BN + ReLU; timm
    models: ``layer4``, ``stages[-1]``, ``blocks[-1]`` or ``layers[-1]``, whichever exists. The
    returned module shares its parameters with ``net`` (setting ``requires_grad`` on it works).
    """
    from torch import nn  # deferred: `extract --help` and training import this module without torch

    model = net.model
    if net.kind == "builtin":
        modules = list(model)
        last_conv = max(i for i, m in enumerate(modules) if isinstance(m, nn.Conv2d))
        return model[last_conv : last_conv + 3]  # conv, BN, ReLU: a view sharing the modules
    if isinstance(getattr(model, "layer4", None), nn.Module):
        return model.layer4
    for name in ("stages", "blocks", "layers"):
        stages = getattr(model, name, None)
        if isinstance(stages, nn.Sequential | nn.ModuleList) and len(stages):
            return stages[-1]
    raise UserInputError(
        f"--backbone {net.spec.name}: cannot tell which block is the last one (no layer4, stages, "
        "blocks or layers); --finetune-last-block supports ResNets and timm models with stages"
    )
