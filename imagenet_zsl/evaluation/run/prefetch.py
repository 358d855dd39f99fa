"""Reading ahead: the next block of a shard (or the next shard's first block) is read and prepared
in one background thread while the current block is searched.

Preparing a block (reading its float16 rows from the memory-mapped shard, converting them to
float32 and checking them: :func:`imagenet_zsl.evaluation.run.search_sets.search_shard`; on a
GPU, copying them into pinned memory and starting their upload) is numpy work that releases the
GIL, so it overlaps with the search of the block before, on the CPU as on a GPU.

What the caller sees does not change: the same blocks in the same order, and an error met while
preparing a block (a corrupted shard file, NaN rows) is raised when that block is asked for,
exactly where reading it in the caller's thread would have raised it, never earlier. Memory: at
most one block ahead of the one the caller holds (the caller drops its block before asking for
the next one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: what opening a shard gives: (its header, an iterator of prepared blocks, how many blocks)
Opened = tuple[Any, Iterator[Any], int]


def _done(fn: Callable[[], Any]) -> Future:
    """``fn()`` run now, in this thread, as a finished future (its result or its error)."""
    future: Future = Future()
    try:
        future.set_result(fn())
    except BaseException as err:  # kept for the caller, who re-raises it where it asks
        future.set_exception(err)
    return future


class _Ahead:
    """A shard opened in the background: its header and first block, or the error met."""

    def __init__(self, opened: Opened, first: Future | None):
        self.opened, self.first = opened, first


class BlockReader:
    """One background thread that reads the next block while the caller searches the current one.

    :meth:`open` opens a shard (``open_fn() -> (header, blocks iterator, block count)``) and
    returns its header and its blocks, each next block taken from the iterator in the background
    while the caller holds the current one. :meth:`expect` names the shard likely searched next:
    once the current shard's last block is handed out, that shard is opened and its first block
    read in the background, to be picked up by the :meth:`open` with the same key (a shard found
    in a cache is never opened; a guess not taken is dropped with its error, if any).
    :meth:`close` waits for the thread (a :func:`search_set` ends with it)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._expected: tuple[tuple, Callable[[], Opened]] | None = None
        self._ahead: tuple[tuple, Future] | None = None

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="read-ahead")
        return self._pool.submit(fn, *args)

    def expect(self, key: tuple | None, open_fn: Callable[[], Opened] | None) -> None:
        """The shard probably searched after the current one (None: none, or not worth it)."""
        self._expected = None if key is None or open_fn is None else (key, open_fn)

    def open(self, key: tuple, open_fn: Callable[[], Opened]) -> tuple[Any, Iterator[Any]]:
        """(header, blocks) of a shard: opened in the background when it was expected under ``key``
        (its error, if any, raised here), else by ``open_fn()`` now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == key:
            started = ahead[1].result()  # opening raised: raise it here, as opening now would
            header, blocks, count = started.opened
            return header, self._handed_out(blocks, count, started.first)
        if ahead is not None:
            _drop(ahead[1])
        header, blocks, count = open_fn()
        return header, self._handed_out(blocks, count, None)

    def _handed_out(self, blocks: Iterator[Any], count: int, first: Future | None) -> Iterator[Any]:
        """The ``count`` blocks, each next one read in the background while the caller holds this
        one; after the last, the expected shard is opened in the background."""
        if count == 0:
            self._start_expected()
            return
        pending = first if first is not None else _done(lambda: next(blocks))
        for index in range(count):
            block = pending.result()  # an error preparing this block is raised here
            if index + 1 < count:
                pending = self._submit(next, blocks)
            else:
                self._start_expected()
            yield block
            del block  # the caller has dropped it too: at most one block ahead

    def _start_expected(self) -> None:
        expected, self._expected = self._expected, None
        if expected is None:
            return
        key, open_fn = expected
        self._ahead = (key, self._submit(_open_ahead, open_fn))

    def close(self) -> None:
        """Drop any guess and wait for the thread (what it was doing is not needed any more)."""
        self._expected = None
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            _drop(ahead[1])
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def _drop(guess: Future) -> None:
    """Drop a guess not taken, its result and its error: cancelled if it has not started, else
    waited for (one reading thread at a time, one block ahead at most)."""
    if not guess.cancel():
        guess.exception()


def _open_ahead(open_fn: Callable[[], Opened]) -> _Ahead:
    """Open a shard and read its first block (in the background thread). An error opening it is
    raised by the future; an error reading the first block is kept for when that block is asked."""
    opened = open_fn()
    _, blocks, count = opened
    return _Ahead(opened, _done(lambda: next(blocks)) if count else None)
