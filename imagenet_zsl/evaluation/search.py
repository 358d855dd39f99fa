"""Exact top-k inner-product search of image queries against class prototypes.

Scoring millions of images against up to 21,842 classes is the toolkit's hot loop. Each tile of
queries is multiplied by the prototype matrix (``Q @ P.T``; on a GPU with torch), the top
``k + 1`` classes are picked (numpy's ``argpartition`` on the CPU, ``topk`` on a torch device)
and sorted, and the tile's score matrix is overwritten by the next tile's: memory is bounded by
one tile (``TILE_ELEMENTS`` scores plus their indices), never the full (N, C) matrix. On the CPU
the product is computed in single-threaded BLAS calls of one fixed shape, shared among as many
Python threads as BLAS had (:mod:`imagenet_zsl.evaluation.products`), and a CPU search imports no
torch. ``tools/bench_search.py`` measures the whole ``evaluate`` command against a plain numpy
floor (np.load, fp32, blocked BLAS, ``argpartition``, exact tie counts) run in a fresh process.
``--search faiss`` lets faiss's flat index propose the candidates, with the same results
(:mod:`imagenet_zsl.evaluation.faiss_search`).

On a GPU the whole tile stays on the device: the product (in full fp32: TF32 is switched off for
it), the top ``k + 1`` selection and the true classes' tie counts run there, and only the (n,
k + 1) candidates and two counts per image come back, so the search is bound by the GPU's GEMM,
not by copying score tiles to the host. The device is the user's ``--device`` (``auto``, ``cpu``,
``cuda``, ``cuda:N``), resolved once by :func:`imagenet_zsl.devices.resolve_device`; on the CPU
the tiles go through numpy/BLAS. The torch tiles also run on the CPU when asked
(``torch_kernel=True``), which is how the tests check them against the numpy path. The torch
path lives in :mod:`imagenet_zsl.evaluation.device_search`: each block is uploaded once (from
pinned memory, or staged there as float16 by the feature reader), and tiles are pipelined, the
host finishing tile t while the device computes tile t + 1.

Same bytes whatever the threads and cuts (issue 35). A GEMM's result for one score may depend on
the call's shape, on the score's place in the call and on how a multi-threaded BLAS cuts the call
among its threads (kernels differ at the edges: on an AMD EPYC with OpenBLAS 0.3.31, cutting the
classes in two moved 47 of 1,379 scores by up to 3.8e-6, and moving a query from row 0 to row 6
of one call moves its scores in the last bit). So every score is computed by a single-threaded
call of one shape, (PRODUCT_ROWS, E) x (E, PRODUCT_CLASSES) on the CPU, (DEVICE_PRODUCT_ROWS, E)
x (E, u) on a torch device, its class at a fixed place (class blocks from the first class) and
its query at its row in the image set modulo the chunk (chunks aligned to the set's rows: callers
that search a set block by block pass ``row_offset``), zero rows and classes padding the calls.
What is promised: on one machine (same CPU, same BLAS library, or the same GPU and CUDA
libraries) a search's scores, lists and tie ranks, and so ``evaluate``'s files, are the same bytes
whatever the BLAS or torch thread count, ``--block-rows``, the tile sizes and the CPUs the process
may run on. Not promised: the same bits on another CPU or BLAS (another kernel may round a score
differently in its last bits), nor between the numpy path and the torch path; there the lists and
metrics are the same except where two scores are closer than float32's resolution (a few ulps).

Identical prototypes. Classes whose prototype rows are exactly equal (bytes, after mapping -0.0
to 0.0) are detected up front by hashing the rows; each distinct row is scored once and its
score copied to every class sharing it, so such classes always tie exactly, whatever the float
rounding of their column position.

Tie order (deterministic, documented contract): every returned row is sorted by descending score,
equal scores by ascending class index, and when equal scores straddle the k-th place the smaller
class indices are kept — exactly what a stable full sort would give. Rows with fewer than ``k``
classes available are padded with id ``-1`` and score ``-inf``. Metrics never rely on tie
order: :meth:`TopKSearcher.search_ranked` also returns the exact number of classes strictly
above and tied with each image's true class, counted over the full score row (see
:mod:`imagenet_zsl.scoring`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.device_search import (
    full_fp32_matmul,  # noqa: F401 - re-exported
    is_tensor,
    search_on_device,
)
from imagenet_zsl.evaluation.faiss_search import (
    MARGIN,
    FaissCandidates,
    check_search,
    first_columns,
    select_above,
    thresholds,
)
from imagenet_zsl.evaluation.products import (  # noqa: F401 - the shapes re-exported
    PRODUCT_CLASSES,
    PRODUCT_ROWS,
    Product,
    class_blocks,
    tile_products,
)
from imagenet_zsl.scoring import TieRanks, sort_topk, topk_from_scores  # noqa: F401 - re-exported

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

#: rows read per block by callers streaming feature shards (memory: block_rows * D * 4 bytes)
DEFAULT_BLOCK_ROWS = 32768
#: scores per tile on the CPU: bounds the search's working memory to about TILE_ELEMENTS * 12
#: bytes (100 MB; 384 -> 256 rows at 21,842 classes: every product call has the same fixed shape
#: anyway, so smaller tiles cost no speed, and peak memory stays near a plain loop's: issue 38)
TILE_ELEMENTS = 1 << 23
#: scores per tile on a torch device (GPU): 512 MB of fp32 scores, so each GEMM is large
DEVICE_TILE_ELEMENTS = 1 << 27
#: float32 scores stay finite when |q| * |p| is below this (Cauchy-Schwarz, with rounding margin)
_SAFE_SCORE_BOUND = 1e37
#: columns hashed first by :func:`unique_rows` (32 bytes of each row)
_HEAD_COLUMNS = 8


@dataclasses.dataclass(frozen=True)
class _HostDevice:
    """The CPU as a searcher's ``device_`` when the caller asked for ``"cpu"`` by name: the numpy
    path then imports no torch (a ``torch.device`` given by the caller is kept as it is)."""

    type: str = "cpu"

    def __str__(self) -> str:
        return self.type


_HOST = _HostDevice()


def prototypes_digest(prototypes: np.ndarray) -> str:
    """sha256 hex digest of a (C, E) prototype matrix's bytes (the search cache's key for it).

    A C-contiguous matrix is hashed in place (``tobytes`` would copy 180 MB at 21,842 x 2,048
    first); the digest is the same."""
    if not prototypes.flags.c_contiguous:
        prototypes = np.ascontiguousarray(prototypes)
    return hashlib.sha256(prototypes.reshape(-1).view(np.uint8)).hexdigest()


def _as_matrix(name: str, array: np.ndarray) -> np.ndarray:
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


def _row_hashes(matrix: np.ndarray, block_rows: int = 2048) -> np.ndarray:
    """(C,) uint64: a hash of each row's bytes (its 32-bit words times fixed odd multipliers,
    wrapping, summed), in blocks of rows.

    Why: sorting the (C, E) rows as byte strings costs 0.5-0.8 s at 21,842 x 2,048; hashing costs
    a third of that and sorting C hashes nothing. Equal rows always get equal hashes."""
    words = matrix.reshape(len(matrix), -1).view(np.uint32)
    multipliers = np.random.default_rng(0).integers(1, 2**31, size=words.shape[1], dtype=np.uint32) | 1
    hashes = np.empty(len(words), dtype=np.uint64)
    for start in range(0, len(words), block_rows):
        block = words[start : start + block_rows] * multipliers
        hashes[start : start + block_rows] = block.sum(axis=1, dtype=np.uint64)
    return hashes


def unique_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Distinct rows of a (C, E) matrix in first-occurrence order, and each row's index among them.

    Rows are compared by their bytes (-0.0 counted as 0.0). Returns (unique (u, E), group (C,)
    int64), or (matrix, None) when every row is distinct.

    Equal rows hash alike, so distinct hashes prove distinct rows. The first ``_HEAD_COLUMNS``
    columns are hashed first: when they already tell every row apart (real prototypes nearly
    always), the whole matrix is neither copied nor hashed (0.5 s at 21,842 x 2,048).
    """
    if len(matrix) < 2:
        return matrix, None
    if matrix.shape[1] > _HEAD_COLUMNS:
        head = matrix[:, :_HEAD_COLUMNS] + np.float32(0.0)
        if len(np.unique(_row_hashes(head))) == len(matrix):
            return matrix, None
    canonical = np.ascontiguousarray(matrix + np.float32(0.0))
    if len(np.unique(_row_hashes(canonical))) == len(canonical):
        return matrix, None
    view = canonical.view(np.dtype((np.void, canonical.dtype.itemsize * canonical.shape[1]))).ravel()
    _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
    if len(first) == len(matrix):
        return matrix, None
    order = np.argsort(first)
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return canonical[first[order]], position[inverse.ravel()].astype(np.int64)


class TopKSearcher:
    """Holds one prototype matrix and answers top-k queries tile by tile.

    prototypes: (C, E) float32; ``search(queries (n, maps * E)) -> (scores (n, k) float32, ids
    (n, k) int64)`` in the documented tie order; ``maps``: a query holds that many E-d parts side
    by side and its score for a class is the max of their dot products with the class's prototype
    (a model's :meth:`~imagenet_zsl.models.base.ZSLModel.score_maps`: LATEM's K maps; 1: one dot
    product); :meth:`search_ranked` adds the true classes' exact
    :class:`~imagenet_zsl.scoring.TieRanks`. ``k`` larger than C is allowed (rows are padded).
    ``device``: "auto" (a CUDA GPU when torch sees one), "cpu", "cuda", "cuda:N" or a
    ``torch.device`` (:func:`imagenet_zsl.devices.resolve_device`). ``torch_kernel``: run the torch
    tiles (the GPU's) even on the CPU, for tests; otherwise the CPU uses numpy/BLAS.
    """

    def __init__(
        self,
        prototypes: np.ndarray,
        k: int,
        device: str | torch.device = "auto",
        *,
        torch_kernel: bool = False,
        maps: int = 1,
    ):
        self.prototypes = _as_matrix("prototypes", prototypes)
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
        self.unique_, self.group_ = unique_rows(self.prototypes)
        self._max_norm = float(np.sqrt(squared.max()))
        if isinstance(device, str):
            # "cpu" needs no torch (the numpy path imports none: issue 38)
            self.device_ = _HOST if device == "cpu" and not torch_kernel else resolve_device(device)
        else:
            self.device_ = device
        self._device = None
        self._blocks: list[tuple[int, int, np.ndarray]] = []
        self._faiss: FaissCandidates | None = None
        self._first = np.arange(0)  # the first class of each distinct row, with faiss
        if self.device_.type == "cpu" and not torch_kernel:
            self._blocks = class_blocks(self.unique_)
        else:
            import torch

            self._device = self.device_
            with warnings.catch_warnings():
                # a read-only matrix (a prototype file's own array): the tensor is only read
                warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                self._device_unique = torch.from_numpy(self.unique_).to(self._device)
            self._device_group = (
                None if self.group_ is None else torch.from_numpy(self.group_).to(self._device)
            )

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the prototypes' bytes, computed once per searcher: hashing a 21,842 x 2,048
        matrix takes about 0.2 s, too much to repeat for every shard key."""
        return prototypes_digest(self.prototypes)

    @property
    def torch_device(self) -> torch.device | None:
        """The torch device the tiles run on (a GPU, or the CPU with ``torch_kernel``); None: the
        CPU's numpy/BLAS path."""
        return self._device

    def faiss_candidates(self) -> FaissCandidates:
        """faiss's flat index over the distinct prototypes (``--search faiss``), built on first use:
        on the searcher's GPU when faiss has GPU support and the search runs on CUDA."""
        if self._faiss is None:
            gpu = (self._device.index or 0) if self.use_gpu else None
            self._faiss = FaissCandidates(self.unique_, self.maps, gpu)
            self._first = first_columns(self.group_, self.num_classes)
        return self._faiss

    def _candidate_count(self) -> int:
        """Candidates asked of faiss per query part: the lists' ``k + 1`` and a margin."""
        return min(len(self.unique_), self.k + 1 + MARGIN)

    @property
    def use_gpu(self) -> bool:
        """Whether the search runs on a CUDA GPU."""
        return self._device is not None and self._device.type == "cuda"

    @property
    def duplicate_classes(self) -> int:
        """Classes whose prototype repeats an earlier class's (they tie with it exactly)."""
        return self.num_classes - len(self.unique_)

    def _tile_rows(self) -> int:
        """Rows per tile; on the CPU a multiple of PRODUCT_ROWS when a tile holds that many, so
        that tiles cut no product chunk (a cut chunk is computed twice, padded)."""
        if self._device is not None:
            return max(1, DEVICE_TILE_ELEMENTS // self.num_classes)
        rows = max(1, TILE_ELEMENTS // self.num_classes)
        return rows if rows < PRODUCT_ROWS else rows - rows % PRODUCT_ROWS

    def _scores(
        self, queries: np.ndarray, product: Product, query_norm: float | None, offset: int
    ) -> np.ndarray:
        """(n, C) float32 class scores; identical prototypes get the same value. ``product``: the
        queries' scores against the distinct prototypes, ``offset`` their first row in the set."""
        scores = product(queries, offset)
        self._check_overflow(queries, lambda: bool(np.isfinite(scores).all()), query_norm)
        return scores if self.group_ is None else scores[:, self.group_]

    def _check_overflow(
        self, queries: np.ndarray, all_finite: Callable[[], bool], query_norm: float | None = None
    ) -> None:
        """Scores of finite inputs overflow only if some |q| * |p| is near float32's limit; only
        then is ``all_finite()`` (a pass over the scores) asked. ``query_norm``: the queries'
        largest norm when the caller knows it (else computed here)."""
        if query_norm is None:
            query_norm = _max_row_norm(queries)
        if query_norm * self._max_norm >= _SAFE_SCORE_BOUND and not all_finite():
            raise UserInputError(
                "scores overflow to inf (queries and prototypes are finite but their products "
                "are not); rescale the features or prototypes, e.g. with --l2-normalize"
            )

    def _check_queries(self, queries: np.ndarray) -> np.ndarray:
        queries = _as_matrix("queries", queries)
        if queries.shape[1] != self.dim:
            raise UserInputError(
                f"query dimension {queries.shape[1]} differs from the {self.dim} of "
                f"{self.maps} x {self.prototype_dim}-d prototypes: "
                "use the model that produced these prototypes, or prototypes in feature space"
            )
        return queries

    def search(self, queries: np.ndarray, *, row_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores (n, k) float32, ids (n, k) int64) of each query (``row_offset``: see
        :meth:`search_ranked`)."""
        scores, ids, _ = self.search_ranked(queries, None, row_offset=row_offset)
        return scores, ids

    def search_ranked(
        self,
        queries: np.ndarray,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None = None,
        *,
        row_offset: int = 0,
        search: str = "exact",
    ) -> tuple[np.ndarray, np.ndarray, TieRanks | None]:
        """Top-k lists plus, with ``labels`` (n,) (class indices; -1: the true class is not in this
        space), the exact TieRanks of each true class over the full score row (above = C and
        tied = 0 where the label is -1). ``squared_norms`` (n,): the queries' squared norms
        (:func:`squared_row_norms`) when the caller has them, for the overflow check.
        ``row_offset``: the queries' first row in the set they are cut from: a score's bits depend
        on its row modulo the product's chunk (module docstring), so a caller that searches a set
        block by block passes each block's first row, and gets the bits of one search of the whole.
        ``search``: "exact", or "faiss" (faiss's candidates set each row's threshold; the same
        results: :mod:`imagenet_zsl.evaluation.faiss_search`)."""
        faiss = self.faiss_candidates() if check_search(search) == "faiss" else None
        if self._device is not None:  # numpy queries, or a float32 block already on the device
            if not is_tensor(queries):
                queries = self._check_queries(queries)
                squared_norms = squared_row_norms(queries) if squared_norms is None else squared_norms
            return search_on_device(self, queries, labels, squared_norms, row_offset, faiss)
        queries = self._check_queries(queries)
        n = len(queries)
        out_scores = np.empty((n, self.k), np.float32)
        out_ids = np.empty((n, self.k), np.int64)
        above = np.empty(n, np.int64) if labels is not None else None
        tied = np.empty(n, np.int64) if labels is not None else None
        step = self._tile_rows()
        with contextlib.ExitStack() as stack:
            if n:
                product = stack.enter_context(
                    tile_products(self._blocks, len(self.unique_), min(step, n), self.maps)
                )
            for start in range(0, n, step):
                stop = min(start + step, n)
                tile_labels = None if labels is None else np.asarray(labels[start:stop], dtype=np.int64)
                norm = None if squared_norms is None else float(np.sqrt(squared_norms[start:stop].max()))
                tile = self._cpu_tile(
                    queries[start:stop], tile_labels, product, norm, row_offset + start, faiss
                )
                out_scores[start:stop], out_ids[start:stop], ranks = tile
                if labels is not None:
                    above[start:stop], tied[start:stop] = ranks
        return out_scores, out_ids, None if labels is None else TieRanks(above, tied)

    def _cpu_tile(
        self,
        queries: np.ndarray,
        labels: np.ndarray | None,
        product: Product,
        query_norm: float | None,
        offset: int,
        faiss: FaissCandidates | None = None,
    ):
        """(top scores (n, k), ids (n, k), (above, tied) or None) of one tile (rows ``offset ..``
        of the set), with numpy/BLAS; ``faiss``: its candidates set the selection's threshold."""
        scores = self._scores(queries, product, query_norm, offset)
        n, c = scores.shape
        take = min(self.k + 1, c)  # one extra class reveals ties across the k-th place
        if take < c and faiss is not None:
            limit = thresholds(scores, faiss(queries, self._candidate_count()), self._first, take)
            part = select_above(scores, limit, take)
        elif take < c:
            part = _largest(scores, take, product.rows_in_parallel)
        else:
            part = np.broadcast_to(np.arange(c), (n, c))
        top, ids = self._finish_topk(
            np.take_along_axis(scores, part, axis=1), part, lambda rows: scores[rows]
        )
        return top, ids, None if labels is None else self._true_ranks(scores, labels)

    def _finish_topk(
        self, values: np.ndarray, part: np.ndarray, full_rows: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top-k lists from each row's ``take`` = min(k + 1, C) best candidates (values, column
        ids (n, take), in any order): sorted in the tie order; where equal scores straddle the
        k-th place, the smallest class indices among them are kept, found in the rows' full
        scores (``full_rows(rows) -> (len(rows), C)``, asked for those rows only)."""
        k = self.k
        top, ids = sort_topk(values, part)
        n, take = top.shape
        if take > k:
            boundary = np.flatnonzero(top[:, k - 1] == top[:, k])
            if len(boundary):
                for row, scores in zip(boundary, full_rows(boundary), strict=True):
                    self._fill_boundary(scores, top[row], ids[row])
            return top[:, :k], ids[:, :k]
        pad = k - take
        if pad:
            top = np.hstack([top, np.full((n, pad), -np.inf, np.float32)])
            ids = np.hstack([ids, np.full((n, pad), -1, np.int64)])
        return top, ids

    def _fill_boundary(self, row: np.ndarray, top: np.ndarray, ids: np.ndarray) -> None:
        """Equal scores straddle the k-th place: keep the smallest class indices among them."""
        value = top[self.k - 1]
        first = int(np.count_nonzero(top[: self.k] > value))
        tied = np.flatnonzero(row == value)[: self.k + 1 - first]
        top[first : first + len(tied)] = value
        ids[first : first + len(tied)] = tied

    @staticmethod
    def _true_ranks(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(above, tied) of each row's true class over its full score row (C and 0 for label -1).

        Row by row (:func:`_count_true_ranks`). Sharing the rows among threads was measured
        slower (7 -> 12 ms per 768-row tile on 2 cores): the rows' short numpy calls make the
        threads take turns at the GIL."""
        labels = np.asarray(labels, dtype=np.int64)
        n, c = scores.shape
        above = np.full(n, c, np.int64)
        tied = np.zeros(n, np.int64)
        rows = np.flatnonzero(labels >= 0)
        _count_true_ranks(scores, rows, labels[rows], above, tied)
        return above, tied


def _count_true_ranks(
    scores: np.ndarray, rows: np.ndarray, labels: np.ndarray, above: np.ndarray, tied: np.ndarray
) -> None:
    """``above[i]`` / ``tied[i]`` for each row ``i`` of ``rows`` whose true class is ``labels``.

    Both comparisons of a row run while it sits in the cache, into one reused mask counted by
    ``count_nonzero``: about 3x faster than comparing the whole tile twice and summing the boolean
    matrices along rows (8 instead of 27 us per image at 21,842 classes, against about 530 us of
    CPU for the product itself)."""
    mask = np.empty(scores.shape[1], bool)
    greater, equal, count = np.greater, np.equal, np.count_nonzero
    for i, label in zip(rows.tolist(), labels.tolist(), strict=True):
        row = scores[i]
        true = row[label]
        greater(row, true, out=mask)
        above[i] = count(mask)
        equal(row, true, out=mask)
        tied[i] = count(mask) - 1


def squared_row_norms(matrix: np.ndarray) -> np.ndarray:
    """(n,) float64 squared row norms of a (n, E) float32 matrix, accumulated in float64 without a
    float64 copy of the matrix (which would cost 8 bytes per entry: 358 MB for 21,842 x 2,048)."""
    return np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64)


def _max_row_norm(matrix: np.ndarray) -> float:
    """The largest row norm of a (n, E) float32 matrix (float64 accumulation)."""
    if not len(matrix):
        return 0.0
    return float(np.sqrt(squared_row_norms(matrix).max()))


#: rows per ``argpartition`` call of :func:`_largest`: its (rows, C) int64 temporary stays small
#: (11 MB at 21,842 classes)
_SELECT_ROWS = 64


def _largest(
    scores: np.ndarray,
    take: int,
    in_parallel: Callable[[Callable[[int, int], object], int], None] | None = None,
) -> np.ndarray:
    """(n, take) int64 column indices of each row's ``take`` largest scores, in no order.

    numpy's ``argpartition`` on the rows cut among the product's threads (``in_parallel``:
    :meth:`~imagenet_zsl.evaluation.products.Product.rows_in_parallel`), in groups of
    ``_SELECT_ROWS`` rows: as fast as torch's multi-threaded ``topk`` was (768 x 21,842 on 2
    cores: 49 against 47 ms), without importing torch for a CPU search. Which of several equal
    scores at the cut it keeps is unspecified; :meth:`TopKSearcher._finish_topk` repairs exactly
    those rows."""
    n, c = scores.shape
    out = np.empty((n, take), np.int64)

    def select(start: int, stop: int) -> None:
        for row in range(start, stop, _SELECT_ROWS):
            end = min(row + _SELECT_ROWS, stop)
            out[row:end] = np.argpartition(scores[row:end], c - take, axis=1)[:, c - take :]

    if in_parallel is None:
        select(0, n)
    else:
        in_parallel(select, n)
    return out


def topk_inner_product(
    queries: np.ndarray,
    prototypes: np.ndarray,
    k: int,
    *,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    device: str | torch.device = "auto",
    torch_kernel: bool = False,
    progress: Callable[[int], object] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` classes per query by inner product.

    queries (N, E) float32, prototypes (C, E) float32 → (scores (N, k) float32, ids (N, k)
    int64 row indices of ``prototypes``), in the module's tie order. Queries are searched in
    blocks of ``block_rows`` so memory stays bounded; ``device`` and ``torch_kernel``: see
    :class:`TopKSearcher`. NaN/Inf in the inputs raise
    ``UserInputError``. ``progress(n)`` is called after each block with its row count (e.g.
    ``tqdm.update``).
    """
    if block_rows < 1:
        raise UserInputError(f"--block-rows must be a positive number of images, got {block_rows}")
    queries = _as_matrix("queries", queries)
    searcher = TopKSearcher(prototypes, k, device, torch_kernel=torch_kernel)
    if queries.shape[1] != searcher.dim:
        raise UserInputError(
            f"query dimension {queries.shape[1]} differs from prototype dimension {searcher.dim}"
        )
    scores = np.empty((len(queries), searcher.k), np.float32)
    ids = np.empty((len(queries), searcher.k), np.int64)
    for start in range(0, len(queries), block_rows):
        block = queries[start : start + block_rows]
        check_finite("queries", block, np.char.add("row ", np.arange(start, start + len(block)).astype(str)))
        top = searcher.search(block, row_offset=start)
        scores[start : start + len(block)], ids[start : start + len(block)] = top
        if progress is not None:
            progress(len(block))
    return scores, ids
