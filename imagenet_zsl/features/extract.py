"""Batched feature extraction from an image store into resumable, verifiable shards.

Pipeline per process: the work list (the ``--classes`` images of the store, optionally a seeded
subsample per class) is cut into fixed-size shards of consecutive work items; DataLoader workers
read bytes straight from the tars and decode + resize + crop to uint8 (with ``--decode
torchvision``, the default with ``--fast`` on CUDA, they pass plain JPEGs through undecoded, and the
main process decodes them with nvJPEG and resizes them in batches on the device); the main process
copies pinned batches to the device (non-blocking), normalises there, and runs the backbone
(channels_last; with ``--compile``, compiled by inductor with frozen weights, see
:mod:`.extract_compile`) in one of two modes (:data:`MODES`): ``deterministic`` (the default)
computes in fp32 with cuDNN's autotuner, TF32 and nondeterministic kernels off, so that two runs
give the same bytes and GPU features match CPU ones to fp32 rounding; ``fast`` is bf16 autocast
with the autotuner on CUDA.
A shard is written atomically once all its batches are done, so an interrupted run loses at most
the shards in flight and a re-run redoes exactly those: batches never straddle shards, so a
shard's bytes do not depend on where a run was interrupted.

Modules: :mod:`.extract_setup` (options, checks, backbone), :mod:`.extract_record` (``run.json``,
the resume identity), :mod:`.extract_compile` (``--compile``), :mod:`.extract_loop` (batches →
shards), :mod:`.distributed` (torchrun ranks, the merge that writes the manifest); this module
plans the work and runs them in order. None of them imports torch at module level: the command
line, batch plans and scored directories import them without loading it, and ``extract`` sets
``OMP_WAIT_POLICY`` before torch first loads.

Output: see :mod:`imagenet_zsl.features.shard_files`. Labels index the label space ``classes``: the
``--classes`` file's wnids in file order. Image ids are ``"<wnid>/<member>"``.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.devices import request_deterministic_cublas, resolve_device, torch_numerics
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.backbones import classifier_head
from imagenet_zsl.features.extract_compile import prepare_net
from imagenet_zsl.features.extract_loop import device_decodes_jpeg, extract_shards
from imagenet_zsl.features.extract_record import check_run, ensure_head, run_record, write_run
from imagenet_zsl.features.extract_setup import (
    DECODERS,
    MODES,
    PRECISIONS,
    TOOL,
    ExtractConfig,
    ExtractionSetup,
    ExtractResult,
    check_choices,
    default_workers,
    load_backbone,
    provenance_fields,
    resolve_decoder,
    resolve_precision,
)
from imagenet_zsl.features.head import BackboneHead
from imagenet_zsl.features.loading import WorkList
from imagenet_zsl.features.scored_shards import ShardSink
from imagenet_zsl.images.store import ImageStore, open_store, select_rows
from imagenet_zsl.splits.io import read_wnid_list

__all__ = [
    "DECODERS",
    "MODES",
    "PRECISIONS",
    "TOOL",
    "ExtractConfig",
    "Begun",
    "ExtractResult",
    "HeldBegun",
    "begin_extraction",
    "load_backbone",
    "merge_run",
    "plan_work",
    "provenance_fields",
    "run_extraction",
]

log = logging.getLogger(__name__)

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
        allow_incomplete=cfg.allow_incomplete,
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


def _setup(cfg: ExtractConfig, work: WorkList, ranks: dist.RankInfo) -> tuple[ExtractionSetup, dict]:
    """This process's device, backbone and settings (and the backbone's weights record)."""
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    device = resolve_device(cfg.device, ranks.local_rank)
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.set_device(device)
    batch_size = cfg.batch_size or (256 if on_cuda else 32)
    if batch_size < 1:
        raise UserInputError(f"--batch-size {batch_size}: must be at least 1")
    net, dim, weights, pre = load_backbone(cfg)
    head = classifier_head(net, dim)
    decode = resolve_decoder(cfg.decode, cfg.mode, on_cuda)
    if decode == "torchvision" and cfg.decode == "auto" and not device_decodes_jpeg(device):
        log.warning("torchvision cannot decode JPEGs on %s: decoding with PIL in the workers", device)
        decode = "pil"
    setup = ExtractionSetup(
        cfg=cfg,
        work=work,
        net=net,
        dim=dim,
        pre=pre,
        device=device,
        precision=resolve_precision(cfg, on_cuda),
        decode=decode,
        batch_size=batch_size,
        workers=cfg.workers if cfg.workers is not None else default_workers(on_cuda, ranks),
        head=None if head is None else BackboneHead(head[0], head[1], sorted(ilsvrc2012_wnids())),
    )
    return setup, weights


@dataclass(frozen=True)
class Begun:
    """An extraction's first steps done (store planned, backbone set up, ``run.json`` and
    ``head.npz`` written): what :func:`run_extraction` continues from, and what a fused run reads
    the features' identity from before extracting (:func:`begin_extraction`)."""

    out: Path
    ranks: dist.RankInfo
    store: ImageStore
    work: WorkList
    setup: ExtractionSetup
    weights: dict
    #: run.json: the run's identity and the manifest without shards
    record: dict
    fresh: bool


def begin_extraction(cfg: ExtractConfig, replace_other: bool = False) -> Begun:
    """Check ``cfg``, plan the work and set up the backbone; check ``cfg.out`` (a resumed run must
    match the record; with ``replace_other``, a directory holding another extraction, or anything
    else, is removed: the caller owns it). Nothing is written yet."""
    ranks = dist.RankInfo.from_env()
    check_choices(cfg)
    out = Path(cfg.out).expanduser().resolve()
    store, work = _plan(cfg, ranks)
    setup, weights = _setup(cfg, work, ranks)
    logit_classes = sorted(ilsvrc2012_wnids()) if cfg.logits else None
    record = run_record(setup, store, weights, logit_classes)
    try:
        fresh = check_run(out, record)
    except UserInputError:
        if not replace_other:
            raise
        shutil.rmtree(out)
        fresh = True
    return Begun(out, ranks, store, work, setup, weights, record, fresh)


class HeldBegun:
    """A :class:`Begun` kept by the process that began it, for :func:`run_extraction` to go on
    from: a fused run begins its extraction when it plans (the features' identity, the planned
    directory), trains its models, then extracts, and builds the backbone once. ``head_file``: a
    ``head.npz`` this process wrote from the same backbone (the planned directory's), which the
    extraction links rather than writing the head again. Pickled (handed to another torchrun
    rank) it is empty: every process builds the backbone for its own device."""

    def __init__(self, begun: Begun | None = None, head_file: Path | None = None):
        self._held = (begun, head_file)

    def take(self) -> tuple[Begun | None, Path | None]:
        """The begun extraction and head file (None, None once taken: the backbone is let go)."""
        held, self._held = self._held, (None, None)
        return held

    def __getstate__(self) -> dict:
        return {"_held": (None, None)}


def run_extraction(
    cfg: ExtractConfig, sink: ShardSink | None = None, held: HeldBegun | None = None
) -> ExtractResult:
    """Extract features for ``cfg`` in this process (one rank of a torchrun job, or alone). With
    a ``sink`` (the fused path, issue 38 §1) every shard's float16 rows are handed to it and no
    feature file is written: the directory holds labels, ids, the run record and a manifest whose
    shards carry the feature files' would-be sha256 (``unstored_sha256``). With ``held`` (an
    extraction of ``cfg`` this process began earlier) its store, work list and backbone are
    used, not made again."""
    deterministic = cfg.mode == "deterministic"
    if deterministic:
        request_deterministic_cublas()  # before this process's first CUDA work
    begun, head_file = held.take() if held is not None else (None, None)
    if begun is None or begun.setup.cfg != cfg:
        begun, head_file = begin_extraction(cfg), None
    else:  # the directory may have changed since it began (a fused run empties a stale one)
        begun = replace(begun, fresh=check_run(begun.out, begun.record))
    out, ranks, store, setup, record = begun.out, begun.ranks, begun.store, begun.setup, begun.record

    result = ExtractResult(out=out)
    num_shards = record["num_shards"]
    mine = dist.shard_range(num_shards, ranks.rank, ranks.world_size)
    done = dist.finished_shards(out)
    pending = [g for g in mine if g not in done]
    result.shards_already_done = len(mine) - len(pending)
    # --compile compiles here, before the run record exists: if it fails, nothing is left behind
    # that would refuse the same --out without --compile
    with torch_numerics(deterministic):
        forward = prepare_net(setup, result) if pending else None
    if begun.fresh:
        write_run(out, record)
    ensure_head(out, setup.head, head_file)

    with _log_file(out, ranks.rank) as log_file:
        if forward is not None:
            with torch_numerics(deterministic):
                extract_shards(setup, forward, store.reader(), pending, ranks, out, result, sink)
        line = _summary_line(result, ranks)
        # logged before the merge: the manifest lists the log file, so it must be complete
        log_file.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None))
    print(line, flush=True)
    if ranks.rank == 0 or pending:
        # re-running a finished run verifies every shard's sha256; fresh shards were just hashed
        result.verified = not pending and all(g in done for g in range(num_shards))
        result.manifest = dist.merge(out, verify=result.verified, require_complete=False)
    _print_outcome(result, ranks, num_shards)
    return result


@contextlib.contextmanager
def _log_file(out: Path, rank: int) -> Iterator[logging.Handler]:
    """Per-rank log file in DIR/logs/ (skipped files with reasons, summaries), attached to the
    package logger (at INFO at least) for the block; the logger's level is restored after it."""
    (out / "logs").mkdir(exist_ok=True)
    handler = logging.FileHandler(out / "logs" / f"extract.r{rank:03d}.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    package_log = logging.getLogger("imagenet_zsl")
    old_level = package_log.level
    package_log.addHandler(handler)
    if package_log.getEffectiveLevel() > logging.INFO:
        package_log.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        package_log.removeHandler(handler)
        package_log.setLevel(old_level)
        handler.close()


def _who(ranks: dist.RankInfo) -> str:
    return f"rank {ranks.rank}/{ranks.world_size}: " if ranks.world_size > 1 else ""


def _summary_line(result: ExtractResult, ranks: dist.RankInfo) -> str:
    """What this process did, for its log and the terminal."""
    if not result.shards_written:
        return f"{_who(ranks)}nothing to extract: {result.shards_already_done} shards already done"
    line = (
        f"{_who(ranks)}extracted {result.images} images ({result.skipped} skipped) in "
        f"{result.seconds:.1f} s, {result.images_per_second:.1f} images/s; "
        f"{result.shards_written} shards written, {result.shards_already_done} already done"
    )
    if result.compile_seconds:
        line += f" (plus {result.compile_seconds:.1f} s to compile)"
    return line


def _print_outcome(result: ExtractResult, ranks: dist.RankInfo, num_shards: int) -> None:
    if result.manifest is not None:
        check = "all sha256 verified, " if result.verified else ""
        print(f"complete: {num_shards} shards, {check}manifest {result.manifest}", flush=True)
    elif ranks.world_size > 1 and result.shards_written:
        print(
            f"{_who(ranks)}other ranks still running; the last to finish writes the manifest "
            f"(or run: imagenet-zsl extract --merge {result.out})",
            flush=True,
        )


def merge_run(out_dir: str | Path, verify: bool = True) -> Path:
    """``imagenet-zsl extract --merge DIR``: check every shard and write the manifest."""
    path = dist.merge(out_dir, verify=verify, require_complete=True)
    assert path is not None
    return path
