"""A registry of feature backbones over torchvision and timm, with honest weight loading.

Every backbone is wrapped as :class:`FeatureNet`: ``forward(x) -> (features (B, D), logits (B, K))``
where features are the global-average-pooled penultimate activations (2048-d for ResNet-50/101)
and logits the backbone's ImageNet-1K classifier outputs (K = 1000, in the standard sorted-wnid
class order of torchvision/timm), which ConSE and the GCN targets need.

Weights come from ``--weights PATH``, or else from the torch hub cache (torchvision) / the Hugging
Face cache (timm) when already downloaded. Nothing is downloaded and nothing falls back silently:
missing weights raise a UserInputError saying where to put them. ``--weights random`` (seeded,
for tests and benchmarks only) is stamped into the manifest.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.io import sha256_file
from imagenet_zsl.registry import Registry

log = logging.getLogger(__name__)

RANDOM = "random"


@dataclass(frozen=True)
class BackboneSpec:
    """A registered backbone: ``library`` is torchvision, timm or builtin (tests)."""

    name: str
    library: str
    arch: str
    dim: int | None
    weights_tag: str | None
    summary: str


#: every named backbone: a function returning its :class:`BackboneSpec`, registered where it is
#: defined below (``timm:<model>`` names are resolved by :func:`get_spec` without registering)
BACKBONES: Registry[Callable[[], BackboneSpec]] = Registry("backbone")


@BACKBONES.register("resnet50")
def resnet50() -> BackboneSpec:
    return BackboneSpec(
        "resnet50",
        "torchvision",
        "resnet50",
        2048,
        "IMAGENET1K_V1",
        "ResNet-50, torchvision ImageNet-1K V1 weights (the ZSL literature's default)",
    )


@BACKBONES.register("resnet50-v2")
def resnet50_v2() -> BackboneSpec:
    return BackboneSpec(
        "resnet50-v2",
        "torchvision",
        "resnet50",
        2048,
        "IMAGENET1K_V2",
        "ResNet-50, torchvision ImageNet-1K V2 (improved recipe) weights",
    )


@BACKBONES.register("resnet101")
def resnet101() -> BackboneSpec:
    return BackboneSpec(
        "resnet101",
        "torchvision",
        "resnet101",
        2048,
        "IMAGENET1K_V1",
        "ResNet-101, torchvision ImageNet-1K V1 weights (xlsa17 used a ResNet-101)",
    )


@BACKBONES.register("resnet18")
def resnet18() -> BackboneSpec:
    return BackboneSpec(
        "resnet18", "torchvision", "resnet18", 512, "IMAGENET1K_V1", "ResNet-18, 512-d: quick experiments"
    )


@BACKBONES.register("tiny-test")
def tiny_test() -> BackboneSpec:
    return BackboneSpec(
        "tiny-test", "builtin", "tiny", 32, None, "4-layer CNN, 32-d, random weights only: for tests"
    )


def describe_backbones() -> str:
    """One line per registered backbone, for --help."""
    lines = [f"{name}: {spec().summary}" for name, spec in BACKBONES.items()]
    lines.append("timm:<model>: any timm model, e.g. timm:resnet50.a1_in1k")
    return "; ".join(lines)


def get_spec(name: str) -> BackboneSpec:
    """The :class:`BackboneSpec` of a registered name or of ``timm:<model>``."""
    if name in BACKBONES:
        return BACKBONES.get(name)()
    if name.startswith("timm:") and len(name) > 5:
        import timm

        arch = name[5:]
        if not timm.is_model(arch.split(".")[0]):
            raise UserInputError(f"--backbone {name}: timm has no model {arch!r} (see timm.list_models)")
        return BackboneSpec(name, "timm", arch, None, None, "timm model")
    raise UserInputError(
        f"--backbone {name!r} is unknown; choose one of {', '.join(BACKBONES.names())} or timm:<model>"
    )


@dataclass
class WeightsInfo:
    """Where the weights came from, for the manifest (``sha256`` of the file; None for random)."""

    source: str  # "file", "torch-hub-cache", "hf-cache" or "random"
    path: str | None
    sha256: str | None
    seed: int | None = None

    def describe(self) -> dict[str, Any]:
        record = {"source": self.source, "path": self.path, "sha256": self.sha256}
        if self.source == RANDOM:
            record["seed"] = self.seed
            record["note"] = "RANDOM WEIGHTS: for tests and benchmarks only, features are meaningless"
        return record


def _tiny_net():
    """The builtin test backbone: 4 strided convs → 32-d pooled features → 1000 logits."""
    from torch import nn

    layers, width = [], 3
    for out in (8, 16, 32, 32):
        layers += [nn.Conv2d(width, out, 3, stride=2, padding=1), nn.BatchNorm2d(out), nn.ReLU()]
        width = out
    body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return body, nn.Linear(32, 1000)


@functools.cache
def feature_net_class():
    """The FeatureNet wrapper class (defined lazily so importing this module does not load torch)."""
    from torch import nn

    class FeatureNet(nn.Module):
        """Backbone wrapper: ``forward(x) -> (features (B, D), logits (B, K) or None)``."""

        def __init__(self, spec: BackboneSpec, model, head, kind: str):
            super().__init__()
            self.spec = spec
            self.model = model
            self.head = head
            self.kind = kind
            self.want_logits = True

        @property
        def num_logits(self) -> int | None:
            return getattr(self.head, "out_features", None)

        def forward(self, x):
            if self.kind == "timm":
                features = self.model.forward_head(self.model.forward_features(x), pre_logits=True)
            else:
                features = self.model(x)
            logits = self.head(features) if self.want_logits and self.head is not None else None
            return features, logits

    return FeatureNet


def _load_state_dict(path: Path) -> dict:
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable file is a user error
            raise UserInputError(f"{path}: cannot read weights ({type(err).__name__}: {err})") from err
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    if not isinstance(state, dict):
        raise UserInputError(f"{path}: not a state_dict (got {type(state).__name__})")
    return {k.removeprefix("module."): v for k, v in state.items()}


def _apply_state_dict(module, state: dict, path: Path, name: str) -> None:
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


def _hub_checkpoint(spec: BackboneSpec) -> tuple[Path, str]:
    import torch
    import torchvision.models as tvm

    weights = tvm.get_model_weights(spec.arch)[spec.weights_tag]
    path = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    return path, weights.url


def _hf_checkpoint(arch: str) -> Path | None:
    try:
        import timm
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    cfg = timm.models.get_pretrained_cfg(arch) if "." in arch else None
    if cfg is None:
        cfg = timm.create_model(arch, pretrained=False).pretrained_cfg
        repo = cfg.get("hf_hub_id") if isinstance(cfg, dict) else None
    else:
        repo = cfg.hf_hub_id
    if not repo:
        return None
    for filename in ("model.safetensors", "pytorch_model.bin"):
        found = try_to_load_from_cache(repo, filename)
        if isinstance(found, str):
            return Path(found)
    return None


def create_backbone(name: str, weights: str | None = None, seed: int = 0) -> tuple[Any, WeightsInfo]:
    """The named backbone with its weights loaded (CPU, eval mode) and a record of the weights.

    ``weights``: a file path, ``"random"`` (seeded init: tests/benchmarks only), or None for the
    torch-hub / Hugging Face cache. Raises UserInputError when pretrained weights are missing.
    """
    import torch

    spec = get_spec(name)
    FeatureNet = feature_net_class()  # noqa: N806 - a class
    weights_path: Path | None = None
    if weights is not None and weights != RANDOM:
        weights_path = Path(weights).expanduser()
        if not weights_path.is_file():
            raise UserInputError(f"--weights {weights}: file not found")

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec.library == "torchvision":
            import torchvision.models as tvm

            model = tvm.get_model(spec.arch, weights=None)
            head, model.fc = model.fc, torch.nn.Identity()
            net = FeatureNet(spec, model, head, "torchvision")
        elif spec.library == "timm":
            import timm

            model = timm.create_model(spec.arch, pretrained=False)
            net = FeatureNet(spec, model, model.get_classifier(), "timm")
        else:
            body, head = _tiny_net()
            net = FeatureNet(spec, body, head, "builtin")

    if weights == RANDOM:
        log.warning("backbone %s uses RANDOM weights (seed %d): for tests and benchmarks only", name, seed)
        info = WeightsInfo(RANDOM, None, None, seed)
    elif weights_path is not None:
        info = WeightsInfo("file", str(weights_path.resolve()), sha256_file(weights_path))
    elif spec.library == "torchvision":
        weights_path, url = _hub_checkpoint(spec)
        if not weights_path.is_file():
            raise UserInputError(
                f"no pretrained weights for --backbone {name}: {weights_path} is not in the torch "
                f"hub cache; download {url} there (or set TORCH_HOME) or pass --weights PATH "
                "(--weights random is for tests and benchmarks only)"
            )
        info = WeightsInfo("torch-hub-cache", str(weights_path), sha256_file(weights_path))
    elif spec.library == "timm":
        weights_path = _hf_checkpoint(spec.arch)
        if weights_path is None:
            raise UserInputError(
                f"no pretrained weights for --backbone {name} in the Hugging Face cache; download "
                "them (e.g. huggingface-cli download timm/<model>) or pass --weights PATH "
                "(--weights random is for tests and benchmarks only)"
            )
        info = WeightsInfo("hf-cache", str(weights_path), sha256_file(weights_path))
    else:
        raise UserInputError(
            f"--backbone {name} has no pretrained weights; pass --weights random or --weights PATH"
        )

    if weights_path is not None:
        state = _load_state_dict(weights_path)
        if all(k.startswith(("model.", "head.")) for k in state):
            target = net  # saved from a FeatureNet
        elif spec.library == "torchvision":  # the original torchvision checkpoint: fc is the head
            target = net
            state = {("head." + k[3:] if k.startswith("fc.") else "model." + k): v for k, v in state.items()}
        else:
            target = net.model
        _apply_state_dict(target, state, weights_path, name)
    net.eval()
    return net, info


def last_block(net) -> Any:
    """The backbone's last stage, the part ``images filter --finetune-last-block`` trains.

    ResNets (torchvision): ``layer4``; the builtin test net: its last conv + BN + ReLU; timm
    models: ``layer4``, ``stages[-1]``, ``blocks[-1]`` or ``layers[-1]``, whichever exists. The
    returned module shares its parameters with ``net`` (setting ``requires_grad`` on it works).
    """
    from torch import nn

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
