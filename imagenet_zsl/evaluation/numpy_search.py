"""The search's numpy/BLAS implementation (the CPU's): :class:`NumpyIndex` owns its tile loop.

Each tile of queries is scored by the fixed-shape product (:class:`Product`), checked for
overflow, its top ``k + 1`` classes picked with numpy's ``argpartition`` (:func:`largest`; or,
with a shortlist proposal, above the floor its candidates set: :func:`select_above`), finished in
the tie order (:func:`~imagenet_zsl.evaluation.search_index.finish_topk`), and the true classes'
ranks counted over the full score rows by the one true-rank function,
:func:`imagenet_zsl.scoring.true_ranks` (``checked=True``: the tile passed the overflow check).
It imports no torch: a CPU evaluate of stored features never loads it (issue 38).

Fixed-shape products (issue 35; the promise is stated in :mod:`imagenet_zsl.evaluation.search`).
A GEMM's result for one score may depend on the call's shape, on the score's place in the call
and on how a multi-threaded BLAS cuts the call. Here a score's query sits at its row in the image
set modulo the chunk (:func:`~imagenet_zsl.evaluation.search_index.chunk_spans`), its class at a
fixed place in its block (:func:`class_blocks`), and every call has the same shape, zero rows and
classes padding it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from imagenet_zsl.evaluation.search_index import (
    ALL_CLASSES,
    Candidates,
    ClassSide,
    SearchLists,
    chunk_spans,
    finish_topk,
    kth_best,
    max_row_norm,
    overflow_error,
)
from imagenet_zsl.scoring import TieRanks, true_ranks

#: every product is computed in single-threaded GEMM calls of exactly this many queries ...
PRODUCT_ROWS = 512
#: ... by this many classes (the last block of classes and of queries zero-padded to it).
#: Why 512 x 512: each call packs both of its operands, (PRODUCT_ROWS + PRODUCT_CLASSES) x E floats
#: for PRODUCT_ROWS x PRODUCT_CLASSES x E multiply-adds; at 256 x 256 the packing (OpenBLAS's
#: sgemm_incopy and sgemm_oncopy) took 36 % of the kernel's time at 1,000 classes (perf), at
#: 512 x 512 19 %. The search needed 6-13 % less CPU at 1,000 and 21,842 classes and D = 512, 768
#: and 2,048, with OpenBLAS's SkylakeX kernels and its Haswell ones (which AMD EPYCs without
#: AVX-512 run) alike; 1,024 x 512 and 512 x 1,024 gained no more, and a 1,024-wide block would pad
#: a class count such as 1,509 to 2,048. Both kernel families cut a 512-wide side into two blocks
#: of 256 (their GEMM_P is 320 and 448), a multiple of their kernels' 8 and 16 rows: no ragged edge
PRODUCT_CLASSES = 512
#: scores per tile on the CPU: bounds the search's score buffer to TILE_ELEMENTS float32 (32 MB),
#: or to one chunk of PRODUCT_ROWS rows where the classes are more (45 MB at 21,842 classes): a
#: tile cut inside a chunk would compute that chunk's padded product once per tile. Every product
#: call has the same fixed shape anyway, so smaller tiles cost no speed, and peak memory stays
#: near a plain loop's (issue 38)
TILE_ELEMENTS = 1 << 23
#: scores per ``argpartition`` call of :func:`largest` (whole rows, at least one): its (rows, C)
#: int64 temporary stays in a core's cache, 512 KB (65 rows at 1,000 classes, 3 at 21,842). 64 rows
#: at 21,842 classes were an 11 MB temporary per thread, 22 MB more peak memory and 1.3x the CPU
SELECT_ELEMENTS = 1 << 16


class NumpyIndex:
    """:class:`~imagenet_zsl.evaluation.search_index.SearchIndex` on the CPU with numpy/BLAS: the
    distinct prototypes cut once into the product's class blocks."""

    def __init__(self, classes: ClassSide):
        self.classes = classes
        self.blocks = class_blocks(classes.unique)

    def tile_rows(self) -> int:
        """Rows per tile: a multiple of PRODUCT_ROWS, at least one, so that tiles cut no product
        chunk (a cut chunk is computed once per tile, padded)."""
        rows = max(PRODUCT_ROWS, TILE_ELEMENTS // self.classes.num_classes)
        return rows - rows % PRODUCT_ROWS

    def search(
        self,
        queries: np.ndarray,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None = None,
        *,
        row_offset: int = 0,
        candidates: Candidates = ALL_CLASSES,
    ) -> SearchLists:
        """The search, tile by tile, one product buffer reused by every tile: each tile's scores
        go through the product, the overflow check, the selection, the finish and the tie counts,
        and its results into the block's arrays."""
        classes, k = self.classes, self.classes.k
        queries = classes.check_queries(queries)
        n = len(queries)
        out_scores = np.empty((n, k), np.float32)
        out_ids = np.empty((n, k), np.int64)
        out_tail = np.empty(n, np.int64)
        ranks = None if labels is None else TieRanks(np.empty(n, np.int64), np.empty(n, np.int64))
        step = self.tile_rows()
        with contextlib.ExitStack() as stack:
            if n:
                product = stack.enter_context(
                    tile_products(self.blocks, len(classes.unique), min(step, n), classes.maps)
                )
            for start in range(0, n, step):
                stop = min(start + step, n)
                tile = queries[start:stop]
                scores = product(tile, row_offset + start)
                norms = None if squared_norms is None else squared_norms[start:stop]
                norm = max_row_norm(tile) if norms is None else float(np.sqrt(norms.max()))
                if classes.may_overflow(norm) and not np.isfinite(scores).all():
                    raise overflow_error()
                if classes.group is not None:  # identical prototypes: the same score, copied
                    scores = scores[:, classes.group]
                c = scores.shape[1]
                take = min(k + 1, c)  # one extra class reveals ties across the k-th place
                proposed = candidates.columns(tile) if take < c else None
                if take == c:
                    part = np.broadcast_to(np.arange(c), (len(tile), c))
                elif proposed is None:
                    part = largest(scores, take, product.rows_in_parallel)
                else:
                    columns, unused = proposed
                    floor = kth_best(np.take_along_axis(scores, columns, axis=1), unused, take)
                    part = select_above(scores, floor, take)
                values = np.take_along_axis(scores, part, axis=1)
                done = slice(start, stop)
                out_scores[done], out_ids[done], out_tail[done] = finish_topk(
                    values, part, k, scores.__getitem__
                )
                if ranks is not None:
                    tile_ranks = true_ranks(labels[done], scores=scores, checked=True)
                    ranks.above[done], ranks.tied[done] = tile_ranks.above, tile_ranks.tied
        return out_scores, out_ids, ranks, out_tail


def largest(
    scores: np.ndarray,
    take: int,
    in_parallel: Callable[[Callable[[int, int], object], int], None] | None = None,
) -> np.ndarray:
    """(n, take) int64 column indices of each row's ``take`` largest scores, in no order.

    numpy's ``argpartition`` on the rows cut among the product's threads (``in_parallel``:
    :meth:`Product.rows_in_parallel`), in groups of ``SELECT_ELEMENTS`` scores: as fast as torch's
    multi-threaded ``topk`` was (768 x 21,842 on 2 cores: 49 against 47 ms), without importing
    torch for a CPU search. Which of several equal scores at the cut it keeps is unspecified;
    :func:`~imagenet_zsl.evaluation.search_index.finish_topk` repairs exactly those rows."""
    n, c = scores.shape
    out = np.empty((n, take), np.int64)
    group = max(1, SELECT_ELEMENTS // c)

    def select(start: int, stop: int) -> None:
        for row in range(start, stop, group):
            end = min(row + group, stop)
            out[row:end] = np.argpartition(scores[row:end], c - take, axis=1)[:, c - take :]

    if in_parallel is None:
        select(0, n)
    else:
        in_parallel(select, n)
    return out


def select_above(scores: np.ndarray, floor: np.ndarray, take: int) -> np.ndarray:
    """(n, take) int64 columns of each row's ``take`` best scores in the tie order (descending
    score, ascending column), found among the columns scoring at or above the row's ``floor``
    (at least ``take`` of them must: :func:`~imagenet_zsl.evaluation.search_index.kth_best`)."""
    n = len(scores)
    rows, cols = np.nonzero(scores >= floor[:, None])
    order = np.lexsort((cols, -scores[rows, cols], rows))
    rows, cols = rows[order], cols[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, np.arange(n))[rows]
    return cols[rank < take].reshape(n, take).astype(np.int64, copy=False)


# ----------------------------------------------------------------------------- fixed-shape products


def class_blocks(unique: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(start, stop, (PRODUCT_CLASSES, E) rows) of a (u, E) prototype matrix: views of its full
    blocks, a zero-padded copy of its last partial one. Every block has the same shape and layout,
    so every product call is the same GEMM."""
    blocks = []
    for start in range(0, len(unique), PRODUCT_CLASSES):
        part = unique[start : start + PRODUCT_CLASSES]
        if len(part) < PRODUCT_CLASSES:
            padded = np.zeros((PRODUCT_CLASSES, unique.shape[1]), np.float32)
            padded[: len(part)] = part
            part = padded
        blocks.append((start, min(start + PRODUCT_CLASSES, len(unique)), part))
    return blocks


class Product:
    """``self(queries) -> (m, u)`` scores of at most ``rows`` queries (m, maps * E) against the
    distinct prototypes (max over the ``maps`` query parts), into one buffer reused from tile to
    tile (a fresh 67 MB tile costs 16,000 page faults).

    Why fixed shapes: a GEMM's bits for one score may depend on its call's shape and on where the
    score falls in it (kernels differ at the edges, and a multi-threaded BLAS cuts the call by its
    thread count: on an AMD EPYC with OpenBLAS 0.3.31, 47 of 1,379 scores moved by up to 3.8e-6
    when the classes were cut in 2). Here every score is one single-threaded call of shape
    (PRODUCT_ROWS, E) x (E, PRODUCT_CLASSES), query chunks and class blocks padded with zeros, its
    class at a fixed place in its block; the (chunk, block) jobs are shared among ``threads``
    Python threads (numpy releases the GIL while it multiplies), which only decides who computes
    a job, not its bits. Single-threaded BLAS calls side by side are also faster than BLAS's own
    threads, which spin for up to 0.1 s after each product through the serial steps that follow."""

    def __init__(
        self, blocks: list[tuple[int, int, np.ndarray]], classes: int, rows: int, maps: int, threads: int
    ):
        self.blocks, self.maps, self.threads = blocks, maps, threads
        self.buffer = np.empty((rows, classes), np.float32)
        self.pool = ThreadPoolExecutor(threads - 1, "search") if threads > 1 else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def rows_in_parallel(self, work: Callable[[int, int], object], n: int) -> None:
        """``work(start, stop)`` over ``n`` rows cut into one contiguous part per thread, run side
        by side (numpy releases the GIL in its loops): the serial steps after the product (the
        top-k selection) use the same threads, not BLAS's or torch's."""
        cuts = np.linspace(0, n, self.threads + 1).round().astype(int).tolist()
        parts = [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
        if self.pool is None or len(parts) < 2:
            work(0, n)
            return
        waiting = [self.pool.submit(work, a, b) for a, b in parts[1:]]
        work(*parts[0])
        for future in waiting:
            future.result()

    def __call__(self, queries: np.ndarray, offset: int = 0) -> np.ndarray:
        """``queries``: rows ``offset ..`` of their set
        (:func:`~imagenet_zsl.evaluation.search_index.chunk_spans`)."""
        out = self.buffer[: len(queries)]
        chunks = []
        for start, real, lead in chunk_spans(len(queries), offset, PRODUCT_ROWS):
            chunk = queries[start : start + real]
            if real < PRODUCT_ROWS:
                chunk = np.zeros((PRODUCT_ROWS, queries.shape[1]), np.float32)
                chunk[lead : lead + real] = queries[start : start + real]
            chunks.append((start, real, lead, chunk))
        jobs = [(chunk, block) for chunk in chunks for block in self.blocks]
        if self.pool is None:
            self._work(jobs, out)
            return out
        waiting = [self.pool.submit(self._work, jobs[t :: self.threads], out) for t in range(1, self.threads)]
        self._work(jobs[:: self.threads], out)
        for future in waiting:
            future.result()
        return out

    def _work(self, jobs: list, out: np.ndarray) -> None:
        """Compute the (chunk, block) jobs into ``out``; fixed-shape scratch where the result is
        padded or reduced over maps."""
        scratch = part = None
        for (row, real, lead, chunk), (start, stop, block) in jobs:
            dim = chunk.shape[1] // self.maps
            direct = self.maps == 1 and real == PRODUCT_ROWS and stop - start == PRODUCT_CLASSES
            if direct:
                _matmul_into(chunk, block, out[row : row + PRODUCT_ROWS, start:stop])
                continue
            if scratch is None:
                scratch = np.empty((PRODUCT_ROWS, PRODUCT_CLASSES), np.float32)
                part = np.empty_like(scratch) if self.maps > 1 else None
            _matmul_into(chunk[:, :dim], block, scratch)
            for k in range(1, self.maps):  # the model's score: the max over its maps
                np.maximum(scratch, _matmul_into(chunk[:, k * dim : (k + 1) * dim], block, part), out=scratch)
            out[row : row + real, start:stop] = scratch[lead : lead + real, : stop - start]


@contextlib.contextmanager
def tile_products(
    blocks: list[tuple[int, int, np.ndarray]], classes: int, rows: int, maps: int = 1
) -> Iterator[Product]:
    """:class:`Product` for tiles of at most ``rows`` queries, BLAS held to one thread meanwhile
    and the jobs shared by as many Python threads as BLAS had."""
    threads = max(1, _blas_threads())
    with threadpool_limits(limits=1, user_api="blas"):
        product = Product(blocks, classes, rows, maps, threads)
        try:
            yield product
        finally:
            product.close()


def _matmul_into(queries: np.ndarray, prototypes: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[:] = queries @ prototypes.T`` (float32 overflow to inf is checked by the caller)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.matmul(queries, prototypes.T, out=out)


def _blas_threads() -> int:
    """The threads numpy's BLAS runs a product on (threadpoolctl; 1 when it cannot tell)."""
    return max([int(pool["num_threads"]) for pool in threadpool_info() if pool["user_api"] == "blas"] or [1])
