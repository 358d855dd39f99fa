"""The seen-class classifier that trivial, ConSE and the GCN models build on.

Two sources, as in the papers:

* ``head``: the backbone's own 1K-class head (the GCN regression targets of Wang et al. /
  Kampffmeyer et al., and ConSE's softmax). Taken as it is when the feature directory stores it
  (``head.npz``, :class:`~imagenet_zsl.features.head.BackboneHead`): then no seen-class image is
  needed at all. Otherwise, for features extracted with logits, its weights are recovered by least
  squares from (features, logits) — exact, since the head is linear in the pooled features, but
  only with at least D + 1 images (fewer is an error, not a silent under-determined fit). The
  posterior is the softmax of the logits restricted to the seen classes.
* ``softmax``: a multinomial logistic regression trained on the seen features (L2-regularised,
  full-batch L-BFGS on standardised features), when the features carry neither head nor logits.

Either way the classifier is expressed in the raw feature space as ``logits = [x, 1] @ W`` with
``W`` of shape (D + 1, S), so the GCN targets are the columns of ``W``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.models.base import SeenData, read_rows
from imagenet_zsl.models.common import LBFGSSettings, column_moments, fit_linear_lbfgs, softmax

log = logging.getLogger(__name__)

SOURCES = ("auto", "head", "softmax")
#: relative residual above which recovered head weights do not reproduce the logits
HEAD_RESIDUAL_LIMIT = 1e-2


def augment(features: np.ndarray) -> np.ndarray:
    """[x, 1]: features with a constant column so a bias is one more weight row."""
    features = np.asarray(features, dtype=np.float32)
    return np.hstack([features, np.ones((len(features), 1), np.float32)])


def _least_squares_head(features: Any, targets: Any, block: int = 65536) -> tuple[np.ndarray, float]:
    """W (D+1, S) minimising ||[x,1] W - logits||² via blocked normal equations, and the relative
    residual (how exactly a linear map reproduces the logits). features (N, D) and targets (N, S):
    row sources, read block by block.

    Fewer than D + 1 images leave W under-determined: any residual would then be 0 and the
    "recovered" head arbitrary, so that is a UserInputError saying how many images it needs."""
    d = features.shape[1] + 1
    if len(features) < d:
        raise UserInputError(
            f"classifier 'head': recovering the backbone head from logits needs at least {d} "
            f"images (feature dimension {d - 1} + 1), got {len(features)}; give more seen-class "
            f"images, or features extracted with the head stored ({HEAD_FILE}, written by "
            "'imagenet-zsl extract'), which needs none"
        )
    gram = np.zeros((d, d))
    rhs = np.zeros((d, targets.shape[1]))
    for start in range(0, len(features), block):
        x = augment(read_rows(features, slice(start, start + block))).astype(np.float64)
        gram += x.T @ x
        rhs += x.T @ read_rows(targets, slice(start, start + block)).astype(np.float64)
    ridge = 1e-9 * max(float(np.trace(gram)) / d, 1e-12)
    weights = np.linalg.solve(gram + ridge * np.eye(d), rhs)
    error = 0.0
    spread = 0.0
    for start in range(0, len(features), block):
        target = read_rows(targets, slice(start, start + block)).astype(np.float64)
        rows = augment(read_rows(features, slice(start, start + block)))
        error += float(np.sum((rows @ weights - target) ** 2))
        spread += float(np.sum((target - target.mean(axis=1, keepdims=True)) ** 2))
    return weights.astype(np.float32), float(np.sqrt(error / max(spread, 1e-30)))


def train_softmax(
    features: Any,
    labels: np.ndarray,
    num_classes: int,
    reg: float,
    max_iter: int,
    device: str = "cpu",
    seed: int = 0,
) -> np.ndarray:
    """Multinomial logistic regression, returned in raw feature space as W (D+1, S).

    Trained (:func:`~imagenet_zsl.models.common.fit_linear_lbfgs`) on standardised features (good
    conditioning for L-BFGS); the weights are mapped back so that ``augment(x) @ W`` are the
    logits of raw features. ``features`` (N, D): a row source, standardised block by block (no
    (N, D) copy).
    """
    mean, std = column_moments(features)
    scale = np.maximum(std, 1e-6)
    settings = LBFGSSettings(reg=reg, max_iter=max_iter, device=device, seed=seed)
    weight, bias = fit_linear_lbfgs(
        features, labels, settings, "ce", num_classes, transform=lambda x: (x - mean) / scale
    )
    w = weight.astype(np.float64) / scale[:, None]
    b = bias.astype(np.float64) - mean @ w
    return np.vstack([w, b[None, :]]).astype(np.float32)


def _columns(rows: Any, columns: np.ndarray) -> Any:
    """Columns ``columns`` of an (N, K) row source: a ShardRows view (nothing read), else a
    float32 array."""
    view = getattr(rows, "columns", None)
    if callable(view):
        return view(columns)
    return np.asarray(rows, dtype=np.float32)[:, columns]


def uses_stored_head(data: SeenData, source: str) -> bool:
    """True when the classifier ``source`` ("auto" or "head") takes ``data``'s stored backbone head:
    there is one and every seen class is one of its outputs. No image is needed then."""
    if source not in ("auto", "head") or data.head is None:
        return False
    outputs = set(data.head.classes)
    return all(w in outputs for w in data.seen_wnids)


class SeenClassifier:
    """Posterior over the seen classes from the backbone head or a trained softmax classifier.

    Fitted: ``kind_`` ("head" or "softmax"), ``weights_`` (D + 1, S) float32 with
    ``logits = [x, 1] @ weights_``, ``columns_`` (S,) the seen classes' columns among the head's
    ``logit_dim_`` outputs, ``head_residual_`` (least-squares recovery) and ``head_stored_`` (the
    head was taken from ``head.npz``)."""

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

    def fit(self, data: SeenData, features: np.ndarray, labels: np.ndarray) -> SeenClassifier:
        """features/labels: the validated arrays of ``data`` (N may be 0 when a stored head is used).

        Source order under "auto": the stored head when it covers every seen class, else the head
        recovered from logits, else a softmax classifier."""
        self.head_stored_ = False
        self.columns_ = np.zeros(0, np.int64)
        self.logit_dim_ = 0
        self.head_residual_ = 0.0
        if uses_stored_head(data, self.source):
            return self._take_head(data.head, data.seen_wnids, features)
        if self.source == "head" and data.head is not None and data.logits is None:
            absent = [w for w in data.seen_wnids if w not in set(data.head.classes)]
            raise UserInputError(
                f"classifier 'head': {len(absent)} seen classes are not outputs of the backbone "
                f"head ({HEAD_FILE}): {preview(absent)}; use classifier: softmax"
            )
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
            self.kind_ = "head"
            self.columns_ = np.array([index[w] for w in data.seen_wnids], dtype=np.int64)
            self.logit_dim_ = len(data.logit_classes)
            logits = _columns(data.logits, self.columns_)  # (N, S), read block by block
            self.weights_, self.head_residual_ = _least_squares_head(features, logits)
        else:
            self.kind_ = "softmax"
            self.weights_ = train_softmax(
                features, labels, len(data.seen_wnids), self.reg, self.max_iter, self.device, self.seed
            )
        return self

    def _take_head(self, head: BackboneHead, seen: list[str], features: np.ndarray) -> SeenClassifier:
        """The stored head restricted to the seen classes: W = [weight.T; bias][:, seen columns]."""
        if features.ndim == 2 and len(features) and features.shape[1] != head.dim:
            raise UserInputError(
                f"classifier 'head': the stored head ({HEAD_FILE}) reads {head.dim}-d features but "
                f"the features have {features.shape[1]}; re-extract the feature directory"
            )
        self.kind_ = "head"
        self.head_stored_ = True
        self.columns_ = head.columns(list(seen))
        self.logit_dim_ = len(head.classes)
        full = np.vstack([head.weight.T, head.bias[None, :]])
        self.weights_ = np.ascontiguousarray(full[:, self.columns_], dtype=np.float32)
        self.head_residual_ = 0.0
        return self

    @property
    def dim(self) -> int:
        """D, the feature dimension the classifier reads."""
        return int(self.weights_.shape[0]) - 1

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"classifier": self.kind_}
        if self.kind_ == "head" and getattr(self, "head_stored_", False):  # saved before it existed
            out["head"] = f"stored ({HEAD_FILE})"
        elif self.kind_ == "head":
            out["head"] = "least squares from logits"
            out["head_residual"] = round(self.head_residual_, 6)
        return out

    def logits(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, S) seen-class logits: the backbone's own when given, else the linear classifier.

        A stored head ignores given logits: it computes them exactly from the features (the
        stored logits are float16 and their column order is not checked against the head's)."""
        if self.kind_ == "head" and logits is not None and not getattr(self, "head_stored_", False):
            logits = np.asarray(logits, dtype=np.float32)
            if logits.ndim != 2 or logits.shape != (len(features), self.logit_dim_):
                raise UserInputError(
                    f"logits have shape {logits.shape}, expected ({len(features)}, {self.logit_dim_})"
                )
            return logits[:, self.columns_]
        if self.kind_ == "head" and self.head_residual_ > HEAD_RESIDUAL_LIMIT:
            raise UserInputError(
                "this model uses the backbone head's posteriors: pass the logits of these images "
                f"(their features do not determine the logits linearly, residual {self.head_residual_:.3g})"
            )
        return augment(features) @ self.weights_

    def posterior(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, S) float64 p(seen class | image)."""
        return softmax(self.logits(features, logits))
