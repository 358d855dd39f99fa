"""The feature classifiers of the filter: a softmax probe and closed-form ridge regression.

Shapes: N images in the store, D feature dims, C classes, k folds; ``store`` is the (N, D)
float16 (or float32) tensor of :class:`~imagenet_zsl.features.in_memory.LoadedFeatures`,
never copied: rows are gathered and cast to float32 block by block.

- :class:`SoftmaxProbe`: multinomial logistic regression on standardised features, trained with
  mini-batch AdamW (``--classifier softmax``, the default).
- :func:`ridge_stats` + :func:`ridge_fold_model`: least squares onto one-hot labels; one pass over
  the data gives the sufficient statistics of every fold (``--classifier ridge``: much cheaper on
  a CPU at ImageNet-21K scale).

Torch is imported inside the functions that compute: through :mod:`.outputs` the split builder's
``image_quality`` pool filter and ``evaluate --kept-images`` load this module and never need torch,
and ``images filter --finetune-last-block`` tunes OpenMP before torch loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from imagenet_zsl.image_filter.folds import blocks
from imagenet_zsl.image_filter.params import FilterParams

if TYPE_CHECKING:  # torch is imported lazily so that `imagenet-zsl --help` and pool filters stay fast
    import torch


@dataclass(frozen=True)
class FoldData:
    """What every fold trains on: ``store`` (N, D) tensor (on ``device`` when it fits there),
    ``labels`` (N,) int64 ndarray and the same as a CPU tensor ``labels_t``, C = ``num_classes``,
    and the ``device`` the classifiers compute on."""

    store: torch.Tensor
    labels: np.ndarray
    labels_t: torch.Tensor
    num_classes: int
    device: torch.device


class SoftmaxProbe:
    """Multinomial logistic regression on standardised frozen features (the "last layer").

    ``mean``/``std`` (D,) standardise the inputs; ``params`` gives epochs, batch size, lr, weight
    decay and min_steps. ``fit(store (N, D) float16/32 tensor, labels (N,) int64 tensor, rows (n,)
    int64 tensor, seed)`` trains on ``store[rows]`` only, casting each mini-batch to float32 on the
    fly so the store is never copied. Zero initialisation plus a seeded ``torch.Generator`` for
    the batch order make results reproducible. Fitted: ``weight_`` (D, C), ``bias_`` (C,).
    """

    def __init__(
        self,
        num_classes: int,
        mean: torch.Tensor,
        std: torch.Tensor,
        params: FilterParams,
        *,
        device: torch.device | str = "cpu",
        progress: bool = False,
    ):
        import torch  # deferred: only a fit loads torch (module docstring)

        self.num_classes = num_classes
        self.device = torch.device(device)
        self.mean = mean.to(self.device, torch.float32)
        self.inv_std = (1.0 / std).to(self.device, torch.float32)
        self.params = params
        self.progress = progress

    def _inputs(self, store: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        import torch  # deferred: only a fit loads torch (module docstring)

        x = store[rows.to(store.device)].to(self.device, torch.float32, non_blocking=True)
        return (x - self.mean) * self.inv_std

    def fit(self, store: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor, seed: int) -> SoftmaxProbe:
        """Train ``max(epochs * ceil(n / batch), min_steps)`` full-batch AdamW steps, cosine decay."""
        import torch  # deferred: only a fit loads torch (module docstring)
        import torch.nn.functional as F  # deferred: only a fit loads torch (module docstring)

        params = self.params
        generator = torch.Generator().manual_seed(seed)
        dim = store.shape[1]
        weight = torch.zeros(dim, self.num_classes, device=self.device, requires_grad=True)
        bias = torch.zeros(self.num_classes, device=self.device, requires_grad=True)
        optimizer = torch.optim.AdamW(
            [
                {"params": [weight], "weight_decay": params.weight_decay},
                {"params": [bias], "weight_decay": 0.0},
            ],
            lr=params.lr,
        )
        batch = min(params.batch_size, len(rows))
        total = max(params.epochs * math.ceil(len(rows) / batch), params.min_steps)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
        targets = labels.to(self.device)
        bar = tqdm(total=total, desc="softmax steps", leave=False, disable=not self.progress)
        step = 0
        while step < total:
            order = rows[torch.randperm(len(rows), generator=generator)]
            for start in range(0, len(order) - batch + 1, batch):  # full batches only
                index = order[start : start + batch]
                logits = self._inputs(store, index) @ weight + bias
                loss = F.cross_entropy(logits, targets[index.to(self.device)])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                bar.update()
                step += 1
                if step == total:
                    break
        bar.close()
        self.weight_ = weight.detach()
        self.bias_ = bias.detach()
        return self

    def predict(self, store: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Predicted class (n,) int64 for ``store[rows]``."""
        import torch  # deferred: only a fit loads torch (module docstring)

        if not hasattr(self, "weight_"):
            raise RuntimeError("SoftmaxProbe.predict called before fit")
        out = []
        with torch.no_grad():
            for block in blocks(rows):
                logits = self._inputs(store, block) @ self.weight_ + self.bias_
                out.append(logits.argmax(dim=1).cpu())
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


def train_softmax_fold(
    data: FoldData,
    fold: np.ndarray,
    f: int,
    moments: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    params: FilterParams,
    seed: int,
    progress: bool = False,
) -> np.ndarray:
    """Train a softmax probe on the folds other than ``f``; predictions (m,) int32 for fold ``f``.

    ``moments``: :func:`~imagenet_zsl.image_filter.folds.fold_moments` of this seed's ``fold``
    (N,), from which the training folds' mean and std are derived without another pass.
    """
    import torch  # deferred: only a fit loads torch (module docstring)

    counts, sums, squares = moments
    n = counts.sum() - counts[f]
    mean = (sums.sum(0) - sums[f]) / n
    var = (squares.sum(0) - squares[f]) / n - mean * mean
    std = var.clamp_min(0).sqrt().clamp_min(1e-6)
    train = torch.from_numpy(np.flatnonzero((fold >= 0) & (fold != f)))
    probe = SoftmaxProbe(data.num_classes, mean, std, params, device=data.device, progress=progress).fit(
        data.store, data.labels_t, train, seed=seed
    )
    held_out = torch.from_numpy(np.flatnonzero(fold == f))
    return probe.predict(data.store, held_out).numpy().astype(np.int32)


@dataclass
class RidgeStats:
    """Per-fold sufficient statistics for least squares: one pass serves every fold."""

    counts: torch.Tensor  # (k,) rows
    sums: torch.Tensor  # (k, D)
    grams: torch.Tensor  # (k, D, D) uncentred X^T X
    class_counts: torch.Tensor  # (k, C)
    class_sums: torch.Tensor  # (k, C, D)


def ridge_stats(
    store: torch.Tensor,
    labels: np.ndarray,
    fold: np.ndarray,
    folds: int,
    num_classes: int,
    device: torch.device,
) -> RidgeStats:
    """:class:`RidgeStats` (float64 on ``device``) of the judged rows of ``store`` (N, D), per
    fold of ``fold`` (N,) int8, with ``labels`` (N,) int64 in [0, C)."""
    import torch  # deferred: only a fit loads torch (module docstring)

    dim = store.shape[1]
    f64 = dict(dtype=torch.float64, device=device)
    grams = torch.zeros(folds, dim, dim, **f64)
    sums = torch.zeros(folds, dim, **f64)
    class_sums = torch.zeros(folds * num_classes, dim, **f64)
    fold_t = torch.from_numpy(fold.astype(np.int64))
    labels_t = torch.from_numpy(labels)
    for rows in blocks(torch.from_numpy(np.flatnonzero(fold >= 0))):
        x = store[rows.to(store.device)].to(device, torch.float32)
        where = fold_t[rows].to(device)
        slot = where * num_classes + labels_t[rows].to(device)
        class_sums.index_add_(0, slot, x.double())
        for f in range(folds):
            xf = x[where == f]
            if len(xf):
                grams[f] += (xf.T @ xf).double()
                sums[f] += xf.sum(dim=0).double()
    judged = fold >= 0
    counts = np.bincount(fold[judged], minlength=folds)
    class_counts = np.bincount(
        fold[judged].astype(np.int64) * num_classes + labels[judged], minlength=folds * num_classes
    ).reshape(folds, num_classes)
    return RidgeStats(
        torch.from_numpy(counts).to(**f64),
        sums,
        grams,
        torch.from_numpy(class_counts).to(**f64),
        class_sums.reshape(folds, num_classes, dim),
    )


def ridge_fold_model(stats: RidgeStats, f: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights (D, C) and offset (C,) of ridge regression onto one-hot labels, trained on the
    folds other than ``f``: scores = x @ W + offset. The penalty is ``alpha`` times the mean
    eigenvalue of the centred Gram matrix, so it is scale-free."""
    import torch  # deferred: only a fit loads torch (module docstring)

    n = stats.counts.sum() - stats.counts[f]
    total = stats.sums.sum(0) - stats.sums[f]
    mean = total / n
    gram = stats.grams.sum(0) - stats.grams[f] - n * torch.outer(mean, mean)
    class_counts = stats.class_counts.sum(0) - stats.class_counts[f]
    cross = (stats.class_sums.sum(0) - stats.class_sums[f]).T - torch.outer(mean, class_counts)
    dim = gram.shape[0]
    penalty = alpha * torch.trace(gram) / dim + 1e-12
    chol = torch.linalg.cholesky(gram + penalty * torch.eye(dim, dtype=gram.dtype, device=gram.device))
    weight = torch.cholesky_solve(cross, chol)
    offset = class_counts / n - mean @ weight
    return weight.float(), offset.float()


def predict_linear(
    store: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor, offset: torch.Tensor
) -> np.ndarray:
    """argmax of ``store[rows] @ weight + offset``: predicted classes (n,) int32."""
    import torch  # deferred: only a fit loads torch (module docstring)

    out = []
    with torch.no_grad():
        for block in blocks(rows):
            x = store[block.to(store.device)].to(weight.device, torch.float32)
            out.append((x @ weight + offset).argmax(dim=1).cpu())
    return torch.cat(out).numpy().astype(np.int32) if out else np.zeros(0, np.int32)
