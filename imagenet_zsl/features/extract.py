"""Batched feature extraction from an image store into resumable, verifiable shards.

Pipeline per process: the work list (the ``--classes`` images of the store, optionally a seeded
subsample per class) is cut into fixed-size shards of consecutive work items; DataLoader workers
read bytes straight from the tars and decode + resize + crop to uint8; the main process copies
pinned batches to the device (non-blocking), normalises there, and runs the backbone
(channels_last; bf16 autocast on CUDA). A shard is written atomically once all its batches are done,
so an interrupted run loses at most the shards in flight and a re-run redoes exactly those: batches
never straddle shards, so a shard's bytes do not depend on where a run was interrupted.

Output: see :mod:`imagenet_zsl.features.shards`. Labels index the label space ``classes``: the
``--classes`` file's wnids in file order. Image ids are ``"<wnid>/<member>"``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import time
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.shards import shard_name, write_shard
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.images.decode import DecodeFailure, decode_rgb, is_plain_ycbcr_jpeg
from imagenet_zsl.images.store import ImageStore, StoreReader, open_store, select_rows
from imagenet_zsl.io import atomic_write_json, canonical_json, file_record, software_versions

log = logging.getLogger(__name__)

DECODERS = ("auto", "pil", "torchvision")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


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
    resize: int = 256
    crop: int = 224
    progress: bool = True
    pad_batches: bool | None = None  # pad short batches to batch_size (None: on CUDA only)


@dataclass
class ExtractResult:
    """What one process did; ``manifest`` is set when the run is complete (merged)."""

    out: Path
    images: int = 0
    skipped: int = 0
    shards_written: int = 0
    shards_already_done: int = 0
    seconds: float = 0.0
    manifest: Path | None = None
    verified: bool = False
    skipped_files: list[dict[str, str]] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return (self.images + self.skipped) / self.seconds if self.seconds > 0 else 0.0


# ----------------------------------------------------------------------------- work list


def read_classes_file(path: str | Path) -> list[str]:
    """The label space: first column of each non-blank, non-# line, in file order, no duplicates."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: classes file not found (give --classes FILE, one wnid a line)")
    classes: list[str] = []
    seen: dict[str, int] = {}
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        wnid = text.split()[0]
        if line_no == 1 and wnid == "wnid":
            continue  # header of a counts TSV
        if wnid in seen:
            raise UserInputError(f"{path}:{line_no}: {wnid} repeats line {seen[wnid]}")
        seen[wnid] = line_no
        classes.append(wnid)
    if not classes:
        raise UserInputError(f"{path}: no classes listed")
    return classes


@dataclass
class WorkList:
    """The images to extract, in work order (store order: sequential reads of each tar).

    ``labels`` (n,) int32 into ``classes``; ``source``/``member``/``offset``/``size`` locate the
    bytes; :meth:`ids` gives "<wnid>/<member>". Fixed-width numpy arrays (not Python objects), so
    forked DataLoader workers share them without copy-on-write growth.
    """

    classes: list[str]
    labels: np.ndarray
    source: np.ndarray
    member: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    missing_classes: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def ids(self, positions: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Image ids ``"<wnid>/<member>"`` of the given work positions (unicode array)."""
        wnids = np.asarray(self.classes, dtype=np.str_)[self.labels[positions]]
        return np.char.add(np.char.add(wnids, "/"), self.member[positions])

    def digest(self) -> str:
        """sha256 over ids and labels: identifies the work list in run.json."""
        digest = hashlib.sha256()
        for start in range(0, len(self), 1 << 18):
            chunk = self.ids(slice(start, start + (1 << 18)))
            digest.update("\n".join(chunk.tolist()).encode())
            digest.update(b"\n")
        digest.update(np.ascontiguousarray(self.labels, dtype="<i4").tobytes())
        return digest.hexdigest()


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
    return WorkList(
        classes=classes,
        labels=labels.astype(np.int32),
        source=store.source_index[rows].astype(np.int32),
        member=store.member[rows].astype(np.str_),
        offset=store.offset[rows].astype(np.int64),
        size=store.size[rows].astype(np.int64),
        missing_classes=missing,
    )


# ----------------------------------------------------------------------------- decoding workers


class _ImageDataset:
    """Map-style dataset over work positions [lo, hi): item → (pos, crop | None, raw | None, reason).

    ``raw`` carries undecoded JPEG bytes when the device decoder (nvJPEG) is used; everything it
    cannot take (CMYK, grey, PNG, truncated) is decoded here with PIL.
    """

    def __init__(self, work: WorkList, lo: int, hi: int, reader: StoreReader,
                 pre: Preprocessing, device_decode: bool):
        self.lo = lo
        self.source = work.source[lo:hi]
        self.member = work.member[lo:hi]
        self.offset = work.offset[lo:hi]
        self.size = work.size[lo:hi]
        self.reader = reader
        self.pre = pre
        self.device_decode = device_decode

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, pos: int):
        i = pos - self.lo
        size = int(self.size[i])
        try:
            data = self.reader.read(int(self.source[i]), str(self.member[i]), int(self.offset[i]),
                                    size)
        except OSError as err:
            return pos, None, None, f"read error: {err.strerror or err}"
        if self.offset[i] >= 0 and len(data) < size:
            return pos, None, None, f"truncated: tar ends {size - len(data)} bytes into the member"
        if self.device_decode and is_plain_ycbcr_jpeg(data):
            return pos, None, data, None
        try:
            image = decode_rgb(data)
        except DecodeFailure as err:
            return pos, None, None, str(err)
        try:
            return pos, self.pre.crop_pil(image), None, None
        except Exception as err:  # noqa: BLE001 - e.g. absurd aspect ratios: skip, never crash
            return pos, None, None, f"preprocessing error: {type(err).__name__}: {str(err)[:120]}"


class _Collate:
    """Stack decoded crops; pass raw JPEGs and skip reasons through (picklable for workers)."""

    def __init__(self, crop: int):
        self.crop = crop

    def __call__(self, items):
        import torch

        crops = [(p, c) for p, c, _, _ in items if c is not None]
        raws = [(p, r) for p, _, r, _ in items if r is not None]
        skipped = [(p, reason) for p, c, r, reason in items if c is None and r is None]
        if crops:
            images = torch.from_numpy(np.stack([c for _, c in crops]))
        else:
            images = torch.zeros((0, 3, self.crop, self.crop), dtype=torch.uint8)
        return {
            "pos": torch.tensor([p for p, _ in crops], dtype=torch.int64),
            "images": images,
            "raw_pos": [p for p, _ in raws],
            "raw": [torch.frombuffer(bytearray(r), dtype=torch.uint8) for _, r in raws],
            "skipped": skipped,
        }


# ----------------------------------------------------------------------------- the run


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _resolve_device(requested: str, ranks: dist.RankInfo):
    import torch

    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserInputError("--device cuda: no CUDA device is visible (use --device cpu)")
        if requested == "cuda":
            requested = f"cuda:{ranks.local_rank % torch.cuda.device_count()}"
        torch.cuda.set_device(torch.device(requested))
    elif requested != "cpu":
        raise UserInputError(f"--device {requested!r}: use cuda, cuda:N, cpu or auto")
    return torch.device(requested)


def _run_record(cfg: ExtractConfig, store: ImageStore, work: WorkList, spec_dim: int,
                weights: dict[str, Any], device_type: str, decode: str, precision: str,
                batch_size: int, pre: Preprocessing, logit_classes: list[str] | None) -> dict:
    """run.json: the run's identity (must match to resume) and the manifest without shards."""
    num_shards = math.ceil(len(work) / cfg.shard_size)
    parameters = {
        "per_class": cfg.per_class, "seed": cfg.seed, "shard_size": cfg.shard_size,
        "batch_size": batch_size, "decode": decode, "precision": precision,
        "device_type": device_type, "logits": cfg.logits,
    }
    inputs = {
        "store": {"path": str(store.root), "layout": store.layout, "index_key": store.key,
                  "images_in_store": len(store)},
        "classes_file": file_record(cfg.classes_file),
    }
    if cfg.val_labels:
        inputs["val_labels"] = file_record(cfg.val_labels)
    identity = {
        "store": inputs["store"], "classes_sha256": inputs["classes_file"]["sha256"],
        "backbone": cfg.backbone, "weights_sha256": weights["sha256"], "weights": weights["source"],
        "preprocessing": pre.describe(), **parameters, "work_digest": work.digest(),
        "num_items": len(work),
    }
    manifest = {
        "classes": work.classes,
        "dim": spec_dim,
        "simulated": False,
        "inputs": inputs,
        "backbone": {"name": cfg.backbone, "dim": spec_dim, "weights": weights},
        "preprocessing": pre.describe(),
        "parameters": parameters,
        "classes_without_images": work.missing_classes,
        "software": software_versions(),
    }
    if logit_classes is not None:
        manifest["logits"] = {
            "classes": logit_classes,
            "order": "sorted ILSVRC-2012 wnids (the torchvision/timm 1K output order)",
        }
    return {"format": dist.RUN_FORMAT, "identity": identity, "manifest": manifest,
            "num_shards": num_shards, "num_items": len(work)}


def _check_or_write_run(out: Path, record: dict) -> None:
    path = out / dist.RUN_FILE
    if path.exists():
        existing = dist.read_run(out)
        old = existing.get("identity", {})
        new = json.loads(canonical_json(record["identity"]))  # tuples → lists, as stored
        differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if differ:
            raise UserInputError(
                f"{out} holds a different extraction ({', '.join(differ)} differ); re-run the "
                "original command to resume it, or choose another --out"
            )
        return
    if out.exists() and any(not e.name.startswith(".") for e in os.scandir(out)):
        raise UserInputError(
            f"{out} is not empty and is not an extraction directory; choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)


def run_extraction(cfg: ExtractConfig) -> ExtractResult:
    """Extract features for ``cfg`` in this process (one rank of a torchrun job, or alone)."""
    import torch

    ranks = dist.RankInfo.from_env()
    if cfg.shard_size < 1:
        raise UserInputError(f"--shard-size {cfg.shard_size}: must be at least 1")
    if cfg.decode not in DECODERS:
        raise UserInputError(f"--decode {cfg.decode!r}: choose one of {', '.join(DECODERS)}")
    if cfg.precision not in PRECISIONS:
        raise UserInputError(f"--precision {cfg.precision!r}: choose one of {', '.join(PRECISIONS)}")
    out = Path(cfg.out).expanduser().resolve()
    classes = read_classes_file(cfg.classes_file)
    # local rank 0 builds the store index once; the other processes on the node wait for it
    store = open_store(cfg.store, cfg.layout, cfg.val_labels,
                       progress=cfg.progress and ranks.rank == 0,
                       wait_for_cache_s=6 * 3600.0 if ranks.local_rank != 0 else 0.0)
    work = plan_work(store, classes, cfg.per_class, cfg.seed)
    if not len(work):
        raise UserInputError(
            f"{cfg.classes_file}: none of its {len(classes)} classes has images in {store.root} "
            f"(store classes e.g. {preview(store.classes, 3)})"
        )
    if work.missing_classes:
        log.warning("%d of %d classes have no images in the store (listed in the manifest): %s",
                    len(work.missing_classes), len(classes), preview(work.missing_classes))

    device = _resolve_device(cfg.device, ranks)
    on_cuda = device.type == "cuda"
    precision = cfg.precision if cfg.precision != "auto" else ("bf16" if on_cuda else "fp32")
    decode = cfg.decode if cfg.decode != "auto" else "pil"
    batch_size = cfg.batch_size or (256 if on_cuda else 32)
    if batch_size < 1:
        raise UserInputError(f"--batch-size {batch_size}: must be at least 1")
    cpus = _available_cpus()
    if cfg.workers is not None:
        workers = cfg.workers
    elif on_cuda:
        workers = max(1, min(32, cpus // max(1, ranks.local_world_size) - 1))
    else:
        workers = max(1, min(4, cpus // (4 * max(1, ranks.local_world_size))))

    from imagenet_zsl.features.backbones import build_backbone

    net, weights = build_backbone(cfg.backbone, cfg.weights, seed=cfg.seed)
    net.want_logits = cfg.logits
    if cfg.logits and net.num_logits != 1000:
        raise UserInputError(
            f"--logits: backbone {cfg.backbone} has {net.num_logits} outputs; logits are stored "
            "only for ImageNet-1K classifiers"
        )
    pre = Preprocessing(cfg.resize, cfg.crop)
    dim = net.spec.dim
    if dim is None:  # timm models: measure
        with torch.inference_mode():
            dim = int(net(torch.zeros(1, 3, cfg.crop, cfg.crop))[0].shape[1])
    logit_classes = None
    if cfg.logits:
        from imagenet_zsl.data import ilsvrc2012_wnids

        logit_classes = sorted(ilsvrc2012_wnids())
    record = _run_record(cfg, store, work, dim, weights.describe(), device.type, decode,
                         precision, batch_size, pre, logit_classes)
    _check_or_write_run(out, record)

    result = ExtractResult(out=out)
    num_shards = record["num_shards"]
    mine = dist.shard_range(num_shards, ranks.rank, ranks.world_size)
    done = dist.finished_shards(out)
    pending = [g for g in mine if g not in done]
    result.shards_already_done = len(mine) - len(pending)

    handler, old_level = _attach_log_file(out, ranks.rank)
    try:
        if pending:
            _extract_shards(cfg, work, store.reader(), net, dim, pre, device, precision, decode,
                            batch_size, workers, pending, ranks, out, result)
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


def _summarise(result: ExtractResult, ranks: dist.RankInfo, num_shards: int,
               log_file: logging.Handler) -> None:
    who = f"rank {ranks.rank}/{ranks.world_size}: " if ranks.world_size > 1 else ""
    if result.shards_written:
        line = (
            f"{who}extracted {result.images} images ({result.skipped} skipped) in "
            f"{result.seconds:.1f} s, {result.images_per_second:.1f} images/s; "
            f"{result.shards_written} shards written, {result.shards_already_done} already done"
        )
    else:
        line = f"{who}nothing to extract: {result.shards_already_done} shards already done"
    log_file.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None))
    print(line, flush=True)
    if result.manifest is not None:
        check = "all sha256 verified, " if result.verified else ""
        print(f"complete: {num_shards} shards, {check}manifest {result.manifest}", flush=True)
    elif ranks.world_size > 1 and result.shards_written:
        print(f"{who}other ranks still running; the last to finish writes the manifest "
              f"(or run: imagenet-zsl extract --merge {result.out})", flush=True)


def _batch_plan(work_len: int, shard_size: int, batch_size: int, shards: list[int]):
    """(shard, positions, is_last_batch_of_shard) for each batch; batches never straddle shards."""
    plan = []
    for g in shards:
        lo, hi = g * shard_size, min((g + 1) * shard_size, work_len)
        starts = list(range(lo, hi, batch_size))
        for k, start in enumerate(starts):
            plan.append((g, range(start, min(start + batch_size, hi)), k == len(starts) - 1))
    return plan


def _extract_shards(cfg, work, reader, net, dim, pre, device, precision, decode, batch_size,
                    workers, pending, ranks, out, result) -> None:
    import torch
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.backends.cudnn.benchmark = True
    net = net.to(device, memory_format=torch.channels_last)
    plan = _batch_plan(len(work), cfg.shard_size, batch_size, pending)
    lo = pending[0] * cfg.shard_size
    hi = min((pending[-1] + 1) * cfg.shard_size, len(work))
    dataset = _ImageDataset(work, lo, hi, reader, pre, device_decode=decode == "torchvision")
    loader = DataLoader(
        dataset,
        batch_sampler=[positions for _, positions, _ in plan],
        num_workers=workers,
        collate_fn=_Collate(pre.crop),
        pin_memory=on_cuda,
        prefetch_factor=2 if workers else None,  # in flight: workers x 2 batches of uint8 crops
    )
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = (torch.autocast(device.type, dtype=dtype) if dtype is not None
                else contextlib.nullcontext())  # re-entrant: entered once per batch
    total = sum(len(p) for _, p, _ in plan)
    bar = tqdm(total=total, unit="img", desc=f"extract r{ranks.rank}", smoothing=0.05,
               disable=not cfg.progress or ranks.rank != 0, dynamic_ncols=True)
    normalize = pre.normalizer(device)
    pad = on_cuda if cfg.pad_batches is None else cfg.pad_batches
    buffers = _ShardBuffer()
    start = time.perf_counter()
    with torch.inference_mode():
        for (g, positions, last), batch in zip(plan, loader, strict=True):
            images, pos = batch["images"], batch["pos"]
            skipped = list(batch["skipped"])
            if batch["raw"]:
                extra, extra_pos, failed = _device_decode(batch["raw"], batch["raw_pos"], pre, device)
                skipped += failed
                if len(extra_pos):
                    images = torch.cat([images.to(device, non_blocking=True), extra])
                    pos = torch.cat([pos, torch.tensor(extra_pos, dtype=torch.int64)])
                    order = torch.argsort(pos)
                    if on_cuda:  # a pinned index copies without stalling the host
                        order_dev = order.pin_memory().to(device, non_blocking=True)
                    else:
                        order_dev = order
                    images, pos = images[order_dev], pos[order]
            n = len(pos)
            if n:
                images = images.to(device, non_blocking=True)
                if pad and n < batch_size:  # one shape per run: no cudnn re-tuning, same kernels
                    filler = images.new_zeros((batch_size - n, *images.shape[1:]))
                    images = torch.cat([images, filler])
                x = normalize(images).contiguous(memory_format=torch.channels_last)
                with autocast:
                    features, logits = net(x)
                buffers.add(pos.numpy(), features[:n].to(torch.float16),
                            None if logits is None else logits[:n].to(torch.float16))
            buffers.skipped += skipped
            bar.update(len(positions))
            if last:
                name = shard_name(ranks.rank, g)
                rows, n_skipped, skipped_records = buffers.write(out, name, work, dim)
                result.images += rows
                result.skipped += n_skipped
                result.skipped_files += skipped_records
                result.shards_written += 1
                buffers = _ShardBuffer()
    bar.close()
    result.seconds = time.perf_counter() - start


class _ShardBuffer:
    """Device-side outputs of one shard until it is complete."""

    def __init__(self):
        self.positions: list[np.ndarray] = []
        self.features: list = []
        self.logits: list = []
        self.skipped: list[tuple[int, str]] = []

    def add(self, positions: np.ndarray, features, logits) -> None:
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
        skipped = [{"id": str(i), "reason": reasons[int(p)]}
                   for p, i in zip(skipped_pos, work.ids(skipped_pos), strict=True)]
        for record in skipped:
            log.warning("skipped %s: %s", record["id"], record["reason"])
        sidecar = dist.skipped_path(out, name)
        if skipped:
            atomic_write_json(sidecar, skipped)
        else:
            sidecar.unlink(missing_ok=True)
        write_shard(out, name, features, work.labels[positions], work.ids(positions), logits)
        return len(positions), len(skipped), skipped


def _device_decode(raw: list, raw_pos: list[int], pre: Preprocessing, device):
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
                crop = torch.from_numpy(pre.crop_pil(decode_rgb(data.numpy().tobytes()))).to(device)
            except DecodeFailure as err:
                failed.append((pos, str(err)))
                continue
            except Exception as err:  # noqa: BLE001 - skip, never crash
                failed.append((pos, f"preprocessing error: {type(err).__name__}: {str(err)[:120]}"))
                continue
        crops.append(crop)
        positions.append(pos)
    stacked = (torch.stack(crops) if crops
               else torch.zeros((0, 3, pre.crop, pre.crop), dtype=torch.uint8, device=device))
    return stacked, positions, failed


def merge_run(out_dir: str | Path, verify: bool = True) -> Path:
    """``imagenet-zsl extract --merge DIR``: check every shard and write the manifest."""
    path = dist.merge(out_dir, verify=verify, require_complete=True)
    assert path is not None
    return path
