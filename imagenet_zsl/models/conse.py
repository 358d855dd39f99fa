"""ConSE (Norouzi et al., ICLR 2014): convex combination of semantic embeddings.

An image is embedded as the posterior-weighted average of the word vectors of its ``T`` most
probable seen classes,

    f(x) = (1 / Z) * sum_{t <= T} p(s_t | x) * v(s_t),      Z = sum_{t <= T} p(s_t | x),

and classes are ranked by cosine similarity to f(x): the prototypes are L2-normalised word
vectors, and dividing f(x) by its norm would not change an image's ranking.

As in the paper, p(s | x) is the pretrained network's own softmax when the feature directory
stores its head (``head.npz``): ConSE then needs no seen-class image at all (see
:mod:`imagenet_zsl.models.seen_classifier` for the other sources).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel
from imagenet_zsl.models.common import check_features, semantic_matrix
from imagenet_zsl.models.params import ClassifierParams, PositiveInt, SemanticNorm
from imagenet_zsl.models.trivial import fit_seen_classifier, seen_classifier_data
from imagenet_zsl.semantics.class_vectors import ClassVectors


def convex_combination(
    posterior: np.ndarray, seen_vectors: np.ndarray, top: int, block: int = 8192
) -> np.ndarray:
    """(N, S) posteriors, (S, E) vectors → (N, E) ConSE embeddings (ties by lower class index)."""
    top = min(int(top), posterior.shape[1])
    out = np.empty((len(posterior), seen_vectors.shape[1]), np.float32)
    for start in range(0, len(posterior), block):
        p = posterior[start : start + block]
        order = np.argsort(-p, axis=1, kind="stable")[:, :top]
        weights = np.take_along_axis(p, order, axis=1)
        weights = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1e-300)
        out[start : start + block] = np.einsum("nt,nte->ne", weights, seen_vectors[order])
    return out


@MODELS.register
class ConSE(ZSLModel):
    """ConSE: top-T posterior-weighted average of seen word vectors, cosine to class vectors."""

    name: ClassVar[str] = "conse"

    class Params(ClassifierParams):
        top: PositiveInt = 10
        semantic_norm: SemanticNorm = "l2"

    uses_training_logits: ClassVar[bool] = True  # the seen classifier's head source
    grid: ClassVar[dict[str, list[Any]]] = {"top": [1, 2, 5, 10, 20]}

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> ConSE:
        features, labels = seen_classifier_data(self, data)
        self.semantics_ = semantics
        self.seen_vectors_ = semantic_matrix(semantics, data.seen_wnids, self.params["semantic_norm"])
        self.classifier_ = fit_seen_classifier(self, data, features, labels)
        self.dim_ = features.shape[1]
        self.fit_info_ = self.classifier_.info()
        return self

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.dim_)
        posterior = self.classifier_.posterior(features, logits)
        return convex_combination(posterior, self.seen_vectors_, int(self.params["top"]))

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        return semantic_matrix(self.semantics_, list(wnids), "l2")
