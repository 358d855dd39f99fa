"""Row operations that models and evaluation share, below both: the L2 normalisation of rows and
the score rule of a query made of several maps. Pure numpy, so ``evaluate`` of a prototype file
loads no model code."""

from __future__ import annotations

import numpy as np


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """(N, E) → (N, E) float32 rows scaled to unit length; zero rows stay zero (they are divided
    by 1, not by a floored norm, so every non-zero row, however short, gets exactly unit length).
    The one L2 normalisation of the toolkit: models' features/semantics and evaluation's cosine."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def map_scores(queries: np.ndarray, prototypes: np.ndarray, maps: int = 1) -> np.ndarray:
    """(N, C) float32 scores of queries (N, maps * E) against prototypes (C, E): the max over the
    ``maps`` E-d parts of each query of their dot products (one product when ``maps`` is 1)."""
    queries = np.asarray(queries, dtype=np.float32)
    prototypes = np.asarray(prototypes, dtype=np.float32)
    dim = prototypes.shape[1]
    if queries.shape[1] != maps * dim:
        raise ValueError(f"bug: queries of {queries.shape[1]} columns for {maps} maps of {dim}-d prototypes")
    scores = queries[:, :dim] @ prototypes.T
    for k in range(1, maps):
        np.maximum(scores, queries[:, k * dim : (k + 1) * dim] @ prototypes.T, out=scores)
    return scores
