"""Batched feature extraction from an image store into resumable, verifiable shards.

Pipeline per process: the work list (the ``--classes`` images of the store, optionally a seeded
subsample per class) is cut into fixed-size shards of consecutive work items; DataLoader workers
read bytes straight from the tars and decode + resize + crop to uint8; the main process copies
pinned batches to the device (non-blocking), normalises there, and runs the backbone
(channels_last; with ``--compile``, compiled by inductor with frozen weights, see :func:`_compile`)
in one of two modes (:data:`MODES`): ``deterministic`` (the default) computes in fp32 with cuDNN's
autotuner, TF32 and nondeterministic kernels off, so that two runs give the same bytes and GPU
features match CPU ones to fp32 rounding; ``fast`` is bf16 autocast with the autotuner on CUDA.
A shard is written atomically once all its batches are done, so an interrupted run loses at most
the shards in flight and a re-run redoes exactly those: batches never straddle shards, so a
shard's bytes do not depend on where a run was interrupted.

Output: see :mod:`imagenet_zsl.features.shards`. Labels index the label space ``classes``: the
``--classes`` file's wnids in file order. Image ids are ``"<wnid>/<member>"``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.devices import request_deterministic_cublas, resolve_device, torch_numerics
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.backbones import (
    RANDOM,
    backbone_preprocessing,
    classifier_head,
    create_backbone,
    get_spec,
)
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.identity import DEFAULT_LAYER
from imagenet_zsl.features.loading import ImageDataset, WorkList, image_loader
from imagenet_zsl.features.shards import encode_head, shard_name, write_shard
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.images.decode import DecodeFailure, decode_rgb
from imagenet_zsl.images.store import ImageStore, StoreReader, open_store, select_rows
from imagenet_zsl.io import (
    atomic_write_bytes,
    atomic_write_json,
    canonical_json,
    file_record,
    sha256_bytes,
    sha256_file,
    software_versions,
)
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.pretraining import pretraining_of

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

TOOL = "imagenet-zsl extract"
DECODERS = ("auto", "pil", "torchvision")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: extraction modes (``--deterministic`` / ``--fast``), recorded as ``parameters.mode``
MODES = ("deterministic", "fast")


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
    decode: str = "auto"
    precision: str = "auto"
    resize: int | None = None  # None: the backbone's own (256 for torchvision, timm's pretrained cfg)
    crop: int | None = None
    progress: bool = True
    pretraining_classes: str | None = None  # wnid list the backbone was pretrained on (overrides)
    pad_batches: bool | None = None  # pad short batches to batch_size (None: on CUDA, or with compile)
    compile: bool = False  # torch.compile (inductor, frozen weights) the backbone: one shape, padded
    ten_crop: bool = False  # the feature is the mean over torchvision's ten crops (issue 24)
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
    skipped_files: list[dict[str, str]] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return (self.images + self.skipped) / self.seconds if self.seconds > 0 else 0.0


# ----------------------------------------------------------------------------- work list


def plan_work(
    store: ImageStore, classes: Sequence[str], per_class: int | None = None, seed: int = 0
) -> WorkList:
    """Select the images of ``classes``; with ``per_class``, a seeded sample of N per class.

    The sample of a class depends only on (seed, wnid, the class's image ids): adding classes to
    the file, or holding the images as tars instead of folders, does not change it.
    """
    if per_class is not None and per_class < 1:
        raise UserInputError(f"--per-class {per_class}: must be at least 1")
    classes = list(classes)
    rows = select_rows(store, classes)
    ids = store.image_ids(rows)
    store_class = store.class_index[rows]
    if per_class is not None and len(rows):
        keep = np.zeros(len(rows), dtype=bool)
        order = np.lexsort((ids, store_class))
        bounds = np.flatnonzero(np.diff(store_class[order])) + 1
        for group in np.split(order, bounds):
            if len(group) <= per_class:
                keep[group] = True
                continue
            wnid = store.classes[store_class[group[0]]]
            rng = np.random.default_rng([seed, zlib.crc32(wnid.encode())])
            keep[group[rng.choice(len(group), size=per_class, replace=False)]] = True
        rows, ids, store_class = rows[keep], ids[keep], store_class[keep]
    position = {w: i for i, w in enumerate(classes)}
    lut = np.array([position.get(w, -1) for w in store.classes], dtype=np.int32)
    labels = lut[store_class] if len(rows) else np.zeros(0, np.int32)
    held = set(store.classes)
    missing = [w for w in classes if w not in held]
    return WorkList.from_store_rows(store, rows, classes, labels, missing)


# ----------------------------------------------------------------------------- the run


def _available_cpus() -> int:
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


def _run_record(
    setup: ExtractionSetup, store: ImageStore, weights: dict[str, Any], logit_classes: list[str] | None
) -> dict:
    """run.json: the run's identity (must match to resume) and the manifest without shards."""
    cfg, work, pre, dim = setup.cfg, setup.work, setup.pre, setup.dim
    num_shards = math.ceil(len(work) / cfg.shard_size)
    parameters = {
        "per_class": cfg.per_class,
        "seed": cfg.seed,
        "shard_size": cfg.shard_size,
        "batch_size": setup.batch_size,
        "decode": setup.decode,
        "precision": setup.precision,
        "mode": cfg.mode,
        "device_type": setup.device.type,
        "logits": cfg.logits,
        "compile": cfg.compile,
    }
    inputs = {
        "store": {
            "path": str(store.root),
            "layout": store.layout,
            "index_key": store.key,
            "images_in_store": len(store),
        },
        "classes_file": file_record(cfg.classes_file),
    }
    if cfg.val_labels:
        inputs["val_labels"] = file_record(cfg.val_labels)
    identity = {
        "store": inputs["store"],
        "classes_sha256": inputs["classes_file"]["sha256"],
        "backbone": cfg.backbone,
        "weights_sha256": weights["sha256"],
        "weights": weights["source"],
        "preprocessing": pre.describe(),
        **parameters,
        "work_digest": work.digest(),
        "num_items": len(work),
    }
    manifest = {
        "tool": TOOL,
        "classes": work.classes,
        "simulated": False,
        "inputs": inputs,
        **provenance_fields(cfg.backbone, dim, weights, pre),
        "parameters": parameters,
        "classes_without_images": work.missing_classes,
        "store_problems": store.problems,
        "pretraining": _pretraining_record(cfg, weights),
        "software": software_versions(),
    }
    if logit_classes is not None:
        manifest["logits"] = {
            "classes": logit_classes,
            "order": "sorted ILSVRC-2012 wnids (the torchvision/timm 1K output order)",
        }
    if setup.head is not None:
        manifest["head"] = {
            "file": HEAD_FILE,
            "sha256": sha256_bytes(encode_head(setup.head)),
            "shape": list(setup.head.weight.shape),
            "order": "sorted ILSVRC-2012 wnids (the torchvision/timm 1K output order)",
            "use": "logits = features @ weight.T + bias",
        }
    return {
        "format": dist.RUN_FORMAT,
        "identity": identity,
        "manifest": manifest,
        "num_shards": num_shards,
        "num_items": len(work),
    }


def _pretraining_record(cfg: ExtractConfig, weights: dict[str, Any]) -> dict[str, Any]:
    """What the backbone was pretrained on: ``--pretraining-classes FILE`` if given, else the label
    sets its name's pretrained tag names (:func:`~imagenet_zsl.splits.pretraining.pretraining_of`;
    torchvision's registered weights are ImageNet-1K). Random weights saw nothing."""
    if cfg.pretraining_classes:
        wnids = read_wnid_list(cfg.pretraining_classes)
        return {
            "model": cfg.backbone,
            "label_sets": [],
            "file": file_record(cfg.pretraining_classes),
            "web_data": False,
            "n_classes": len(wnids),
            "note": f"{cfg.backbone}: pretrained on the {len(wnids)} classes of {cfg.pretraining_classes}",
        }
    if weights.get("source") == RANDOM:
        return {
            "model": cfg.backbone,
            "label_sets": [],
            "web_data": False,
            "n_classes": 0,
            "note": "random weights: no pretraining",
        }
    spec = get_spec(cfg.backbone)
    if spec.library == "torchvision":
        name = f"{spec.arch}.tv_in1k"
    elif spec.library == "open_clip":
        name = f"{spec.arch}/{spec.weights_tag or ''}"
    else:
        name = spec.arch
    return pretraining_of(name).as_dict()


#: identity keys added after run records of RUN_FORMAT were first written, with the value an older
#: record (without the key) ran with, so that such runs still resume
_IDENTITY_DEFAULTS = {"compile": False, "mode": "fast"}


def _check_run(out: Path, record: dict) -> bool:
    """Refuse an ``out`` holding another run (or other files); True when ``out`` holds no run yet."""
    path = out / dist.RUN_FILE
    if path.exists():
        existing = dist.read_run(out)
        old = {**_IDENTITY_DEFAULTS, **existing.get("identity", {})}
        new = json.loads(canonical_json(record["identity"]))  # tuples → lists, as stored
        differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if differ:
            raise UserInputError(
                f"{out} holds a different extraction ({', '.join(differ)} differ); re-run the "
                "original command to resume it, or choose another --out"
            )
        return False
    if out.exists() and any(not e.name.startswith(".") for e in os.scandir(out)):
        raise UserInputError(f"{out} is not empty and is not an extraction directory; choose another --out")
    return True


def _write_run(out: Path, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / dist.RUN_FILE, record)


def _ensure_head(out: Path, head: BackboneHead | None) -> None:
    """Write ``head.npz`` (after run.json, so a directory holding it is always an extraction
    directory) unless it is there with the same bytes; its sha256 is in the run's manifest and
    :func:`~imagenet_zsl.features.distributed.merge` checks it. Every rank computes the same bytes."""
    if head is None:
        return
    data = encode_head(head)
    path = out / HEAD_FILE
    if path.is_file() and sha256_file(path) == sha256_bytes(data):
        return
    atomic_write_bytes(path, data)


def _check_choices(cfg: ExtractConfig) -> None:
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


def _plan(cfg: ExtractConfig, ranks: dist.RankInfo) -> tuple[ImageStore, WorkList]:
    """The store (its index built once per node) and this run's work list."""
    classes = read_wnid_list(cfg.classes_file)
    if not classes:
        raise UserInputError(f"{cfg.classes_file}: no classes listed")
    # local rank 0 builds the store index once; the other processes on the node wait for it
    store = open_store(
        cfg.store,
        cfg.layout,
        cfg.val_labels,
        progress=cfg.progress and ranks.rank == 0,
        wait_for_cache_s=6 * 3600.0 if ranks.local_rank != 0 else 0.0,
    )
    work = plan_work(store, classes, cfg.per_class, cfg.seed)
    if not len(work):
        raise UserInputError(
            f"{cfg.classes_file}: none of its {len(classes)} classes has images in {store.root} "
            f"(store classes e.g. {preview(store.classes, 3)})"
        )
    if work.missing_classes:
        log.warning(
            "%d of %d classes have no images in the store (listed in the manifest): %s",
            len(work.missing_classes),
            len(classes),
            preview(work.missing_classes),
        )
    return store, work


def _default_workers(on_cuda: bool, ranks: dist.RankInfo) -> int:
    """Decode processes per rank: on CUDA all CPUs of the rank but one (up to 32); on CPU one per
    CPU of the rank, up to 4. A worker only decodes while fewer than 2 of its batches wait, so a
    forward-bound network leaves them asleep (ResNet-50 on 2 CPUs: 12.5 images/s with 2 workers,
    12.6 with 1), while a decode-bound run needs them all (tiny network, 1024x768 JPEGs on 2
    CPUs: 215-220 images/s with 2 workers against 165-173 with 1)."""
    cpus = _available_cpus() // max(1, ranks.local_world_size)
    if on_cuda:
        return max(1, min(32, cpus - 1))
    return max(1, min(4, cpus))


def load_backbone(cfg: ExtractConfig) -> tuple[Any, int, dict[str, Any], Preprocessing]:
    """(FeatureNet, feature dim, weights record, its preprocessing) of ``cfg.backbone``, exactly as
    ``extract`` builds them (``imagenet-zsl predict`` uses it to embed photos the same way); only
    ``backbone``, ``weights``, ``seed``, ``resize``, ``crop``, ``ten_crop`` and ``logits`` of
    ``cfg`` are read."""
    import torch

    net, weights = create_backbone(cfg.backbone, cfg.weights, seed=cfg.seed)
    pre = backbone_preprocessing(net, cfg.resize, cfg.crop, cfg.ten_crop)
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


def run_extraction(cfg: ExtractConfig) -> ExtractResult:
    """Extract features for ``cfg`` in this process (one rank of a torchrun job, or alone)."""
    import torch

    ranks = dist.RankInfo.from_env()
    _check_choices(cfg)
    if cfg.mode == "deterministic":
        request_deterministic_cublas()  # before this process's first CUDA work
    out = Path(cfg.out).expanduser().resolve()
    store, work = _plan(cfg, ranks)

    device = resolve_device(cfg.device, ranks.local_rank)
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.set_device(device)
    batch_size = cfg.batch_size or (256 if on_cuda else 32)
    if batch_size < 1:
        raise UserInputError(f"--batch-size {batch_size}: must be at least 1")
    net, dim, weights, pre = load_backbone(cfg)
    head = classifier_head(net, dim)
    setup = ExtractionSetup(
        cfg=cfg,
        work=work,
        net=net,
        dim=dim,
        pre=pre,
        device=device,
        precision=_resolve_precision(cfg, on_cuda),
        decode=cfg.decode if cfg.decode != "auto" else "pil",
        batch_size=batch_size,
        workers=cfg.workers if cfg.workers is not None else _default_workers(on_cuda, ranks),
        head=None if head is None else BackboneHead(head[0], head[1], sorted(ilsvrc2012_wnids())),
    )
    logit_classes = sorted(ilsvrc2012_wnids()) if cfg.logits else None
    record = _run_record(setup, store, weights, logit_classes)
    fresh = _check_run(out, record)

    result = ExtractResult(out=out)
    num_shards = record["num_shards"]
    mine = dist.shard_range(num_shards, ranks.rank, ranks.world_size)
    done = dist.finished_shards(out)
    pending = [g for g in mine if g not in done]
    result.shards_already_done = len(mine) - len(pending)
    # --compile compiles here, before the run record exists: if it fails, nothing is left behind
    # that would refuse the same --out without --compile
    with torch_numerics(cfg.mode == "deterministic"):
        forward = _prepare_net(setup, result) if pending else None
    if fresh:
        _write_run(out, record)
    _ensure_head(out, setup.head)

    handler, old_level = _attach_log_file(out, ranks.rank)
    try:
        if forward is not None:
            with torch_numerics(cfg.mode == "deterministic"):
                _extract_shards(setup, forward, store.reader(), pending, ranks, out, result)
        if ranks.rank == 0 or pending:
            # re-running a finished run verifies every shard's sha256; fresh shards were just hashed
            result.verified = not pending and all(g in done for g in range(num_shards))
            result.manifest = dist.merge(out, verify=result.verified, require_complete=False)
        _summarise(result, ranks, num_shards, handler)
    finally:
        package_log = logging.getLogger("imagenet_zsl")
        package_log.removeHandler(handler)
        package_log.setLevel(old_level)
        handler.close()
    return result


def _resolve_precision(cfg: ExtractConfig, on_cuda: bool) -> str:
    """``--precision auto``: fp32 in deterministic mode and on the CPU, bf16 in fast mode on CUDA. An
    explicit bf16/fp16 is honoured in deterministic mode too: reproducible, but no longer equal to
    fp32 (CPU) features."""
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16" if on_cuda and cfg.mode == "fast" else "fp32"


def _attach_log_file(out: Path, rank: int) -> tuple[logging.Handler, int]:
    """Per-rank log file in DIR/logs/ (skipped files with reasons, summaries); returns the handler
    and the package logger's previous level, restored after the run."""
    (out / "logs").mkdir(exist_ok=True)
    handler = logging.FileHandler(out / "logs" / f"extract.r{rank:03d}.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    package_log = logging.getLogger("imagenet_zsl")
    old_level = package_log.level
    package_log.addHandler(handler)
    if package_log.getEffectiveLevel() > logging.INFO:
        package_log.setLevel(logging.INFO)
    return handler, old_level


def _summarise(
    result: ExtractResult, ranks: dist.RankInfo, num_shards: int, log_file: logging.Handler
) -> None:
    who = f"rank {ranks.rank}/{ranks.world_size}: " if ranks.world_size > 1 else ""
    if result.shards_written:
        line = (
            f"{who}extracted {result.images} images ({result.skipped} skipped) in "
            f"{result.seconds:.1f} s, {result.images_per_second:.1f} images/s; "
            f"{result.shards_written} shards written, {result.shards_already_done} already done"
        )
        if result.compile_seconds:
            line += f" (plus {result.compile_seconds:.1f} s to compile)"
    else:
        line = f"{who}nothing to extract: {result.shards_already_done} shards already done"
    log_file.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None))
    print(line, flush=True)
    if result.manifest is not None:
        check = "all sha256 verified, " if result.verified else ""
        print(f"complete: {num_shards} shards, {check}manifest {result.manifest}", flush=True)
    elif ranks.world_size > 1 and result.shards_written:
        print(
            f"{who}other ranks still running; the last to finish writes the manifest "
            f"(or run: imagenet-zsl extract --merge {result.out})",
            flush=True,
        )


def _batch_plan(work_len: int, shard_size: int, batch_size: int, shards: list[int]):
    """(shard, positions, is_last_batch_of_shard) for each batch; batches never straddle shards."""
    plan = []
    for g in shards:
        lo, hi = g * shard_size, min((g + 1) * shard_size, work_len)
        starts = list(range(lo, hi, batch_size))
        for k, start in enumerate(starts):
            plan.append((g, range(start, min(start + batch_size, hi)), k == len(starts) - 1))
    return plan


def _autocast(setup: ExtractionSetup) -> Any:
    """The forward pass's autocast context (re-entrant: entered once per batch), or a null one."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(setup.precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(setup.device.type, dtype=dtype)


def _prepare_net(setup: ExtractionSetup, result: ExtractResult) -> Callable[[Any], tuple[Any, Any]]:
    """The backbone on its device (channels_last), as ``x -> (features, logits)``.

    With ``--compile`` it is compiled here, by one warm-up forward pass on a zero batch of exactly
    the loop's shape, dtype, layout, grad and autocast mode (so the loop reuses that graph); the
    time goes into ``result.compile_seconds``. A compiler that is missing or fails is a
    UserInputError naming ``--compile``; any other error propagates unchanged.
    """
    import torch

    # cudnn.benchmark (fast mode) is set by the caller's torch_numerics: one input shape per run
    net = setup.net.to(setup.device, memory_format=torch.channels_last)
    if not setup.cfg.compile:
        return net
    start = time.perf_counter()
    forward = _compile(net)
    from torch._dynamo.exc import TorchDynamoException, TorchRuntimeError

    crop = setup.pre.crop
    with torch.inference_mode():
        x = torch.zeros((setup.batch_size * setup.pre.views, 3, crop, crop), device=setup.device)
        x = x.contiguous(memory_format=torch.channels_last)
        try:
            with _autocast(setup):
                forward(x)
        except TorchDynamoException as err:
            if isinstance(err, TorchRuntimeError):
                raise  # the model itself fails on this input: not a compiler problem
            raise UserInputError(_compile_failure(err)) from err
    if setup.device.type == "cuda":
        torch.cuda.synchronize(setup.device)
    result.compile_seconds = time.perf_counter() - start
    log.info(
        "--compile: compiled %s for batch %d in %.1f s",
        setup.cfg.backbone,
        setup.batch_size,
        result.compile_seconds,
    )
    return forward


def _compile(net: Any) -> Callable[[Any], tuple[Any, Any]]:
    """``torch.compile`` (inductor, static shapes) of ``net`` with inductor's freezing on.

    Freezing turns the weights into constants: BatchNorm folds into the convolutions and, on CPU,
    the convolution weights are prepacked for oneDNN, which is most of the gain (ResNet-50 on 2
    CPU cores: 12 -> 18 img/s over eager channels_last). Inductor reads the flag when it compiles,
    i.e. inside a call, so each call is wrapped in ``config.patch``: the global config is restored
    after it and no other compilation in the process sees it (``torch.compile(options=...)`` does
    not reach freezing in torch 2.14: it silently compiles unfrozen).
    """
    import torch
    from torch._inductor import config as inductor_config

    try:
        compiled = torch.compile(net, backend="inductor", dynamic=False)
    except RuntimeError as err:  # e.g. a Python version or platform torch.compile does not support
        raise UserInputError(_compile_failure(err)) from err

    def forward(x: Any) -> tuple[Any, Any]:
        with inductor_config.patch(freezing=True):
            return compiled(x)

    return forward


def _compile_failure(err: BaseException) -> str:
    """One line for a failed ``torch.compile``: the underlying error's type and first line."""
    inner = getattr(err, "inner_exception", None) or err
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    cause = first if first.startswith(type(inner).__name__) else f"{type(inner).__name__}: {first}"
    if len(cause) > 240:
        cause = cause[:237] + "..."
    return (
        f"--compile: torch.compile failed ({cause}); it needs a working C++ compiler on CPU "
        "(Triton on CUDA): install one or run without --compile"
    )


def _extract_shards(
    setup: ExtractionSetup,
    forward: Callable[[Any], tuple[Any, Any]],
    reader: StoreReader,
    pending: list[int],
    ranks: dist.RankInfo,
    out: Path,
    result: ExtractResult,
) -> None:
    """Extract the ``pending`` shards of ``setup.work`` into ``out`` with ``forward`` (the prepared
    backbone), each shard written atomically once its last batch is done; counts and timings go
    into ``result``."""
    import torch

    cfg, work, pre, device, batch_size = setup.cfg, setup.work, setup.pre, setup.device, setup.batch_size
    on_cuda = device.type == "cuda"
    plan = _batch_plan(len(work), cfg.shard_size, batch_size, pending)
    lo = pending[0] * cfg.shard_size
    hi = min((pending[-1] + 1) * cfg.shard_size, len(work))
    dataset = ImageDataset(work, lo, hi, reader, pre, device_decode=setup.decode == "torchvision")
    loader = image_loader(
        dataset, [positions for _, positions, _ in plan], workers=setup.workers, pin_memory=on_cuda
    )
    autocast = _autocast(setup)
    total = sum(len(p) for _, p, _ in plan)
    bar = tqdm(
        total=total,
        unit="img",
        desc=f"extract r{ranks.rank}",
        smoothing=0.05,
        disable=not cfg.progress or ranks.rank != 0,
        dynamic_ncols=True,
    )
    normalize = pre.normalizer(device)
    # one input shape per run: no cudnn re-tuning on CUDA; with --compile, one graph (never a
    # recompile for the short last batch of a shard or a batch shortened by skipped files)
    pad = cfg.compile or (on_cuda if cfg.pad_batches is None else cfg.pad_batches)
    buffers = _ShardBuffer()
    start = time.perf_counter()
    with torch.inference_mode():
        for (g, positions, last), batch in zip(plan, loader, strict=True):
            images, pos, skipped = _with_device_decoded(batch, pre, device)
            n = len(pos)
            if n:
                images = images.to(device, non_blocking=True)
                if pad and n < batch_size:
                    filler = images.new_zeros((batch_size - n, *images.shape[1:]))
                    images = torch.cat([images, filler])
                x = normalize(images)
                if pre.ten_crop:  # (b, 10, 3, c, c): one forward over the b x 10 crops
                    x = x.reshape(-1, *x.shape[2:])
                x = x.contiguous(memory_format=torch.channels_last)
                with autocast:
                    features, logits = forward(x)
                if pre.ten_crop:
                    features, logits = _mean_over_crops(features, logits, pre.views)
                buffers.add(
                    pos.numpy(),
                    features[:n].to(torch.float16),
                    None if logits is None else logits[:n].to(torch.float16),
                )
            buffers.skipped += skipped
            bar.update(len(positions))
            if last:
                rows, n_skipped, skipped_records = buffers.write(
                    out, shard_name(ranks.rank, g), work, setup.dim
                )
                result.images += rows
                result.skipped += n_skipped
                result.skipped_files += skipped_records
                result.shards_written += 1
                buffers = _ShardBuffer()
    bar.close()
    result.seconds = time.perf_counter() - start


def _mean_over_crops(features: Any, logits: Any, views: int) -> tuple[Any, Any]:
    """(b x views, D) features (and logits) → (b, D): the mean over each image's crops, in fp32
    (mean logits = the head applied to the mean features: the head is linear)."""
    features = features.float().reshape(-1, views, features.shape[-1]).mean(dim=1)
    if logits is not None:
        logits = logits.float().reshape(-1, views, logits.shape[-1]).mean(dim=1)
    return features, logits


def _with_device_decoded(batch: dict[str, Any], pre: Preprocessing, device: torch.device):
    """(images (b, 3, c, c) uint8, positions (b,) int64 in work order, skipped (pos, reason)) of a
    :class:`~imagenet_zsl.features.loading.Collate` batch, its raw JPEGs decoded on ``device``."""
    import torch

    images, pos = batch["images"], batch["pos"]
    skipped = list(batch["skipped"])
    if not batch["raw"]:
        return images, pos, skipped
    extra, extra_pos, failed = _device_decode(batch["raw"], batch["raw_pos"], pre, device)
    skipped += failed
    if len(extra_pos):
        images = torch.cat([images.to(device, non_blocking=True), extra])
        pos = torch.cat([pos, torch.tensor(extra_pos, dtype=torch.int64)])
        order = torch.argsort(pos)
        if device.type == "cuda":  # a pinned index copies without stalling the host
            order_dev = order.pin_memory().to(device, non_blocking=True)
        else:
            order_dev = order
        images, pos = images[order_dev], pos[order]
    return images, pos, skipped


class _ShardBuffer:
    """Device-side outputs of one shard until it is complete."""

    def __init__(self):
        self.positions: list[np.ndarray] = []
        self.features: list = []
        self.logits: list = []
        self.skipped: list[tuple[int, str]] = []

    def add(self, positions: np.ndarray, features: Any, logits: Any) -> None:
        self.positions.append(positions)
        self.features.append(features)
        if logits is not None:
            self.logits.append(logits)

    def write(self, out: Path, name: str, work: WorkList, dim: int | None):
        import torch

        if self.positions:
            positions = np.concatenate(self.positions)
            features = torch.cat(self.features).cpu().numpy()
            logits = torch.cat(self.logits).cpu().numpy() if self.logits else None
        else:
            positions = np.zeros(0, np.int64)
            features = np.zeros((0, dim or 0), np.float16)
            logits = None
        assert np.all(np.diff(positions) > 0), "rows must stay in work order"
        skipped_pos = np.array(sorted(p for p, _ in self.skipped), dtype=np.int64)
        reasons = dict(self.skipped)
        skipped = [
            {"id": str(i), "reason": reasons[int(p)]}
            for p, i in zip(skipped_pos, work.ids(skipped_pos), strict=True)
        ]
        for record in skipped:
            log.warning("skipped %s: %s", record["id"], record["reason"])
        sidecar = dist.skipped_path(out, name)
        if skipped:
            atomic_write_json(sidecar, skipped)
        else:
            sidecar.unlink(missing_ok=True)
        write_shard(out, name, features, work.labels[positions], work.ids(positions), logits)
        return len(positions), len(skipped), skipped


def _device_decode(raw: list, raw_pos: list[int], pre: Preprocessing, device: torch.device):
    """Decode plain JPEGs with torchvision.io.decode_jpeg on ``device`` (nvJPEG on CUDA), in one
    batched call; on failure retry one by one, then fall back to PIL. Returns (crops uint8
    (k, 3, c, c) on device, positions, skipped (pos, reason))."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():
        # torchvision 0.29 deprecates its decoders in favour of TorchCodec (not a dependency yet)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            decoded = decode_jpeg(raw, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:
            decoded = []
            for data in raw:
                try:
                    decoded.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    decoded.append(None)
    crops, positions, failed = [], [], []
    for pos, data, image in zip(raw_pos, raw, decoded, strict=True):
        crop = None
        if image is not None:
            with contextlib.suppress(RuntimeError):
                crop = pre.crop_tensor(image)
        if crop is None:  # the device could not decode or resize it: PIL decides
            try:
                crop = torch.from_numpy(
                    pre.crop_pil(decode_rgb(data.numpy().tobytes(), pre.decode_min_side))
                ).to(device)
            except DecodeFailure as err:
                failed.append((pos, str(err)))
                continue
            except Exception as err:  # noqa: BLE001 - skip, never crash
                failed.append((pos, f"preprocessing error: {type(err).__name__}: {str(err)[:120]}"))
                continue
        crops.append(crop)
        positions.append(pos)
    stacked = (
        torch.stack(crops) if crops else torch.zeros((0, *pre.crop_shape), dtype=torch.uint8, device=device)
    )
    return stacked, positions, failed


def merge_run(out_dir: str | Path, verify: bool = True) -> Path:
    """``imagenet-zsl extract --merge DIR``: check every shard and write the manifest."""
    path = dist.merge(out_dir, verify=verify, require_complete=True)
    assert path is not None
    return path
