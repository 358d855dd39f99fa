"""Stratified, seeded folds and the per-fold sums the classifiers standardise with.

Shapes: N images, D feature dims, C classes, k folds. A fold array is (N,) int8 with -1 for rows
that are not judged (their class has fewer images than folds).

Torch is imported inside the functions that compute: through :mod:`.outputs` the split builder's
``image_quality`` pool filter and ``evaluate --kept-images`` load this module and never need torch,
and ``images filter --finetune-last-block`` tunes OpenMP before torch loads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported lazily so that `imagenet-zsl --help` and pool filters stay fast
    import torch

BLOCK_ROWS = 16384  # rows per streamed block: 16k x 2048 float32 = 128 MiB


def stratified_folds(labels: np.ndarray, num_classes: int, folds: int, seed: int) -> np.ndarray:
    """Fold (N,) int8 of every row: each class shuffled and dealt round-robin over the folds.

    Each class's fold sizes differ by at most one; a random per-class starting fold keeps the
    folds balanced overall. Rows of classes with fewer than ``folds`` images get -1 (not judged).
    """
    labels = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    order = order[np.argsort(labels[order], kind="stable")]
    counts = np.bincount(labels, minlength=num_classes)
    starts = np.cumsum(counts) - counts
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels)) - starts[labels[order]]
    offset = rng.integers(0, folds, size=num_classes)
    assigned = ((rank + offset[labels]) % folds).astype(np.int8)
    assigned[counts[labels] < folds] = -1
    return assigned


def blocks(rows: torch.Tensor, size: int = BLOCK_ROWS) -> Iterator[torch.Tensor]:
    """Consecutive slices of ``rows`` (n,) of at most ``size``: bounded float32 working memory."""
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def fold_moments(
    store: torch.Tensor, fold: np.ndarray, folds: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-fold row counts (k,), feature sums (k, D) and sums of squares (k, D), float64.

    One pass over ``store`` (N, D) serves every fold: fold ``f``'s training statistics are the
    totals minus fold ``f``'s share.
    """
    import torch  # deferred: only a fit loads torch (module docstring)

    dim, device = store.shape[1], store.device
    sums = torch.zeros(folds, dim, dtype=torch.float64, device=device)
    squares = torch.zeros(folds, dim, dtype=torch.float64, device=device)
    fold_t = torch.from_numpy(fold.astype(np.int64)).to(device)
    judged = torch.from_numpy(np.flatnonzero(fold >= 0)).to(device)
    for rows in blocks(judged):
        x = store[rows].to(torch.float32)
        where = fold_t[rows]
        sums += torch.zeros(folds, dim, device=device).index_add_(0, where, x).double()
        squares += torch.zeros(folds, dim, device=device).index_add_(0, where, x * x).double()
    counts = torch.from_numpy(np.bincount(fold[fold >= 0], minlength=folds)).double()
    return counts, sums.cpu(), squares.cpu()
