"""sha256 of bytes and files, and of the files a manifest lists, hashed once while unchanged
(bottom utility: the stages import them from here; :mod:`imagenet_zsl.manifests` records them)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["listed_sha256", "sha256_bytes", "sha256_file"]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Streaming sha256 of a file (constant memory for multi-GB shards)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


#: :func:`listed_sha256`'s digests, by file identity (path, device, inode, size, mtime and ctime ns)
_LISTED: dict[tuple[str, int, int, int, int, int], str] = {}
#: at most this many kept (a ``run`` checks about ten files per cell)
_LISTED_MAX = 65536


def listed_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file a manifest lists (``safe_output``'s check of an ``--out``, the verified
    manifest reader), hashed once per process while the file is unchanged: keyed by its absolute
    path, device, inode, size, and modification and change times in ns.

    Why: re-running ``evaluate`` over its own output checks the listed files (the multi-GB top-k
    lists among them) before any work, when ``atomic_directory`` starts, and just before the swap.
    A write to a file changes its change time (which no user can set), so a file edited in between
    is hashed again and refused exactly as before."""
    info = os.stat(path)
    key = (os.path.abspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if key not in _LISTED:
        if len(_LISTED) >= _LISTED_MAX:
            _LISTED.clear()
        _LISTED[key] = sha256_file(Path(path))
    return _LISTED[key]
