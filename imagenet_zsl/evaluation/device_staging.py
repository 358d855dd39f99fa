"""float16 feature blocks staged on a torch device for its search (issue 27).

Feature blocks scored as they are (a prototype file without ``--l2-normalize``) go up as float16,
half the bytes, are converted to float32 there and checked there (:func:`stage_rows`,
:func:`device_rows`): one reduction gives each row's norm, finite exactly when the row is. Their
copy into pinned memory and their upload run in the reader's background thread, on a stream of
their own, while the previous block is searched
(:class:`~imagenet_zsl.evaluation.device_search.TorchBackend`).

Every CUDA-only call (pinned memory, streams, events) is guarded by the device type; on the CPU
the same code runs with plain tensors. The run's reader imports this module whatever the device,
so torch is imported inside the functions, which only a torch device calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

_STREAMS: dict[str, Any] = {}
_STREAMS_LOCK = threading.Lock()


def _copy_stream(device: torch.device) -> Any:
    """The side stream the uploads of feature blocks run on (one per GPU), so that they overlap
    the search's kernels on the current stream."""
    import torch  # deferred: a CPU evaluate of stored features never loads torch

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
    import torch  # deferred: a CPU evaluate of stored features never loads torch

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


def device_rows(staged: StagedRows, device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """The staged block as float32 on the device and its rows' squared norms (n,) float64 on the
    host: one reduction on the device and one wait per block. A row's norm is finite exactly
    when the row is: float16 values square to at most 4.3e9, so a float32 sum of D of them
    overflows only beyond D = 7.9e28. (The norms only decide whether the overflow check runs:
    the search's scores and lists do not depend on their last bits.)"""
    import torch  # deferred: a CPU evaluate of stored features never loads torch

    with torch.inference_mode():
        rows = staged.rows
        if staged.ready is not None:
            current = torch.cuda.current_stream(device)
            current.wait_event(staged.ready)
            rows.record_stream(current)  # allocated on the side stream, used on this one
        rows32 = rows.float()
        norms = torch.linalg.vector_norm(rows32, dim=1).double() ** 2
        return rows32, norms.cpu().numpy()
