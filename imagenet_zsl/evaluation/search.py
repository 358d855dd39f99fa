"""Exact top-k inner-product search of image queries against class prototypes.

Scoring millions of images against up to 21,842 classes is the toolkit's hot loop. Each tile of
queries is multiplied by the prototype matrix (``Q @ P.T``; on a GPU with torch), the top
``k + 1`` classes are picked (numpy's ``argpartition`` on the CPU, ``topk`` on a torch device)
and sorted, and the tile's score matrix is overwritten by the next tile's: memory is bounded by
one tile (``TILE_ELEMENTS`` scores plus their indices), never the full (N, C) matrix. On the CPU
the product is computed in single-threaded BLAS calls of one fixed shape, shared among as many
Python threads as BLAS had (:mod:`imagenet_zsl.evaluation.numpy_search`), and a CPU search
imports no torch. ``tools/bench_search.py`` measures the whole ``evaluate`` command against a
plain numpy floor (np.load, fp32, blocked BLAS, ``argpartition``, exact tie counts) run in a
fresh process.

On a GPU the whole tile stays on the device: the product (in full fp32: TF32 is switched off for
it), the top ``k + 1`` selection and the true classes' tie counts run there, and only the (n,
k + 1) candidates and two counts per image come back, so the search is bound by the GPU's GEMM,
not by copying score tiles to the host. The device is the user's ``--device`` (``auto``, ``cpu``,
``cuda``, ``cuda:N``), resolved once by :func:`imagenet_zsl.devices.resolve_device`; on the CPU
the tiles go through numpy/BLAS. The torch tiles also run on the CPU when asked
(``torch_kernel=True``), which is how the tests check them against the numpy path. The torch
path (:mod:`imagenet_zsl.evaluation.torch_search`) uploads each block once (from pinned memory,
or staged there as float16 by the feature reader: :func:`stage_rows`), and pipelines its tiles,
the host finishing tile t while the device computes tile t + 1.

Four modules, as faiss's CPU and GPU indexes share ``.search(x, k)``:

- here, the front: :class:`TopKSearcher` prepares the class side once, picks an implementation
  (by the device) and, for each search, a candidate proposal (by ``search``: every class, or
  :class:`FaissCandidates`), and hands both to the implementation's one ``search`` call;
- :mod:`~imagenet_zsl.evaluation.search_index`: the interface (``SearchIndex.search``, the
  prepared ``ClassSide``, the ``Candidates`` proposal) and the plain functions of arrays both
  implementations apply alike (the top-k finish in the tie order, the distinct rows);
- :mod:`~imagenet_zsl.evaluation.numpy_search` (``NumpyIndex``: numpy/BLAS, never torch) and
  :mod:`~imagenet_zsl.evaluation.torch_search` (``TorchIndex``: CUDA, or the CPU with
  ``torch_kernel``; loaded by the dotted target :data:`TORCH_INDEX` only when a searcher runs on
  a torch device), each owning its tile loop: a tile's data goes one way, from the product to the
  block's lists, through plain array functions of the interface (``finish_topk`` is handed the
  tile's row lookup for the rare rows tied at the k-th place).

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

``--search faiss``: faiss's flat inner-product index (``IndexFlatIP``) proposes each image's
candidate classes (:class:`FaissCandidates`); the lists, scores and tie counts stay the exact
search's, bit for bit. Why not faiss's own lists: the run's files promise the scores of the
fixed-shape product, and the exact tie counts of the true class need every class's score under
those same bits, so the exact product is computed anyway; faiss rounds its own sums differently,
and where two scores are a few ulps apart its order may differ from ours. So faiss only sets a
floor: the exact score, under our bits, of the ``take``-th best of its candidates (``take`` =
k + 1). At least ``take`` classes score at or above it, whatever faiss returned, so the ``take``
best classes are among those at or above it: they are selected there, sorted by descending score
and ascending class index (the documented tie order). A faiss candidate list that misses a class,
or orders near-ties otherwise, only lowers the floor and lets a few more classes through; the
result cannot change. That is the test (tests/evaluation/test_faiss_search.py): the same files as
the default, with planted near-ties, identical prototypes, and candidates that are wrong on
purpose. Cost: faiss's product comes on top of the exact one (it replaces only the
``argpartition``), so on the CPU it cannot come near the exact search. Measured with
``tools/bench_search.py --mode evaluate --repeats 3 --sizes 5000x21842,20000x21842
[--evaluate-args='--search faiss']`` on 2 shared cores (load 4-9, faiss-cpu 1.15.1, 2,048-d
float16 features, median of 3 CPU seconds, 2026-12-07): 20,000 images x 21,842 classes 42.7 s
against the default's 23.3 s (1.83x) and 565 MB peak against 378 MB (1.49x: faiss holds its own
copy of the prototypes); 5,000 x 21,842 1.66x and 1.53x. So the exact search stays the default,
and the faster on the CPU; this option is for faiss-gpu's index with a CUDA ``--device`` (the
index lives on the GPU beside the exact torch search), not measured here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.numpy_search import NumpyIndex
from imagenet_zsl.evaluation.search_index import (
    ALL_CLASSES,
    Candidates,
    ClassSide,
    SearchIndex,
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
#: the torch implementation (GPU, or ``torch_kernel``) and its staging of feature blocks, named by
#: target: its module imports torch, which a searcher on the CPU never loads (issue 38)
TORCH_INDEX = "imagenet_zsl.evaluation.torch_search:TorchIndex"
#: the values of ``--search``: the exact search alone (default), or faiss's candidates first
SEARCHES = ("exact", "faiss")
Search = Literal["exact", "faiss"]
#: candidates asked of faiss beyond the ``take`` classes the lists need: near-ties at the cut
MARGIN = 8
#: the most neighbours faiss's GPU index returns per query
GPU_MAX_K = 2048


@dataclasses.dataclass(frozen=True)
class _HostDevice:
    """The CPU as a searcher's ``device`` when the caller asked for ``"cpu"`` by name: the numpy
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
    tiles (the GPU's) even on the CPU, for tests; otherwise the CPU uses numpy/BLAS. ``classes``:
    the prepared class side; ``index``: the implementation that searches it
    (:class:`~imagenet_zsl.evaluation.search_index.SearchIndex`); ``torch_device``: the torch
    device its tiles run on (None: the numpy/BLAS implementation).
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
        self.classes = ClassSide(prototypes, k, maps)
        if isinstance(device, str):
            # "cpu" needs no torch (the numpy path imports none: issue 38)
            self.device = _HOST if device == "cpu" and not torch_kernel else resolve_device(device)
        else:
            self.device = device
        self.index: SearchIndex
        self.torch_device: torch.device | None
        if self.device.type == "cpu" and not torch_kernel:
            self.index, self.torch_device = NumpyIndex(self.classes), None
        else:
            self.index = load_target(TORCH_INDEX)(self.classes, self.device)
            self.torch_device = self.device
        self._faiss: Candidates | None = None

    @property
    def prototypes(self) -> np.ndarray:
        """The (C, E) float32 prototype matrix searched."""
        return self.classes.prototypes

    @property
    def k(self) -> int:
        """The lists' length."""
        return self.classes.k

    @property
    def dim(self) -> int:
        """The queries' dimension (maps * E)."""
        return self.classes.dim

    @property
    def duplicate_classes(self) -> int:
        """Classes whose prototype repeats an earlier class's (they tie with it exactly)."""
        return self.classes.duplicate_classes

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the prototypes' bytes, computed once per searcher: hashing a 21,842 x 2,048
        matrix takes about 0.2 s, too much to repeat for every shard key."""
        return prototypes_digest(self.prototypes)

    @property
    def use_gpu(self) -> bool:
        """Whether the search runs on a CUDA GPU."""
        return self.torch_device is not None and self.torch_device.type == "cuda"

    def candidates(self, search: str) -> Candidates:
        """The candidate proposal of ``search``: every class ("exact"), or faiss's flat index over
        the distinct prototypes ("faiss"), built on first use: on the searcher's GPU when faiss
        has GPU support and the search runs on CUDA."""
        if check_search(search) == "exact":
            return ALL_CLASSES
        if self._faiss is None:
            gpu = (self.torch_device.index or 0) if self.use_gpu else None
            index = FaissIndex(self.classes.unique, self.classes.maps, gpu)
            self._faiss = FaissCandidates(self.classes, index)
        return self._faiss

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
        (:func:`~imagenet_zsl.evaluation.search_index.squared_row_norms`) when the caller has
        them, for the overflow check. ``queries``: numpy, or on a torch device a float32 block
        already there (:func:`device_rows`). ``row_offset``: the queries' first row in the set
        they are cut from: a score's bits depend on its row modulo the product's chunk (module
        docstring), so a caller that searches a set block by block passes each block's first row,
        and gets the bits of one search of the whole. ``search``: "exact", or "faiss" (faiss's
        candidates set each row's floor; the same results: :class:`FaissCandidates`)."""
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
        return self.index.search(
            queries, labels, squared_norms, row_offset=row_offset, candidates=self.candidates(search)
        )


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


def stage_rows(block: np.ndarray, device: torch.device) -> Any:
    """Start moving a (n, D) float16 feature block to a torch ``device`` for its search (the
    reader's background thread calls this): :meth:`~imagenet_zsl.evaluation.torch_search.
    TorchIndex.stage_rows`, reached by name (only a torch device calls it)."""
    return load_target(TORCH_INDEX).stage_rows(block, device)


def device_rows(staged: Any, device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """A staged block (:func:`stage_rows`) as float32 on the device and its rows' squared norms
    (n,) float64 on the host: :meth:`~imagenet_zsl.evaluation.torch_search.TorchIndex.
    device_rows`."""
    return load_target(TORCH_INDEX).device_rows(staged, device)


# ----------------------------------------------------------------------------- --search faiss


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
    """The shortlist proposal (:class:`~imagenet_zsl.evaluation.search_index.Candidates`) of
    ``--search faiss``: ``propose(queries (n, maps * E) numpy, count) -> (n, m)`` int64 distinct-row
    ids (-1 unused; :class:`FaissIndex`, or a test's wrong lists), asked for ``count`` = k + 1 +
    MARGIN per query part and turned into class columns (a distinct row's first class)."""

    def __init__(self, classes: ClassSide, propose: Callable[[np.ndarray, int], np.ndarray]):
        self.propose = propose
        self.count = min(len(classes.unique), classes.k + 1 + MARGIN)
        self.first = first_columns(classes.group, classes.num_classes)

    def columns(self, queries: Any) -> tuple[np.ndarray, np.ndarray]:
        """(columns (n, m) int64, unused (n, m) bool) of each query's distinct candidates; queries
        on a torch device are copied to the host for faiss."""
        if not isinstance(queries, np.ndarray):
            queries = queries.cpu().numpy()
        return candidate_columns(self.propose(queries, self.count), self.first)


class FaissIndex:
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
        self.on_gpu = gpu is not None and faiss_gpus(faiss) > 0
        if self.on_gpu:
            self._resources = faiss.StandardGpuResources()
            index = faiss.index_cpu_to_gpu(self._resources, gpu, index)
        self.index = index

    def __call__(self, queries: np.ndarray, count: int) -> np.ndarray:
        if self.on_gpu:  # faiss's GPU k-selection stops at 2,048; fewer candidates only lower
            count = min(count, GPU_MAX_K)  # the floor (still exact)
        parts = []
        for m in range(self.maps):
            part = np.ascontiguousarray(queries[:, m * self.dim : (m + 1) * self.dim], dtype=np.float32)
            parts.append(self.index.search(part, count)[1].astype(np.int64, copy=False))
        return parts[0] if len(parts) == 1 else np.hstack(parts)


def faiss_gpus(faiss: Any) -> int:
    """GPUs faiss can use (0 for a CPU-only build)."""
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None else 0


def first_columns(group: np.ndarray | None, classes: int) -> np.ndarray:
    """(u,) the first class of each distinct prototype row (``group``: each class's distinct row,
    or None when every row is distinct): faiss's candidates are distinct rows."""
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
