"""The extraction loop: batches of decoded crops through the backbone into shards, each shard
written atomically once its last batch is done (batches never straddle shards). torch is imported
when the loop runs, not at import (see :mod:`imagenet_zsl.features.extract`)."""

from __future__ import annotations

import contextlib
import io
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from imagenet_zsl.atomic import atomic_write_json
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.extract_compile import autocast
from imagenet_zsl.features.extract_setup import ExtractionSetup, ExtractResult
from imagenet_zsl.features.loading import ImageDataset, WorkList, image_loader, split_raw
from imagenet_zsl.features.scored_shards import ShardOutputs, ShardSink, write_scored_shard
from imagenet_zsl.features.shard_files import shard_name, write_shard
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.images.decode import DecodeFailure, decode_rgb
from imagenet_zsl.images.store import StoreReader

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def _batch_plan(work_len: int, shard_size: int, batch_size: int, shards: list[int]):
    """(shard, positions, is_last_batch_of_shard) for each batch; batches never straddle shards."""
    plan = []
    for g in shards:
        lo, hi = g * shard_size, min((g + 1) * shard_size, work_len)
        starts = list(range(lo, hi, batch_size))
        for k, start in enumerate(starts):
            plan.append((g, range(start, min(start + batch_size, hi)), k == len(starts) - 1))
    return plan


def extract_shards(
    setup: ExtractionSetup,
    forward: Callable[[Any], tuple[Any, Any]],
    reader: StoreReader,
    pending: list[int],
    ranks: dist.RankInfo,
    out: Path,
    result: ExtractResult,
    sink: ShardSink | None = None,
) -> None:
    """Extract the ``pending`` shards of ``setup.work`` into ``out`` with ``forward`` (the prepared
    backbone), each shard written atomically once its last batch is done; counts and timings go
    into ``result``. With a ``sink`` (the fused path) each shard's float16 rows go to it and only
    its labels, ids and record are written (:mod:`~imagenet_zsl.features.scored_shards`)."""
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    cfg, work, pre, device, batch_size = setup.cfg, setup.work, setup.pre, setup.device, setup.batch_size
    on_cuda = device.type == "cuda"
    plan = _batch_plan(len(work), cfg.shard_size, batch_size, pending)
    lo = pending[0] * cfg.shard_size
    hi = min((pending[-1] + 1) * cfg.shard_size, len(work))
    dataset = ImageDataset(work, lo, hi, reader, pre, device_decode=setup.decode == "torchvision")
    loader = image_loader(
        dataset, [positions for _, positions, _ in plan], workers=setup.workers, pin_memory=on_cuda
    )
    autocast_context = autocast(setup)
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
                with autocast_context:
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
                rows, n_skipped = buffers.write(out, shard_name(ranks.rank, g), work, setup.dim, sink)
                result.images += rows
                result.skipped += n_skipped
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
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    images, pos = batch["images"], batch["pos"]
    skipped = list(batch["skipped"])
    if not batch["raw_pos"]:
        return images, pos, skipped
    extra, extra_pos, failed = _device_decode(split_raw(batch), batch["raw_pos"], pre, device)
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

    def write(
        self, out: Path, name: str, work: WorkList, dim: int | None, sink: ShardSink | None = None
    ) -> tuple[int, int]:
        """Write the shard (and its skipped-files sidecar); (rows written, images skipped). With
        a ``sink``, the features go to it instead of a file (:func:`write_scored_shard`)."""
        import torch  # deferred: importing extraction loads no torch (see the module docstring)

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
        if sink is None:
            write_shard(out, name, features, work.labels[positions], work.ids(positions), logits)
        else:
            outputs = ShardOutputs.of(name, features, work.labels[positions], work.ids(positions), logits)
            write_scored_shard(out, outputs, sink)
        return len(positions), len(skipped)


#: input values per resize call of the device-decode path (``Preprocessing.crop_tensors``): on
#: CUDA the images of one size go in one call, up to 2^26 values (256 MiB as float; 119 images of
#: 500x375), so that a batch costs a few kernel launches per size rather than per image; on the
#: CPU one image per call, the fastest there (the float resize is bound by memory and cache: 256
#: images of 500x375, 375x500 and 500x333 took 1.9-2.2 ms each one at a time, 2.4-2.6 ms in pairs
#: and 4.1-4.8 ms in groups of 85, on one thread of the 2-core machine)
GROUP_ELEMENTS = {"cuda": 1 << 26}


def _device_decode(
    raw: list, raw_pos: list[int], pre: Preprocessing, device: torch.device, group_elements: int | None = None
):
    """Decode plain JPEGs (1-D uint8 tensors) with torchvision.io.decode_jpeg on ``device``
    (nvJPEG on CUDA) in one batched call, on failure one by one; resize and crop them grouped by
    size (:meth:`~imagenet_zsl.features.transforms.Preprocessing.crop_tensors`, up to
    ``group_elements`` values per call, default :data:`GROUP_ELEMENTS` of the device: the pixels of
    ``crop_tensor``), on failure one by one; what the device could not decode or resize, PIL
    decides. Returns (crops uint8 (k, 3, c, c) on device, their positions, skipped (pos, reason));
    the crops are not in ``raw_pos`` order (the caller sorts the batch)."""
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    if group_elements is None:
        group_elements = GROUP_ELEMENTS.get(device.type, 0)
    decoded = decode_jpegs(raw, device)
    good = [k for k, image in enumerate(decoded) if image is not None]
    try:
        crops = [pre.crop_tensors([decoded[k] for k in good], group_elements)] if good else []
        done = good
    except RuntimeError:  # a group the device could not resize: image by image
        crops, done = [], []
        for k in good:
            with contextlib.suppress(RuntimeError):
                crops.append(pre.crop_tensor(decoded[k])[None])
                done.append(k)
    del decoded
    positions = [raw_pos[k] for k in done]
    failed, on_cpu = [], []
    for k in sorted(set(range(len(raw))) - set(done)):  # the device could not: PIL decides
        try:
            on_cpu.append(pre.crop_pil(decode_rgb(raw[k].numpy().tobytes(), pre.decode_min_side)))
        except DecodeFailure as err:
            failed.append((raw_pos[k], str(err)))
            continue
        except Exception as err:  # noqa: BLE001 - skip, never crash
            failed.append((raw_pos[k], f"preprocessing error: {type(err).__name__}: {str(err)[:120]}"))
            continue
        positions.append(raw_pos[k])
    if on_cpu:
        crops.append(torch.from_numpy(np.stack(on_cpu)).to(device))
    if not crops:
        return torch.zeros((0, *pre.crop_shape), dtype=torch.uint8, device=device), positions, failed
    return (torch.cat(crops) if len(crops) > 1 else crops[0]), positions, failed


def decode_jpegs(raw: list, device: torch.device) -> list:
    """uint8 (3, H, W) RGB images on ``device`` (None where decode_jpeg failed) of ``raw``."""
    from torchvision.io import ImageReadMode, decode_jpeg  # deferred: as torch (module docstring)

    with warnings.catch_warnings():
        # torchvision 0.29 deprecates its decoders in favour of TorchCodec (not a dependency yet)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return decode_jpeg(raw, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:
            decoded = []
            for data in raw:
                try:
                    decoded.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    decoded.append(None)
            return decoded


def device_decodes_jpeg(device: torch.device) -> bool:
    """Whether torchvision's ``decode_jpeg`` works on ``device`` (a build without nvJPEG would
    send every JPEG of a ``--decode torchvision`` run through the per-image PIL fallback in the
    main process): decodes one small JPEG there."""
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    buffer = io.BytesIO()
    Image.new("RGB", (16, 8), (200, 100, 50)).save(buffer, "JPEG")
    (image,) = decode_jpegs([torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)], device)
    return image is not None and tuple(image.shape) == (3, 8, 16)
