"""GFZSL (Verma & Rai, ECML-PKDD 2017), inductive: class-conditional Gaussians whose parameters are
regressed from the class's semantic vector.

Each seen class's images give a mean μ_c and a per-dimension variance σ²_c (diagonal Gaussian).
Two ridge regressions on the seen classes, [a_c, 1] → μ_c (λ_μ) and [a_c, 1] → log σ²_c (λ_σ,
in log space so that predicted variances stay positive), predict both for any class. An image is
assigned by log-likelihood,

    log N(x; μ, diag σ²) = −½ Σ_d x_d²/σ²_d + Σ_d x_d μ_d/σ²_d − ½ Σ_d μ²_d/σ²_d − ½ Σ_d log σ²_d + const,

which is exactly the dot product [x², x, 1] · [−1/(2σ²), μ/σ², −½ Σ μ²/σ² − ½ Σ log σ²]: the
toolkit's one scoring rule holds without approximation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imagenet_zsl.features.prototypes import add_rows_by_label
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData
from imagenet_zsl.models.closed_form import POWERS, LinearSemanticModel, solve_or_lstsq
from imagenet_zsl.models.common import BLOCK_ROWS, check_features
from imagenet_zsl.models.params import FeatureMode, LinearParams, NonNegative
from imagenet_zsl.semantics.class_vectors import ClassVectors

#: variances are floored here (relative to the mean variance) so a constant dimension cannot blow up
VARIANCE_FLOOR = 1e-4


def class_moments(
    prep: Any, features: np.ndarray, labels: np.ndarray, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(Z, D) per-class means and (Z, D) per-class variances of the prepared features, streamed
    in blocks with float64 sums (no (N, D) copy)."""
    sums = np.zeros((num_classes, prep.dim_))
    squares = np.zeros((num_classes, prep.dim_))
    for start in range(0, len(features), BLOCK_ROWS):
        block = prep(features[start : start + BLOCK_ROWS]).astype(np.float64)
        rows = labels[start : start + BLOCK_ROWS]
        add_rows_by_label(sums, rows, block)
        add_rows_by_label(squares, rows, block**2)
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)[:, None]
    means = sums / counts
    return means, np.maximum(squares / counts - means**2, 0.0)


@MODELS.register
class GFZSL(LinearSemanticModel):
    """GFZSL: diagonal Gaussians per class, mean and log-variance regressed from semantics."""

    name: ClassVar[str] = "gfzsl"

    class Params(LinearParams):
        lam_mean: NonNegative = 1.0
        lam_var: NonNegative = 1.0
        features: FeatureMode = "standard"

    #: GBU: the two regularisers of the linear regressions
    grid: ClassVar[dict[str, list[Any]]] = {"lam_mean": POWERS, "lam_var": POWERS}

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> GFZSL:
        features, labels, seen = self._prepare(data, semantics)
        means, variances = class_moments(self.prep_, features, labels, len(seen))
        floor = VARIANCE_FLOOR * max(float(variances.mean()), 1e-12)
        a = np.hstack([seen, np.ones((len(seen), 1))])  # [a_c, 1]
        gram = a.T @ a
        ridge = np.eye(len(gram))
        ridge[-1, -1] = 0.0  # the bias is not regularised
        self.mean_map_ = solve_or_lstsq(gram + float(self.params["lam_mean"]) * ridge, a.T @ means)
        log_var = np.log(np.maximum(variances, floor))
        self.log_var_map_ = solve_or_lstsq(gram + float(self.params["lam_var"]) * ridge, a.T @ log_var)
        self.dim_ = int(features.shape[1])
        self.fit_info_ = {"mean_variance": float(variances.mean())}
        return self

    def gaussians(self, wnids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(C, D) predicted means and (C, D) predicted variances of the classes ``wnids``."""
        s = self._semantic(wnids).astype(np.float64)
        a = np.hstack([s, np.ones((len(s), 1))])
        return a @ self.mean_map_, np.exp(a @ self.log_var_map_)

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        x = self.prep_(check_features(self.name, features, self.dim_)).astype(np.float64)
        return np.hstack([x**2, x, np.ones((len(x), 1))]).astype(np.float32)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        mu, var = self.gaussians(wnids)
        constant = -0.5 * np.sum(mu**2 / var, axis=1, keepdims=True) - 0.5 * np.sum(
            np.log(var), axis=1, keepdims=True
        )
        return np.hstack([-0.5 / var, mu / var, constant]).astype(np.float32)
