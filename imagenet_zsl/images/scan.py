"""Scanning one source of an image store (a tar or a folder) for its image files, recording what
could not be indexed (damaged tars, dangling links, undecodable names) instead of failing."""

from __future__ import annotations

import os
import stat
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError

IMAGE_SUFFIXES = frozenset(
    {".jpeg", ".jpg", ".jpe", ".jfif", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
)


def is_image_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if not base or base.startswith("."):
        return False
    return os.path.splitext(base)[1].lower() in IMAGE_SUFFIXES


@dataclass
class Scan:
    """Images found in one source (a tar or a folder), and what could not be indexed there.

    ``problems``: one dict per damage or skipped entry, ``{"source", "kind", "detail", ...}``
    (kinds: ``damaged-tar`` with ``offset`` and ``members_lost``, ``truncated-tar``,
    ``dangling-symlink``, ``non-utf8-name``, ``unreadable``, ``not-a-regular-file``, and one
    ``skipped-files`` per source counting the files not read as images, by suffix).
    ``labels``: per member, what a self-labelled store (webdataset, parquet) says of its class,
    resolved into wnids by the layout; None for stores labelled by their folder or tar names.
    """

    source: str
    members: list[str]
    offsets: list[int]
    sizes: list[int]
    problems: list[dict] = field(default_factory=list)
    labels: list[Any] | None = None


def _suffix(name: str) -> str:
    """The lower-case suffix of a file name; ``(hidden)`` for dot files and macOS ``._*`` forks,
    ``(none)`` without one."""
    base = name.rsplit("/", 1)[-1]
    if base.startswith("."):
        return "(hidden)"
    return os.path.splitext(base)[1].lower() or "(none)"


def skipped_files_problem(source: str, names: list[str]) -> dict | None:
    """One record counting the files of ``source`` not read as images (by suffix, a few named)."""
    if not names:
        return None
    suffixes = dict(sorted(Counter(_suffix(n) for n in names).items()))
    shown = ", ".join(f"{k} {v}" for k, v in suffixes.items())
    return {
        "source": source,
        "kind": "skipped-files",
        "count": len(names),
        "suffixes": suffixes,
        "examples": [printable(n) for n in sorted(names)[:3]],
        "detail": f"{len(names)} files not read as images ({shown})",
    }


def source_path(root: Path, source: str) -> Path:
    return root / source if source else root


_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")
_BLOCK = tarfile.BLOCKSIZE


def printable(name: str) -> str:
    """A name that may hold undecodable bytes (surrogate escapes) as printable text."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _headers_after(path: Path, offset: int) -> int:
    """Valid tar headers of image files found after ``offset`` (resynchronising block by block):
    the members a damaged header hides from the index."""
    lost = 0
    size = path.stat().st_size
    with open(path, "rb") as handle:
        pos = offset + _BLOCK
        while pos + _BLOCK <= size:
            handle.seek(pos)
            block = handle.read(_BLOCK)
            try:
                info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError:
                pos += _BLOCK
                continue
            if info.isfile() and is_image_name(info.name):
                lost += 1
            pos += _BLOCK + -(-info.size // _BLOCK) * _BLOCK
    return lost


def _tar_end_problem(path: Path, end: int, file_size: int, count: int) -> dict | None:
    """Why the member list stopped at byte ``end``: None for a proper end-of-archive marker."""
    if end >= file_size:
        return None  # ends at a member boundary (end marker missing): nothing lost
    with open(path, "rb") as handle:
        handle.seek(end)
        block = handle.read(_BLOCK)
    if len(block) == _BLOCK and not block.strip(b"\0"):
        return None  # the end-of-archive zero block
    if len(block) < _BLOCK:
        detail = f"cut inside a member header at byte {end} (after {count} images)"
        return {"kind": "damaged-tar", "offset": end, "members_lost": None, "detail": detail}
    lost = _headers_after(path, end)
    detail = (
        f"bad member header at byte {end} (after {count} images); {lost} image members after it "
        "are not indexed"
    )
    return {"kind": "damaged-tar", "offset": end, "members_lost": lost, "detail": detail}


def scan_tar(root: Path, source: str) -> Scan:
    """Members of an uncompressed tar. A damaged tar (truncated download, bad header, garbage)
    keeps the members read before the damage, and the damage is recorded (offset, members lost
    when they can be counted) and warned about; a last member cut short is listed and skipped,
    with its reason, when read. Names that are not valid UTF-8 are skipped and recorded."""
    path = source_path(root, source)
    scan = Scan(source, [], [], [])
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic.startswith(_COMPRESSED_MAGIC):
        raise UserInputError(
            f"{path}: a compressed archive; extraction reads uncompressed tars in place, so "
            "decompress it first (e.g. gunzip) and point --store at the .tar files"
        )
    file_size = path.stat().st_size
    damage = None
    others: list[str] = []
    try:
        with tarfile.open(path, mode="r:", encoding="utf-8", errors="surrogateescape") as tar:
            for info in tar:
                if not (info.isfile() and is_image_name(info.name)):
                    if not info.isdir():
                        others.append(info.name)
                    continue
                if not _is_utf8(info.name):
                    scan.problems.append(
                        {
                            "kind": "non-utf8-name",
                            "offset": info.offset,
                            "detail": f"member name {printable(info.name)!r} is not valid UTF-8; skipped",
                        }
                    )
                    continue
                scan.members.append(info.name)
                scan.offsets.append(info.offset_data)
                scan.sizes.append(info.size)
            damage = _tar_end_problem(path, tar.offset, file_size, len(scan.members))
    except tarfile.ReadError as err:
        damage = {
            "kind": "damaged-tar",
            "offset": 0,
            "members_lost": None,
            "detail": f"not a readable tar ({err}); indexed the {len(scan.members)} images before the damage",
        }
    if damage is not None:
        scan.problems.append(damage)
    skipped = skipped_files_problem(source, others)
    if skipped is not None:
        scan.problems.append(skipped)
    if scan.members and scan.offsets[-1] + scan.sizes[-1] > file_size:
        scan.problems.append(
            {
                "kind": "truncated-tar",
                "offset": file_size,
                "members_lost": 1,
                "detail": f"the tar ends inside its last image {scan.members[-1]} (skipped when read)",
            }
        )
    for problem in scan.problems:
        problem["source"] = source
    return scan


def scan_folder(root: Path, source: str, recursive: bool = True) -> Scan:
    """Image files under a folder; dangling symlinks, unreadable entries, FIFOs and other
    non-regular files (never opened) and names that are not valid UTF-8 are skipped and recorded;
    files whose names are not image names are counted in one ``skipped-files`` record."""
    base = source_path(root, source)
    scan = Scan(source, [], [], [])
    others: list[str] = []

    def skip(kind: str, name: str, detail: str) -> None:
        scan.problems.append({"source": source, "kind": kind, "path": printable(name), "detail": detail})

    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        rel = os.path.relpath(dirpath, base)
        for name in filenames:
            member = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
            if not is_image_name(name):
                others.append(member)
                continue
            if not _is_utf8(member):
                skip("non-utf8-name", member, "file name is not valid UTF-8; skipped")
                continue
            try:
                info = os.stat(os.path.join(dirpath, name))  # stat never opens (a FIFO would block)
            except FileNotFoundError:
                skip("dangling-symlink", member, "symbolic link to a missing file; skipped")
                continue
            except OSError as err:
                skip("unreadable", member, f"cannot stat ({err.strerror}); skipped")
                continue
            if not stat.S_ISREG(info.st_mode):
                skip("not-a-regular-file", member, "a FIFO, socket or device, not a file; skipped unopened")
                continue
            scan.members.append(member)
            scan.sizes.append(info.st_size)
    scan.offsets = [-1] * len(scan.members)
    skipped = skipped_files_problem(source, others)
    if skipped is not None:
        scan.problems.append(skipped)
    return scan
