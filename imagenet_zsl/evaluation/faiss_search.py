"""``evaluate --search faiss``: faiss's flat inner-product index (``IndexFlatIP``) proposes each
image's candidate classes; the lists, scores and tie counts stay the exact search's, bit for bit.

Why not faiss's own lists: the run's files promise the scores of the fixed-shape product
(:mod:`imagenet_zsl.evaluation.products`), and the exact tie counts of the true class need every
class's score under those same bits, so the exact product is computed anyway; faiss rounds its
own sums differently, and where two scores are a few ulps apart its order may differ from ours.
So faiss only sets a threshold: the exact score, under our bits, of the ``take``-th best of its
candidates (``take`` = k + 1). At least ``take`` classes score at or above it, whatever faiss
returned, so the ``take`` best classes are among those at or above it: they are selected there,
sorted by descending score and ascending class index (the documented tie order). A faiss
candidate list that misses a class, or orders near-ties otherwise, only lowers the threshold and
lets a few more classes through; the result cannot change. That is the test
(tests/evaluation/test_faiss_search.py): the same files as the default, with planted near-ties,
identical prototypes, and candidates that are wrong on purpose.

Cost: faiss's product comes on top of the exact one (it replaces only the ``argpartition``), so on
the CPU it cannot come near the exact search. Measured with ``tools/bench_search.py --mode evaluate
--repeats 3 --sizes 5000x21842,20000x21842 [--evaluate-args='--search faiss']`` on 2 shared cores
(load 4-9, faiss-cpu 1.15.1, 2,048-d float16 features, median of 3 CPU seconds, 2026-12-07):
20,000 images x 21,842 classes 42.7 s against the default's 23.3 s (1.83x) and 565 MB peak
against 378 MB (1.49x: faiss holds its own copy of the prototypes); 5,000 x 21,842 1.66x and
1.53x. So the exact search stays the default, and the faster on the CPU; this option is for
faiss-gpu's index with a CUDA ``--device`` (the index lives on the GPU beside the exact torch
search), not measured here.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from imagenet_zsl.errors import UserInputError

#: the values of ``--search``: the exact search alone (default), or faiss's candidates first
SEARCHES = ("exact", "faiss")
Search = Literal["exact", "faiss"]
#: candidates asked of faiss beyond the ``take`` classes the lists need: near-ties at the cut
MARGIN = 8
#: the most neighbours faiss's GPU index returns per query
GPU_MAX_K = 2048


def check_search(search: str) -> str:
    """``search`` if it is one of :data:`SEARCHES`, else a one-line error."""
    if search not in SEARCHES:
        raise UserInputError(f"--search {search!r}: use one of {', '.join(SEARCHES)}")
    return search


def import_faiss() -> Any:
    """The faiss module, or a one-line error saying how to install it."""
    try:
        import faiss  # deferred: an optional extra, loaded only for --search faiss
    except ImportError as err:
        raise UserInputError(
            "--search faiss: faiss is not installed; pip install faiss-cpu (or faiss-gpu for a GPU index), "
            "or use the default exact search"
        ) from err
    return faiss


class FaissCandidates:
    """faiss's ``IndexFlatIP`` over the distinct prototypes (u, E): ``self(queries (n, maps * E),
    count) -> (n, maps * count)`` int64 distinct-row ids (-1 where faiss has fewer), the union of
    each query part's top ``count`` (a class among the ``count`` best by the max over maps is among
    the ``count`` best of the map that gives its max). ``gpu``: put the index on GPU ``gpu`` when
    faiss was built with GPU support (``faiss-gpu``); else it stays on the CPU."""

    def __init__(self, unique: np.ndarray, maps: int = 1, gpu: int | None = None):
        faiss = import_faiss()
        self.maps, self.dim = maps, int(unique.shape[1])
        index = faiss.IndexFlatIP(self.dim)
        index.add(np.ascontiguousarray(unique, dtype=np.float32))
        self.on_gpu = gpu is not None and _gpus(faiss) > 0
        if self.on_gpu:
            self._resources = faiss.StandardGpuResources()
            index = faiss.index_cpu_to_gpu(self._resources, gpu, index)
        self.index = index

    def __call__(self, queries: np.ndarray, count: int) -> np.ndarray:
        if self.on_gpu:  # faiss's GPU k-selection stops at 2,048; fewer candidates only lower
            count = min(count, GPU_MAX_K)  # the threshold (still exact)
        parts = []
        for m in range(self.maps):
            part = np.ascontiguousarray(queries[:, m * self.dim : (m + 1) * self.dim], dtype=np.float32)
            parts.append(self.index.search(part, count)[1].astype(np.int64, copy=False))
        return parts[0] if len(parts) == 1 else np.hstack(parts)


def _gpus(faiss: Any) -> int:
    """GPUs faiss can use (0 for a CPU-only build)."""
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None else 0


def first_columns(group: np.ndarray | None, classes: int) -> np.ndarray:
    """(u,) the first class of each distinct prototype row (``group``: each class's distinct row,
    or None when every row is distinct)."""
    if group is None:
        return np.arange(classes)
    return np.unique(group, return_index=True)[1]


def candidate_columns(candidates: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(columns (n, m) int64, unused (n, m) bool) of each row's distinct candidates (``candidates``
    (n, m) distinct-row ids, -1 unused; ``first``: :func:`first_columns`): a repeated id (the
    maps' lists overlap) and -1 are unused."""
    ids = np.sort(candidates, axis=1)
    unused = ids < 0
    unused[:, 1:] |= ids[:, 1:] == ids[:, :-1]
    return first[np.where(unused, 0, ids)], unused


def kth_best(values: np.ndarray, unused: np.ndarray, take: int) -> np.ndarray:
    """(n,) the ``take``-th largest of each row's used ``values`` (the candidates' exact
    scores); -inf where a row has fewer than ``take``."""
    values = np.where(unused, -np.inf, values).astype(np.float32, copy=False)
    if values.shape[1] < take:
        return np.full(len(values), -np.inf, np.float32)
    return -np.partition(-values, take - 1, axis=1)[:, take - 1]


def thresholds(scores: np.ndarray, candidates: np.ndarray, first: np.ndarray, take: int) -> np.ndarray:
    """(n,) the ``take``-th best exact score among each row's distinct candidates (``scores``
    (n, C): the exact tile); -inf where a row has fewer than ``take`` distinct candidates. At
    least ``take`` classes of a row score at or above its threshold, whatever the candidates."""
    columns, unused = candidate_columns(candidates, first)
    return kth_best(np.take_along_axis(scores, columns, axis=1), unused, take)


def select_above(scores: np.ndarray, threshold: np.ndarray, take: int) -> np.ndarray:
    """(n, take) int64 columns of each row's ``take`` best scores in the tie order (descending
    score, ascending column), found among the columns scoring at or above the row's
    ``threshold`` (at least ``take`` of them must)."""
    n = len(scores)
    rows, cols = np.nonzero(scores >= threshold[:, None])
    order = np.lexsort((cols, -scores[rows, cols], rows))
    rows, cols = rows[order], cols[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, np.arange(n))[rows]
    return cols[rank < take].reshape(n, take).astype(np.int64, copy=False)
