"""The search's torch path (a GPU's; on the CPU with ``torch_kernel=True``, as the tests run it):
a block of queries searched tile by tile on the device, and float16 feature blocks staged there.

What keeps a GPU busy (issue 27: host work serialised with it):

- Each block goes to the device once, from pinned host memory with ``non_blocking=True``. Feature
  blocks scored as they are (a prototype file without ``--l2-normalize``) go up as float16, half
  the bytes, are converted to float32 there and checked there (:func:`stage_rows`,
  :func:`device_rows`): one reduction gives each row's norm, finite exactly when the row is. Their
  copy into pinned memory and their upload run in the reader's background thread, on a stream of
  their own, while the previous block is searched.
- Tiles are pipelined (:func:`search_on_device`): tile t + 1's product, selection and tie counts
  are queued before tile t's results are waited for; those come back by asynchronous copies into
  pinned buffers, so the host sorts tile t while the device works on tile t + 1.

Every CUDA-only call (pinned memory, streams, events) is guarded by the device type; on the CPU
the same code runs with plain tensors and synchronous copies, and gives the numpy path's lists and
tie ranks bit for bit (the host finishes each tile with the same code:
:meth:`~imagenet_zsl.evaluation.search.TopKSearcher._finish_topk`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.evaluation.faiss_search import FaissCandidates, candidate_columns, kth_best
from imagenet_zsl.evaluation.products import chunk_spans
from imagenet_zsl.scoring import TieRanks

if TYPE_CHECKING:
    import torch

    from imagenet_zsl.evaluation.search import TopKSearcher


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor (without importing torch for numpy arrays)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


@contextlib.contextmanager
def full_fp32_matmul() -> Iterator[None]:
    """torch matrix products in full fp32 inside (no TF32 on a GPU: the search is exact), the
    caller's setting restored after."""
    import torch

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
    import torch

    source = torch.from_numpy(np.ascontiguousarray(array))
    if not _is_cuda(device):
        return source.to(device)
    pinned = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
    pinned.copy_(source)
    return pinned.to(device, non_blocking=True)


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of ``tensor``, on a GPU into a pinned buffer without waiting for it (the tile's
    event says when it is there); on the CPU the tensor itself."""
    import torch

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


def search_on_device(
    searcher: TopKSearcher,
    queries: np.ndarray | torch.Tensor,
    labels: np.ndarray | None,
    squared_norms: np.ndarray | None,
    offset: int = 0,
    faiss: FaissCandidates | None = None,
) -> tuple[np.ndarray, np.ndarray, TieRanks | None]:
    """:meth:`TopKSearcher.search_ranked` on the searcher's torch device. ``queries``: (n, E) float32
    numpy, checked by the caller (uploaded once), or a float32 tensor already on the device
    (:func:`device_rows`); ``squared_norms``: the rows' squared norms, if known; ``offset``: the
    queries' first row in their set (:func:`chunk_spans`); ``faiss``: its candidates set each row's
    threshold (:mod:`imagenet_zsl.evaluation.faiss_search`)."""
    import torch

    device = searcher.torch_device
    if is_tensor(queries) and (
        queries.ndim != 2 or queries.shape[1] != searcher.dim or queries.dtype != torch.float32
    ):
        raise ValueError(f"bug: device queries of shape {tuple(queries.shape)} and {queries.dtype}")
    n = len(queries)
    out_scores = np.empty((n, searcher.k), np.float32)
    out_ids = np.empty((n, searcher.k), np.int64)
    ranks = None if labels is None else TieRanks(np.empty(n, np.int64), np.empty(n, np.int64))
    if n == 0:
        return out_scores, out_ids, ranks
    with full_fp32_matmul(), torch.inference_mode():
        rows = queries if is_tensor(queries) else upload(queries, device)
        if squared_norms is None:
            squared_norms = (torch.linalg.vector_norm(rows, dim=1, dtype=torch.float64) ** 2).cpu().numpy()
        wanted = None if labels is None else upload(np.asarray(labels, dtype=np.int64), device)
        step = searcher._tile_rows()
        pending: _Tile | None = None
        for start in range(0, n, step):
            stop = min(start + step, n)
            norm = float(np.sqrt(squared_norms[start:stop].max()))
            tile = _launch(searcher, rows, wanted, (start, stop, offset), norm, faiss)
            if pending is not None:  # the device already works on the next tile
                _finish(searcher, pending, out_scores, out_ids, ranks)
            pending = tile
        _finish(searcher, pending, out_scores, out_ids, ranks)
    return out_scores, out_ids, ranks


def _launch(
    searcher: TopKSearcher,
    rows: torch.Tensor,
    wanted: torch.Tensor | None,
    span: tuple[int, int, int],
    norm: float,
    faiss: FaissCandidates | None = None,
) -> _Tile:
    """Queue one tile: product (full fp32), top ``k + 1`` candidates and the true classes' tie
    counts, and their copies to the host; nothing waits for the device unless the scores may
    have overflowed (``span``: the tile's rows and the block's first row in its set; ``norm``: the
    tile's largest query norm)."""
    import torch

    start, stop, offset = span
    queries = rows[start:stop]
    scores = device_product(queries, searcher._device_unique, searcher.maps, offset + start)
    searcher._check_overflow(queries, lambda: bool(torch.isfinite(scores).all()), norm)
    if searcher._device_group is not None:
        scores = scores.index_select(1, searcher._device_group)
    c = scores.shape[1]
    take = min(searcher.k + 1, c)
    if faiss is not None and take < c:  # only classes at or above faiss's threshold can be taken
        scores_or_floor = scores.masked_fill(
            scores < _threshold(searcher, faiss, queries, scores, take), -torch.inf
        )
        values, part = scores_or_floor.topk(take, dim=1, sorted=False)
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


def _threshold(
    searcher: TopKSearcher, faiss: FaissCandidates, queries: torch.Tensor, scores: torch.Tensor, take: int
) -> torch.Tensor:
    """(n, 1) each row's threshold on the device (:func:`~imagenet_zsl.evaluation.faiss_search.
    thresholds`): faiss's candidates for the queries, their exact scores gathered from the tile."""
    import torch

    candidates = faiss(queries.cpu().numpy(), searcher._candidate_count())
    columns, unused = candidate_columns(candidates, searcher._first)
    values = scores.gather(1, torch.from_numpy(columns).to(scores.device)).cpu().numpy()
    return torch.from_numpy(kth_best(values, unused, take)).to(scores.device)[:, None]


#: the device's products are computed in GEMM calls of exactly this many queries (the last chunk of a
#: tile zero-padded to it): one call shape for every score, whatever the tiles and blocks
DEVICE_PRODUCT_ROWS = 1024


def device_product(
    queries: torch.Tensor, unique: torch.Tensor, maps: int = 1, offset: int = 0
) -> torch.Tensor:
    """(m, u) scores of queries (m, maps * E), rows ``offset ..`` of their set, against the
    distinct prototypes (u, E): the max over the ``maps`` query parts of their products, each
    computed in calls of DEVICE_PRODUCT_ROWS queries by all u classes (:func:`chunk_spans`).
    Why: a GEMM's algorithm, and so a score's bits, may depend on the call's shape and on the
    score's place in it; fixed shapes and places make them independent of where blocks and tiles
    start. The classes are not cut: u is fixed for a searcher."""
    import torch

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


def _finish(
    searcher: TopKSearcher,
    tile: _Tile,
    out_scores: np.ndarray,
    out_ids: np.ndarray,
    ranks: TieRanks | None,
) -> None:
    """Wait for one tile's host copies and write its sorted lists and tie counts."""
    import torch

    if tile.ready is not None:
        tile.ready.synchronize()
    scores = tile.scores

    def full_rows(rows: np.ndarray) -> np.ndarray:  # rows whose k-th place is tied (rare)
        return scores.index_select(0, torch.from_numpy(rows).to(scores.device)).cpu().numpy()

    top, ids = searcher._finish_topk(tile.host["values"].numpy(), tile.host["part"].numpy(), full_rows)
    out_scores[tile.start : tile.stop], out_ids[tile.start : tile.stop] = top, ids
    if ranks is not None:
        ranks.above[tile.start : tile.stop] = tile.host["above"].numpy()
        ranks.tied[tile.start : tile.stop] = tile.host["tied"].numpy()


# -- float16 feature blocks staged on the device ---------------------------------------------------

_STREAMS: dict[str, Any] = {}
_STREAMS_LOCK = threading.Lock()


def _copy_stream(device: torch.device) -> Any:
    """The side stream the uploads of feature blocks run on (one per GPU), so that they overlap
    the search's kernels on the current stream."""
    import torch

    with _STREAMS_LOCK:
        key = str(device)
        if key not in _STREAMS:
            _STREAMS[key] = torch.cuda.Stream(device=device)
        return _STREAMS[key]


@dataclass
class StagedRows:
    """A block's float16 rows on (or on their way to) the device: ``ready`` is the upload's event
    on its side stream (None on the CPU, where the rows are a host tensor)."""

    rows: Any
    ready: Any


def stage_rows(block: np.ndarray, device: torch.device) -> StagedRows:
    """Start moving a (n, D) float16 block to ``device`` (the reader's background thread calls
    this): its rows are read from the memory-mapped shard into pinned memory here, then, on a
    GPU, uploaded on a side stream without waiting."""
    import torch

    if not _is_cuda(device):
        return StagedRows(torch.from_numpy(np.array(block, dtype=np.float16, copy=True)), None)
    pinned = torch.empty(block.shape, dtype=torch.float16, pin_memory=True)
    np.copyto(pinned.numpy(), block, casting="no")
    stream = _copy_stream(device)
    with torch.cuda.stream(stream):
        rows = pinned.to(device, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record(stream)
    return StagedRows(rows, ready)


def device_rows(staged: StagedRows, device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """The staged block as float32 on the device and its rows' squared norms (n,) float64 on the
    host: one reduction on the device and one wait per block. A row's norm is finite exactly
    when the row is: float16 values square to at most 4.3e9, so a float32 sum of D of them
    overflows only beyond D = 7.9e28. (The norms only decide whether the overflow check runs:
    the search's scores and lists do not depend on their last bits.)"""
    import torch

    with torch.inference_mode():
        rows = staged.rows
        if staged.ready is not None:
            current = torch.cuda.current_stream(device)
            current.wait_event(staged.ready)
            rows.record_stream(current)  # allocated on the side stream, used on this one
        rows32 = rows.float()
        norms = torch.linalg.vector_norm(rows32, dim=1).double() ** 2
        return rows32, norms.cpu().numpy()
