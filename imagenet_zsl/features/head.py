"""The backbone's own classifier ("head"), stored beside its features.

Why: GCNZ, SGCN and DGP regress the pretrained network's final-layer weights, and ConSE reads its
softmax. Those come from the checkpoint, not from training on seen images, so ``extract`` stores
the head (weights, bias and the wnid of each output) in the feature directory, and the models use
it when present: they then need no seen-class image at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the file in a feature directory that holds the head (its sha256 is in the manifest)
HEAD_FILE = "head.npz"


@dataclass(frozen=True)
class BackboneHead:
    """A linear classifier on the pooled features: ``logits = features @ weight.T + bias``.

    weight: (K, D) float32; bias: (K,) float32; classes: the K wnids, in output order.
    """

    weight: np.ndarray
    bias: np.ndarray
    classes: list[str]

    def __post_init__(self) -> None:
        weight = np.asarray(self.weight, dtype=np.float32)
        bias = np.asarray(self.bias, dtype=np.float32)
        if weight.ndim != 2 or bias.shape != (weight.shape[0],) or len(self.classes) != weight.shape[0]:
            raise ValueError(
                f"head: weight {weight.shape}, bias {bias.shape} and {len(self.classes)} classes disagree"
            )
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "bias", bias)
        object.__setattr__(self, "classes", list(self.classes))

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    def columns(self, wnids: list[str]) -> np.ndarray:
        """(S,) int64 output index of each of ``wnids`` (KeyError for a class the head lacks)."""
        index = {w: i for i, w in enumerate(self.classes)}
        return np.array([index[w] for w in wnids], dtype=np.int64)

    def logits(self, features: np.ndarray) -> np.ndarray:
        """(N, D) features → (N, K) float32 logits."""
        return np.asarray(features, dtype=np.float32) @ self.weight.T + self.bias
