"""Atomic writes: a file is written to a temp sibling and renamed, so nothing is half-written; the
process umask the temp files are given; deterministic JSON; the temp siblings a killed run left."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


def current_umask() -> int:
    """The process umask, read without changing it where the system allows (Linux ``/proc``)."""
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
        with open("/proc/self/status", encoding="ascii") as handle:
            return next(int(line.split()[1], 8) for line in handle if line.startswith("Umask:"))
    mask = os.umask(0o022)  # elsewhere: set and restore (not atomic, but only on other systems)
    os.umask(mask)
    return mask


def honour_umask(path: str | os.PathLike, directory: bool = False) -> None:
    """mkstemp/mkdtemp create 0600/0700 whatever the umask; give outputs the modes the user's
    umask asks for (files 0666 & ~umask, directories 0777 & ~umask), as ``open``/``mkdir`` do."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def _temp_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    honour_umask(tmp)
    return Path(tmp)


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator:
    """Binary handle on a temp file beside ``path``; renamed over ``path`` only on success. An
    OSError without a file name (ENOSPC, EFBIG from ``write``) gets ``path``'s, for the user."""
    tmp = _temp_sibling(path)
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    path = Path(path)
    with atomic_file(path) as handle:
        handle.write(data)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, 2-space indent, trailing newline) so same input → same bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    converters = ((np.integer, int), (np.floating, float), (np.ndarray, np.ndarray.tolist), (Path, str))
    for kind, convert in (*converters, (set | frozenset, sorted)):
        if isinstance(obj, kind):
            return convert(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, canonical_json(obj))


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> Path:
    """np.save through a temp file + rename (never a truncated .npy on interrupt)."""
    path = Path(path)
    with atomic_file(path) as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
    return path


def remove_stale_temps(final: Path) -> None:
    """Remove temp siblings (``.NAME.XXXXXXXX[.old].tmp``, as mkdtemp/mkstemp name them here) that
    a killed run of the same output left behind; never those of a sibling output whose name
    extends this one (``eszsl.v2``), whatever characters the name holds."""
    if not final.parent.is_dir():
        return
    own = re.compile(rf"\.{re.escape(final.name)}\.[a-z0-9_]{{8}}(\.old)?\.tmp")
    for leftover in (p for p in final.parent.iterdir() if own.fullmatch(p.name)):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
