"""The search's numpy/BLAS backend (the CPU's): each tile of queries scored by the fixed-shape product
(:mod:`imagenet_zsl.evaluation.products`), its top ``k + 1`` classes picked with numpy's
``argpartition`` (or above faiss's threshold), finished by the contract's exact top-k
(:meth:`~imagenet_zsl.evaluation.search_contract.ClassSide.finish_topk`), and the true classes'
tie counts taken over the full score row. It imports no torch: a CPU evaluate of stored features
never loads it (issue 38)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from imagenet_zsl.evaluation.faiss_search import FaissCandidates, select_above, thresholds
from imagenet_zsl.evaluation.products import PRODUCT_ROWS, Product, class_blocks, tile_products
from imagenet_zsl.evaluation.search_contract import ClassSide, SearchLists
from imagenet_zsl.scoring import TieRanks

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


class NumpyBackend:
    """:class:`~imagenet_zsl.evaluation.search_contract.SearchBackend` on the CPU with numpy/BLAS:
    the distinct prototypes cut once into the product's class blocks."""

    #: the numpy backend runs no torch tiles
    torch_device = None

    def __init__(self, classes: ClassSide):
        self.classes = classes
        self.blocks = class_blocks(classes.unique)

    def tile_rows(self) -> int:
        """Rows per tile: a multiple of PRODUCT_ROWS, at least one, so that tiles cut no product
        chunk (a cut chunk is computed once per tile, padded)."""
        rows = max(PRODUCT_ROWS, TILE_ELEMENTS // self.classes.num_classes)
        return rows - rows % PRODUCT_ROWS

    def search_ranked(
        self,
        queries: np.ndarray,
        labels: np.ndarray | None,
        squared_norms: np.ndarray | None,
        row_offset: int = 0,
        faiss: FaissCandidates | None = None,
    ) -> SearchLists:
        """The contract's search, tile by tile, one product buffer reused by every tile."""
        classes = self.classes
        queries = classes.check_queries(queries)
        n = len(queries)
        out_scores = np.empty((n, classes.k), np.float32)
        out_ids = np.empty((n, classes.k), np.int64)
        out_tail = np.empty(n, np.int64)
        above = np.empty(n, np.int64) if labels is not None else None
        tied = np.empty(n, np.int64) if labels is not None else None
        step = self.tile_rows()
        with contextlib.ExitStack() as stack:
            if n:
                product = stack.enter_context(
                    tile_products(self.blocks, len(classes.unique), min(step, n), classes.maps)
                )
            for start in range(0, n, step):
                stop = min(start + step, n)
                tile_labels = None if labels is None else np.asarray(labels[start:stop], dtype=np.int64)
                norm = None if squared_norms is None else float(np.sqrt(squared_norms[start:stop].max()))
                tile = self._tile(queries[start:stop], tile_labels, product, norm, row_offset + start, faiss)
                out_scores[start:stop], out_ids[start:stop], out_tail[start:stop], ranks = tile
                if labels is not None:
                    above[start:stop], tied[start:stop] = ranks
        return out_scores, out_ids, None if labels is None else TieRanks(above, tied), out_tail

    def _scores(
        self, queries: np.ndarray, product: Product, query_norm: float | None, offset: int
    ) -> np.ndarray:
        """(n, C) float32 class scores; identical prototypes get the same value. ``product``: the
        queries' scores against the distinct prototypes, ``offset`` their first row in the set."""
        scores = product(queries, offset)
        self.classes.check_overflow(queries, lambda: bool(np.isfinite(scores).all()), query_norm)
        return scores if self.classes.group is None else scores[:, self.classes.group]

    def _tile(
        self,
        queries: np.ndarray,
        labels: np.ndarray | None,
        product: Product,
        query_norm: float | None,
        offset: int,
        faiss: FaissCandidates | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """(top scores (n, k), ids (n, k), tails (n,), (above, tied) or None) of one tile (rows
        ``offset ..`` of the set); ``faiss``: its candidates set the selection's threshold."""
        classes = self.classes
        scores = self._scores(queries, product, query_norm, offset)
        n, c = scores.shape
        take = min(classes.k + 1, c)  # one extra class reveals ties across the k-th place
        if take < c and faiss is not None:
            candidates = faiss(queries, classes.candidate_count)
            part = select_above(scores, thresholds(scores, candidates, classes.first_columns, take), take)
        elif take < c:
            part = largest(scores, take, product.rows_in_parallel)
        else:
            part = np.broadcast_to(np.arange(c), (n, c))
        top, ids, tail = classes.finish_topk(
            np.take_along_axis(scores, part, axis=1), part, lambda rows: scores[rows]
        )
        return top, ids, tail, None if labels is None else true_ranks(scores, labels)


def true_ranks(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(above, tied) of each row's true class over its full score row (C and 0 for label -1).

    Row by row (:func:`count_true_ranks`). Sharing the rows among threads was measured slower
    (7 -> 12 ms per 768-row tile on 2 cores): the rows' short numpy calls make the threads take
    turns at the GIL."""
    labels = np.asarray(labels, dtype=np.int64)
    n, c = scores.shape
    above = np.full(n, c, np.int64)
    tied = np.zeros(n, np.int64)
    rows = np.flatnonzero(labels >= 0)
    count_true_ranks(scores, rows, labels[rows], above, tied)
    return above, tied


def count_true_ranks(
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


def largest(
    scores: np.ndarray,
    take: int,
    in_parallel: Callable[[Callable[[int, int], object], int], None] | None = None,
) -> np.ndarray:
    """(n, take) int64 column indices of each row's ``take`` largest scores, in no order.

    numpy's ``argpartition`` on the rows cut among the product's threads (``in_parallel``:
    :meth:`~imagenet_zsl.evaluation.products.Product.rows_in_parallel`), in groups of
    ``SELECT_ELEMENTS`` scores: as fast as torch's multi-threaded ``topk`` was (768 x 21,842 on 2
    cores: 49 against 47 ms), without importing torch for a CPU search. Which of several equal
    scores at the cut it keeps is unspecified;
    :meth:`~imagenet_zsl.evaluation.search_contract.ClassSide.finish_topk` repairs exactly those
    rows."""
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
