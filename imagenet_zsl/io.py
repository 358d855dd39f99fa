"""Atomic writes, checksums and manifests: nothing is half-written, every output is traceable."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST_NAME = "manifest.json"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Streaming sha256 of a file (constant memory for multi-GB shards)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _temp_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator:
    """Binary handle on a temp file beside ``path``; renamed over ``path`` only on success."""
    tmp = _temp_sibling(path)
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    path = Path(path)
    with _atomic_file(path) as handle:
        handle.write(data)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, 2-space indent, trailing newline) so same input → same bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, canonical_json(obj))


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> Path:
    """np.save through a temp file + rename (never a truncated .npy on interrupt)."""
    path = Path(path)
    with _atomic_file(path) as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
    return path


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temp directory next to ``final``; on success it replaces ``final`` in one rename.

    On any exception the temp directory is removed, so a failed run leaves no partial output.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            if not overwrite:
                raise FileExistsError(f"{final} exists; pass overwrite=True or remove it")
            backup = final.with_name(f".{final.name}.old")
            if backup.exists():
                shutil.rmtree(backup)
            os.replace(final, backup)
            os.replace(tmp, final)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_VERSIONED_PACKAGES = (
    "imagenet-zsl", "numpy", "scipy", "networkx", "nltk", "pandas", "gensim", "wordfreq",
    "torch", "torchvision", "timm", "faiss-cpu", "faiss-gpu-cu12",
)


def software_versions(packages: tuple[str, ...] = _VERSIONED_PACKAGES) -> dict[str, str]:
    """Versions of the libraries that shape outputs (for manifests)."""
    versions = {"python": platform.python_version()}
    for name in packages:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def command_line() -> str:
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])


def file_record(path: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """{path, bytes, sha256} for a manifest's inputs/outputs list."""
    path = Path(path)
    shown = str(path.relative_to(root)) if root is not None else str(path)
    return {"path": shown, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
