"""The search's one contract, shared by its two backends as faiss's CPU and GPU indexes share
``.search(x, k)``: the prepared class side (:class:`ClassSide`) and what a backend answers
(:class:`SearchBackend`).

:class:`~imagenet_zsl.evaluation.search.TopKSearcher` (the front) prepares the prototypes once,
picks a backend (:class:`~imagenet_zsl.evaluation.cpu_search.NumpyBackend` on the CPU,
:class:`~imagenet_zsl.evaluation.device_search.TorchBackend` on a torch device) and sends every
search through :meth:`SearchBackend.search_ranked`. What both backends must do alike lives here as
public names, so that they give the same lists and tie ranks by construction: the checks of the
queries and of overflowing scores, and the exact top-k finish (the documented tie order, ties
straddling the k-th place repaired from the full scores). A backend imports this module, never the
front nor the other backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.faiss_search import MARGIN, FaissCandidates, first_columns
from imagenet_zsl.scoring import TieRanks, sort_topk

if TYPE_CHECKING:
    import torch

#: (scores (n, k) float32, ids (n, k) int64, the true classes' TieRanks or None): one search's answer
SearchResult = tuple[np.ndarray, np.ndarray, TieRanks | None]
#: a backend's answer: :data:`SearchResult` and each list's tail (n,) int64, the classes left out
#: of the list that score exactly its last score (0 where it ends lower or is padded)
SearchLists = tuple[np.ndarray, np.ndarray, TieRanks | None, np.ndarray]
#: float32 scores stay finite when |q| * |p| is below this (Cauchy-Schwarz, with rounding margin)
SAFE_SCORE_BOUND = 1e37
#: columns hashed first by :func:`unique_rows` (32 bytes of each row)
HEAD_COLUMNS = 8


class SearchBackend(Protocol):
    """What the front asks of a backend: one prepared class side, searched tile by tile.

    ``torch_device``: the torch device the tiles run on (None: the numpy/BLAS backend).
    :meth:`search_ranked` takes the queries as the front got them (a numpy matrix, or for the torch
    backend a float32 tensor already on its device), checks them, and returns the
    :data:`SearchResult` in the documented tie order (:mod:`imagenet_zsl.evaluation.search`)."""

    classes: ClassSide
    torch_device: torch.device | None

    def tile_rows(self) -> int:
        """Rows searched per tile (the working memory's bound)."""
        ...

    def search_ranked(
        self,
        queries: Any,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None,
        row_offset: int = 0,
        faiss: FaissCandidates | None = None,
    ) -> SearchLists:
        """Top-k lists with their tails, and with ``labels`` the exact tie ranks of each true class
        (``row_offset``: the queries' first row in their set; ``faiss``: its candidates set each
        row's threshold)."""
        ...


def as_matrix(name: str, array: np.ndarray) -> np.ndarray:
    """``array`` as a C-contiguous float32 2-D matrix; a one-line error naming it otherwise."""
    array = np.asarray(array)
    if array.ndim != 2:
        raise UserInputError(f"{name} must be a 2-D matrix, got shape {array.shape}")
    return np.ascontiguousarray(array, dtype=np.float32)


def check_finite(
    name: str,
    matrix: np.ndarray,
    row_names: np.ndarray | None = None,
    squared_norms: np.ndarray | None = None,
) -> None:
    """Raise a one-line UserInputError naming the first row holding NaN or Inf.

    ``squared_norms``: the rows' squared norms accumulated in float64 (:func:`squared_row_norms`),
    when the caller has them: they are finite exactly when the row is (a float32 squared is at
    most 1.2e77, far from float64's limit), so the common all-finite case reads the matrix no
    further."""
    if squared_norms is not None and np.isfinite(squared_norms).all():
        return
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        first = row_names[bad[0]] if row_names is not None else f"row {bad[0]}"
        raise UserInputError(
            f"{name}: {len(bad)} rows contain NaN or Inf (first: {first}); "
            "re-extract those features or drop the images"
        )


def squared_row_norms(matrix: np.ndarray) -> np.ndarray:
    """(n,) float64 squared row norms of a (n, E) float32 matrix, finite exactly when the row is.

    Summed in the matrix's float32 (SIMD: a fifth of the CPU of a float64 sum, 1.7 us per 2,048-d
    row; relative error at most E * 2^-24, which the overflow check's 34x margin absorbs); the rows
    whose float32 sum is not finite (NaN or Inf in the row, or squares past float32's range) are
    summed again in float64, without a float64 copy of the matrix: a float32 squared is at most
    1.2e77, far from float64's limit, so only NaN or Inf leave those sums not finite."""
    norms = np.einsum("ij,ij->i", matrix, matrix).astype(np.float64)
    again = np.flatnonzero(~np.isfinite(norms))
    if len(again):
        rows = matrix[again]
        norms[again] = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
    return norms


def max_row_norm(matrix: np.ndarray) -> float:
    """The largest row norm of a (n, E) float32 matrix (float64 accumulation)."""
    if not len(matrix):
        return 0.0
    return float(np.sqrt(squared_row_norms(matrix).max()))


def _row_hashes(matrix: np.ndarray, block_rows: int = 2048) -> np.ndarray:
    """(C,) uint64: a hash of each row's bytes (its 32-bit words times fixed odd multipliers,
    wrapping, summed), in blocks of rows.

    Why: sorting the (C, E) rows as byte strings costs 0.5-0.8 s at 21,842 x 2,048; hashing costs
    a third of that and sorting C hashes nothing. Equal rows always get equal hashes."""
    words = matrix.reshape(len(matrix), -1).view(np.uint32)
    # fixed odd multipliers from the golden-ratio (Weyl) sequence: numpy.random is not imported
    weyl = np.arange(1, words.shape[1] + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    multipliers = (weyl >> np.uint64(33)).astype(np.uint32) | np.uint32(1)
    hashes = np.empty(len(words), dtype=np.uint64)
    for start in range(0, len(words), block_rows):
        block = words[start : start + block_rows] * multipliers
        hashes[start : start + block_rows] = block.sum(axis=1, dtype=np.uint64)
    return hashes


def _all_distinct(values: np.ndarray) -> bool:
    """Whether the (n,) values are pairwise distinct (a sort: ``np.unique`` loads numpy.ma)."""
    ordered = np.sort(values)
    return not bool(np.any(ordered[1:] == ordered[:-1]))


def unique_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Distinct rows of a (C, E) matrix in first-occurrence order, and each row's index among them.

    Rows are compared by their bytes (-0.0 counted as 0.0). Returns (unique (u, E), group (C,)
    int64), or (matrix, None) when every row is distinct.

    Equal rows hash alike, so distinct hashes prove distinct rows. The first ``HEAD_COLUMNS``
    columns are hashed first: when they already tell every row apart (real prototypes nearly
    always), the whole matrix is neither copied nor hashed (0.5 s at 21,842 x 2,048).
    """
    if len(matrix) < 2:
        return matrix, None
    if matrix.shape[1] > HEAD_COLUMNS:
        head = matrix[:, :HEAD_COLUMNS] + np.float32(0.0)
        if _all_distinct(_row_hashes(head)):
            return matrix, None
    canonical = np.ascontiguousarray(matrix + np.float32(0.0))
    if _all_distinct(_row_hashes(canonical)):
        return matrix, None
    view = canonical.view(np.dtype((np.void, canonical.dtype.itemsize * canonical.shape[1]))).ravel()
    _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
    if len(first) == len(matrix):
        return matrix, None
    order = np.argsort(first)
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return canonical[first[order]], position[inverse.ravel()].astype(np.int64)


class ClassSide:
    """The prototypes prepared once for every backend, and the steps both backends share.

    prototypes (C, E) float32, checked (not empty, finite); ``k`` the lists' length (larger than C
    is allowed: rows are padded); ``maps`` the E-d parts of a query (its score for a class is the
    max of their dot products). ``unique`` (u, E) the distinct rows, scored once, and ``group``
    (C,) each class's row among them (None when all are distinct: :func:`unique_rows`)."""

    def __init__(self, prototypes: np.ndarray, k: int, maps: int = 1):
        self.prototypes = as_matrix("prototypes", prototypes)
        if len(self.prototypes) == 0:
            raise UserInputError("prototype matrix is empty: the label space has no classes")
        # one pass gives both the finiteness check and the largest norm (the distinct rows'
        # norms are the rows' norms: -0.0 and 0.0 square alike)
        squared = squared_row_norms(self.prototypes)
        check_finite("prototypes", self.prototypes, squared_norms=squared)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if maps < 1:
            raise ValueError(f"maps must be >= 1, got {maps}")
        self.k = int(k)
        self.maps = int(maps)
        #: the prototypes' dimension E, and the queries' (maps * E)
        self.prototype_dim = int(self.prototypes.shape[1])
        self.dim = self.maps * self.prototype_dim
        self.num_classes = int(len(self.prototypes))
        self.unique, self.group = unique_rows(self.prototypes)
        self.max_norm = float(np.sqrt(squared.max()))

    @property
    def duplicate_classes(self) -> int:
        """Classes whose prototype repeats an earlier class's (they tie with it exactly)."""
        return self.num_classes - len(self.unique)

    @property
    def candidate_count(self) -> int:
        """Candidates asked of faiss per query part: the lists' ``k + 1`` and a margin."""
        return min(len(self.unique), self.k + 1 + MARGIN)

    @functools.cached_property
    def first_columns(self) -> np.ndarray:
        """(u,) the first class of each distinct row (faiss's candidates are distinct rows)."""
        return first_columns(self.group, self.num_classes)

    def check_queries(self, queries: np.ndarray) -> np.ndarray:
        """``queries`` as float32 (n, maps * E); a one-line error for another shape."""
        queries = as_matrix("queries", queries)
        if queries.shape[1] != self.dim:
            raise UserInputError(
                f"query dimension {queries.shape[1]} differs from the {self.dim} of "
                f"{self.maps} x {self.prototype_dim}-d prototypes: "
                "use the model that produced these prototypes, or prototypes in feature space"
            )
        return queries

    def check_overflow(
        self, queries: Any, all_finite: Callable[[], bool], query_norm: float | None = None
    ) -> None:
        """Scores of finite inputs overflow only if some |q| * |p| is near float32's limit; only
        then is ``all_finite()`` (a pass over the scores) asked. ``query_norm``: the queries'
        largest norm when the caller knows it (else computed here from a numpy ``queries``)."""
        if query_norm is None:
            query_norm = max_row_norm(queries)
        if query_norm * self.max_norm >= SAFE_SCORE_BOUND and not all_finite():
            raise UserInputError(
                "scores overflow to inf (queries and prototypes are finite but their products "
                "are not); rescale the features or prototypes, e.g. with --l2-normalize"
            )

    def finish_topk(
        self, values: np.ndarray, part: np.ndarray, full_rows: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The top-k lists from each row's ``take`` = min(k + 1, C) best candidates (values, column
        ids (n, take), in any order): sorted in the tie order; where equal scores straddle the
        k-th place, the smallest class indices among them are kept, found in the rows' full
        scores (``full_rows(rows) -> (len(rows), C)``, asked for those rows only). Returns (scores
        (n, k), ids (n, k), tail (n,) int64): the tail counts the classes left out of a list that
        score exactly its last score, found in the same full rows (only a row whose k-th and
        (k + 1)-th candidates tie has any), so a tie group reaching the end of a list is counted
        whole downstream (:class:`~imagenet_zsl.scoring.GZSLLists`)."""
        k = self.k
        top, ids = sort_topk(values, part)
        n, take = top.shape
        tail = np.zeros(n, np.int64)
        if take > k:
            boundary = np.flatnonzero(top[:, k - 1] == top[:, k])
            if len(boundary):
                for row, scores in zip(boundary, full_rows(boundary), strict=True):
                    tail[row] = self._fill_boundary(scores, top[row], ids[row])
            return top[:, :k], ids[:, :k], tail
        pad = k - take
        if pad:
            top = np.hstack([top, np.full((n, pad), -np.inf, np.float32)])
            ids = np.hstack([ids, np.full((n, pad), -1, np.int64)])
        return top, ids, tail

    def _fill_boundary(self, row: np.ndarray, top: np.ndarray, ids: np.ndarray) -> int:
        """Equal scores straddle the k-th place: keep the smallest class indices among them.
        Returns how many of them are left out of the k kept."""
        value = top[self.k - 1]
        first = int(np.count_nonzero(top[: self.k] > value))
        equal = np.flatnonzero(row == value)
        tied = equal[: self.k + 1 - first]
        top[first : first + len(tied)] = value
        ids[first : first + len(tied)] = tied
        return len(equal) - (self.k - first)
