"""Bilinear compatibility F(x, c) = θ(x)ᵀ W φ(c) learnt with ranking losses: DeViSE, ALE, SJE, LATEM.

All score every seen class for a mini-batch and penalise the margin violations
``l_j = max(0, Δ + F(x, j) - F(x, y))`` of the wrong classes j ≠ y:

* DeViSE (Frome et al., NIPS 2013): the hinge rank loss sum_j l_j, margin Δ = ``margin``.
* ALE (Akata et al., TPAMI 2016): the weighted approximate ranking loss
  (β_r / r) · sum_j l_j with r the number of violations and β_r = sum_{i<=r} 1/i, which puts more
  weight on pushing the true class into the top ranks than on its exact position further down.
* SJE (Akata et al., CVPR 2015): the structured SVM loss max_j l_j (only the most violating class,
  Δ the 0/1 label loss scaled by ``margin``). SJE's "multiple outputs" F = Σ_k α_k θᵀW_kφ_k(y)
  is one bilinear map on the concatenated class vectors [φ_1, φ_2, ...] (α_k is absorbed by W_k):
  pass a class-vector file holding the concatenation.
* LATEM (Xian et al., CVPR 2016): K maps, F(x, y) = max_k θ(x)ᵀ W_k φ(y) (piecewise bilinear),
  trained as GBU state (their Eq. 10 with the ranking loss of their Eq. 4) and as the authors'
  ``latEm_train.m`` does: for each image one wrong class j ≠ y drawn uniformly, loss
  max(0, Δ + F(x, j) − F(x, y)) with Δ = ``margin`` (``loss: sampled``, the default; its
  expectation is Eq. 4's sum over wrong classes divided by Z − 1). The draws come from their own
  generator seeded by ``seed``, so the mini-batches are those of ``loss: max_violating`` (SJE's
  most violating class, the toolkit's loss before). Differences from the reference: Adam on
  mini-batches (the reference: plain SGD, one image a step, learning rate ``eta``, no weight decay;
  set ``weight_decay: 0`` for the latter), random initialisation N(0, 1/D) as the reference.
  A max is not one dot product: LATEM's ``embed_images`` gives the K projections θ(x)ᵀW_k side by
  side and its :meth:`~imagenet_zsl.models.base.ZSLModel.score_maps` is K, so model selection, the
  attribute protocol and evaluation's search (``evaluate``, ``run``) all rank by the max, exactly.

Trained with Adam on seeded mini-batches (torch, CPU or GPU). The image side is θ(x)ᵀ W, the class
side the (normalised) semantic vector. Defaults converge on small sets (lr 1e-2, 50 epochs, batch 64:
margin 1 with unit-norm class vectors: DeViSE's 0.1 under-trains, 0.72 against 0.93 unseen top-1 on
the generated test problem); margin (0.1 and 1) and epochs are in the selection grid.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData
from imagenet_zsl.models.closed_form import LinearSemanticModel
from imagenet_zsl.models.common import (
    LossHistory,
    check_features,
    minibatches,
    seeded_torch,
    torch_threads,
)
from imagenet_zsl.models.params import MinibatchParams, NonNegative, PositiveInt
from imagenet_zsl.semantics.class_vectors import ClassVectors

if TYPE_CHECKING:
    import torch


class RankingParams(MinibatchParams):
    """The mini-batch trainer's hyper-parameters and the ranking loss's margin Δ."""

    margin: NonNegative = 1.0


class BilinearRanking(LinearSemanticModel):
    """The base class of the bilinear compatibility models F(x, c) = θ(x)ᵀ W φ(c) trained on a
    ranking loss (DeViSE, ALE, SJE, LATEM here; SSE in :mod:`imagenet_zsl.models.embedding`):
    the mini-batch training loop, the losses and the selection grid."""

    weighting: ClassVar[str] = "uniform"
    Params: ClassVar[type[RankingParams]] = RankingParams
    #: GBU tune learning rate and epochs of the SGD-trained models; margin and weight decay too
    grid: ClassVar[dict[str, list[Any]]] = {
        "lr": [1e-3, 1e-2],
        "epochs": [25, 50],
        "margin": [0.1, 1.0],
        "weight_decay": [0.0, 1e-4],
    }

    def _loss(self, scores, labels, wrong=None):  # noqa: ANN001, ANN202 - torch tensors
        """Mean over the batch of the model's ranking loss; scores (B, Z), labels (B,). ``wrong``
        (B,): one sampled wrong class per image (LATEM's ``loss: sampled``), else None."""
        import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

        true = scores.gather(1, labels[:, None])
        if wrong is not None:
            return torch.relu(float(self.params["margin"]) + scores.gather(1, wrong[:, None]) - true).mean()
        violation = torch.relu(float(self.params["margin"]) + scores - true)
        violation = violation.scatter(1, labels[:, None], 0.0)
        total = violation.amax(dim=1) if self.weighting == "max" else violation.sum(dim=1)
        if self.weighting == "rank":
            rank = (violation > 0).sum(dim=1).to(scores.dtype)
            harmonic = torch.special.digamma(rank + 1) + np.euler_gamma  # β_r = sum_{i<=r} 1/i
            total = total * torch.where(rank > 0, harmonic / rank.clamp(min=1), torch.zeros_like(rank))
        return total.mean()

    def _samples_wrong_class(self) -> bool:
        return False

    def _train(
        self,
        x: np.ndarray,
        labels: np.ndarray,
        num_classes: int,
        init: Callable[[torch.device], list[torch.Tensor]],
        score: Callable[[list[torch.Tensor], torch.Tensor], torch.Tensor],
        step_flops: float,
    ) -> tuple[list[torch.Tensor], list[float]]:
        """Adam on seeded mini-batches of the prepared features: ``init(device)`` → the trainable
        tensors (created inside the seeded block), ``score(tensors, features (B, D))`` → (B, Z)
        scores of the seen classes. Returns (the trained tensors, mean loss per epoch)."""
        import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

        device = resolve_device(self.params["device"])
        seed = int(self.params["seed"])
        rng = np.random.default_rng(seed)
        wrong_rng = np.random.default_rng([seed, 1])  # LATEM's wrong classes: apart from the batches
        sampled = self._samples_wrong_class()
        targets = torch.from_numpy(labels).to(device)
        batch_size = int(self.params["batch_size"])
        threads = torch_threads(step_flops) if device.type == "cpu" else contextlib.nullcontext()
        epochs = int(self.params["epochs"])
        history = LossHistory(epochs, device)  # read once at the end: no device sync per step
        with seeded_torch(seed, device), threads:
            tensors = init(device)
            optimiser = torch.optim.Adam(
                tensors, lr=float(self.params["lr"]), weight_decay=float(self.params["weight_decay"])
            )
            for epoch in range(epochs):
                for batch in minibatches(len(x), batch_size, rng):
                    batch = np.sort(batch)  # sorted rows read faster from memory-mapped features
                    features = torch.from_numpy(self.prep_(x[batch])).to(device)
                    wrong = None
                    if sampled:  # uniform over the Z - 1 wrong classes (none when Z = 1)
                        offset = wrong_rng.integers(1, num_classes, len(batch)) if num_classes > 1 else 0
                        wrong = torch.from_numpy((labels[batch] + offset) % num_classes).to(device)
                    rows = targets[torch.from_numpy(batch).to(device)]
                    loss = self._loss(score(tensors, features), rows, wrong)
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    history.add(epoch, loss, len(batch))
        return tensors, [total / len(x) for total in history.values()]

    def fit(
        self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None
    ) -> BilinearRanking:
        import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

        x, labels, s = self._prepare(data, semantics)
        k, batch_size = self._maps(), int(self.params["batch_size"])
        step_flops = 6.0 * min(batch_size, len(x)) * k * s.shape[1] * (x.shape[1] + len(s))

        seen: list[torch.Tensor] = []  # the class side, on the training device (set by init)

        def init(device: torch.device) -> list[torch.Tensor]:
            seen.append(torch.from_numpy(s.astype(np.float32)).to(device))
            weight = torch.randn(k, x.shape[1], s.shape[1], device=device) / np.sqrt(x.shape[1])
            return [weight.requires_grad_(True)]

        def score(tensors: list[torch.Tensor], features: torch.Tensor) -> torch.Tensor:
            weight = tensors[0]
            if k == 1:  # one map: a plain matrix product (a batched one is ~2x slower)
                return features @ weight[0] @ seen[0].T
            return (features @ weight @ seen[0].T).amax(dim=0)  # max over the maps

        tensors, losses = self._train(x, labels, len(s), init, score, step_flops)
        maps = tensors[0].detach().cpu().numpy().astype(np.float32)
        # K > 1 (LATEM): the (D, K * E) maps side by side, so that prep(x) @ map_ gives the K
        # query vectors whose max is the score (score_maps)
        self.map_ = (
            maps[0]
            if len(maps) == 1
            else np.ascontiguousarray(maps.transpose(1, 0, 2)).reshape(len(maps[0]), -1)
        )
        if len(maps) > 1:
            self.maps_ = maps
        self.fit_info_ = {
            "loss_first_epoch": losses[0] if losses else None,
            "loss_last_epoch": losses[-1] if losses else None,
        }
        return self

    def _maps(self) -> int:
        return 1

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        return self._semantic(wnids)


@MODELS.register
class DeViSE(BilinearRanking):
    """DeViSE: linear map of image features into the word-vector space, hinge rank loss."""

    name: ClassVar[str] = "devise"
    weighting: ClassVar[str] = "uniform"


@MODELS.register
class ALE(BilinearRanking):
    """ALE: bilinear compatibility with the rank-weighted (WARP-style) hinge loss."""

    name: ClassVar[str] = "ale"
    weighting: ClassVar[str] = "rank"


@MODELS.register
class SJE(BilinearRanking):
    """SJE: bilinear compatibility with the structured SVM loss (most violating class only)."""

    name: ClassVar[str] = "sje"
    weighting: ClassVar[str] = "max"


@MODELS.register
class LATEM(BilinearRanking):
    """LATEM: K latent bilinear maps, the best-scoring one per pair; one sampled wrong class per image."""

    name: ClassVar[str] = "latem"
    weighting: ClassVar[str] = "max"
    #: loss "sampled": GBU's Eq. 4 with one uniformly drawn wrong class per image (latEm_train.m);
    #: "max_violating": SJE's structured loss on the max over maps (the toolkit's loss before)

    class Params(RankingParams):
        k: PositiveInt = 4
        loss: Literal["sampled", "max_violating"] = "sampled"

    #: GBU: K in {2, 4, 6, 8, 10}, learning rate and epochs
    grid: ClassVar[dict[str, list[Any]]] = {"k": [2, 4, 6, 8, 10], "lr": [1e-3, 1e-2], "epochs": [25, 50]}

    def _samples_wrong_class(self) -> bool:
        return self.params.get("loss", "sampled") == "sampled"

    def _maps(self) -> int:
        return int(self.params["k"])

    def score_maps(self) -> int:
        """K: the score is the max over the K maps (1 when K = 1: one map, one dot product)."""
        maps = getattr(self, "maps_", None)
        return 1 if maps is None else len(maps)

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, K * E): θ(x)ᵀ W_k for k = 1..K side by side (from ``maps_``: a model directory
        written before stored the sum of the maps as ``map_``)."""
        maps = getattr(self, "maps_", None)
        if maps is None:
            return super().embed_images(features, logits)
        x = self.prep_(check_features(self.name, features, self.prep_.dim_))
        side_by_side = np.ascontiguousarray(np.transpose(maps, (1, 0, 2))).reshape(maps.shape[1], -1)
        return (x @ side_by_side).astype(np.float32)
