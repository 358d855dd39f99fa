"""Bilinear compatibility F(x, c) = θ(x)ᵀ W φ(c) learnt with ranking losses: DeViSE and ALE.

Both score every seen class for a mini-batch and penalise the margin violations
``l_j = max(0, Δ + F(x, j) - F(x, y))`` of the wrong classes j ≠ y:

* DeViSE (Frome et al., NIPS 2013): the hinge rank loss sum_j l_j, margin Δ = ``margin``.
* ALE (Akata et al., TPAMI 2016): the weighted approximate ranking loss
  (β_r / r) · sum_j l_j with r the number of violations and β_r = sum_{i<=r} 1/i, which puts more
  weight on pushing the true class into the top ranks than on its exact position further down.

Trained with Adam on seeded mini-batches (torch, CPU or GPU). The image side is θ(x)ᵀ W, the class
side the (normalised) semantic vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData
from imagenet_zsl.models.closed_form import _LinearSemanticModel
from imagenet_zsl.models.common import (
    check_positive,
    minibatches,
    seeded_torch,
)
from imagenet_zsl.semantics.class_vectors import ClassVectors

_TRAINING_DEFAULTS: dict[str, Any] = {
    "margin": 0.1,
    "lr": 1e-3,
    "weight_decay": 1e-4,
    "epochs": 20,
    "batch_size": 256,
    "features": "standard",
    "semantic_norm": "l2",
    "device": "cpu",
    "seed": 0,
}


class _BilinearRanking(_LinearSemanticModel):
    weighting: ClassVar[str] = "uniform"
    defaults: ClassVar[dict[str, Any]] = dict(_TRAINING_DEFAULTS)
    grid: ClassVar[dict[str, list[Any]]] = {"lr": [1e-4, 1e-3, 1e-2], "weight_decay": [0.0, 1e-4, 1e-2]}

    def __init__(self, **params: Any):
        super().__init__(**params)
        check_positive(self.name, self.params, ["lr", "epochs", "batch_size"])
        check_positive(self.name, self.params, ["margin", "weight_decay"], allow_zero=True)

    def _loss(self, scores, labels):  # noqa: ANN001, ANN202 - torch tensors
        import torch

        true = scores.gather(1, labels[:, None])
        violation = torch.relu(float(self.params["margin"]) + scores - true)
        violation = violation.scatter(1, labels[:, None], 0.0)
        total = violation.sum(dim=1)
        if self.weighting == "rank":
            rank = (violation > 0).sum(dim=1).to(scores.dtype)
            harmonic = torch.special.digamma(rank + 1) + np.euler_gamma  # β_r = sum_{i<=r} 1/i
            total = total * torch.where(rank > 0, harmonic / rank.clamp(min=1), torch.zeros_like(rank))
        return total.mean()

    def fit(
        self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None
    ) -> _BilinearRanking:
        import torch

        x, labels, s = self._prepare(data, semantics)
        device = resolve_device(self.params["device"])
        rng = np.random.default_rng(int(self.params["seed"]))
        targets = torch.from_numpy(labels).to(device)
        seen = torch.from_numpy(s.astype(np.float32)).to(device)
        with seeded_torch(int(self.params["seed"]), device):
            weight = torch.randn(x.shape[1], s.shape[1], device=device) / np.sqrt(x.shape[1])
            weight.requires_grad_(True)
            optimiser = torch.optim.Adam(
                [weight], lr=float(self.params["lr"]), weight_decay=float(self.params["weight_decay"])
            )
            losses = []
            for _ in range(int(self.params["epochs"])):
                epoch_loss = 0.0
                for batch in minibatches(len(x), int(self.params["batch_size"]), rng):
                    batch = np.sort(batch)  # sorted rows read faster from memory-mapped features
                    features = torch.from_numpy(self.prep_(x[batch])).to(device)
                    scores = features @ weight @ seen.T
                    loss = self._loss(scores, targets[torch.from_numpy(batch).to(device)])
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    epoch_loss += float(loss.detach()) * len(batch)
                losses.append(epoch_loss / len(x))
        self.map_ = weight.detach().cpu().numpy().astype(np.float32)
        self.fit_info_ = {
            "loss_first_epoch": losses[0] if losses else None,
            "loss_last_epoch": losses[-1] if losses else None,
        }
        return self

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        return self._semantic(wnids)


@MODELS.register("devise")
class DeViSE(_BilinearRanking):
    """DeViSE: linear map of image features into the word-vector space, hinge rank loss."""

    name: ClassVar[str] = "devise"
    weighting: ClassVar[str] = "uniform"


@MODELS.register("ale")
class ALE(_BilinearRanking):
    """ALE: bilinear compatibility with the rank-weighted (WARP-style) hinge loss."""

    name: ClassVar[str] = "ale"
    weighting: ClassVar[str] = "rank"
    defaults: ClassVar[dict[str, Any]] = {**_TRAINING_DEFAULTS, "margin": 1.0}
