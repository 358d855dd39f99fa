"""Linear compatibility models with closed-form solutions: ESZSL, SAE, ridge in both directions.

Notation: X (N, D) prepared image features, S_y (N, E) the semantic vector of each image's class,
S (Z, E) the seen classes' semantic vectors, Y (N, Z) the label matrix.

* ESZSL (Romera-Paredes & Torr, ICML 2015): V = (XᵀX + γI)⁻¹ XᵀY S (SᵀS + λI)⁻¹, Y in {-1, 1};
  score(x, c) = x V s_c.
* SAE (Kodirov et al., CVPR 2017): W (E, D) solves the Sylvester equation
  S_yᵀS_y W + λ W XᵀX = (1 + λ) S_yᵀX; "v2s" compares W x with s_c, "s2v" compares x with Wᵀ s_c
  (cosine, as in the paper). As Kodirov's code (``NormalizeFea(W)`` in ``demo_*.m``) and its common
  ports, each row of W is L2-normalised before predicting in both directions
  (``normalize_w: true``, the default; ``false`` keeps the raw Sylvester solution).
* ridge (visual → semantic): W = (XᵀX + αI)⁻¹ XᵀS_y; score = x W s_c.
* ridge_s2v (semantic → visual, Shigeto et al. 2015, less hubness): p_c = x̄ + (s_c - s̄) W with
  W = (S̃ᵀS̃ + αI)⁻¹ S̃ᵀX̃ on centred data; ranked by Euclidean distance, written as a dot product:
  [x, 1] · [p_c, -|p_c|²/2] = -|x - p_c|²/2 + |x|²/2, whose last term is constant per image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel
from imagenet_zsl.models.common import (
    FeaturePrep,
    check_features,
    feature_statistics,
    semantic_matrix,
)
from imagenet_zsl.models.common import check_seen_data as _check_seen_data
from imagenet_zsl.models.params import FeatureMode, LinearParams, NonNegative, Positive
from imagenet_zsl.scoring.vectors import l2_normalize
from imagenet_zsl.semantics.class_vectors import ClassVectors

POWERS = [10.0**p for p in range(-3, 4)]


class LinearSemanticModel(ZSLModel):
    """The base class of the models that learn a map between prepared image features and the
    classes' semantic vectors (ESZSL, SAE, ridge, ridge_s2v here; GFZSL, SYNC, CMT and the bilinear
    ranking models in other modules): feature preparation, the stored semantics, the statistics a grid
    search shares, and by default the image map x ↦ prep(x) @ map scored against the semantic
    vectors."""

    Params: ClassVar[type[LinearParams]] = LinearParams

    def _prepare(self, data: SeenData, semantics: ClassVectors) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw features float32 (N, D), labels (N,), S float64 (Z, E)); fits the feature map."""
        features, labels = _check_seen_data(self.name, data)
        self.prep_ = FeaturePrep(self.params["features"]).fit(features)
        self.semantics_ = semantics
        seen = semantic_matrix(semantics, data.seen_wnids, self.params["semantic_norm"])
        return features, labels, seen.astype(np.float64)

    def _statistics(
        self, data: SeenData, semantics: ClassVectors
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(XᵀX, class sums (Z, D), counts (Z,), S (Z, E)) of the prepared features; computed once
        per grid search (:meth:`ZSLModel.fit_many`) — they depend on the normalisations only."""

        def compute() -> tuple[FeaturePrep, tuple[np.ndarray, ...]]:
            features, labels, seen = self._prepare(data, semantics)
            gram, sums, counts = feature_statistics(self.prep_, features, labels, len(seen))
            return self.prep_, (gram, sums, counts, seen)

        key = ("statistics", self.params["features"], self.params["semantic_norm"])
        self.prep_, statistics = self.shared(key, compute)  # a fitted FeaturePrep is never changed
        self.semantics_ = semantics
        return statistics  # type: ignore[return-value]

    def _semantic(self, wnids: Sequence[str]) -> np.ndarray:
        return semantic_matrix(self.semantics_, list(wnids), self.params["semantic_norm"])

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.prep_.dim_)
        return (self.prep_(features) @ self.map_).astype(np.float32)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        return self._semantic(wnids)


def solve_or_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a⁻¹ b, or the minimum-norm least-squares solution when ``a`` is singular (zero regularisation
    with collinear inputs)."""
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(a, b, rcond=None)[0]


class SylvesterBases:
    """Eigendecompositions that solve A W + λ W G = μ C for any λ > 0, μ with A (E, E) and G (D, D)
    symmetric positive semi-definite (SAE: A = S_yᵀS_y, G = XᵀX, C = S_yᵀX (E, D)).

    Why: with A = U diag(a) Uᵀ and G = V diag(g) Vᵀ the equation is diagonal in the eigenbases,
    W = U [μ (UᵀCV)_ij / (a_i + λ g_j)] Vᵀ. Two ``eigh`` calls replace the two Schur decompositions
    of ``scipy.linalg.solve_sylvester`` (about half its time) and do not depend on λ or μ, so a grid
    over λ pays them once and each further λ costs two matrix products. Entries whose divisor
    a_i + λ g_j is zero up to rounding (both matrices singular in those directions, where C
    vanishes too) are set to 0: the minimum-norm solution, where a Schur solver returns
    rounding noise.
    """

    def __init__(
        self,
        a_values: np.ndarray,
        a_vectors: np.ndarray,
        g_values: np.ndarray,
        g_vectors: np.ndarray,
        rotated: np.ndarray,
    ):
        self.a_values, self.a_vectors = a_values, a_vectors  # (E,), (E, E)
        self.g_values, self.g_vectors = g_values, g_vectors  # (D,), (D, D)
        self.rotated = rotated  # UᵀCV (E, D)

    @classmethod
    def of(cls, a: np.ndarray, g: np.ndarray, c: np.ndarray) -> SylvesterBases:
        """Decompose A (E, E) and G (D, D), both symmetric PSD, and rotate C (E, D)."""
        a_values, a_vectors = np.linalg.eigh(a)
        g_values, g_vectors = np.linalg.eigh(g)
        rotated = a_vectors.T @ c @ g_vectors
        # eigh of a PSD matrix can return eigenvalues of -rounding: clip them to zero
        return cls(np.maximum(a_values, 0.0), a_vectors, np.maximum(g_values, 0.0), g_vectors, rotated)

    def solve(self, lam: float, scale: float = 1.0) -> np.ndarray:
        """W (E, D) with A W + λ W G = scale · C."""
        divisor = self.a_values[:, None] + lam * self.g_values[None, :]  # (E, D)
        tolerance = max(divisor.shape) * np.finfo(np.float64).eps * max(float(divisor.max()), 0.0)
        ratio = np.divide(
            scale * self.rotated, divisor, out=np.zeros_like(divisor), where=divisor > tolerance
        )
        return self.a_vectors @ ratio @ self.g_vectors.T


@MODELS.register
class ESZSL(LinearSemanticModel):
    """Embarrassingly simple ZSL: a bilinear map with a closed form (γ: features, λ: semantics)."""

    name: ClassVar[str] = "eszsl"

    class Params(LinearParams):
        gamma: NonNegative = 1.0
        lam: NonNegative = 1.0
        features: FeatureMode = "standard"

    grid: ClassVar[dict[str, list[Any]]] = {"gamma": POWERS, "lam": POWERS}

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> ESZSL:
        gram, sums, _, s = self._statistics(data, semantics)
        gamma, lam = float(self.params["gamma"]), float(self.params["lam"])

        def solve_left() -> np.ndarray:  # (XᵀX + γI)⁻¹ XᵀY S, (D, E): shared by every λ of a grid
            xty = 2.0 * sums.T - sums.sum(axis=0)[:, None]  # XᵀY with Y = 2·onehot − 1
            return solve_or_lstsq(gram + gamma * np.eye(len(gram)), xty @ s)

        left = self.shared(
            ("eszsl-left", self.params["features"], self.params["semantic_norm"], gamma), solve_left
        )
        self.map_ = solve_or_lstsq(s.T @ s + lam * np.eye(s.shape[1]), left.T).T  # left (SᵀS + λI)⁻¹
        self.fit_info_ = {}
        return self


@MODELS.register
class SAE(LinearSemanticModel):
    """Semantic autoencoder: encoder W (image → semantic) tied to its transpose as decoder."""

    name: ClassVar[str] = "sae"

    class Params(LinearParams):
        lam: Positive = 1.0
        direction: Literal["v2s", "s2v"] = "v2s"
        normalize_w: bool = True
        features: FeatureMode = "l2"

    grid: ClassVar[dict[str, list[Any]]] = {"lam": [10.0**p for p in range(-2, 6)]}

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> SAE:
        gram, sums, counts, s = self._statistics(data, semantics)
        lam = float(self.params["lam"])

        def decompose() -> SylvesterBases:  # independent of λ: shared by every λ of a grid
            # S_yᵀS_y = Σ_c n_c s_c s_cᵀ and S_yᵀX = Σ_c s_c (Σ_{i in c} x_i)ᵀ
            return SylvesterBases.of((s.T * counts) @ s, gram, s.T @ sums)

        bases = self.shared(("sae-bases", self.params["features"], self.params["semantic_norm"]), decompose)
        encoder = bases.solve(lam, 1.0 + lam)  # S_yᵀS_y W + λ W XᵀX = (1 + λ) S_yᵀX
        if self.params["normalize_w"]:  # the reference's NormalizeFea(W): unit rows (E of them)
            encoder = encoder / np.where(
                (norms := np.linalg.norm(encoder, axis=1, keepdims=True)) > 0, norms, 1.0
            )
        self.encoder_ = encoder.astype(np.float32)  # (E, D)
        self.map_ = encoder.T.astype(np.float32)  # image side of "v2s": x ↦ W x
        self.fit_info_ = {}
        return self

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        if self.params["direction"] == "s2v":
            features = check_features(self.name, features, self.prep_.dim_)
            return self.prep_(features)
        return super().embed_images(features, logits)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        semantic = self._semantic(wnids)
        if self.params["direction"] == "s2v":
            return l2_normalize(semantic @ self.encoder_)  # decoder Wᵀ s, cosine ranking
        return l2_normalize(semantic)


@MODELS.register
class Ridge(LinearSemanticModel):
    """Ridge regression from image features to the class's semantic vector."""

    name: ClassVar[str] = "ridge"

    class Params(LinearParams):
        alpha: NonNegative = 1.0
        features: FeatureMode = "standard"

    grid: ClassVar[dict[str, list[Any]]] = {"alpha": POWERS}

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> Ridge:
        gram, sums, _, s = self._statistics(data, semantics)
        alpha = float(self.params["alpha"])
        self.map_ = solve_or_lstsq(gram + alpha * np.eye(len(gram)), sums.T @ s).astype(np.float32)  # XᵀS_y
        self.fit_info_ = {}
        return self


@MODELS.register
class RidgeS2V(LinearSemanticModel):
    """Ridge regression from a class's semantic vector to its images (Euclidean ranking)."""

    name: ClassVar[str] = "ridge_s2v"

    class Params(LinearParams):
        alpha: NonNegative = 1.0
        metric: Literal["euclidean", "dot"] = "euclidean"
        features: FeatureMode = "standard"

    grid: ClassVar[dict[str, list[Any]]] = {"alpha": POWERS}

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> RidgeS2V:
        _, sums, counts, s = self._statistics(data, semantics)
        n = counts.sum()
        self.x_mean_ = sums.sum(axis=0) / n
        self.s_mean_ = counts @ s / n
        # centred S̃ᵀS̃ and S̃ᵀX̃ from class-level sums
        sts = (s.T * counts) @ s - n * np.outer(self.s_mean_, self.s_mean_)
        stx = s.T @ sums - n * np.outer(self.s_mean_, self.x_mean_)
        alpha = float(self.params["alpha"])
        # least squares: with alpha = 0 and fewer classes than dimensions the system is singular
        self.decoder_ = np.linalg.lstsq(sts + alpha * np.eye(s.shape[1]), stx, rcond=None)[0]
        self.fit_info_ = {}
        return self

    def visual_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        """(C, D) predicted mean prepared feature of each class."""
        return ((self._semantic(wnids) - self.s_mean_) @ self.decoder_ + self.x_mean_).astype(np.float32)

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.prep_.dim_)
        x = self.prep_(features)
        if self.params["metric"] == "dot":
            return x
        return np.hstack([x, np.ones((len(x), 1), np.float32)])

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        p = self.visual_prototypes(wnids)
        if self.params["metric"] == "dot":
            return p
        return np.hstack([p, -0.5 * np.sum(p.astype(np.float64) ** 2, axis=1, keepdims=True)]).astype(
            np.float32
        )
