"""Decoded feature blocks shared by several readers of the same shards in one process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from imagenet_zsl.features.shard_files import FeatureBlock


class SharedBlocks:
    """Decoded (float32) feature blocks kept in memory up to ``max_bytes``, read-only, so that
    several consumers of the same shards in one process (every model of a batch run on one split)
    read and convert each shard once. Blocks that do not fit are streamed as usual."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.used = 0
        self.reads = 0  # shards read from disk while sharing (for tests and logs)
        self._blocks: dict[tuple, list[FeatureBlock]] = {}

    def get(self, key: tuple) -> list[FeatureBlock] | None:
        return self._blocks.get(key)

    def put(self, key: tuple, blocks: list[FeatureBlock]) -> list[FeatureBlock]:
        self.reads += 1
        size = sum(b.features.nbytes + (0 if b.logits is None else b.logits.nbytes) for b in blocks)
        for block in blocks:  # shared by several readers: nobody may change them in place
            for array in (block.features, block.logits, block.labels, block.ids):
                if array is not None:
                    array.flags.writeable = False
        if self.used + size <= self.max_bytes:
            self._blocks[key] = blocks
            self.used += size
        return blocks


_SHARED_BLOCKS: SharedBlocks | None = None


def active() -> SharedBlocks | None:
    """The blocks being shared now (inside :func:`shared_blocks`), or None."""
    return _SHARED_BLOCKS


@contextlib.contextmanager
def shared_blocks(max_bytes: int) -> Iterator[SharedBlocks]:
    """Within the block, :meth:`FeatureDir.shard_blocks` keeps what it reads (up to ``max_bytes``)
    for the next reader of the same rows; memory is released on exit."""
    global _SHARED_BLOCKS
    previous, _SHARED_BLOCKS = _SHARED_BLOCKS, SharedBlocks(max_bytes)
    try:
        yield _SHARED_BLOCKS
    finally:
        _SHARED_BLOCKS = previous
