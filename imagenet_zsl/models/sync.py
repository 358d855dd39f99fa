"""SYNC (Changpinyo et al., CVPR 2016): classifiers synthesised from phantom classes.

R phantom classes live both in the semantic space (b_r) and in the classifier space (v_r). A class
c with semantic vector a_c gets the classifier

    w_c = sum_r s_cr v_r,      s_cr = softmax_r( -|a_c - b_r|² / (σ · m²) ),

with m the median distance between (L2-normalised) seen-class vectors, so σ is scale-free. As in
the paper's base setting the phantoms are the seen classes (b_r = a_r, R = Z). The default follows
the official ``SynC_fast.m`` (Changpinyo et al.'s code, ``Compute_Sim(..., 'RBF_norm')`` on
``get_class_signatures(attr, 'L2')``): σ = 1 / ``Sim_scale``, and

* ``solver: pinv`` (the reference, default): first learn the seen classes' classifiers W (Z, D)
  alone, ``train_W_OVO.m``: min_W  Σ_{i,c} max(0, 1 - y_ic w_cᵀx_i)² / (N·Z) + λ/2 |W|²
  (y_ic = ±1; full-batch L-BFGS), then V = pinv(S_seen) W with S_seen (Z, R) the seen classes'
  similarities to the phantoms. W does not depend on σ, so a grid search over σ fits W once per λ.
* ``solver: direct`` (this toolkit's earlier variant, kept as an option): learn V through the
  mixture, min_V Σ_c max(0, 1 - y_ic (S V)_cᵀx_i)² averaged over images + λ|V|².
* ``loss``: ``ovo`` one-versus-other squared hinge (above, ``train_W_OVO.m``); ``cs`` Crammer-Singer,
  ``train_W_CS.m``: mean_i max_c (w_cᵀx_i + [c ≠ y_i] - w_yᵀx_i); ``struct`` the structured
  variant, ``train_W_struct.m``: the margin [c ≠ y_i] becomes Δ(y_i, c) = |â_y - â_c| (distance
  of the class signatures in units of their median distance). With ``solver: direct`` the ``cs``
  and ``struct`` data terms are the same and the regulariser is λ|V|².

Deviations from the reference, documented: the median distance m is taken over the seen classes
(the reference takes it over all classes of the dataset, unseen included, which fit never sees);
torch's L-BFGS stands in for minFunc (1000 iterations, as MaxIter).
Image side: prepared features (L2 per image, as ``data_loader.m``), ``bias: true`` appends a
constant 1; class side: s_c V.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData
from imagenet_zsl.models.closed_form import LinearSemanticModel
from imagenet_zsl.models.common import (
    blocked_loss,
    check_features,
    seeded_torch,
    tensor_blocks,
    torch_threads,
)
from imagenet_zsl.models.params import (
    FeatureMode,
    LinearParams,
    NonNegative,
    Positive,
    PositiveInt,
    TorchParams,
)
from imagenet_zsl.models.seen_classifier import augment
from imagenet_zsl.semantics.class_vectors import ClassVectors

if TYPE_CHECKING:
    import torch


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) squared Euclidean distances (float64, clipped at 0)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    d2 = np.sum(a**2, axis=1, keepdims=True) - 2 * a @ b.T + np.sum(b**2, axis=1)[None, :]
    return np.maximum(d2, 0.0)


def phantom_weights(semantic: np.ndarray, phantoms: np.ndarray, bandwidth: float) -> np.ndarray:
    """(C, R) softmax over phantoms of -squared distance / bandwidth (the reference's
    ``Compute_Sim(..., 'RBF_norm')`` with ``Sim_scale = 1 / bandwidth``)."""
    logits = -squared_distances(semantic, phantoms) / bandwidth
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def median_distance(vectors: np.ndarray) -> float:
    """Median of the positive pairwise Euclidean distances of (C, E) ``vectors`` (1.0 if none), as
    ``get_class_signatures.m``'s ``median(Dist(Dist > 0))``."""
    distances = np.sqrt(squared_distances(vectors, vectors))
    positive = distances[distances > 0]
    return float(np.median(positive)) if positive.size else 1.0


def ovo_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One-versus-other squared hinge of ``train_W_OVO.m``: Σ max(0, 1 - y_ic s_ic)² / (N·C) for
    (N, C) scores, y_ic = +1 on the true class and -1 elsewhere."""
    import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

    signs = -torch.ones_like(scores)
    signs[torch.arange(len(scores)), labels] = 1.0
    hinge = torch.relu(1.0 - signs * scores)
    return (hinge * hinge).sum() / scores.numel()


def struct_loss(scores: torch.Tensor, labels: torch.Tensor, margins: torch.Tensor) -> torch.Tensor:
    """Crammer-Singer / structured hinge of ``train_W_CS.m`` / ``train_W_struct.m``:
    mean_i max_c (s_ic + Δ(y_i, c) - s_iy) for (N, C) scores and (C, C) margins Δ with a zero
    diagonal (so the max is ≥ 0). Δ = 1 - I is Crammer-Singer."""
    true = scores.gather(1, labels[:, None])
    return (scores + margins[labels] - true).max(dim=1).values.mean()


@MODELS.register
class SYNC(LinearSemanticModel):
    """SYNC: each class's classifier is a semantic-similarity mixture of phantom classifiers."""

    name: ClassVar[str] = "sync"

    class Params(LinearParams, TorchParams):
        lam: NonNegative = 2.0**-15
        sigma: Positive = 1.0
        solver: Literal["pinv", "direct"] = "pinv"
        loss: Literal["ovo", "cs", "struct"] = "ovo"
        max_iter: PositiveInt = 1000
        features: FeatureMode = "l2"
        bias: bool = False

    #: ``SynC_fast.m``'s grids: λ ∈ 2^(-24:-9) (every third power), Sim_scale = 1/σ ∈ 2^(-5:5)
    grid: ClassVar[dict[str, list[Any]]] = {
        "lam": [2.0**p for p in range(-24, -8, 3)],
        "sigma": [2.0**p for p in range(-5, 6)],
    }

    def _image_side(self, features: np.ndarray) -> np.ndarray:
        x = self.prep_(features).astype(np.float32)
        return augment(x) if self.params["bias"] else x

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> SYNC:
        raw, labels, seen = self._prepare(data, semantics)
        self.phantoms_ = seen.astype(np.float32)
        median = median_distance(seen)
        self.bandwidth_ = float(self.params["sigma"]) * max(median, 1e-12) ** 2
        mixing = phantom_weights(seen, self.phantoms_, self.bandwidth_)  # (Z, R)
        margins = np.sqrt(squared_distances(seen, seen)) / max(median, 1e-12)
        if self.params["loss"] == "cs":
            margins = 1.0 - np.eye(len(seen))
        if self.params["solver"] == "pinv":
            key = ("sync-w", self.params["lam"], self.params["loss"], self.params["max_iter"],
                   self.params["features"], self.params["bias"], self.params["semantic_norm"],
                   self.params["device"], self.params["seed"])  # fmt: skip
            self.classifiers_, final = self.shared(key, lambda: self._minimise(raw, labels, None, margins))
            self.phantom_classifiers_ = (np.linalg.pinv(mixing) @ self.classifiers_).astype(np.float32)
        else:
            self.phantom_classifiers_, final = self._minimise(raw, labels, mixing, margins)
        self.fit_info_ = {"loss": final}
        return self

    def _minimise(
        self, raw: Any, labels: np.ndarray, mixing: np.ndarray | None, margins: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Full-batch L-BFGS from randn/100 (seeded, as ``train_W_*.m``) on the image side of the
        raw features (N, D) (a row source, prepared block by block: :func:`~imagenet_zsl.models.
        common.blocked_loss` sums the mean loss and its gradient over blocks). ``mixing`` None:
        learn W (Z, D) with λ/2|W|² (reference); otherwise learn V (R, D) through W = mixing V with
        λ|V|² (``solver: direct``)."""
        import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

        device = resolve_device(self.params["device"])
        blocks = tensor_blocks(raw, labels, self._image_side, device)
        width = int(raw.shape[1]) + int(bool(self.params["bias"]))
        delta = torch.from_numpy(margins.astype(np.float32)).to(device)
        a = None if mixing is None else torch.from_numpy(mixing.astype(np.float32)).to(device)
        rows = len(margins) if a is None else a.shape[1]
        lam = float(self.params["lam"])
        loss = self.params["loss"]
        with seeded_torch(int(self.params["seed"]), device):  # train_W_*.m: W0 = randn(C, d) / 100
            start = torch.randn(rows, width, device=device) / 100
        weights = start.requires_grad_(True)
        optimiser = torch.optim.LBFGS(
            [weights],
            lr=1.0,
            max_iter=int(self.params["max_iter"]),
            max_eval=int(self.params["max_iter"]) * 6 // 5,
            history_size=20,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-10,
            tolerance_change=1e-12,
        )

        def data_term(features: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            classifiers = weights if a is None else a @ weights
            scores = features @ classifiers.T
            if loss != "ovo":
                return struct_loss(scores, targets, delta)
            if a is not None:  # the earlier variant: summed over classes, not averaged
                return ovo_loss(scores, targets) * scores.shape[1]
            return ovo_loss(scores, targets)

        def penalty() -> torch.Tensor:
            value = (weights**2).sum()
            return lam / 2 * value if a is None else lam * value

        def closure() -> torch.Tensor:
            optimiser.zero_grad()
            return blocked_loss(blocks, len(labels), data_term, penalty)

        step_flops = 6.0 * len(labels) * width * len(margins)
        with torch_threads(step_flops):
            optimiser.step(closure)
            with torch.no_grad():
                final = float(blocked_loss(blocks, len(labels), data_term, penalty, backward=False))
        return weights.detach().cpu().numpy().astype(np.float32), final

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.prep_.dim_)
        return self._image_side(features)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        mixing = phantom_weights(self._semantic(wnids), self.phantoms_, self.bandwidth_)
        return (mixing @ self.phantom_classifiers_).astype(np.float32)
