"""The one manifest: its writer, its verifying reader and the file records it lists, so every
output is traceable to its inputs, parameters and software."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_json
from imagenet_zsl.checksums import listed_sha256, sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import resolve_path
from imagenet_zsl.versions import command_line, software_versions

MANIFEST_NAME = "manifest.json"
#: seconds things took: never hashed by a manifest (the rest of an output is the same bytes each time)
TIMINGS_NAME = "timings.json"


def read_manifest(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed ``manifest.json`` of ``directory``, or None if it has none (or it is unreadable)."""
    path = Path(directory) / MANIFEST_NAME
    try:  # not a regular file (a FIFO would block): no manifest
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def file_record(path: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """{path, bytes, sha256} for a manifest's inputs/outputs list."""
    path = Path(path)
    shown = str(path.relative_to(root)) if root is not None else str(path)
    return {"path": shown, "bytes": path.stat().st_size, "sha256": sha256_file(path)}


#: ``imagenet-zsl/<kind>-v<N>``: a reader refuses a format (or a version) it does not know
FORMAT_PATTERN = re.compile(r"^imagenet-zsl/[a-z0-9][a-z0-9-]*-v[0-9]+$")
#: the keys every manifest has; a stage's own fields (``classes``, ``splits`` ...) sit beside them
MANIFEST_KEYS = ("format", "tool", "command", "inputs", "parameters", "software", "files")


def directory_files(
    directory: str | os.PathLike, known_sha256: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """{path, bytes, sha256} of every file under ``directory`` but its manifest and timings
    (:data:`TIMINGS_NAME`), sorted by path. ``known_sha256`` (relative path → digest) skips
    re-hashing files the caller has just written and hashed (multi-GB feature shards)."""
    root = Path(directory)
    known = known_sha256 or {}
    records = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST_NAME or path.name == TIMINGS_NAME:
            continue
        digest = known.get(rel) or sha256_file(path)
        records.append({"path": rel, "bytes": path.stat().st_size, "sha256": digest})
    return records


def write_manifest(
    directory: str | os.PathLike,
    *,
    format: str,  # noqa: A002 - the manifest key
    tool: str,
    inputs: Any = None,
    parameters: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    known_sha256: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Write ``directory/manifest.json`` (atomically) and return it: the one manifest writer.

    Every output directory carries the same keys (:data:`MANIFEST_KEYS`): its versioned
    ``format``, the ``tool`` that wrote it (``"imagenet-zsl evaluate"``), the ``command`` line,
    the ``inputs`` (file records or a mapping of them), the ``parameters``, the ``software``
    versions and ``files``: path, size and sha256 of every other file in the directory. A stage's
    own fields (``fields``: the class list, the splits ...) are added beside them and may not
    shadow them. Call it last, once every other file is in place; :func:`read_manifest_verified`
    is its reader.
    """
    if not FORMAT_PATTERN.match(format):
        raise ValueError(f"bug: manifest format {format!r} is not 'imagenet-zsl/<kind>-v<N>'")
    if not tool.startswith("imagenet-zsl"):
        raise ValueError(f"bug: manifest tool {tool!r} does not name an imagenet-zsl command")
    if clash := set(fields or {}) & set(MANIFEST_KEYS):
        raise ValueError(f"bug: manifest fields {sorted(clash)} shadow the standard keys")
    manifest: dict[str, Any] = {
        "format": format,
        "tool": tool,
        "command": command_line(),
        "inputs": inputs if inputs is not None else [],
        "parameters": dict(parameters or {}),
        "software": software_versions(),
        **dict(fields or {}),
        "files": directory_files(directory, known_sha256),
    }
    atomic_write_json(Path(directory) / MANIFEST_NAME, manifest)
    return manifest


def _manifest_problem(path: Path, problem: str, rerun: str) -> UserInputError:
    return UserInputError(f"{path}: {problem}" + (f"; {rerun}" if rerun else ""))


def read_manifest_verified(
    directory: str | os.PathLike,
    formats: str | Iterable[str],
    *,
    hash_files: bool | Callable[[str], bool] = True,
    rerun: str = "",
) -> dict[str, Any]:
    """The manifest of ``directory`` after checking that the directory is what it says: the one
    manifest reader.

    Refused with one line naming the file: a missing or unreadable manifest, a ``format`` not in
    ``formats`` (a version this code does not read), a ``files`` list that is not records, a listed
    file that lies outside the directory, is missing, or differs in size or sha256. ``hash_files``
    may be a predicate on the relative path (False: check the size only, for files of gigabytes
    that the caller does not read). Files the manifest does not list are ignored. ``rerun`` is
    the advice appended to every message ("re-run 'imagenet-zsl evaluate'").
    """
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    accepted = {formats} if isinstance(formats, str) else set(formats)
    if not path.is_file():
        what = " or ".join(sorted(accepted))
        raise _manifest_problem(path, f"missing, so {directory} is not a verified {what} output", rerun)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise _manifest_problem(path, f"not a readable JSON manifest ({err})", rerun) from err
    except RecursionError:  # json builds nested values recursively
        raise _manifest_problem(path, "not a manifest: its JSON is nested too deeply", rerun) from None
    if not isinstance(manifest, dict):
        raise _manifest_problem(path, "not a JSON object", rerun)
    if manifest.get("format") not in accepted:
        found = str(manifest.get("format"))[:80]
        raise _manifest_problem(path, f"format {found!r}, expected {' or '.join(sorted(accepted))}", rerun)
    files = manifest.get("files")
    kinds = (("path", str), ("sha256", str), ("bytes", int))
    good = isinstance(files, list) and all(
        isinstance(r, dict) and all(isinstance(r.get(k), t) for k, t in kinds) for r in files
    )
    if not good:
        raise _manifest_problem(path, "no valid 'files' list of {path, bytes, sha256} records", rerun)
    root = resolve_path(directory)
    for record in files:
        _verify_file(directory, root, record, hash_files, rerun)
    return manifest


def _verify_file(
    directory: Path, root: Path, record: dict, hash_files: bool | Callable[[str], bool], rerun: str
) -> None:
    target = directory / record["path"]
    if root not in resolve_path(target).parents:
        raise _manifest_problem(
            directory / MANIFEST_NAME, f"lists {record['path']!r} outside {directory}", rerun
        )
    if not target.is_file():
        raise _manifest_problem(target, "missing, though the manifest lists it", rerun)
    check = hash_files(record["path"]) if callable(hash_files) else hash_files
    if differs := file_difference(target, record, hashed=check):
        raise _manifest_problem(
            target, f"changed since it was written ({differs} differs from the manifest)", rerun
        )


def file_difference(target: Path, record: Mapping[str, Any], hashed: bool = True) -> str | None:
    """``size`` or ``sha256`` when the file ``target`` is not the one ``record`` describes, else None."""
    if target.stat().st_size != record.get("bytes"):
        return "size"
    return "sha256" if hashed and listed_sha256(target) != record.get("sha256") else None
