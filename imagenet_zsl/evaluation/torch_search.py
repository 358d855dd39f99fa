"""The search's torch implementation (a GPU's; on the CPU with ``torch_kernel=True``, as the tests
run it): :class:`TorchIndex` owns its tile loop, and the float16 feature blocks staged on its
device (:meth:`TorchIndex.stage_rows`, :meth:`TorchIndex.device_rows`).

What keeps a GPU busy (issue 27: host work serialised with it):

- Each block goes to the device once, from pinned host memory with ``non_blocking=True``, or is
  already there: feature blocks scored as they are (a prototype file without ``--l2-normalize``)
  go up as float16, half the bytes, copied into pinned memory and uploaded on a side stream by the
  reader's background thread while the previous block is searched, then converted to float32 and
  checked there (one reduction gives each row's norm, finite exactly when the row is).
- Tiles are pipelined (:meth:`TorchIndex.search`): tile t + 1's product, selection and tie counts
  are queued before tile t's results are waited for; those come back by asynchronous copies into
  pinned buffers, so the host sorts tile t while the device works on tile t + 1.

Every CUDA-only call (pinned memory, streams, events) is guarded by the device type; on the CPU the
same code runs with plain tensors and synchronous copies, and gives the numpy implementation's
lists and tie ranks bit for bit: the host finishes each tile with the same function
(:func:`~imagenet_zsl.evaluation.search_index.finish_topk`). The front loads this module (and
torch with it) only for a searcher on a torch device
(:data:`~imagenet_zsl.evaluation.search.TORCH_INDEX`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from imagenet_zsl.evaluation.search_index import (
    ALL_CLASSES,
    Candidates,
    ClassSide,
    SearchLists,
    chunk_spans,
    finish_topk,
    kth_best,
    overflow_error,
    squared_row_norms,
)
from imagenet_zsl.scoring import TieRanks

#: scores per tile on a torch device (GPU): 512 MB of fp32 scores, so each GEMM is large
DEVICE_TILE_ELEMENTS = 1 << 27
#: the device's products are computed in GEMM calls of exactly this many queries (the last chunk of a
#: tile zero-padded to it): one call shape for every score, whatever the tiles and blocks
DEVICE_PRODUCT_ROWS = 1024

_STREAMS: dict[str, Any] = {}
_STREAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def full_fp32_matmul() -> Iterator[None]:
    """torch matrix products in full fp32 inside (no TF32 on a GPU: the search is exact), the
    caller's setting restored after."""
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)


def _is_cuda(device: torch.device) -> bool:
    return device.type == "cuda"


def upload(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``: on a GPU through a pinned buffer with ``non_blocking=True`` (torch's
    pinned allocator keeps the buffer until the copy is done); on the CPU, the array itself."""
    source = torch.from_numpy(np.ascontiguousarray(array))
    if not _is_cuda(device):
        return source.to(device)
    pinned = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
    pinned.copy_(source)
    return pinned.to(device, non_blocking=True)


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of ``tensor``, on a GPU into a pinned buffer without waiting for it (the tile's
    event says when it is there); on the CPU the tensor itself."""
    if not _is_cuda(tensor.device):
        return tensor
    out = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    out.copy_(tensor, non_blocking=True)
    return out


@dataclass
class _Tile:
    """One tile queued on the device: its rows of the block, its full scores (kept until finished:
    rows whose k-th place is tied are repaired from them), host copies on their way, and the event
    recorded after them (None on the CPU)."""

    start: int
    stop: int
    scores: Any
    host: dict[str, Any]
    ready: Any


@dataclass
class StagedRows:
    """A block's float16 rows on (or on their way to) the device: ``ready`` is the upload's event
    on its side stream (None on the CPU, where the rows are a host tensor)."""

    rows: Any
    ready: Any


class TorchIndex:
    """:class:`~imagenet_zsl.evaluation.search_index.SearchIndex` on a torch device: the distinct
    prototypes (and the class → row map) uploaded once."""

    def __init__(self, classes: ClassSide, device: torch.device):
        self.classes = classes
        self.device = device
        with warnings.catch_warnings():
            # a read-only matrix (a prototype file's own array): the tensor is only read
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            self.unique = torch.from_numpy(classes.unique).to(device)
        self.group = None if classes.group is None else torch.from_numpy(classes.group).to(device)

    def tile_rows(self) -> int:
        """Rows per tile: DEVICE_TILE_ELEMENTS scores, so that each GEMM is large."""
        return max(1, DEVICE_TILE_ELEMENTS // self.classes.num_classes)

    def search(
        self,
        queries: np.ndarray | torch.Tensor,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None = None,
        *,
        row_offset: int = 0,
        candidates: Candidates = ALL_CLASSES,
    ) -> SearchLists:
        """The search on the device. ``queries``: (n, E) numpy, checked and uploaded once, or a
        float32 tensor already on the device (:meth:`device_rows`); ``squared_norms``: the rows'
        squared norms, if known; ``row_offset``: the queries' first row in their set
        (:func:`~imagenet_zsl.evaluation.search_index.chunk_spans`)."""
        classes = self.classes
        if not isinstance(queries, torch.Tensor):
            queries = classes.check_queries(queries)
            squared_norms = squared_row_norms(queries) if squared_norms is None else squared_norms
        elif queries.ndim != 2 or queries.shape[1] != classes.dim or queries.dtype != torch.float32:
            raise ValueError(f"bug: device queries of shape {tuple(queries.shape)} and {queries.dtype}")
        n, k = len(queries), classes.k
        out = (np.empty((n, k), np.float32), np.empty((n, k), np.int64), np.empty(n, np.int64))
        ranks = None if labels is None else TieRanks(np.empty(n, np.int64), np.empty(n, np.int64))
        if n == 0:
            return (*out[:2], ranks, out[2])
        with full_fp32_matmul(), torch.inference_mode():
            rows = queries if isinstance(queries, torch.Tensor) else upload(queries, self.device)
            if squared_norms is None:
                squared_norms = (
                    (torch.linalg.vector_norm(rows, dim=1, dtype=torch.float64) ** 2).cpu().numpy()
                )
            wanted = None if labels is None else upload(np.asarray(labels, dtype=np.int64), self.device)
            step = self.tile_rows()
            pending: _Tile | None = None
            for start in range(0, n, step):
                stop = min(start + step, n)
                norm = float(np.sqrt(squared_norms[start:stop].max()))
                tile = self._launch(rows, wanted, (start, stop, row_offset), norm, candidates)
                if pending is not None:  # the device already works on the next tile
                    self._finish(pending, out, ranks)
                pending = tile
            self._finish(pending, out, ranks)
        return (*out[:2], ranks, out[2])

    def _launch(
        self,
        rows: torch.Tensor,
        wanted: torch.Tensor | None,
        span: tuple[int, int, int],
        norm: float,
        candidates: Candidates,
    ) -> _Tile:
        """Queue one tile: product (full fp32), top ``k + 1`` candidates and the true classes' tie
        counts, and their copies to the host; nothing waits for the device unless the scores may
        have overflowed or a shortlist proposal is asked (``span``: the tile's rows and the
        block's first row in its set; ``norm``: the tile's largest query norm)."""
        classes = self.classes
        start, stop, offset = span
        queries = rows[start:stop]
        scores = device_product(queries, self.unique, classes.maps, offset + start)
        if classes.may_overflow(norm) and not bool(torch.isfinite(scores).all()):
            raise overflow_error()
        if self.group is not None:
            scores = scores.index_select(1, self.group)
        c = scores.shape[1]
        take = min(classes.k + 1, c)
        proposed = candidates.columns(queries) if take < c else None
        if proposed is not None:  # only classes at or above the candidates' floor can be taken
            columns, unused = proposed
            exact = scores.gather(1, torch.from_numpy(columns).to(scores.device)).cpu().numpy()
            floor = torch.from_numpy(kth_best(exact, unused, take)).to(scores.device)[:, None]
            values, part = scores.masked_fill(scores < floor, -torch.inf).topk(take, dim=1, sorted=False)
        else:
            values, part = scores.topk(take, dim=1, sorted=False)
        host = {"values": _to_host(values), "part": _to_host(part)}
        if wanted is not None:
            labels = wanted[start:stop]
            true = scores.gather(1, labels.clamp(min=0)[:, None])
            valid = labels >= 0
            host["above"] = _to_host(torch.where(valid, (scores > true).sum(dim=1), c))
            host["tied"] = _to_host(torch.where(valid, (scores == true).sum(dim=1) - 1, 0))
        ready = None
        if _is_cuda(scores.device):
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(scores.device))
        return _Tile(start, stop, scores, host, ready)

    def _finish(
        self, tile: _Tile, out: tuple[np.ndarray, np.ndarray, np.ndarray], ranks: TieRanks | None
    ) -> None:
        """Wait for one tile's host copies and write its sorted lists, their tails (``out``:
        scores, ids, tails of the whole block) and tie counts."""
        if tile.ready is not None:
            tile.ready.synchronize()
        scores = tile.scores

        def full_rows(rows: np.ndarray) -> np.ndarray:  # rows whose k-th place is tied (rare)
            return scores.index_select(0, torch.from_numpy(rows).to(scores.device)).cpu().numpy()

        values, part = tile.host["values"].numpy(), tile.host["part"].numpy()
        done = slice(tile.start, tile.stop)
        out[0][done], out[1][done], out[2][done] = finish_topk(values, part, self.classes.k, full_rows)
        if ranks is not None:
            ranks.above[done] = tile.host["above"].numpy()
            ranks.tied[done] = tile.host["tied"].numpy()

    @staticmethod
    def stage_rows(block: np.ndarray, device: torch.device) -> StagedRows:
        """Start moving a (n, D) float16 block to ``device`` (the reader's background thread calls
        this): its rows are read from the memory-mapped shard into pinned memory here, then, on a
        GPU, uploaded on a side stream without waiting."""
        if device.type != "cuda":
            return StagedRows(torch.from_numpy(np.array(block, dtype=np.float16, copy=True)), None)
        pinned = torch.empty(block.shape, dtype=torch.float16, pin_memory=True)
        np.copyto(pinned.numpy(), block, casting="no")
        stream = _copy_stream(device)
        with torch.cuda.stream(stream):
            rows = pinned.to(device, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(stream)
        return StagedRows(rows, ready)

    @staticmethod
    def device_rows(staged: StagedRows, device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
        """The staged block as float32 on the device and its rows' squared norms (n,) float64 on
        the host: one reduction on the device and one wait per block. A row's norm is finite
        exactly when the row is: float16 values square to at most 4.3e9, so a float32 sum of D of
        them overflows only beyond D = 7.9e28. (The norms only decide whether the overflow check
        runs: the search's scores and lists do not depend on their last bits.)"""
        with torch.inference_mode():
            rows = staged.rows
            if staged.ready is not None:
                current = torch.cuda.current_stream(device)
                current.wait_event(staged.ready)
                rows.record_stream(current)  # allocated on the side stream, used on this one
            rows32 = rows.float()
            norms = torch.linalg.vector_norm(rows32, dim=1).double() ** 2
            return rows32, norms.cpu().numpy()


def _copy_stream(device: torch.device) -> Any:
    """The side stream the uploads of feature blocks run on (one per GPU), so that they overlap
    the search's kernels on the current stream."""
    with _STREAMS_LOCK:
        key = str(device)
        if key not in _STREAMS:
            _STREAMS[key] = torch.cuda.Stream(device=device)
        return _STREAMS[key]


def device_product(
    queries: torch.Tensor, unique: torch.Tensor, maps: int = 1, offset: int = 0
) -> torch.Tensor:
    """(m, u) scores of queries (m, maps * E), rows ``offset ..`` of their set, against the
    distinct prototypes (u, E): the max over the ``maps`` query parts of their products, each
    computed in calls of DEVICE_PRODUCT_ROWS queries by all u classes
    (:func:`~imagenet_zsl.evaluation.search_index.chunk_spans`).
    Why: a GEMM's algorithm, and so a score's bits, may depend on the call's shape and on the
    score's place in it; fixed shapes and places make them independent of where blocks and tiles
    start. The classes are not cut: u is fixed for a searcher."""
    m, dim = len(queries), unique.shape[1]
    out = torch.empty((m, len(unique)), dtype=torch.float32, device=queries.device)
    for start, real, lead in chunk_spans(m, offset, DEVICE_PRODUCT_ROWS):
        chunk = queries[start : start + real]
        if real == DEVICE_PRODUCT_ROWS and maps == 1:  # a whole aligned chunk: straight into out
            torch.matmul(chunk, unique.T, out=out[start : start + real])
            continue
        if real < DEVICE_PRODUCT_ROWS:
            padded = torch.zeros(
                (DEVICE_PRODUCT_ROWS, chunk.shape[1]), dtype=torch.float32, device=chunk.device
            )
            padded[lead : lead + real] = chunk
            chunk = padded
        scores = chunk[:, :dim] @ unique.T
        for k in range(1, maps):  # the model's score: the max over its maps
            scores = torch.maximum(scores, chunk[:, k * dim : (k + 1) * dim] @ unique.T)
        out[start : start + real] = scores[lead : lead + real]
    return out
