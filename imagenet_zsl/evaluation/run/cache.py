"""The resumable search cache: each shard's search result under ``.<out>.search-cache/``, keyed
by everything it depends on (:class:`SetKey`, :func:`shard_key`); and the shared one that
``run`` opens (:func:`shared_search`), keyed per label space (:func:`space_key`), so that the
evaluations of one model on several splits search its held-out seen and validation images in
the label spaces they share (the seen and validation classes) once."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.evaluation.queries import QuerySource
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.features.scored_shards import UNSTORED_KEY

#: 3: scores from fixed-shape products (issue 35) and models scored by their own rule (LATEM
#: issue 33): results of version 2 have other bits or other lists; 4: row numbers relative to the
#: shard (the set's offsets are added when the shards are joined, so a shard's entry never depends
#: on the shards before it: issue 38, every torchrun rank scores its own test shards), and a
#: scored shard keyed by its features' digests too (``unstored_sha256``); 5: each space's lists
#: carry their tails (``SPACE.tail``: unlisted classes tied with a list's last score, issue 45); 6:
#: the CPU products are 512 x 512 GEMM calls (issue 46), whose scores may differ in the last bit
#: from the 256 x 256 calls' on some BLAS kernels: a resumed run never mixes the two
CACHE_VERSION = 6


class SearchCache:
    """Per-shard search results under one directory, each tagged with the key it was made with."""

    def __init__(self, root: Path | None):
        self.root = root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def _path(self, set_name: str, shard: str) -> Path:
        return self.root / f"{set_name}-{shard}.npz"

    def get(self, set_name: str, shard: str, key: str) -> dict[str, np.ndarray] | None:
        if self.root is None:
            return None
        path = self._path(set_name, shard)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["key"]) != key:
                    return None
                return {name: data[name] for name in data.files if name != "key"}
        except (OSError, ValueError, KeyError):
            return None

    def has(self, set_name: str, shard: str) -> bool:
        """Whether a result of the shard is stored (under some key: :meth:`get` checks it)."""
        return self.root is not None and self._path(set_name, shard).exists()

    def put(self, set_name: str, shard: str, key: str, arrays: dict[str, np.ndarray]) -> None:
        if self.root is None:
            return
        buffer = io.BytesIO()
        np.savez(buffer, key=np.asarray(key), **arrays)
        atomic_write_bytes(self._path(set_name, shard), buffer.getvalue())


def run_cache_root(out: Path) -> Path:
    """The resumable search cache of the run written to ``out`` (``.<out>.search-cache`` beside it)."""
    return out.parent / f".{out.name}.search-cache"


@contextlib.contextmanager
def run_cache(out: Path) -> Iterator[SearchCache]:
    """The search cache of ``evaluate --out OUT`` while the block runs (:func:`run_cache_root`).

    It is this command's own temporary, so it goes when the block ends, written or failed (a NaN,
    an inf, a shard of the wrong width: the same inputs fail again), except where resuming is what
    it is for: an interrupted run (Ctrl-C, a kill) or one the system stopped (a full disk, out of
    memory) keeps it, and re-running the command searches only the shards not finished."""
    cache = SearchCache(run_cache_root(out))
    try:
        yield cache
    except (OSError, MemoryError):  # the system's: resumable once space or memory is freed
        raise
    except Exception:
        shutil.rmtree(run_cache_root(out), ignore_errors=True)
        raise
    shutil.rmtree(run_cache_root(out), ignore_errors=True)


@dataclass(frozen=True)
class SetKey:
    """The parts of a shard's cache key shared by every shard of one image set, hashed once per
    set (the prototype digests once per label space: each searcher caches its own)."""

    name: str
    source_digest: str
    #: label space -> sha256 of its prototypes
    spaces: dict[str, str]
    #: label space -> k
    ks: dict[str, int]
    lookup_sum: int
    lookup_digest: str
    kept_digest: str | None

    @classmethod
    def of(
        cls,
        name: str,
        lookup: np.ndarray,
        spaces: dict[str, TopKSearcher],
        source: QuerySource,
        kept_ids: np.ndarray | None,
    ) -> SetKey:
        return cls(
            name,
            source.digest,
            {s: sp.digest for s, sp in spaces.items()},
            {s: sp.k for s, sp in spaces.items()},
            int(lookup.sum()),
            hashlib.sha256(lookup.tobytes()).hexdigest(),
            None if kept_ids is None else hashlib.sha256(kept_ids.tobytes()).hexdigest(),
        )


def shard_digests(shard: dict) -> dict[str, str]:
    """The digests of a shard's content: its record's ``sha256`` (a stored shard's features,
    labels and ids), plus, for a shard scored while extracted, its unstored features' (and
    logits') as ``unstored.features``: without them two extractions of the same images with
    other settings (a crop, a backbone: the same labels and ids) would share keys."""
    unstored = shard.get(UNSTORED_KEY) or {}
    return {**shard.get("sha256", {}), **{f"unstored.{kind}": d for kind, d in unstored.items()}}


def shard_key(set_key: SetKey, shard: dict) -> str:
    """Everything a shard's cached search result depends on, hashed (the same bytes as before the
    digests were computed once per set). Not the shard's place in its set: the cached row
    numbers are the shard's own (:data:`CACHE_VERSION` 4)."""
    return hashlib.sha256(
        json.dumps(
            [
                CACHE_VERSION,
                set_key.name,
                set_key.source_digest,
                set_key.spaces,
                sorted(set_key.spaces),
                shard_digests(shard),
                int(shard["rows"]),
                set_key.ks,
                set_key.lookup_sum,
                set_key.lookup_digest,
                set_key.kept_digest,
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()


#: the shared caches open in this process, innermost last (:func:`shared_search`)
_SHARED: list[SearchCache] = []


@contextlib.contextmanager
def shared_search(root: Path) -> Iterator[SearchCache]:
    """While open, every evaluation in this process keeps its searches of the held-out seen and
    validation images under ``root``, one file per (image set, shard, label space) keyed by
    :func:`space_key`, and reuses them: ``run`` evaluates a model on several splits, whose seen
    and validation images are searched in the same seen and validation label spaces (and, with
    ``label_space: all``, the same test label space). The caller removes ``root``."""
    cache = SearchCache(root)
    _SHARED.append(cache)
    try:
        yield cache
    finally:
        _SHARED.remove(cache)


def shared_cache() -> SearchCache | None:
    """The innermost open :func:`shared_search` cache (None: none open, as in ``evaluate``)."""
    return _SHARED[-1] if _SHARED else None


def space_key(set_key: SetKey, shard: dict, space: str, own: bool) -> str:
    """Everything one shard's search in one label space depends on: the images (shard sha256,
    the class lookup, the kept images), the query source, that space's prototypes and k, and
    whether the true classes' tie ranks are in it (``own``); not the other spaces."""
    return hashlib.sha256(
        json.dumps(
            [
                CACHE_VERSION,
                "space",
                set_key.name,
                set_key.source_digest,
                space,
                set_key.spaces[space],
                set_key.ks[space],
                own,
                shard_digests(shard),
                int(shard["rows"]),
                set_key.lookup_sum,
                set_key.lookup_digest,
                set_key.kept_digest,
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()
