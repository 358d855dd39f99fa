"""The search's products in single-threaded GEMM calls of one fixed shape, so that a score's bits
depend neither on the thread count nor on how blocks and tiles are cut (issue 35; the promise is
stated in :mod:`imagenet_zsl.evaluation.search`).

A GEMM's result for one score may depend on the call's shape, on the score's place in the call
and on how a multi-threaded BLAS cuts the call. Here a score's query sits at its row in the image
set modulo the chunk (:func:`chunk_spans`), its class at a fixed place in its block
(:func:`class_blocks`), and every call has the same shape, zero rows and classes padding it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits


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
        """``queries``: rows ``offset ..`` of their set (:func:`chunk_spans`)."""
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
