"""What an extraction run is: its options (:class:`ExtractConfig`), their checks and defaults,
the backbone and preprocessing it builds (:func:`load_backbone`), and what a process resolved
(:class:`ExtractionSetup`) and did (:class:`ExtractResult`).

torch is imported where a backbone runs, never at import: the command line and batch plans import
the extraction modules without loading it, and ``extract`` sets ``OMP_WAIT_POLICY``
(:func:`~imagenet_zsl.devices.tune_process_for_image_pipeline`) before torch first loads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.config import shared_fields
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.backbones import backbone_preprocessing, create_backbone
from imagenet_zsl.features.head import BackboneHead
from imagenet_zsl.features.identity import DEFAULT_LAYER
from imagenet_zsl.features.loading import WorkList
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.paths import resolve_path

if TYPE_CHECKING:
    import torch

TOOL = "imagenet-zsl extract"
DECODERS = ("auto", "pil", "torchvision")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: extraction modes (``--deterministic`` / ``--fast``), recorded as ``parameters.mode``
MODES = ("deterministic", "fast")
#: the :class:`ExtractConfig` fields that ``features.cli.pipeline_flags`` gives ``extract`` and
#: ``validate`` alike: how images become features (decoder, numerics, preprocessing), and how they
#: are loaded
PIPELINE_FIELDS = (
    "batch_size", "device", "workers", "decode", "jpeg_draft", "mode", "precision", "compile", "resize",
    "crop", "ten_crop",
)  # fmt: skip
#: the backbone of ``extract`` and ``validate`` when ``--backbone`` is left off
DEFAULT_BACKBONE = "resnet50"


def extract_config(options: Any, **given: Any) -> ExtractConfig:
    """The :class:`ExtractConfig` of a command's options (a dataclass: ``extract``'s, ``validate``'s):
    each of its fields the options hold under the same name, then ``given``. The one reading both
    commands build their extraction from, so ``validate`` checks the pipeline ``extract`` runs."""
    return shared_fields(ExtractConfig, options, **given)


@dataclass
class ExtractConfig:
    """Everything that defines an extraction run (see ``imagenet-zsl extract --help``)."""

    store: str
    classes_file: str
    backbone: str
    out: str
    weights: str | None = None
    per_class: int | None = None
    seed: int = 0
    batch_size: int | None = None
    device: str = "auto"
    workers: int | None = None
    shard_size: int = 10_240
    logits: bool = False
    layout: str = "auto"
    val_labels: str | None = None
    allow_incomplete: bool = False  # read a store that lacks what it declares (recorded)
    decode: str = "auto"
    precision: str = "auto"
    resize: int | None = None  # None: the backbone's own (256 for torchvision, timm's pretrained cfg)
    crop: int | None = None
    progress: bool = True
    pretraining_classes: str | None = None  # wnid list the backbone was pretrained on (overrides)
    pad_batches: bool | None = None  # pad short batches to batch_size (None: on CUDA, or with compile)
    compile: bool = False  # torch.compile (inductor, frozen weights) the backbone: one shape, padded
    ten_crop: bool = False  # the feature is the mean over torchvision's ten crops (issue 24)
    jpeg_draft: bool = False  # opt-in: large JPEGs decoded at reduced DCT scale (not torchvision's pixels)
    mode: str = "deterministic"  # or "fast": see MODES and devices.torch_numerics


@dataclass
class ExtractResult:
    """What one process did; ``manifest`` is set when the run is complete (merged)."""

    out: Path
    images: int = 0
    skipped: int = 0
    shards_written: int = 0
    shards_already_done: int = 0
    seconds: float = 0.0  # the extraction loop; model building and compiling not included
    compile_seconds: float = 0.0  # with --compile: the one-off compile (its warm-up forward included)
    manifest: Path | None = None
    verified: bool = False

    @property
    def images_per_second(self) -> float:
        return (self.images + self.skipped) / self.seconds if self.seconds > 0 else 0.0


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ExtractionSetup:
    """What one process resolved from its :class:`ExtractConfig` before extracting.

    ``work``: the images (:class:`~imagenet_zsl.features.loading.WorkList`); ``net``: the backbone
    (a ``FeatureNet``, on the CPU until extraction moves it) giving ``dim``-d features; ``pre``:
    the preprocessing; ``device``: where it runs; ``precision`` (fp32/bf16/fp16), ``decode``
    (pil/torchvision), ``batch_size`` and ``workers`` (decode processes) with "auto" resolved;
    ``head``: the backbone's ImageNet-1K classifier, stored as ``head.npz`` (None: it has none).
    """

    cfg: ExtractConfig
    work: WorkList
    net: Any
    dim: int
    pre: Preprocessing
    device: torch.device
    precision: str
    decode: str
    batch_size: int
    workers: int
    head: BackboneHead | None = None


def check_choices(cfg: ExtractConfig) -> None:
    if cfg.shard_size < 1:
        raise UserInputError(f"--shard-size {cfg.shard_size}: must be at least 1")
    if cfg.decode not in DECODERS:
        raise UserInputError(f"--decode {cfg.decode!r}: choose one of {', '.join(DECODERS)}")
    if cfg.precision not in PRECISIONS:
        raise UserInputError(f"--precision {cfg.precision!r}: choose one of {', '.join(PRECISIONS)}")
    if cfg.mode not in MODES:
        raise UserInputError(f"extraction mode {cfg.mode!r}: choose one of {', '.join(MODES)}")
    if cfg.compile and cfg.pad_batches is False:
        raise UserInputError(
            "--compile pads every batch to --batch-size (one compiled shape): "
            "pad_batches=False contradicts it"
        )
    check_out_outside_store(cfg.out, cfg.store)


def check_out_outside_store(out: str | os.PathLike, store: str | os.PathLike) -> None:
    """Refuse an ``--out`` inside the store (its shards would be read as images or classes of the
    store, and a cleaned store loses them) or one that holds the store, in one line."""
    where, source = resolve_path(out), resolve_path(store)
    if where == source or source in where.parents or where in source.parents:
        inside = "is" if where == source else "lies inside" if source in where.parents else "holds"
        raise UserInputError(
            f"--out {out} {inside} the store {store}: features and images would mix; choose an "
            "--out outside the store"
        )


def default_workers(on_cuda: bool, ranks: dist.RankInfo) -> int:
    """Decode processes per rank: on CUDA all CPUs of the rank but one (up to 32); on CPU one per
    CPU of the rank, up to 4. A worker only decodes while fewer than 2 of its batches wait, so a
    forward-bound network leaves them asleep (ResNet-50 on 2 CPUs: 12.5 images/s with 2 workers,
    12.6 with 1), while a decode-bound run needs them all (tiny network, 1024x768 JPEGs on 2
    CPUs: 215-220 images/s with 2 workers against 165-173 with 1)."""
    cpus = available_cpus() // max(1, ranks.local_world_size)
    if on_cuda:
        return max(1, min(32, cpus - 1))
    return max(1, min(4, cpus))


def load_backbone(cfg: ExtractConfig) -> tuple[Any, int, dict[str, Any], Preprocessing]:
    """(FeatureNet, feature dim, weights record, its preprocessing) of ``cfg.backbone``, exactly as
    ``extract`` builds them (``imagenet-zsl predict`` uses it to embed photos the same way); only
    ``backbone``, ``weights``, ``seed``, ``resize``, ``crop``, ``ten_crop``, ``jpeg_draft`` and
    ``logits`` of ``cfg`` are read."""
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    net, weights = create_backbone(cfg.backbone, cfg.weights, seed=cfg.seed)
    pre = backbone_preprocessing(net, cfg.resize, cfg.crop, cfg.ten_crop, cfg.jpeg_draft)
    net.want_logits = cfg.logits
    if cfg.logits and net.num_logits != 1000:
        raise UserInputError(
            f"--logits: backbone {cfg.backbone} has {net.num_logits} outputs; logits are stored "
            "only for ImageNet-1K classifiers"
        )
    dim = net.spec.dim
    if dim is None:  # timm and open_clip models: measure
        with torch.inference_mode():
            try:
                dim = int(net(torch.zeros(1, 3, pre.crop, pre.crop))[0].shape[1])
            except (RuntimeError, AssertionError) as err:
                raise UserInputError(
                    f"--backbone {cfg.backbone}: does not run on {pre.crop}x{pre.crop} crops "
                    f"({str(err)[:160]}); drop --crop to use the model's own input size"
                ) from None
    return net, dim, weights.describe(), pre


def provenance_fields(backbone: str, dim: int, weights: dict[str, Any], pre: Preprocessing) -> dict[str, Any]:
    """The feature-manifest fields that determine the features' identity
    (:func:`~imagenet_zsl.features.identity.feature_identity`): backbone name (its pretrained tag
    included), weights record (sha256), preprocessing, feature layer and dimension."""
    return {
        "dim": dim,
        "backbone": {"name": backbone, "dim": dim, "weights": weights},
        "preprocessing": pre.describe(),
        "feature_layer": DEFAULT_LAYER,
    }


def resolve_precision(cfg: ExtractConfig, on_cuda: bool) -> str:
    """``--precision auto``: fp32 in deterministic mode and on the CPU, bf16 in fast mode on CUDA. An
    explicit bf16/fp16 is honoured in deterministic mode too: reproducible, but no longer equal to
    fp32 (CPU) features."""
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16" if on_cuda and cfg.mode == "fast" else "fp32"


def resolve_decoder(decode: str, mode: str, on_cuda: bool) -> str:
    """``--decode auto``: PIL in deterministic mode and on the CPU (decoded in the workers, the
    features equal torchvision's on PIL), torchvision's ``decode_jpeg`` (nvJPEG) with ``--fast``
    on CUDA (decoded and resized in batches on the GPU: faster, but its pixels differ slightly
    from PIL's). An explicit ``pil`` or ``torchvision`` is honoured in either mode."""
    if decode != "auto":
        return decode
    return "torchvision" if on_cuda and mode == "fast" else "pil"
