"""Small generated zero-shot problems with a known structure, shared by the model tests."""

from __future__ import annotations

import numpy as np

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import SeenData
from imagenet_zsl.semantics.class_vectors import ClassVectors

#: hyper-parameters that make a model fit in a few epochs / iterations, for the tests that check
#: the interface or a rule of every registered model, not its accuracy
QUICK = {
    "sgcn": {"hidden": [8], "epochs": 3},
    "dgp": {"hidden": [8], "epochs": 3},
    "gcnz": {"hidden": [8, 8, 8, 8, 8], "epochs": 3},
    "devise": {"epochs": 2},
    "ale": {"epochs": 2},
    "sync": {"max_iter": 5},
    "dap": {"max_iter": 5},
    "iap": {"max_iter": 5},
}


class Problem:
    """A 3-level tree (root → ``groups`` groups → ``leaves`` leaves each; the last leaf of each group
    is unseen): class means are a random walk down the tree plus a linear image of the class's
    semantic vector (a random walk too); images are noisy means."""

    def __init__(
        self,
        seed: int = 0,
        dim: int = 12,
        sem_dim: int = 6,
        images: int = 20,
        noise: float = 0.3,
        walk: float = 0.3,
        groups: int = 3,
        leaves: int = 4,
    ):
        rng = np.random.default_rng(seed)
        edges = [("root", f"g{g}") for g in range(groups)]
        edges += [(f"g{g}", f"g{g}c{c}") for g in range(groups) for c in range(leaves)]
        self.graph = ClassGraph.from_edges(edges)
        semantic = {"root": rng.normal(size=sem_dim)}
        walk_part = {"root": np.zeros(dim)}
        for parent, child in edges:
            semantic[child] = semantic[parent] + rng.normal(size=sem_dim)
            walk_part[child] = walk_part[parent] + walk * rng.normal(size=dim)
        projection = rng.normal(size=(sem_dim, dim))
        self.wnids = self.graph.wnids
        self.semantics = ClassVectors(
            self.wnids, np.array([semantic[w] for w in self.wnids]), source="generated"
        )
        unit = {w: semantic[w] / np.linalg.norm(semantic[w]) for w in self.wnids}
        self.means = {w: unit[w] @ projection + walk_part[w] for w in self.wnids}
        self.leaves = [w for w in self.wnids if "c" in w]
        last = f"c{leaves - 1}"
        self.seen = [w for w in self.leaves if not w.endswith(last)]
        self.unseen = [w for w in self.leaves if w.endswith(last)]
        self.rng = rng
        self.noise = noise
        self.images = images

    def draw(self, wnids: list[str], images: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        images = images or self.images
        labels = np.repeat(np.arange(len(wnids)), images)
        means = np.array([self.means[w] for w in wnids])
        features = means[labels] + self.noise * self.rng.normal(size=(len(labels), means.shape[1]))
        return features.astype(np.float32), labels.astype(np.int64)

    def seen_data(self, logits: bool = False) -> SeenData:
        features, labels = self.draw(self.seen)
        data = SeenData(features, labels, list(self.seen))
        if logits:
            data.logits = self.bayes_logits(features)
            data.logit_classes = list(self.seen)
        return data

    def bayes_logits(self, features: np.ndarray) -> np.ndarray:
        means = np.array([self.means[w] for w in self.seen])
        return ((features @ means.T - 0.5 * np.sum(means**2, axis=1)) / self.noise**2).astype(np.float32)


def accuracy(model, features: np.ndarray, labels: np.ndarray, wnids: list[str], logits=None) -> float:
    scores = model.embed_images(features, logits) @ model.class_prototypes(wnids).T
    return float(np.mean(scores.argmax(axis=1) == labels))
