"""Checks behind :class:`~imagenet_zsl.features.feature_dir.FeatureDir`: the manifest (read with
:func:`imagenet_zsl.io.read_manifest_verified`, then its feature fields) and each shard file's
sha256, hashed once per file version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.head import HEAD_FILE
from imagenet_zsl.features.shard_files import FORMAT, REQUIRED_FILES, RERUN, SHARD_FILES
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_write_text,
    cache_dir,
    read_manifest_verified,
    sha256_bytes,
    sha256_file,
)

#: in-process record of shard files whose sha256 matched the manifest, keyed by
#: (path, device, inode, size, mtime_ns, ctime_ns): a second read of an unchanged file is free
_VERIFIED: dict[tuple, str] = {}
_VERIFIED_CACHE_DIR = "verified-shards"


def _hashed_on_open(relpath: str) -> bool:
    """Small files (run record, shard markers, logs) are hashed when a directory is opened; shard
    arrays are hashed on first use (:func:`check_shard_file`) and the head by ``head()``."""
    return not relpath.endswith(".npy") and relpath != HEAD_FILE


def read_feature_manifest(path: Path) -> dict[str, Any]:
    """The verified manifest of feature directory ``path`` (every listed file present with its
    size; small files hashed) with valid feature fields; one-line UserInputError otherwise."""
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise UserInputError(
            f"{manifest_path}: no feature manifest; point to a directory written by "
            "'imagenet-zsl extract' or 'imagenet-zsl simulate' (after --merge for torchrun runs)"
        )
    manifest = read_manifest_verified(path, FORMAT, hash_files=_hashed_on_open, rerun=RERUN)
    problem = manifest_problem(manifest)
    if problem:
        raise UserInputError(
            f"{manifest_path}: {problem}; the feature manifest is incomplete or damaged: "
            "re-run the extraction (or 'imagenet-zsl extract --merge DIR')"
        )
    return manifest


def _shard_problem(i: int, shard: Any) -> str | None:
    if not isinstance(shard, dict) or not isinstance(shard.get("name"), str):
        return f"shards[{i}] has no 'name'"
    if not isinstance(shard.get("rows"), int) or shard["rows"] < 0:
        return f"shards[{i}] ({shard['name']}) has no row count 'rows'"
    if "/" in shard["name"] or shard["name"].startswith("."):
        return f"shards[{i}]: {shard['name']!r} is not a plain shard name"
    digests = shard.get("sha256")
    if digests is not None and not (
        isinstance(digests, dict)
        and all(k in SHARD_FILES and isinstance(v, str) and len(v) == 64 for k, v in digests.items())
    ):
        return f"shards[{i}] ({shard['name']}): 'sha256' must map each shard file kind to a hex digest"
    return None


def manifest_problem(manifest: Any) -> str | None:
    """What makes ``manifest`` unusable as a feature manifest (None when it is fine)."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    classes = manifest.get("classes")
    if classes is None:
        return "no 'classes' list (the label space the shards' labels index)"
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return "'classes' must be a list of wnids"
    if not isinstance(manifest.get("dim"), int) or isinstance(manifest.get("dim"), bool):
        return "no integer 'dim' (the feature dimension)"
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        return "no 'shards' list"
    for i, shard in enumerate(shards):
        problem = _shard_problem(i, shard)
        if problem:
            return problem
    return None


def unverifiable(shards: list[dict[str, Any]]) -> list[str]:
    """Names of the shards whose manifest record lacks the sha256 of a required file."""
    return [s["name"] for s in shards if not all(k in (s.get("sha256") or {}) for k in REQUIRED_FILES)]


def _file_key(path: Path) -> tuple:
    """What changes whenever a file's bytes may have changed (ctime cannot be set back by users)."""
    st = path.stat()
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _marker(key: tuple) -> Path | None:
    """The on-disk note that ``key``'s file was verified (shared between runs); None without a cache."""
    try:
        root = cache_dir() / _VERIFIED_CACHE_DIR
    except OSError:
        return None
    return root / sha256_bytes(repr(key).encode())[:40]


def _known_good(key: tuple, digest: str) -> bool:
    if _VERIFIED.get(key) == digest:
        return True
    marker = _marker(key)
    try:
        if marker is not None and marker.read_text() == digest:
            _VERIFIED[key] = digest
            return True
    except OSError:
        pass
    return False


def _remember_good(key: tuple, digest: str) -> None:
    _VERIFIED[key] = digest
    marker = _marker(key)
    if marker is None:
        return
    try:
        atomic_write_text(marker, digest)
    except OSError:  # a read-only cache only costs a re-hash next time
        pass


def check_shard_file(path: Path, digest: str) -> None:
    """Refuse a shard file whose sha256 is not ``digest`` (hashed once per file version, also
    noted in the cache directory so the next run does not hash it again)."""
    key = _file_key(path)
    if _known_good(key, digest):
        return
    if sha256_file(path) != digest:
        raise UserInputError(
            f"{path}: sha256 does not match the manifest: the shard is corrupted or was "
            "changed after extraction; restore it or re-extract (delete its .done.json and "
            "re-run the extract command)"
        )
    _remember_good(key, digest)
