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
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError

MANIFEST_NAME = "manifest.json"
CACHE_ENV = "IMAGENET_ZSL_CACHE"


def cache_dir() -> Path:
    """Where derived data is cached (created on first use): ``$IMAGENET_ZSL_CACHE``, else
    ``$XDG_CACHE_HOME/imagenet-zsl`` (default ``~/.cache/imagenet-zsl``)."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV]).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imagenet-zsl"
    root.mkdir(parents=True, exist_ok=True)
    return root


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


def read_manifest(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed ``manifest.json`` of ``directory``, or None if it has none (or it is unreadable)."""
    path = Path(directory) / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def check_out_dir(
    final: str | os.PathLike, tool: str, inputs: Iterable[str | os.PathLike | None] = ()
) -> Path:
    """Refuse an ``--out`` that would destroy data; returns it resolved.

    The rule for every command that writes a directory:
    - an ``--out`` that contains, or lies inside, one of the command's ``inputs`` is refused;
    - an existing ``--out`` is replaced only if it is empty or its manifest says ``tool`` wrote it;
    - an ``--out`` that is a file, or whose parent is not a writable directory, is refused.
    """
    final = Path(final)
    resolved = final.resolve()
    for given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        if _inside(resolved, source) or _inside(source, resolved):
            raise UserInputError(
                f"--out {final} overlaps the input {given}: writing there could destroy it; "
                "choose an --out outside every input"
            )
    if resolved.exists() or resolved.is_symlink():
        if not resolved.is_dir():
            raise UserInputError(f"--out {final} exists and is not a directory; choose another path")
        manifest = read_manifest(resolved)
        empty = not any(resolved.iterdir())
        if not empty and (manifest is None or manifest.get("tool") != tool):
            short = tool.removeprefix("imagenet-zsl ")
            raise UserInputError(
                f"--out {final} exists and is not an output of '{short}'; choose another path or remove it"
            )
    _check_writable_parent(final, resolved)
    return resolved


def _check_writable_parent(final: Path, resolved: Path) -> None:
    """The nearest existing ancestor of ``--out`` must be a writable directory."""
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserInputError(f"--out {final}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserInputError(f"--out {final}: {parent} is not writable; choose a writable location")


def check_out_file(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    suffixes: tuple[str, ...] = (),
) -> Path:
    """Refuse an ``--out`` file that has the wrong suffix, is a directory, is (inside) an input, or
    cannot be written; returns it resolved. The file itself is then written atomically."""
    out = Path(out)
    if suffixes and out.suffix not in suffixes:
        raise UserInputError(f"--out {out}: must end in {' or '.join(suffixes)}")
    if out.is_dir():
        raise UserInputError(
            f"--out {out} is a directory; give a file name ending in {' or '.join(suffixes)}"
        )
    resolved = out.resolve()
    for given in inputs:
        if given is not None and _inside(resolved, Path(given).resolve()):
            raise UserInputError(
                f"--out {out} would overwrite the input {given}; choose an --out outside every input"
            )
    _check_writable_parent(out, resolved)
    return resolved


def remove_stale_temps(final: Path) -> None:
    """Remove temp siblings (``.NAME.*.tmp``) that a killed run of the same output left behind."""
    if not final.parent.is_dir():
        return
    for leftover in final.parent.glob(f".{final.name}.*.tmp"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_directory(
    final: str | os.PathLike, *, tool: str, inputs: Iterable[str | os.PathLike | None] = ()
) -> Iterator[Path]:
    """Yield a temp directory next to ``final``; on success it replaces ``final`` in one rename.

    ``tool`` is the command writing the directory (``"imagenet-zsl evaluate"``): its manifest must
    carry it as ``"tool"``, and an existing ``final`` is only replaced if written by the same
    tool (see :func:`check_out_dir`). On any exception the temp directory is removed, so a failed
    run leaves no partial output and the previous output untouched.
    """
    final = Path(final)
    check_out_dir(final, tool, inputs)
    remove_stale_temps(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        written = read_manifest(tmp)
        if written is not None and written.get("tool") != tool:
            raise ValueError(f"bug: manifest of {final} says tool {written.get('tool')!r}, not {tool!r}")
        if final.exists():
            check_out_dir(final, tool)  # still ours: nothing else wrote there meanwhile
            backup = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old.tmp", dir=final.parent))
            os.replace(final, backup / "old")
            os.replace(tmp, final)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_VERSIONED_PACKAGES = (
    "imagenet-zsl",
    "numpy",
    "scipy",
    "networkx",
    "nltk",
    "pandas",
    "gensim",
    "wordfreq",
    "torch",
    "torchvision",
    "timm",
    "faiss-cpu",
    "faiss-gpu-cu12",
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
