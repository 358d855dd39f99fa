"""The seen-class classifier that trivial, ConSE and the GCN models build on.

Two sources, as in the papers:

* ``head``: the backbone's own 1K-class head. Features extracted with logits carry it: the
  posterior is the softmax of the logits restricted to the seen classes. The head's weights
  (the GCN regression targets of Wang et al. / Kampffmeyer et al.) are recovered exactly by least
  squares from (features, logits), since the head is linear in the pooled features.
* ``softmax``: a multinomial logistic regression trained on the seen features (L2-regularised,
  full-batch L-BFGS on standardised features), when no logits came with the features.

Either way the classifier is expressed in the raw feature space as ``logits = [x, 1] @ W`` with
``W`` of shape (D + 1, S), so the GCN targets are the columns of ``W``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.models.base import SeenData
from imagenet_zsl.models.common import seeded_torch, softmax

log = logging.getLogger(__name__)

SOURCES = ("auto", "head", "softmax")
#: relative residual above which recovered head weights do not reproduce the logits
HEAD_RESIDUAL_LIMIT = 1e-2


def augment(features: np.ndarray) -> np.ndarray:
    """[x, 1]: features with a constant column so a bias is one more weight row."""
    features = np.asarray(features, dtype=np.float32)
    return np.hstack([features, np.ones((len(features), 1), np.float32)])


def _least_squares_head(
    features: np.ndarray, targets: np.ndarray, block: int = 65536
) -> tuple[np.ndarray, float]:
    """W (D+1, S) minimising ||[x,1] W - logits||² via blocked normal equations, and the relative
    residual (how exactly a linear map reproduces the logits)."""
    d = features.shape[1] + 1
    gram = np.zeros((d, d))
    rhs = np.zeros((d, targets.shape[1]))
    for start in range(0, len(features), block):
        x = augment(features[start : start + block]).astype(np.float64)
        gram += x.T @ x
        rhs += x.T @ targets[start : start + block].astype(np.float64)
    ridge = 1e-9 * max(float(np.trace(gram)) / d, 1e-12)
    weights = np.linalg.solve(gram + ridge * np.eye(d), rhs)
    error = 0.0
    spread = 0.0
    for start in range(0, len(features), block):
        target = targets[start : start + block].astype(np.float64)
        error += float(np.sum((augment(features[start : start + block]) @ weights - target) ** 2))
        spread += float(np.sum((target - target.mean(axis=1, keepdims=True)) ** 2))
    return weights.astype(np.float32), float(np.sqrt(error / max(spread, 1e-30)))


def train_softmax(
    features: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    reg: float,
    max_iter: int,
    device: str = "cpu",
    seed: int = 0,
) -> np.ndarray:
    """Multinomial logistic regression, returned in raw feature space as W (D+1, S).

    Trained on standardised features (good conditioning for L-BFGS); the weights are mapped back
    so that ``augment(x) @ W`` are the logits of raw features.
    """
    import torch

    mean = features.mean(axis=0)
    scale = np.maximum(features.std(axis=0), 1e-6)
    dev = resolve_device(device)
    x = torch.from_numpy(((features - mean) / scale).astype(np.float32)).to(dev)
    y = torch.from_numpy(labels.astype(np.int64)).to(dev)
    with seeded_torch(seed, dev):
        weight = torch.zeros(x.shape[1], num_classes, device=dev, requires_grad=True)
        bias = torch.zeros(num_classes, device=dev, requires_grad=True)
        optimiser = torch.optim.LBFGS(
            [weight, bias],
            lr=1.0,
            max_iter=max_iter,
            history_size=20,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-7,
            tolerance_change=1e-10,
        )

        def closure() -> torch.Tensor:
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ weight + bias, y)
            loss = loss + reg * (weight * weight).sum()
            loss.backward()
            return loss

        optimiser.step(closure)
    w = weight.detach().cpu().numpy().astype(np.float64) / scale[:, None]
    b = bias.detach().cpu().numpy().astype(np.float64) - mean @ w
    return np.vstack([w, b[None, :]]).astype(np.float32)


class SeenClassifier:
    """Posterior over the seen classes from the backbone head or a trained softmax classifier."""

    def __init__(
        self, source: str = "auto", reg: float = 1e-4, max_iter: int = 200, device: str = "cpu", seed: int = 0
    ):
        if source not in SOURCES:
            raise ValueError(f"classifier must be one of {SOURCES}, got {source!r}")
        self.source = source
        self.reg = float(reg)
        self.max_iter = int(max_iter)
        self.device = device
        self.seed = int(seed)
        self.kind = ""
        self.weights = np.zeros((0, 0), np.float32)
        self.columns = np.zeros(0, np.int64)
        self.logit_dim = 0
        self.head_residual = 0.0

    def fit(self, data: SeenData, features: np.ndarray, labels: np.ndarray) -> SeenClassifier:
        """features/labels: the validated arrays of ``data``."""
        use_head = self.source == "head" or (self.source == "auto" and data.logits is not None)
        if use_head:
            if data.logits is None or data.logit_classes is None:
                raise UserInputError(
                    "classifier 'head' needs features extracted with logits (logit_classes); "
                    "use classifier: softmax"
                )
            index = {w: i for i, w in enumerate(data.logit_classes)}
            absent = [w for w in data.seen_wnids if w not in index]
            if absent and self.source == "head":
                raise UserInputError(
                    f"classifier 'head': {len(absent)} seen classes are not outputs of the backbone "
                    f"head: {preview(absent)}; use classifier: softmax"
                )
            use_head = not absent
            if absent:
                log.info(
                    "%d seen classes are not backbone-head outputs: training a softmax classifier instead",
                    len(absent),
                )
        if use_head:
            self.kind = "head"
            self.columns = np.array([index[w] for w in data.seen_wnids], dtype=np.int64)
            self.logit_dim = len(data.logit_classes)
            logits = np.asarray(data.logits, dtype=np.float32)[:, self.columns]
            self.weights, self.head_residual = _least_squares_head(features, logits)
        else:
            self.kind = "softmax"
            self.weights = train_softmax(
                features, labels, len(data.seen_wnids), self.reg, self.max_iter, self.device, self.seed
            )
        return self

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"classifier": self.kind}
        if self.kind == "head":
            out["head_residual"] = round(self.head_residual, 6)
        return out

    def logits(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, S) seen-class logits: the backbone's own when given, else the linear classifier."""
        if self.kind == "head" and logits is not None:
            logits = np.asarray(logits, dtype=np.float32)
            if logits.ndim != 2 or logits.shape != (len(features), self.logit_dim):
                raise UserInputError(
                    f"logits have shape {logits.shape}, expected ({len(features)}, {self.logit_dim})"
                )
            return logits[:, self.columns]
        if self.kind == "head" and self.head_residual > HEAD_RESIDUAL_LIMIT:
            raise UserInputError(
                "this model uses the backbone head's posteriors: pass the logits of these images "
                f"(their features do not determine the logits linearly, residual {self.head_residual:.3g})"
            )
        return augment(features) @ self.weights

    def posterior(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, S) float64 p(seen class | image)."""
        return softmax(self.logits(features, logits))
