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
pinned memory, or staged there as float16 by the feature reader:
:mod:`imagenet_zsl.evaluation.device_staging`), and tiles are pipelined, the
host finishing tile t while the device computes tile t + 1.

One contract, two backends (as faiss's CPU and GPU indexes share ``.search(x, k)``):
:class:`TopKSearcher` is the front. It prepares the class side once
(:class:`~imagenet_zsl.evaluation.search_contract.ClassSide`: distinct rows, the class → row map,
the overflow check, the exact top-k finish) and hands every search to a backend of
:class:`~imagenet_zsl.evaluation.search_contract.SearchBackend`:
:class:`~imagenet_zsl.evaluation.cpu_search.NumpyBackend` on the CPU, or
:class:`~imagenet_zsl.evaluation.device_search.TorchBackend` on a torch device, named by the dotted
target :data:`TORCH_BACKEND` and so imported (with torch) only when a searcher runs there. The
backends know the contract, not the front nor each other.

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
:mod:`imagenet_zsl.scoring`), and :meth:`TopKSearcher.search_lists` each list's tail: the classes
left out of it that score exactly its last score, so that a tie group reaching the end of a list
is counted whole.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.cpu_search import NumpyBackend
from imagenet_zsl.evaluation.faiss_search import FaissCandidates, check_search
from imagenet_zsl.evaluation.search_contract import (
    ClassSide,
    SearchBackend,
    SearchLists,
    SearchResult,
    as_matrix,
    check_finite,
)
from imagenet_zsl.registry import load_target

if TYPE_CHECKING:
    import torch

#: rows read per block by callers streaming feature shards (memory: block_rows * D * 4 bytes)
DEFAULT_BLOCK_ROWS = 32768
#: the torch backend (GPU, or ``torch_kernel``), named by target: its module imports torch, which a
#: searcher on the CPU never loads (issue 38)
TORCH_BACKEND = "imagenet_zsl.evaluation.device_search:TorchBackend"


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
    tiles (the GPU's) even on the CPU, for tests; otherwise the CPU uses numpy/BLAS. The work is
    the ``backend``'s (:class:`~imagenet_zsl.evaluation.search_contract.SearchBackend`).
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
        #: the prepared class side every backend shares
        self.classes = ClassSide(prototypes, k, maps)
        self.prototypes = self.classes.prototypes
        self.k, self.maps = self.classes.k, self.classes.maps
        #: the prototypes' dimension E, and the queries' (maps * E)
        self.prototype_dim, self.dim = self.classes.prototype_dim, self.classes.dim
        self.num_classes = self.classes.num_classes
        self.unique_, self.group_ = self.classes.unique, self.classes.group
        if isinstance(device, str):
            # "cpu" needs no torch (the numpy path imports none: issue 38)
            self.device_ = _HOST if device == "cpu" and not torch_kernel else resolve_device(device)
        else:
            self.device_ = device
        self._faiss: FaissCandidates | None = None
        self.backend: SearchBackend
        if self.device_.type == "cpu" and not torch_kernel:
            self.backend = NumpyBackend(self.classes)
        else:
            self.backend = load_target(TORCH_BACKEND)(self.classes, self.device_)

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the prototypes' bytes, computed once per searcher: hashing a 21,842 x 2,048
        matrix takes about 0.2 s, too much to repeat for every shard key."""
        return prototypes_digest(self.prototypes)

    @property
    def torch_device(self) -> torch.device | None:
        """The torch device the tiles run on (a GPU, or the CPU with ``torch_kernel``); None: the
        CPU's numpy/BLAS path."""
        return self.backend.torch_device

    def faiss_candidates(self) -> FaissCandidates:
        """faiss's flat index over the distinct prototypes (``--search faiss``), built on first use:
        on the searcher's GPU when faiss has GPU support and the search runs on CUDA."""
        if self._faiss is None:
            gpu = (self.torch_device.index or 0) if self.use_gpu else None
            self._faiss = FaissCandidates(self.unique_, self.maps, gpu)
        return self._faiss

    @property
    def use_gpu(self) -> bool:
        """Whether the search runs on a CUDA GPU."""
        return self.torch_device is not None and self.torch_device.type == "cuda"

    @property
    def duplicate_classes(self) -> int:
        """Classes whose prototype repeats an earlier class's (they tie with it exactly)."""
        return self.classes.duplicate_classes

    def search(self, queries: np.ndarray, *, row_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores (n, k) float32, ids (n, k) int64) of each query (``row_offset``: see
        :meth:`search_ranked`)."""
        scores, ids, _ = self.search_ranked(queries, None, row_offset=row_offset)
        return scores, ids

    def search_ranked(
        self,
        queries: np.ndarray | torch.Tensor,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None = None,
        *,
        row_offset: int = 0,
        search: str = "exact",
    ) -> SearchResult:
        """Top-k lists plus, with ``labels`` (n,) (class indices; -1: the true class is not in this
        space), the exact TieRanks of each true class over the full score row (above = C and
        tied = 0 where the label is -1). ``squared_norms`` (n,): the queries' squared norms
        (:func:`~imagenet_zsl.evaluation.search_contract.squared_row_norms`) when the caller has
        them, for the overflow check. ``queries``: numpy, or on a torch device a float32 block
        already there (:func:`~imagenet_zsl.evaluation.device_staging.device_rows`).
        ``row_offset``: the queries' first row in the set they are cut from: a score's bits depend
        on its row modulo the product's chunk (module docstring), so a caller that searches a set
        block by block passes each block's first row, and gets the bits of one search of the whole.
        ``search``: "exact", or "faiss" (faiss's candidates set each row's threshold; the same
        results: :mod:`imagenet_zsl.evaluation.faiss_search`)."""
        scores, ids, ranks, _ = self.search_lists(
            queries, labels, squared_norms, row_offset=row_offset, search=search
        )
        return scores, ids, ranks

    def search_lists(
        self,
        queries: np.ndarray | torch.Tensor,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None = None,
        *,
        row_offset: int = 0,
        search: str = "exact",
    ) -> SearchLists:
        """:meth:`search_ranked` and each list's tail (n,) int64: the classes left out of the list
        that score exactly its last score (0 where the list ends lower or is padded), so that a
        tie group reaching the end of a list is counted whole (the GZSL lists of the other label
        space: :class:`~imagenet_zsl.scoring.GZSLLists`)."""
        faiss = self.faiss_candidates() if check_search(search) == "faiss" else None
        return self.backend.search_ranked(queries, labels, squared_norms, row_offset, faiss)


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
    queries = as_matrix("queries", queries)
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
