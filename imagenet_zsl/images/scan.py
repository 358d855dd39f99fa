"""Scanning one source of an image store (a tar or a folder) for its image files, recording what
could not be indexed (damaged tars, dangling links, undecodable names) instead of failing.

Every scan fills a *ledger entry* for its source (:func:`new_ledger`): ``members`` seen (tar
members other than directories, files of a folder, rows of a parquet file), ``images`` indexed,
``metadata`` members read as labels (a webdataset sample's ``.cls``/``.json``), ``skipped`` by
reason, ``bytes_unread`` (the bytes of a damaged tar after its last complete member) and
``damage`` (why the source was not read to its end; None when it was). The counts add up:
``members == images + metadata + sum(skipped.values())``.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file

IMAGE_SUFFIXES = frozenset(
    {".jpeg", ".jpg", ".jpe", ".jfif", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
)
#: why a member or file was not indexed (the keys of a ledger entry's ``skipped``)
SKIP_REASONS = {
    "not-an-image": "not an image name",
    "non-utf8-name": "name not valid UTF-8",
    "link": "a link member (hard or symbolic)",
    "special": "a FIFO or device member",
    "sparse": "a sparse member",
    "truncated": "cut by the end of the file",
    "cut-by-damage": "a sample cut short by the damage",
    "metadata-too-large": ".cls/.json over 1 MiB",
    "no-image-in-sample": "a sample without an image",
    "extra-image-in-sample": "a second image of one sample",
    "dangling-symlink": "a link to a missing file",
    "unreadable": "cannot be read",
    "not-a-regular-file": "a FIFO, socket or device",
}
#: a zero-filled tail longer than this is a partly downloaded, preallocated file, not padding
MAX_ZERO_TAIL = 1 << 20


def is_image_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if not base or base.startswith("."):
        return False
    return os.path.splitext(base)[1].lower() in IMAGE_SUFFIXES


def new_ledger(source: str) -> dict[str, Any]:
    """An empty ledger entry for ``source`` (see the module docstring)."""
    return {
        "source": source,
        "members": 0,
        "images": 0,
        "metadata": 0,
        "skipped": {},
        "bytes_unread": 0,
        "damage": None,
    }


@dataclass
class Scan:
    """Images found in one source (a tar or a folder), and what could not be indexed there.

    ``problems``: one dict per damage or skipped entry, ``{"source", "kind", "detail", ...}``
    (kinds: ``damaged-tar`` with ``offset`` and ``members_lost``, ``truncated-tar``,
    ``dangling-symlink``, ``non-utf8-name``, ``unreadable``, ``not-a-regular-file``, one
    ``skipped-files`` per source counting the files not read as images, by suffix, and one record
    per other skip reason of :data:`SKIP_REASONS` with its count and examples).
    ``labels``: per member, what a self-labelled store (webdataset, parquet) says of its class,
    resolved into wnids by the layout; None for stores labelled by their folder or tar names.
    ``ledger``: the source's ledger entry (:func:`new_ledger`); ``skipped_names``: the members
    behind its ``skipped`` counts, by reason (turned into problem records by :meth:`finish`).
    """

    source: str
    members: list[str]
    offsets: list[int]
    sizes: list[int]
    problems: list[dict] = field(default_factory=list)
    labels: list[Any] | None = None
    ledger: dict[str, Any] = field(default_factory=dict)
    skipped_names: dict[str, list[str]] = field(default_factory=dict)
    meta: Any = None  # a parquet file's schema metadata

    def __post_init__(self) -> None:
        if not self.ledger:
            self.ledger = new_ledger(self.source)

    def add(self, name: str, offset: int, size: int) -> None:
        """Index one image."""
        self.members.append(name)
        self.offsets.append(offset)
        self.sizes.append(size)
        self.ledger["images"] += 1

    def skip(self, reason: str, name: str) -> None:
        """Count one member (or file) not indexed, for ``reason`` (a key of :data:`SKIP_REASONS`)."""
        skipped = self.ledger["skipped"]
        skipped[reason] = skipped.get(reason, 0) + 1
        self.skipped_names.setdefault(reason, []).append(name)

    def finish(self) -> Scan:
        """Turn the skipped names into problem records (one per reason) and sort the ledger's."""
        for reason in sorted(self.skipped_names):
            names = self.skipped_names[reason]
            record = (
                skipped_files_problem(self.source, names)
                if reason == "not-an-image"
                else _skip_problem(self.source, reason, names)
            )
            if record is not None and reason != "truncated":  # the damage record names it
                self.problems.append(record)
        self.ledger["skipped"] = dict(sorted(self.ledger["skipped"].items()))
        for problem in self.problems:
            problem["source"] = self.source
        return self


#: reasons a folder store records one problem per file, where they are found
_PER_FILE = ("non-utf8-name", "dangling-symlink", "unreadable", "not-a-regular-file")


def _skip_problem(source: str, reason: str, names: list[str]) -> dict | None:
    if not names:
        return None
    return {
        "source": source,
        "kind": reason,
        "count": len(names),
        "examples": [printable(n) for n in sorted(names)[:3]],
        "detail": f"{len(names)} members skipped ({SKIP_REASONS.get(reason, reason)}), e.g. "
        f"{', '.join(printable(n) for n in sorted(names)[:3])}",
    }


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


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _headers_after(path: Path, offset: int) -> int:
    """Valid tar headers of image files found after ``offset`` (resynchronising block by block,
    zero-filled stretches skipped a MiB at a time): the members a damaged header hides."""
    lost = 0
    size = path.stat().st_size
    with open(path, "rb") as handle:
        pos = offset + _BLOCK
        while pos + _BLOCK <= size:
            handle.seek(pos)
            chunk = handle.read(1 << 20)
            zeros = len(chunk) - len(chunk.lstrip(b"\0"))
            if zeros >= _BLOCK:
                pos += zeros // _BLOCK * _BLOCK
                continue
            try:
                info = tarfile.TarInfo.frombuf(chunk[:_BLOCK], "utf-8", "surrogateescape")
            except (tarfile.HeaderError, ValueError, OverflowError):
                pos += _BLOCK
                continue
            if info.isfile() and is_image_name(info.name):
                lost += 1
            pos += _BLOCK + -(-max(info.size, 0) // _BLOCK) * _BLOCK
    return lost


class TarEntry(NamedTuple):
    """One tar member: its name, kind (``file``, ``link``, ``special``, ``sparse``), header
    offset, data offset and size in bytes."""

    name: str
    kind: str
    header: int
    data: int
    size: int


@dataclass
class TarListing:
    """The members of a tar up to its end or its damage. ``truncated``: the member whose data the
    end of the file cuts (listed last, not readable); ``damage``: a ``damaged-tar`` or
    ``truncated-tar`` problem record, with ``short`` (the ledger's phrase) and ``bytes_unread``."""

    entries: list[TarEntry]
    damage: dict | None = None
    truncated: TarEntry | None = None


def _entry(info: tarfile.TarInfo) -> TarEntry | None:
    if info.isdir():
        return None
    if info.issparse():
        kind = "sparse"
    elif info.isfile():
        kind = "file"
    elif info.islnk() or info.issym():
        kind = "link"
    else:
        kind = "special"
    return TarEntry(info.name, kind, info.offset, info.offset_data, info.size)


def list_tar(path: Path) -> TarListing:
    """Every member of the uncompressed tar at ``path`` up to its end-of-archive blocks, reading
    headers only. Where the members stop before a proper end (a download cut at a member boundary,
    inside a header or inside a member's data, a bad header, a zero-filled hole or tail), the
    listing keeps the members before it and says why (:attr:`TarListing.damage`)."""
    entries: list[TarEntry] = []
    end, error = 0, None
    with open(path, "rb") as handle:
        try:
            tar = tarfile.TarFile(fileobj=handle, mode="r", encoding="utf-8", errors="surrogateescape")
        except (tarfile.TarError, ValueError, OverflowError) as err:
            error = str(err)
        else:
            try:
                for info in tar:
                    entry = _entry(info)
                    if entry is not None:
                        entries.append(entry)
            except (tarfile.TarError, ValueError, OverflowError) as err:
                error = str(err)
            end = tar.offset
    return _classify_end(path, entries, end, error)


def _classify_end(path: Path, entries: list[TarEntry], end: int, error: str | None) -> TarListing:
    """Where and why the member list of ``path`` stopped at byte ``end`` (see :func:`list_tar`)."""
    file_size = path.stat().st_size
    listing = TarListing(entries)
    count = len(entries)
    if entries and entries[-1].kind == "file" and entries[-1].data + entries[-1].size > file_size:
        cut = entries[-1]
        listing.truncated = cut
        unread = file_size - cut.header
        short = f"truncated inside member {printable(cut.name)} after {count - 1} complete members"
        listing.damage = _damage("truncated-tar", cut.header, 1, short, unread, "skipped, not indexed")
        return listing
    if end >= file_size:
        if count == 0 and error is not None:
            short = f"not a readable tar ({error})"
            listing.damage = _damage("damaged-tar", 0, None, short, file_size, "")
        else:
            short = f"truncated after {count} members (no end-of-archive blocks)"
            listing.damage = _damage("damaged-tar", end, None, short, 0, "members after them are lost")
        return listing
    rest = file_size - end
    with open(path, "rb") as handle:
        handle.seek(end)
        tail = handle.read(min(rest, MAX_ZERO_TAIL + 1))
    if rest <= MAX_ZERO_TAIL and not tail.strip(b"\0"):
        return listing  # the end-of-archive blocks and padding
    if rest < _BLOCK and not (count == 0 and error is not None):
        short = f"truncated after {count} members (cut inside a member header at byte {end})"
        listing.damage = _damage("damaged-tar", end, None, short, rest, "")
        return listing
    lost = _headers_after(path, end)
    if not tail[:_BLOCK].strip(b"\0"):
        what = f"a zero-filled block at byte {end} (a hole in a partly downloaded file?)"
        if not tail.strip(b"\0"):
            what = f"{rest:,} zero bytes at byte {end} (a partly downloaded, preallocated file?)"
    elif count == 0 and error is not None:
        what = f"not a readable tar ({error})"
    else:
        what = f"bad member header at byte {end}"
    short = f"{what} after {count} members; {lost} image members after it not indexed"
    listing.damage = _damage("damaged-tar", end, lost, short, rest, "")
    return listing


def _damage(kind: str, offset: int, lost: int | None, short: str, unread: int, more: str) -> dict:
    detail = f"{short}; {unread:,} bytes unread" + (f"; {more}" if more else "")
    return {
        "kind": kind,
        "offset": offset,
        "members_lost": lost,
        "detail": detail,
        "short": short,
        "bytes_unread": unread,
    }


def not_regular(path: Path) -> str:
    """What a source that is not a regular file is, for its ledger entry (never opened)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a link to a missing file"
    except OSError as err:
        return f"unreadable ({err.strerror})"
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return f"{name}, not a regular file"
    return "not a regular file"


def open_tar_source(root: Path, source: str, what: str = "tar") -> tuple[Scan, TarListing | None]:
    """An empty scan of one tar source and its member listing. A source that is not a regular
    file (a FIFO named like a shard) is never opened: its ledger records why and the listing is
    None. A compressed archive is a one-line error. Damage goes to the ledger and the problems."""
    path = source_path(root, source)
    scan = Scan(source, [], [], [])
    try:
        regular_input_file(path, what)
    except UserInputError:
        kind = not_regular(path)
        scan.ledger["damage"] = f"{kind}: not read"
        scan.problems.append(
            {"source": source, "kind": "not-a-regular-file", "detail": f"{kind}; skipped unopened"}
        )
        return scan, None
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic.startswith(_COMPRESSED_MAGIC):
        raise UserInputError(
            f"{path}: a compressed archive; extraction reads uncompressed tars in place, so "
            "decompress it first (e.g. gunzip) and point --store at the .tar files"
        )
    listing = list_tar(path)
    if listing.damage is not None:
        scan.ledger["damage"] = listing.damage["short"]
        scan.ledger["bytes_unread"] = listing.damage["bytes_unread"]
        scan.problems.append({k: v for k, v in listing.damage.items() if k not in ("short", "bytes_unread")})
    return scan, listing


def member_problem(entry: TarEntry, listing: TarListing) -> str | None:
    """Why a tar member cannot be indexed as an image whatever its name (None: it can)."""
    if entry.kind != "file":
        return entry.kind
    if entry is listing.truncated:
        return "truncated"
    if not is_utf8(entry.name):
        return "non-utf8-name"
    return None


def scan_tar(root: Path, source: str) -> Scan:
    """Members of an uncompressed tar. A damaged tar (truncated download, bad header, garbage)
    keeps the members read before the damage, and the damage is recorded (offset, members lost
    when they can be counted, bytes unread) and warned about; a member cut short by the end of
    the file is counted, not indexed. Names that are not valid UTF-8, links and special members
    are skipped and counted."""
    scan, listing = open_tar_source(root, source)
    for entry in listing.entries if listing is not None else []:
        scan.ledger["members"] += 1
        reason = member_problem(entry, listing)
        if reason is None and not is_image_name(entry.name):
            reason = "not-an-image"
        if reason is not None:
            scan.skip(reason, entry.name)
            continue
        scan.add(entry.name, entry.data, entry.size)
    return scan.finish()


def scan_folder(root: Path, source: str, recursive: bool = True) -> Scan:
    """Image files under a folder; dangling symlinks, unreadable entries, FIFOs and other
    non-regular files (never opened) and names that are not valid UTF-8 are skipped and recorded;
    files whose names are not image names are counted in one ``skipped-files`` record."""
    base = source_path(root, source)
    scan = Scan(source, [], [], [])

    def skip(kind: str, name: str, detail: str) -> None:
        scan.skip(kind, name)
        scan.problems.append({"source": source, "kind": kind, "path": printable(name), "detail": detail})

    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        rel = os.path.relpath(dirpath, base)
        for name in filenames:
            scan.ledger["members"] += 1
            member = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
            if not is_image_name(name):
                scan.skip("not-an-image", member)
                continue
            if not is_utf8(member):
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
            scan.add(member, -1, info.st_size)
    for reason in _PER_FILE:
        scan.skipped_names.pop(reason, None)  # recorded per file above
    return scan.finish()
