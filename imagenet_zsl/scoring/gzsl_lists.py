"""GZSL top-k lists (:class:`GZSLTopK`): every image's top-m among the seen and among the unseen
classes, held in parts that are never copied and read one block of images at a time.

Why parts: at ImageNet scale the lists are the largest arrays of a run (4 × m × 4 bytes per image,
4.3 GB at 12.9M images and m = 21). The evaluation's search keeps them memory-mapped, one part per
image set; joining the parts would copy them onto the heap. See :mod:`imagenet_zsl.scoring`.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring.ranks import TieRanks, sort_block, true_ranks

LIST_FIELDS = ("seen_scores", "seen_ids", "unseen_scores", "unseen_ids")


#: np.memmap modes whose mapping is shared with the file (``"c"`` is a private copy: never dropped)
_SHARED_MODES = ("r", "r+", "w+")


def release_pages(*arrays: np.ndarray) -> None:
    """Drop the pages of memory-mapped ``arrays`` (np.memmap or views of one) from this process's
    resident set; other arrays are left alone.

    Why: a pass over memory-mapped top-k lists (336 bytes per image at m = 21) faults every page
    into the resident set, where it stays until the mapping is closed: 4.3 GB of peak RSS at 12.9M
    images. The data stays in the file and the page cache (``MADV_DONTNEED`` on a shared mapping
    keeps dirty pages); a later read faults it back in. Blocked passes call this after each block.
    """
    if not hasattr(mmap.mmap, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    for array in arrays:
        base: object = array
        shared = False  # only a mapping numpy opened as shared: a private one would lose writes
        while isinstance(base, np.ndarray):
            if isinstance(base, np.memmap):
                shared = getattr(base, "mode", None) in _SHARED_MODES
                if not shared:
                    break
            base = base.base
        if shared and isinstance(base, mmap.mmap) and not base.closed:
            base.madvise(mmap.MADV_DONTNEED)


def index_dtype(size: int) -> type:
    """The narrowest signed integer dtype that holds 0 .. ``size`` exactly."""
    for dtype in (np.int16, np.int32):
        if size <= np.iinfo(dtype).max:
            return dtype
    return np.int64


@dataclass(frozen=True)
class GZSLLists:
    """The top-m lists of consecutive images: seen_scores / seen_ids and unseen_scores / unseen_ids
    (n, m), float32 scores and integer ids of any width, kept as given (views, memory maps).
    ``seen_offset`` is added to each listed seen id to index the joint label space (padding -1
    stays -1), so seen ids in their own space need no shifted copy.

    ``seen_tail`` / ``unseen_tail`` (n,) integers: per image, the classes of that space left out
    of its list that score exactly the list's last score (0 where the list ends lower or is
    padded). Only the last value of a sorted top-m list can run past its end, so with these counts
    a tie group reaching the end of a list is counted whole (as ZSL's ``tied`` counts it). None:
    not known (lists written without them), and a tie group reaching the end of a list that does
    not hold its whole space is then undecided (a miss, :func:`~imagenet_zsl.scoring.gzsl.
    image_credit`)."""

    seen_scores: np.ndarray
    seen_ids: np.ndarray
    unseen_scores: np.ndarray
    unseen_ids: np.ndarray
    seen_offset: int = 0
    seen_tail: np.ndarray | None = None
    unseen_tail: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.seen_scores)

    def rows(self, start: int, stop: int) -> GZSLLists:
        """Images ``start:stop`` (views)."""
        tails = (None if t is None else t[start:stop] for t in (self.seen_tail, self.unseen_tail))
        return GZSLLists(*(getattr(self, f)[start:stop] for f in LIST_FIELDS), self.seen_offset, *tails)

    def joint_seen_ids(self) -> np.ndarray:
        """(n, m) int64 seen ids in the joint label space (-1 padding kept); a copy."""
        ids = self.seen_ids.astype(np.int64)
        if self.seen_offset:
            ids[ids >= 0] += self.seen_offset
        return ids

    def field(self, name: str) -> np.ndarray:
        """One list as the joint space sees it (``seen_ids`` shifted by the offset)."""
        if name == "seen_ids" and self.seen_offset:
            return self.joint_seen_ids()
        return getattr(self, name)


def _narrow_labels(labels: np.ndarray, n: int, num_classes: int) -> np.ndarray:
    """(n,) labels checked against [0, num_classes), in the narrowest exact integer dtype."""
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
    if n == 0:
        raise UserInputError("no images to evaluate (empty label array)")
    if labels.dtype.kind not in "iu":
        labels = labels.astype(np.int64)
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= num_classes:
        raise UserInputError(f"labels outside the label space [0, {num_classes}): min {low}, max {high}")
    return labels.astype(index_dtype(num_classes), copy=False)


def _narrow_ranks(ranks: TieRanks) -> TieRanks:
    """Tie ranks as int32 (8 bytes per image; counts of classes always fit)."""
    return TieRanks(
        np.asarray(ranks.above).astype(np.int32, copy=False),
        np.asarray(ranks.tied).astype(np.int32, copy=False),
    )


class GZSLTopK:
    """Per image, the top-m classes among seen classes and, separately, among unseen classes.

    Class indices are into one joint label space of C classes; ``seen_mask`` (C,) bool marks the
    seen ones. seen_scores/seen_ids, unseen_scores/unseen_ids: (N, m) float32/integer in the
    search tie order (padding id -1, score -inf); labels: (N,) joint indices. ``own_ranks``: the
    exact :class:`TieRanks` of the true class within its own label space (seen classes for a
    seen-class image, unseen for an unseen-class one), e.g. from the search; derived from the
    lists when omitted.

    Held as ``parts`` (:class:`GZSLLists`, never copied; :meth:`from_parts`, :meth:`concat`),
    read by :meth:`blocks`. Stored per image besides the lists: ``labels`` in the narrowest dtype
    that holds C (int16 up to 32,767 classes) and ``own_ranks`` as int32.
    """

    def __init__(
        self,
        seen_scores: np.ndarray,
        seen_ids: np.ndarray,
        unseen_scores: np.ndarray,
        unseen_ids: np.ndarray,
        labels: np.ndarray,
        seen_mask: np.ndarray,
        own_ranks: TieRanks | None = None,
    ) -> None:
        self._setup(
            (GZSLLists(seen_scores, seen_ids, unseen_scores, unseen_ids),), labels, seen_mask, own_ranks
        )

    @classmethod
    def from_parts(
        cls, parts: Sequence[GZSLLists], labels: np.ndarray, seen_mask: np.ndarray, own_ranks: TieRanks | None
    ) -> GZSLTopK:
        """The lists of ``parts`` one after the other (not copied); labels (N,) and own_ranks over
        all of them, in the same order."""
        gz = cls.__new__(cls)
        gz._setup(tuple(parts), labels, seen_mask, own_ranks)
        return gz

    def _setup(
        self,
        parts: tuple[GZSLLists, ...],
        labels: np.ndarray,
        seen_mask: np.ndarray,
        own_ranks: TieRanks | None,
    ) -> None:
        self.seen_mask = np.asarray(seen_mask, dtype=bool)
        self.parts = parts
        n = sum(len(p) for p in parts)
        widths = {getattr(p, f).shape[1:] for p in parts for f in LIST_FIELDS}
        rows_ok = all(getattr(p, f).shape[0] == len(p) for p in parts for f in LIST_FIELDS)
        rows_ok &= all(
            t is None or np.shape(t) == (len(p),) for p in parts for t in (p.seen_tail, p.unseen_tail)
        )
        if not parts or len(widths) != 1 or len(next(iter(widths))) != 1 or not rows_ok:
            shapes = [[getattr(p, f).shape for f in LIST_FIELDS] for p in parts]
            raise ValueError(f"GZSL top-k lists must share one (N, m) shape with N={len(labels)}: {shapes}")
        self.labels = _narrow_labels(labels, n, len(self.seen_mask))
        self._check_ids()
        if self.seen_mask.all() or not self.seen_mask.any():
            raise UserInputError("GZSL needs both seen and unseen classes in the label space")
        if own_ranks is None:
            own_ranks = self._derive_own_ranks()
        elif len(own_ranks) != n:
            raise ValueError(f"own_ranks hold {len(own_ranks)} images, the lists {n}")
        self.own_ranks = _narrow_ranks(own_ranks)

    def _check_ids(self) -> None:
        """Every listed id in its own label space, block by block (O(block · m) temporaries)."""
        size = len(self.seen_mask)
        for _, _, lists in self.blocks():
            for name, want in (("seen", True), ("unseen", False)):
                ids = getattr(lists, f"{name}_ids")
                listed = ids[ids >= 0].astype(np.int64)
                if name == "seen":
                    listed += lists.seen_offset
                if len(listed) and (listed.max() >= size or (self.seen_mask[listed] != want).any()):
                    raise ValueError(f"{name}_ids hold classes outside the {name} label space")

    def _derive_own_ranks(self) -> TieRanks:
        """:class:`TieRanks` of each true class within its own label space, judged from the lists
        (one block of images at a time); a tie group reaching the end of its list is counted whole
        where the list's tail is known (:meth:`tails`), else as far as the list shows it. A true
        class outside its own list gets ``above`` = m (its score is not in the list: a miss, though
        it may tie the list's last score): pass the search's exact ranks where that matters."""
        above = np.empty(len(self.labels), np.int32)
        tied = np.empty(len(self.labels), np.int32)
        for lo, hi, lists in self.blocks():
            seen_img = self.seen_mask[self.labels[lo:hi]]
            own_ids = np.where(seen_img[:, None], lists.joint_seen_ids(), lists.unseen_ids)
            own_scores = np.where(seen_img[:, None], lists.seen_scores, lists.unseen_scores)
            seen_tail, unseen_tail = self.tails(lists)
            own_tail = None
            if seen_tail is not None and unseen_tail is not None:
                own_tail = np.where(seen_img, seen_tail, unseen_tail)
            ranks = true_ranks(
                self.labels[lo:hi].astype(np.int64),
                topk_ids=own_ids,
                topk_scores=own_scores,
                tail_ties=own_tail,
            )
            above[lo:hi], tied[lo:hi] = ranks.above, ranks.tied
        return TieRanks(above, tied)

    def tails(self, lists: GZSLLists) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(seen, unseen) (n,) int64 tails of a block's lists (:class:`GZSLLists`): the stored
        counts, 0 for a list that holds its whole space (m at least the space's classes), None
        where neither tells."""
        out = []
        for tail, size in ((lists.seen_tail, self.seen_classes), (lists.unseen_tail, self.unseen_classes)):
            if tail is not None:
                out.append(np.asarray(tail).astype(np.int64, copy=False))
            elif size <= self.m:
                out.append(np.zeros(len(lists), np.int64))
            else:
                out.append(None)
        return out[0], out[1]

    @property
    def seen_classes(self) -> int:
        """Classes of the seen label space."""
        return int(np.count_nonzero(self.seen_mask))

    @property
    def unseen_classes(self) -> int:
        """Classes of the unseen label space."""
        return len(self.seen_mask) - self.seen_classes

    def blocks(self, block: int | None = None) -> Iterator[tuple[int, int, GZSLLists]]:
        """(start, stop, lists of images start:stop) for consecutive blocks of at most ``block``
        images (default: ``scoring.ranks.SORT_BLOCK``, read at each call); a block never spans
        two parts."""
        block = sort_block(block)
        start = 0
        for part in self.parts:
            for lo in range(0, len(part), block):
                hi = min(lo + block, len(part))
                yield start + lo, start + hi, part.rows(lo, hi)
                release_pages(*(getattr(part, f) for f in LIST_FIELDS))
            start += len(part)

    def _joined(self, name: str) -> np.ndarray:
        if len(self.parts) == 1:
            return self.parts[0].field(name)
        return np.concatenate([p.field(name) for p in self.parts])

    # whole (N, m) lists in the joint space: the stored array itself for one part, else a copy
    seen_scores = property(lambda self: self._joined("seen_scores"))
    seen_ids = property(lambda self: self._joined("seen_ids"))
    unseen_scores = property(lambda self: self._joined("unseen_scores"))
    unseen_ids = property(lambda self: self._joined("unseen_ids"))

    @property
    def m(self) -> int:
        return int(self.parts[0].seen_ids.shape[1])

    @property
    def seen_images(self) -> np.ndarray:
        return self.seen_mask[self.labels]

    def __len__(self) -> int:
        return len(self.labels)

    @classmethod
    def concat(cls, parts: Sequence[GZSLTopK]) -> GZSLTopK:
        """The images of ``parts`` one after the other; their lists are shared, not copied."""
        ranks = TieRanks(
            np.concatenate([p.own_ranks.above for p in parts]),
            np.concatenate([p.own_ranks.tied for p in parts]),
        )
        labels = np.concatenate([p.labels for p in parts])
        return cls.from_parts([q for p in parts for q in p.parts], labels, parts[0].seen_mask, ranks)
