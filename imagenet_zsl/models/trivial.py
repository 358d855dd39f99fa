"""The trivial baseline of Hascoet et al. (2019, §5): structure alone, no semantics.

Each class is represented by the local (one-hot) code of its nearest training class(es) in the
class graph — uniform over ties — and images by the seen-class posterior, so an image of an
unseen class scores ``mean_{s in nearest(c)} p(s | x)``. On splits whose test classes sit one hop
from a training class this already scores far above chance; it falls toward chance as test classes
move away from the training classes. A benchmark where a real model does not beat it measures
graph structure, not zero-shot transfer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel
from imagenet_zsl.models.common import (
    FeaturePrep,
    check_features,
    check_seen_data,
    feature_statistics,
    require_graph,
)
from imagenet_zsl.models.params import ClassifierParams, FeatureMode, ModelParams, NonNegative
from imagenet_zsl.models.seen_classifier import SeenClassifier, uses_stored_head
from imagenet_zsl.semantics.class_vectors import ClassVectors


def seen_classifier_data(model: ZSLModel, data: SeenData) -> tuple[np.ndarray, np.ndarray]:
    """Validated (features (N, D), labels (N,)) for a model built on the seen classifier. With a
    stored backbone head covering the seen classes (and ``classifier`` auto or head) images are
    optional: N may be 0 and D is then the head's input dimension."""
    optional = uses_stored_head(data, str(model.params["classifier"]))
    return check_seen_data(model.name, data, images_optional=optional)


def fit_seen_classifier(
    model: ZSLModel, data: SeenData, features: np.ndarray, labels: np.ndarray
) -> SeenClassifier:
    """The seen-class classifier of ``model`` (its :class:`ClassifierParams`) on ``data``; fitted
    once per grid search (:meth:`ZSLModel.shared`): no grid value of these models changes it."""
    params = model.params
    key = ("seen-classifier", *(repr(params[name]) for name in sorted(ClassifierParams.model_fields)))
    return model.shared(
        key,
        lambda: SeenClassifier(
            source=params["classifier"],
            reg=float(params["classifier_reg"]),
            max_iter=int(params["classifier_iter"]),
            device=params["device"],
            seed=int(params["seed"]),
        ).fit(data, features, labels),
    )


def nearest_seen_sets(graph: ClassGraph, seen: Sequence[str]) -> tuple[sp.csr_matrix, np.ndarray]:
    """(n_nodes, S) bool csr: [v, s] iff seen class s is among the nearest seen classes of node v;
    and (n_nodes,) the distance to them (inf: no seen class reachable).

    One multi-source BFS gives every node's distance d(v) to its nearest seen class; then, layer by
    layer, nearest(v) = union of nearest(u) over neighbours u with d(u) = d(v) - 1 (every shortest
    path to a nearest seen class leaves v through such a neighbour, and every such u's nearest
    classes are at distance d(v) from v). Exact, and O(BFS layers) sparse products instead of one
    BFS per seen class.
    """
    seen_idx = graph.indices(seen, "seen classes")
    n, num_seen = len(graph), len(seen_idx)
    dist = graph.distances_from(seen)
    adjacency = graph.adjacency.astype(np.float32).tocsr()
    layer_rows = [seen_idx]
    blocks = [
        sp.csr_matrix(
            (np.ones(num_seen, np.float32), (np.arange(num_seen), np.arange(num_seen))),
            shape=(num_seen, num_seen),
        )
    ]
    # a seen class listed twice is its own nearest class under both positions
    finite = dist[np.isfinite(dist)]
    for level in range(1, int(finite.max()) + 1 if finite.size else 1):
        rows = np.flatnonzero(dist == level)
        if rows.size == 0:
            continue
        step = adjacency[rows][:, layer_rows[-1]]
        block = (step @ blocks[-1]).tocsr()
        block.data[:] = 1.0
        layer_rows.append(rows)
        blocks.append(block)
    order = np.concatenate(layer_rows)
    stacked = sp.vstack(blocks).tocsr()
    position = np.full(n, -1, np.int64)
    position[order] = np.arange(len(order))
    reached = position >= 0
    sets = sp.csr_matrix((n, num_seen), dtype=np.float32)
    if reached.any():
        permute = sp.csr_matrix(
            (np.ones(reached.sum(), np.float32), (np.flatnonzero(reached), position[reached])),
            shape=(n, len(order)),
        )
        sets = (permute @ stacked).tocsr()
    return sets.astype(bool), dist


def nearest_seen_matrix(graph: ClassGraph, seen: Sequence[str], wnids: Sequence[str]) -> np.ndarray:
    """(len(wnids), len(seen)) float32: row c is uniform over the seen classes nearest to c in the
    undirected is-a graph (hop distance); a class that reaches no seen class gets the uniform row."""
    wanted = graph.indices(wnids)
    sets, dist = nearest_seen_sets(graph, seen)
    codes = sets[wanted].toarray().astype(np.float32)
    codes[~np.isfinite(dist[wanted])] = 1.0
    return codes / codes.sum(axis=1, keepdims=True)


def nearest_seen_matrix_bfs(graph: ClassGraph, seen: Sequence[str], wnids: Sequence[str]) -> np.ndarray:
    """Reference for :func:`nearest_seen_matrix`: full BFS distances from every seen class."""
    seen_idx = graph.indices(seen, "seen classes")
    wanted = graph.indices(wnids)
    dist = csgraph.shortest_path(graph.adjacency, directed=False, unweighted=True, indices=seen_idx)
    dist = dist[:, wanted].T
    nearest = dist == dist.min(axis=1, keepdims=True)
    return (nearest / nearest.sum(axis=1, keepdims=True)).astype(np.float32)


@MODELS.register
class Trivial(ZSLModel):
    """Hascoet et al.'s structural baseline: one-hot code of the nearest training class(es)."""

    name: ClassVar[str] = "trivial"
    Params: ClassVar[type[ClassifierParams]] = ClassifierParams
    uses_training_logits: ClassVar[bool] = True  # the seen classifier's head source
    grid: ClassVar[dict[str, list[Any]]] = {}
    needs_graph: ClassVar[bool] = True
    needs_semantics: ClassVar[bool] = False
    seen_need_vectors: ClassVar[bool] = False

    def fit(
        self, data: SeenData, semantics: ClassVectors | None = None, graph: ClassGraph | None = None
    ) -> Trivial:
        graph = require_graph(self.name, graph)
        graph.indices(data.seen_wnids, "seen classes")
        features, labels = seen_classifier_data(self, data)
        self.classifier_ = fit_seen_classifier(self, data, features, labels)
        self.dim_ = features.shape[1]
        self.seen_wnids_ = list(data.seen_wnids)
        self.graph_ = graph
        self.fit_info_ = self.classifier_.info()
        return self

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.dim_)
        return self.classifier_.posterior(features, logits).astype(np.float32)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        return nearest_seen_matrix(self.graph_, self.seen_wnids_, list(wnids))


@MODELS.register
class HascoetTrivial(ZSLModel):
    """Hascoet et al.'s trivial linear baseline: ridge onto one-hot codes, nearest training class."""

    # Hascoet et al. (2019, Sec. 5.2, App. E): the linear baseline (ridge regression from image
    # features to the class embedding) trained with one-hot codes of the training classes as the
    # embedding; a test class gets the code of its nearest training class in the graph (uniform over
    # ties: the expected value of a random tie break). Unlike ``trivial`` the image side is the
    # regression output x W (D, S), not a softmax posterior.
    name: ClassVar[str] = "hascoet_trivial"

    class Params(ModelParams):
        alpha: NonNegative = 1.0
        features: FeatureMode = "standard"

    grid: ClassVar[dict[str, list[Any]]] = {"alpha": [10.0**p for p in range(-3, 4)]}
    needs_graph: ClassVar[bool] = True
    needs_semantics: ClassVar[bool] = False
    seen_need_vectors: ClassVar[bool] = False

    def fit(
        self, data: SeenData, semantics: ClassVectors | None = None, graph: ClassGraph | None = None
    ) -> HascoetTrivial:
        graph = require_graph(self.name, graph)
        graph.indices(data.seen_wnids, "seen classes")
        features, labels = check_seen_data(self.name, data)

        def compute() -> tuple[FeaturePrep, tuple[np.ndarray, ...]]:
            prep = FeaturePrep(self.params["features"]).fit(features)
            return prep, feature_statistics(prep, features, labels, len(data.seen_wnids))

        self.prep_, (gram, sums, _) = self.shared(("statistics", self.params["features"]), compute)
        # ridge onto one-hot targets: W = (XᵀX + αI)⁻¹ XᵀY, and XᵀY is the per-class feature sums
        system = gram + float(self.params["alpha"]) * np.eye(len(gram))
        try:
            self.map_ = np.linalg.solve(system, sums.T).astype(np.float32)
        except np.linalg.LinAlgError:
            self.map_ = np.linalg.lstsq(system, sums.T, rcond=None)[0].astype(np.float32)
        self.seen_wnids_ = list(data.seen_wnids)
        self.graph_ = graph
        self.fit_info_ = {}
        return self

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        features = check_features(self.name, features, self.prep_.dim_)
        return (self.prep_(features) @ self.map_).astype(np.float32)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        return nearest_seen_matrix(self.graph_, self.seen_wnids_, list(wnids))
