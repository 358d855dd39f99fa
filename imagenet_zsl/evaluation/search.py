"""Exact top-k inner-product search of image queries against class prototypes (faiss).

Scoring millions of images against up to 21,842 classes is the toolkit's hot loop. faiss's
exhaustive inner-product search multiplies query tiles by prototype tiles with BLAS and keeps a
k-heap per query, so it runs at matrix-product speed without ever holding the full (N, C) score
matrix (see ``tools/bench_search.py``).

Tie order (deterministic, documented contract): every returned row is sorted by descending score,
equal scores by ascending class index, and when equal scores straddle the k-th place the smaller
class indices are kept — exactly what a stable full sort would give. faiss alone does not
promise which tied classes it keeps, so we search k+1 classes and re-rank, from their full score
row, the (rare) rows whose k-th and (k+1)-th scores are equal. Rows with fewer than ``k``
classes available are padded with id ``-1`` and score ``-inf``. Metrics never rely on tie
order: they judge ties from the scores (ties count against the model, see
:mod:`imagenet_zsl.scoring`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring import sort_topk, topk_from_scores  # noqa: F401 - re-exported

log = logging.getLogger(__name__)
# faiss logs which SIMD build it loads at INFO level; that is noise on every CLI run
logging.getLogger("faiss.loader").setLevel(logging.WARNING)

#: rows per faiss call: bounds memory to block_rows * (E + 2k) * 4 bytes beyond the inputs
DEFAULT_BLOCK_ROWS = 32768


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees at least one GPU."""
    import faiss

    try:
        return hasattr(faiss, "GpuIndexFlatIP") and faiss.get_num_gpus() > 0
    except Exception:  # a CPU build without the symbol, or a driver problem
        return False


def _as_matrix(name: str, array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2:
        raise UserInputError(f"{name} must be a 2-D matrix, got shape {array.shape}")
    return np.ascontiguousarray(array, dtype=np.float32)


def check_finite(name: str, matrix: np.ndarray, row_names: np.ndarray | None = None) -> None:
    """Raise a one-line UserInputError naming the first row holding NaN or Inf."""
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        first = row_names[bad[0]] if row_names is not None else f"row {bad[0]}"
        raise UserInputError(
            f"{name}: {len(bad)} rows contain NaN or Inf (first: {first}); "
            "re-extract those features or drop the images"
        )


class TopKSearcher:
    """Holds one prototype matrix (on the GPU when used) and answers top-k queries block by block.

    prototypes: (C, E) float32; ``search(queries (n, E)) -> (scores (n, k) float32, ids (n, k)
    int64)`` in the documented tie order. ``k`` larger than C is allowed (rows are padded).
    """

    def __init__(self, prototypes: np.ndarray, k: int, use_gpu: bool | None = None):
        import faiss

        self.prototypes = _as_matrix("prototypes", prototypes)
        if len(self.prototypes) == 0:
            raise UserInputError("prototype matrix is empty: the label space has no classes")
        check_finite("prototypes", self.prototypes)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.dim = int(self.prototypes.shape[1])
        # one extra class reveals ties across the k-th place
        self._k_search = min(self.k + 1, len(self.prototypes))
        self.use_gpu = gpu_available() if use_gpu is None else bool(use_gpu)
        self._index = None
        if self.use_gpu:
            if not gpu_available():
                raise UserInputError(
                    "use_gpu=True but faiss sees no GPU; install the 'gpu' extra "
                    "(faiss-gpu-cu12) on a machine with a CUDA GPU, or leave use_gpu unset"
                )
            self._resources = faiss.StandardGpuResources()
            self._index = faiss.GpuIndexFlatIP(self._resources, self.dim)
            self._index.add(self.prototypes)
        self._faiss = faiss

    def search(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        queries = _as_matrix("queries", queries)
        if queries.shape[1] != self.dim:
            raise UserInputError(
                f"query dimension {queries.shape[1]} differs from prototype dimension {self.dim}: "
                "use the model that produced these prototypes, or prototypes in feature space"
            )
        if len(queries) == 0:
            return np.zeros((0, self.k), np.float32), np.zeros((0, self.k), np.int64)
        if self._index is not None:
            scores, ids = self._index.search(queries, self._k_search)
        else:
            scores, ids = self._faiss.knn(
                queries, self.prototypes, self._k_search, metric=self._faiss.METRIC_INNER_PRODUCT
            )
        scores, ids = sort_topk(scores, ids)
        if self._k_search > self.k:
            tied = np.flatnonzero(scores[:, self.k - 1] == scores[:, self.k])
            if len(tied):
                scores[tied], ids[tied] = self._rerank(queries[tied])
            return scores[:, : self.k], ids[:, : self.k]
        pad = self.k - self._k_search
        if pad:
            scores = np.hstack([scores, np.full((len(scores), pad), -np.inf, np.float32)])
            ids = np.hstack([ids, np.full((len(ids), pad), -1, np.int64)])
        return scores, ids

    def _rerank(self, queries: np.ndarray, rows: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """Exact stable top-(k+1) from full score rows, for rows with a tie at the k-th place."""
        parts = [
            topk_from_scores(queries[i : i + rows] @ self.prototypes.T, self._k_search)
            for i in range(0, len(queries), rows)
        ]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def topk_inner_product(
    queries: np.ndarray,
    prototypes: np.ndarray,
    k: int,
    *,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    use_gpu: bool | None = None,
    progress: Callable[[int], object] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` classes per query by inner product.

    queries (N, E) float32, prototypes (C, E) float32 → (scores (N, k) float32, ids (N, k)
    int64 row indices of ``prototypes``), in the module's tie order. Queries are searched in
    blocks of ``block_rows`` so memory stays bounded; ``use_gpu=None`` uses a GPU when faiss
    sees one. NaN/Inf in the inputs raise ``UserInputError``. ``progress(n)`` is called after
    each block with its row count (e.g. ``tqdm.update``).
    """
    queries = _as_matrix("queries", queries)
    searcher = TopKSearcher(prototypes, k, use_gpu=use_gpu)
    if queries.shape[1] != searcher.dim:
        raise UserInputError(
            f"query dimension {queries.shape[1]} differs from prototype dimension {searcher.dim}"
        )
    scores = np.empty((len(queries), searcher.k), np.float32)
    ids = np.empty((len(queries), searcher.k), np.int64)
    for start in range(0, len(queries), block_rows):
        block = queries[start : start + block_rows]
        check_finite("queries", block, np.char.add("row ", np.arange(start, start + len(block)).astype(str)))
        scores[start : start + len(block)], ids[start : start + len(block)] = searcher.search(block)
        if progress is not None:
            progress(len(block))
    return scores, ids
