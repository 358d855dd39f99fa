"""The search's interface, in the spirit of faiss's ``Index.search(x, k)``: what an implementation
is given, what it answers, and the plain functions of arrays that both implementations apply alike.

An implementation (:class:`SearchIndex`) is built on one :class:`ClassSide` (the prototypes checked
once, their distinct rows) and answers :meth:`SearchIndex.search` in its own tile loop: the
product, the overflow check (:data:`SAFE_SCORE_BOUND`), the top ``k + 1`` classes among those a
:class:`Candidates` proposal lets through, :func:`finish_topk` (the documented tie order) and the
true classes' tie counts. Two implement it: :class:`~imagenet_zsl.evaluation.numpy_search.
NumpyIndex` (numpy/BLAS, the CPU's) and :class:`~imagenet_zsl.evaluation.torch_search.TorchIndex`
(a torch device's). The candidate proposal is a strategy handed to each search: every class
(:data:`ALL_CLASSES`: the implementation's own exact selection), or faiss's shortlists
(:class:`~imagenet_zsl.evaluation.search.FaissCandidates`). The front,
:class:`~imagenet_zsl.evaluation.search.TopKSearcher`, picks both. This module imports neither
implementation nor the front; the implementations import this module, not each other's search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring import TieRanks, sort_topk

#: (scores (n, k) float32, ids (n, k) int64, the true classes' TieRanks or None): one search's answer
SearchResult = tuple[np.ndarray, np.ndarray, TieRanks | None]
#: an implementation's answer: :data:`SearchResult` and each list's tail (n,) int64, the classes
#: left out of the list that score exactly its last score (0 where it ends lower or is padded)
SearchLists = tuple[np.ndarray, np.ndarray, TieRanks | None, np.ndarray]
#: float32 scores stay finite when |q| * |p| is below this (Cauchy-Schwarz, with rounding margin)
SAFE_SCORE_BOUND = 1e37
#: columns hashed first by :func:`unique_rows` (32 bytes of each row)
HEAD_COLUMNS = 8


class Candidates(Protocol):
    """A candidate proposal: which classes may hold each query's top ``k + 1``.

    :meth:`columns` gets a tile's queries as the implementation holds them (a numpy matrix, or a
    torch tensor on its device) and returns the candidates' class columns (n, m) int64 and which
    of them are unused (n, m) bool, or None: every class is a candidate. The implementation then
    keeps the classes scoring at least :func:`kth_best` of the candidates' exact scores, so a
    proposal that misses a class only lets more through: the lists stay the exact ones."""

    def columns(self, queries: Any) -> tuple[np.ndarray, np.ndarray] | None: ...


class AllClasses:
    """The exact search's proposal: every class is a candidate (no shortlist)."""

    def columns(self, queries: Any) -> None:
        return None


#: the default proposal: every class
ALL_CLASSES = AllClasses()


class SearchIndex(Protocol):
    """What the front asks of an implementation: one prepared class side, searched tile by tile.

    :meth:`search` takes the queries as the front got them (a numpy matrix, or for the torch
    implementation a float32 tensor already on its device), checks them, and returns the
    :data:`SearchLists` in the documented tie order (:mod:`imagenet_zsl.evaluation.search`)."""

    classes: ClassSide

    def tile_rows(self) -> int:
        """Rows searched per tile (the working memory's bound)."""
        ...

    def search(
        self,
        queries: Any,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None = None,
        *,
        row_offset: int = 0,
        candidates: Candidates = ALL_CLASSES,
    ) -> SearchLists:
        """Top-k lists with their tails, and with ``labels`` (n,) the exact tie ranks of each true
        class (``squared_norms``: the queries' when the caller has them; ``row_offset``: the
        queries' first row in their set; ``candidates``: the proposal of each row's candidates)."""
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


def chunk_spans(n: int, offset: int, rows: int) -> list[tuple[int, int, int]]:
    """(start, real, lead) of each product chunk of ``n`` queries that are rows ``offset`` ..
    ``offset + n`` of their set: queries ``start .. start + real`` sit at rows ``lead .. lead +
    real`` of a chunk of ``rows`` rows (zero rows elsewhere), chunks aligned to multiples of
    ``rows`` of the set. So a query's place in its GEMM call is its row in the set modulo
    ``rows``, wherever a block or tile starts."""
    spans = []
    start = 0
    while start < n:
        lead = (offset + start) % rows
        real = min(rows - lead, n - start)
        spans.append((start, real, lead))
        start += real
    return spans


class ClassSide:
    """The prototypes prepared once for an implementation.

    prototypes (C, E) float32, checked (not empty, finite); ``k`` the lists' length (larger than C
    is allowed: rows are padded); ``maps`` the E-d parts of a query (its score for a class is the
    max of their dot products). ``unique`` (u, E) the distinct rows, scored once, and ``group``
    (C,) each class's row among them (None when all are distinct: :func:`unique_rows`);
    ``max_norm`` the largest prototype norm (the overflow check's)."""

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

    def may_overflow(self, query_norm: float) -> bool:
        """Whether scores of queries up to ``query_norm`` may overflow float32: only then need the
        scores be checked for inf (a pass over them)."""
        return query_norm * self.max_norm >= SAFE_SCORE_BOUND


def overflow_error() -> UserInputError:
    """The one-line error for scores of finite inputs that overflow to inf."""
    return UserInputError(
        "scores overflow to inf (queries and prototypes are finite but their products "
        "are not); rescale the features or prototypes, e.g. with --l2-normalize"
    )


def kth_best(values: np.ndarray, unused: np.ndarray, take: int) -> np.ndarray:
    """(n,) the ``take``-th largest of each row's used ``values`` (the candidates' exact scores:
    the floor a row's classes must reach to be selected); -inf where a row has fewer than
    ``take``. At least ``take`` classes of a row score at or above it, whatever the candidates."""
    values = np.where(unused, -np.inf, values).astype(np.float32, copy=False)
    if values.shape[1] < take:
        return np.full(len(values), -np.inf, np.float32)
    return -np.partition(-values, take - 1, axis=1)[:, take - 1]


def finish_topk(
    values: np.ndarray, part: np.ndarray, k: int, full_rows: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top-k lists from each row's ``take`` = min(k + 1, C) best candidates (values, column
    ids (n, take), in any order): sorted in the tie order; where equal scores straddle the k-th
    place, the smallest class indices among them are kept, found in the rows' full scores
    (``full_rows(rows) -> (len(rows), C)`` numpy, asked for those rows only). Returns (scores
    (n, k), ids (n, k), tail (n,) int64): the tail counts the classes left out of a list that
    score exactly its last score, found in the same full rows (only a row whose k-th and
    (k + 1)-th candidates tie has any), so a tie group reaching the end of a list is counted
    whole downstream (:class:`~imagenet_zsl.scoring.GZSLLists`)."""
    top, ids = sort_topk(values, part)
    n, take = top.shape
    tail = np.zeros(n, np.int64)
    if take > k:
        boundary = np.flatnonzero(top[:, k - 1] == top[:, k])
        if len(boundary):
            for row, scores in zip(boundary, full_rows(boundary), strict=True):
                tail[row] = _fill_boundary(scores, top[row], ids[row], k)
        return top[:, :k], ids[:, :k], tail
    pad = k - take
    if pad:
        top = np.hstack([top, np.full((n, pad), -np.inf, np.float32)])
        ids = np.hstack([ids, np.full((n, pad), -1, np.int64)])
    return top, ids, tail


def _fill_boundary(row: np.ndarray, top: np.ndarray, ids: np.ndarray, k: int) -> int:
    """Equal scores straddle the k-th place: keep the smallest class indices among them.
    Returns how many of them are left out of the k kept."""
    value = top[k - 1]
    first = int(np.count_nonzero(top[:k] > value))
    equal = np.flatnonzero(row == value)
    tied = equal[: k + 1 - first]
    top[first : first + len(tied)] = value
    ids[first : first + len(tied)] = tied
    return len(equal) - (k - first)
