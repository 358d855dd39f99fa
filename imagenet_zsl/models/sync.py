"""SYNC (Changpinyo et al., CVPR 2016): classifiers synthesised from phantom classes.

R phantom classes live both in the semantic space (b_r) and in the classifier space (v_r). A class
c with semantic vector a_c gets the classifier

    w_c = sum_r s_cr v_r,      s_cr = softmax_r( -|a_c - b_r|² / (σ · m) ),

with m the median squared distance between seen classes (so σ is scale-free). As in the paper's
base setting the phantoms' semantic coordinates are the seen classes' (b_r = a_r, R = Z), and the
v_r are learnt with the one-versus-other squared hinge loss plus λ|V|² (full-batch L-BFGS).
Image side: [x̃, 1] (prepared features and a bias); class side: s_c V.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData
from imagenet_zsl.models.closed_form import _LinearSemanticModel
from imagenet_zsl.models.common import check_features, check_positive, seeded_torch
from imagenet_zsl.models.seen_classifier import augment
from imagenet_zsl.semantics.class_vectors import ClassVectors


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) squared Euclidean distances (float64, clipped at 0)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    d2 = np.sum(a**2, axis=1, keepdims=True) - 2 * a @ b.T + np.sum(b**2, axis=1)[None, :]
    return np.maximum(d2, 0.0)


def phantom_weights(semantic: np.ndarray, phantoms: np.ndarray, bandwidth: float) -> np.ndarray:
    """(C, R) softmax over phantoms of -squared distance / bandwidth."""
    logits = -squared_distances(semantic, phantoms) / bandwidth
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


@MODELS.register("sync")
class SYNC(_LinearSemanticModel):
    """SYNC: each class's classifier is a semantic-similarity mixture of phantom classifiers."""

    name: ClassVar[str] = "sync"
    defaults: ClassVar[dict[str, Any]] = {
        "lam": 1e-3,
        "sigma": 1.0,
        "max_iter": 100,
        "features": "standard",
        "semantic_norm": "l2",
        "device": "cpu",
        "seed": 0,
    }
    grid: ClassVar[dict[str, list[Any]]] = {
        "lam": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1],
        "sigma": [0.25, 0.5, 1.0, 2.0, 4.0],
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        check_positive(self.name, self.params, ["sigma", "max_iter"])
        check_positive(self.name, self.params, ["lam"], allow_zero=True)

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> SYNC:
        import torch

        raw, labels, seen = self._prepare(data, semantics)
        x = self.prep_(raw)
        self.phantoms_ = seen.astype(np.float32)
        d2 = squared_distances(seen, seen)
        off_diagonal = d2[~np.eye(len(d2), dtype=bool)]
        median = float(np.median(off_diagonal)) if off_diagonal.size else 1.0
        self.bandwidth_ = float(self.params["sigma"]) * max(median, 1e-12)
        mixing = phantom_weights(seen, self.phantoms_, self.bandwidth_)  # (Z, R)

        device = resolve_device(self.params["device"])
        features = torch.from_numpy(augment(x.astype(np.float32))).to(device)
        signs = -torch.ones(len(x), len(seen), device=device)
        signs[torch.arange(len(x)), torch.from_numpy(labels).to(device)] = 1.0
        a = torch.from_numpy(mixing.astype(np.float32)).to(device)
        lam = float(self.params["lam"])
        with seeded_torch(int(self.params["seed"]), device):
            phantom_classifiers = torch.zeros(len(seen), features.shape[1], device=device, requires_grad=True)
            optimiser = torch.optim.LBFGS(
                [phantom_classifiers],
                lr=1.0,
                max_iter=int(self.params["max_iter"]),
                history_size=20,
                line_search_fn="strong_wolfe",
                tolerance_grad=1e-7,
                tolerance_change=1e-10,
            )

            def objective() -> torch.Tensor:
                scores = features @ (a @ phantom_classifiers).T
                hinge = torch.relu(1.0 - signs * scores)
                return (hinge * hinge).sum(dim=1).mean() + lam * (phantom_classifiers**2).sum()

            def closure() -> torch.Tensor:
                optimiser.zero_grad()
                loss = objective()
                loss.backward()
                return loss

            optimiser.step(closure)
            with torch.no_grad():
                final = float(objective())
        self.phantom_classifiers_ = phantom_classifiers.detach().cpu().numpy().astype(np.float32)
        self.fit_info_ = {"loss": final}
        return self

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.prep_.dim)
        return augment(self.prep_(features))

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        mixing = phantom_weights(self._semantic(wnids), self.phantoms_, self.bandwidth_)
        return (mixing @ self.phantom_classifiers_).astype(np.float32)
