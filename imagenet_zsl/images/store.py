"""ImageNet as users hold it, read in place: per-synset tars, a folder tree, or a flat labelled folder.

Layouts (detected automatically, or forced with ``layout=``)::

    tars  STORE/<wnid>.tar            fall11 release: one uncompressed tar of JPEGs per synset
    tree  STORE/<wnid>/**/<image>     extracted folders (also ILSVRC-2012 train)
    flat  STORE/<image> or STORE.tar  ILSVRC-2012 val: images + a labels file, either the devkit
                                      ground truth (1-based ILSVRC2012_ID per line, line i labels
                                      ILSVRC2012_val_<i:08d>.JPEG) or ``filename<TAB>wnid`` lines

Tars are never extracted: the index records each member's data offset, so an image is one
``pread``. The index (class, source, member, offset, size per image) is built once and cached as
Parquet in the cache directory (``$IMAGENET_ZSL_CACHE``, else ``$XDG_CACHE_HOME/imagenet-zsl``,
else ``~/.cache/imagenet-zsl``) under a key made of the store's absolute path, the layout, the
labels file's sha256 and the sizes/mtimes of the tars (mtimes of the class folders, of the flat
folder): adding, replacing or removing a tar or a class folder's files rebuilds it.

Only image files count (by suffix, case-insensitive: .jpeg .jpg .png .bmp .gif .webp .tif
.tiff .ppm .pgm); hidden files and macOS ``._*`` resource forks are ignored.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import tarfile
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.io import (
    CACHE_ENV,
    atomic_write_bytes,
    atomic_write_text,
    cache_dir,
    canonical_json,
    sha256_bytes,
    sha256_file,
)

log = logging.getLogger(__name__)

LAYOUTS = ("tars", "tree", "flat")
IMAGE_SUFFIXES = frozenset(
    {".jpeg", ".jpg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
)
WNID_RE = re.compile(r"^n\d{8}$")
WNID_TAR_RE = re.compile(r"^(n\d{8})\.tar$")
INDEX_VERSION = 2  # 2: problems (damaged tars, skipped entries) recorded


def _index_path(key: str) -> Path | None:
    """Where the index with ``key`` is cached; None (with a warning) if no cache dir can be made."""
    try:
        return cache_dir() / "index" / f"{key}.parquet"
    except OSError as err:
        log.warning("cannot create the cache directory (%s); set %s to a writable folder", err, CACHE_ENV)
        return None


def is_image_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if not base or base.startswith("."):
        return False
    return os.path.splitext(base)[1].lower() in IMAGE_SUFFIXES


# ----------------------------------------------------------------------------- labels (flat)


def read_val_labels(path: str | Path) -> dict[str, str]:
    """Image file name → wnid from the devkit ground truth or a ``filename<TAB>wnid`` file.

    Devkit format: one 1-based ILSVRC2012_ID per line; line i labels ``ILSVRC2012_val_<i:08d>.JPEG``
    and ids map to wnids through the packaged devkit-order ``ilsvrc2012_wnids.txt``.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: labels file not found (give --val-labels FILE)")
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    rows = [(i, ln) for i, ln in enumerate(lines, 1) if ln and not ln.startswith("#")]
    if not rows:
        raise UserInputError(f"{path}: labels file is empty")
    if all(ln.isdigit() for _, ln in rows):
        wnids = ilsvrc2012_wnids()
        labels: dict[str, str] = {}
        for number, (line_no, text) in enumerate(rows, 1):
            class_id = int(text)
            if not 1 <= class_id <= len(wnids):
                raise UserInputError(f"{path}:{line_no}: ILSVRC2012_ID {class_id} is outside 1..{len(wnids)}")
            labels[f"ILSVRC2012_val_{number:08d}.JPEG"] = wnids[class_id - 1]
        return labels
    labels = {}
    for line_no, text in rows:
        parts = text.split("\t") if "\t" in text else text.split()
        if len(parts) != 2:
            raise UserInputError(
                f"{path}:{line_no}: expected 'filename<TAB>wnid' or one ILSVRC2012_ID per line, "
                f"got {text[:60]!r}"
            )
        name, wnid = parts[0].strip().rsplit("/", 1)[-1], parts[1].strip()
        if name in labels and labels[name] != wnid:
            raise UserInputError(f"{path}:{line_no}: {name} is labelled twice ({labels[name]}, {wnid})")
        labels[name] = wnid
    return labels


# ----------------------------------------------------------------------------- scanning


@dataclass
class _Scan:
    """Images found in one source (a tar or a folder), and what could not be indexed there.

    ``problems``: one dict per damage or skipped entry, ``{"source", "kind", "detail", ...}``
    (kinds: ``damaged-tar`` with ``offset`` and ``members_lost``, ``truncated-tar``,
    ``dangling-symlink``, ``non-utf8-name``, ``unreadable``).
    """

    source: str
    members: list[str]
    offsets: list[int]
    sizes: list[int]
    problems: list[dict] = field(default_factory=list)


def _source_path(root: Path, source: str) -> Path:
    return root / source if source else root


_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")
_BLOCK = tarfile.BLOCKSIZE


def _printable(name: str) -> str:
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


def _scan_tar(root: Path, source: str) -> _Scan:
    """Members of an uncompressed tar. A damaged tar (truncated download, bad header, garbage)
    keeps the members read before the damage, and the damage is recorded (offset, members lost
    when they can be counted) and warned about; a last member cut short is listed and skipped,
    with its reason, when read. Names that are not valid UTF-8 are skipped and recorded."""
    path = _source_path(root, source)
    scan = _Scan(source, [], [], [])
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic.startswith(_COMPRESSED_MAGIC):
        raise UserInputError(
            f"{path}: a compressed archive; extraction reads uncompressed tars in place, so "
            "decompress it first (e.g. gunzip) and point --store at the .tar files"
        )
    file_size = path.stat().st_size
    damage = None
    try:
        with tarfile.open(path, mode="r:", encoding="utf-8", errors="surrogateescape") as tar:
            for info in tar:
                if not (info.isfile() and is_image_name(info.name)):
                    continue
                if not _is_utf8(info.name):
                    scan.problems.append(
                        {
                            "kind": "non-utf8-name",
                            "offset": info.offset,
                            "detail": f"member name {_printable(info.name)!r} is not valid UTF-8; skipped",
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


def _scan_folder(root: Path, source: str, recursive: bool = True) -> _Scan:
    """Image files under a folder; dangling symlinks, unreadable entries and names that are not
    valid UTF-8 are skipped and recorded."""
    base = _source_path(root, source)
    scan = _Scan(source, [], [], [])

    def skip(kind: str, name: str, detail: str) -> None:
        scan.problems.append({"source": source, "kind": kind, "path": _printable(name), "detail": detail})

    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        rel = os.path.relpath(dirpath, base)
        for name in filenames:
            if not is_image_name(name):
                continue
            member = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
            if not _is_utf8(member):
                skip("non-utf8-name", member, "file name is not valid UTF-8; skipped")
                continue
            try:
                size = os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                skip("dangling-symlink", member, "symbolic link to a missing file; skipped")
                continue
            except OSError as err:
                skip("unreadable", member, f"cannot stat ({err.strerror}); skipped")
                continue
            scan.members.append(member)
            scan.sizes.append(size)
    scan.offsets = [-1] * len(scan.members)
    return scan


# ----------------------------------------------------------------------------- the store


@dataclass
class ImageStore:
    """Index of the images in a store: one row per image, sorted by (source, offset, member).

    Arrays (length n): ``class_index`` int32 into ``classes`` (sorted wnids present),
    ``source_index`` int32 into ``sources`` (tar files or folders, relative to ``root``),
    ``member`` (object, name inside the tar / path inside the folder), ``offset`` int64 (data
    offset inside the tar, -1 for plain files), ``size`` int64 (bytes). ``problems``: damaged
    tars and skipped entries found while indexing (see :class:`_Scan`), recorded in the index
    and in every extraction manifest.
    """

    root: Path
    layout: str
    key: str
    classes: list[str]
    sources: list[str]
    class_index: np.ndarray
    source_index: np.ndarray
    member: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    problems: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.member)

    def counts(self, include_empty: bool = False) -> dict[str, int]:
        """Images per wnid (zero-byte files are not images and are not counted by default)."""
        keep = slice(None) if include_empty else self.size > 0
        counts = np.bincount(self.class_index[keep], minlength=len(self.classes))
        return {wnid: int(c) for wnid, c in zip(self.classes, counts, strict=True) if c > 0}

    def image_ids(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Stable ids ``"<wnid>/<member>"`` (as a unicode array) for ``rows`` (default all)."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        wnids = np.asarray(self.classes, dtype=np.str_)[self.class_index[rows]]
        return np.char.add(np.char.add(wnids, "/"), self.member[rows].astype(np.str_))

    def reader(self) -> StoreReader:
        return StoreReader(str(self.root), list(self.sources), self.layout)

    # -- persistence -------------------------------------------------------------------------

    def to_parquet_bytes(self) -> bytes:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(
            {
                "class_index": pa.array(self.class_index, pa.int32()),
                "source_index": pa.array(self.source_index, pa.int32()),
                "member": pa.array(self.member.tolist(), pa.string()),
                "offset": pa.array(self.offset, pa.int64()),
                "size": pa.array(self.size, pa.int64()),
            }
        )
        meta = {
            "version": INDEX_VERSION,
            "root": str(self.root),
            "layout": self.layout,
            "key": self.key,
            "classes": self.classes,
            "sources": self.sources,
            "problems": self.problems,
        }
        table = table.replace_schema_metadata({"imagenet_zsl": canonical_json(meta)})
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        return buffer.getvalue()

    @classmethod
    def from_parquet(cls, path: Path) -> ImageStore:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[b"imagenet_zsl"])
        if meta.get("version") != INDEX_VERSION:
            raise ValueError("index version changed")
        return cls(
            root=Path(meta["root"]),
            layout=meta["layout"],
            key=meta["key"],
            classes=list(meta["classes"]),
            sources=list(meta["sources"]),
            class_index=table["class_index"].to_numpy().astype(np.int32),
            source_index=table["source_index"].to_numpy().astype(np.int32),
            member=table["member"].to_numpy(zero_copy_only=False).astype(object),
            offset=table["offset"].to_numpy().astype(np.int64),
            size=table["size"].to_numpy().astype(np.int64),
            problems=list(meta.get("problems", [])),
        )


class StoreReader:
    """Reads one image's bytes; picklable, so DataLoader workers each open their own files.

    Tar members are read with ``os.pread`` on a small LRU of open descriptors (no tarfile
    parsing, no extraction).
    """

    def __init__(self, root: str, sources: list[str], layout: str, max_open: int = 64):
        self.root = root
        self.sources = sources
        self.layout = layout
        self.max_open = max_open
        self._fds: OrderedDict[int, int] = OrderedDict()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fds"] = OrderedDict()
        return state

    def _fd(self, source: int) -> int:
        fd = self._fds.get(source)
        if fd is not None:
            self._fds.move_to_end(source)
            return fd
        fd = os.open(self._path(source), os.O_RDONLY)
        self._fds[source] = fd
        if len(self._fds) > self.max_open:
            _, old = self._fds.popitem(last=False)
            os.close(old)
        return fd

    def _path(self, source: int) -> str:
        name = self.sources[source]
        return os.path.join(self.root, name) if name else self.root

    def read(self, source: int, member: str, offset: int, size: int) -> bytes:
        """The image's bytes; may be shorter than ``size`` if a tar is truncated."""
        if offset >= 0:
            return os.pread(self._fd(source), size, offset)
        with open(os.path.join(self._path(source), member), "rb") as handle:
            return handle.read()

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


# ----------------------------------------------------------------------------- opening


def detect_layout(root: Path, val_labels: str | Path | None = None) -> str:
    """Guess the layout of ``root``; ambiguous or empty stores raise a UserInputError."""
    if not root.exists():
        raise UserInputError(f"{root}: image store not found (give --store PATH)")
    if root.is_file():
        if not root.name.endswith(".tar"):
            raise UserInputError(f"{root}: a store file must be a .tar archive")
        if val_labels is not None or not WNID_TAR_RE.match(root.name):
            return "flat"
        return "tars"
    if val_labels is not None:
        return "flat"
    tars = dirs = images = 0
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir() and WNID_RE.match(entry.name):
                dirs += 1
            elif entry.is_file() and WNID_TAR_RE.match(entry.name):
                tars += 1
            elif entry.is_file() and is_image_name(entry.name):
                images += 1
    if tars and dirs:
        raise UserInputError(
            f"{root}: holds both <wnid>.tar files ({tars}) and <wnid>/ folders ({dirs}); "
            "pass --layout tars or --layout tree"
        )
    if tars:
        return "tars"
    if dirs:
        return "tree"
    if images:
        raise UserInputError(
            f"{root}: a flat folder of {images} images needs labels: pass --val-labels FILE "
            "(devkit ILSVRC2012_validation_ground_truth.txt or 'filename<TAB>wnid' lines)"
        )
    raise UserInputError(
        f"{root}: no <wnid>.tar files, <wnid>/ folders or images found; point --store to the "
        "folder holding the fall11 tars, the extracted class folders, or the val images"
    )


def _sources(root: Path, layout: str) -> list[str]:
    """Sources (relative names) of a store, sorted; '' means the store path itself."""
    if root.is_file():
        return [""]
    if layout == "flat":
        return [""]
    with os.scandir(root) as entries:
        if layout == "tars":
            names = [e.name for e in entries if e.is_file() and WNID_TAR_RE.match(e.name)]
        else:
            names = [e.name for e in entries if e.is_dir() and WNID_RE.match(e.name)]
    if not names:
        what = "<wnid>.tar files" if layout == "tars" else "<wnid>/ folders"
        raise UserInputError(f"{root}: no {what} found for --layout {layout}")
    return sorted(names)


def _index_key(root: Path, layout: str, sources: list[str], labels_sha: str | None) -> str:
    """Cache key: store path, layout, labels file, and each source's size and mtime."""
    listing = []
    for name in sources:
        path = _source_path(root, name)
        stat = os.stat(path)
        size = stat.st_size if path.is_file() else None
        listing.append([name, size, stat.st_mtime_ns])
    material = {
        "version": INDEX_VERSION,
        "root": str(root),
        "layout": layout,
        "labels_sha256": labels_sha,
        "sources": listing,
    }
    return sha256_bytes(canonical_json(material).encode())[:24]


def _build(
    root: Path, layout: str, sources: list[str], labels: dict[str, str] | None, progress: bool
) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
    def scan(source: str) -> _Scan:
        if _source_path(root, source).is_file():
            return _scan_tar(root, source)
        return _scan_folder(root, source, recursive=layout != "flat")

    workers = min(16, max(1, len(sources)), (os.cpu_count() or 1) * 4)
    with ThreadPoolExecutor(workers) as pool:
        scans = list(
            tqdm(
                pool.map(scan, sources),
                total=len(sources),
                desc="indexing store",
                unit="src",
                disable=not progress or len(sources) < 2,
            )
        )
    member_lists, class_of = [], []
    for found in scans:
        if layout == "flat":
            assert labels is not None
            wnids = [labels.get(m.rsplit("/", 1)[-1]) for m in found.members]
            unlabeled = [m for m, w in zip(found.members, wnids, strict=True) if w is None]
            if unlabeled:
                raise UserInputError(
                    f"{root}: {len(unlabeled)} images have no label in the --val-labels file, "
                    f"e.g. {preview(unlabeled, 3)}; give a labels file covering every image"
                )
        elif layout == "tars":
            tar_name = _source_path(root, found.source).name
            wnids = [WNID_TAR_RE.match(tar_name).group(1)] * len(found.members)
        else:
            wnids = [found.source] * len(found.members)
        class_of.append(wnids)
        member_lists.append(found)
    classes = sorted({w for wnids in class_of for w in wnids})
    position = {w: i for i, w in enumerate(classes)}
    class_index = np.fromiter((position[w] for wnids in class_of for w in wnids), dtype=np.int32)
    source_index = np.concatenate(
        [np.full(len(s.members), i, np.int32) for i, s in enumerate(member_lists)] or [np.zeros(0, np.int32)]
    )
    member = np.array([m for s in member_lists for m in s.members], dtype=object)
    offset = np.array([o for s in member_lists for o in s.offsets], dtype=np.int64)
    size = np.array([z for s in member_lists for z in s.sizes], dtype=np.int64)
    # deterministic order: by source, then tar offset (sequential reads), then member name
    order = np.lexsort((member.astype(np.str_) if len(member) else member, offset, source_index))
    return (
        classes,
        sources,
        class_index[order],
        source_index[order],
        member[order],
        offset[order],
        size[order],
        [problem for found in scans for problem in found.problems],
    )


def open_store(
    path: str | Path,
    layout: str = "auto",
    val_labels: str | Path | None = None,
    *,
    use_cache: bool = True,
    rebuild: bool = False,
    progress: bool = True,
    wait_for_cache_s: float = 0.0,
) -> ImageStore:
    """Open an image store, building (once) or loading its cached index.

    ``wait_for_cache_s``: wait up to this long for another process (e.g. local rank 0 of a
    torchrun job) to finish building the index instead of scanning the store again in parallel.
    """
    root = Path(path).expanduser().resolve()
    if layout == "auto":
        layout = detect_layout(root, val_labels)
    elif layout not in LAYOUTS:
        raise UserInputError(f"--layout {layout!r}: choose one of auto, {', '.join(LAYOUTS)}")
    if not root.exists():
        raise UserInputError(f"{root}: image store not found (give --store PATH)")
    labels = labels_sha = None
    if layout == "flat":
        if val_labels is None:
            raise UserInputError(f"{root}: --layout flat needs --val-labels FILE")
        labels = read_val_labels(val_labels)
        labels_sha = sha256_file(val_labels)
    sources = _sources(root, layout)
    key = _index_key(root, layout, sources, labels_sha)
    cached = _index_path(key) if use_cache else None
    if cached is not None and not rebuild and wait_for_cache_s > 0 and not cached.exists():
        log.info("waiting for the store index %s to be built by another process", cached)
        deadline = time.monotonic() + wait_for_cache_s
        while not cached.exists() and time.monotonic() < deadline:
            time.sleep(2.0)
    if cached is not None and not rebuild and cached.exists():
        try:
            store = ImageStore.from_parquet(cached)
            log.debug("store index loaded from %s", cached)
            warn_problems(store)
            return store
        except Exception as err:  # noqa: BLE001 - a broken cache file is rebuilt, never trusted
            log.warning("ignoring unreadable index cache %s (%s); rebuilding", cached, err)
    built = _build(root, layout, sources, labels, progress)
    store = ImageStore(root, layout, key, *built)
    warn_problems(store)
    if not len(store):
        raise UserInputError(f"{root}: the store holds no image files")
    if cached is not None:
        try:
            atomic_write_bytes(cached, store.to_parquet_bytes())
            log.info(
                "indexed %d images in %d classes; index cached at %s", len(store), len(store.classes), cached
            )
        except OSError as err:
            log.warning(
                "could not cache the store index at %s (%s); set %s to a writable folder",
                cached,
                err,
                CACHE_ENV,
            )
    return store


def warn_problems(store: ImageStore, limit: int = 5) -> None:
    """Log one warning per recorded problem (the first ``limit``) and a summary of the rest."""
    for problem in store.problems[:limit]:
        kind = problem["kind"]
        what = "damaged tar" if kind in ("damaged-tar", "truncated-tar") else kind.replace("-", " ")
        where = _source_path(store.root, problem["source"])
        if problem.get("path"):  # a file in a folder store: name the file, not only its folder
            where = where / problem["path"]
        log.warning("%s: %s: %s", where, what, problem["detail"])
    if len(store.problems) > limit:
        log.warning(
            "%s: %d more damaged or skipped entries (listed in the store index and the extraction manifest)",
            store.root,
            len(store.problems) - limit,
        )


COUNTS_HEADER = "wnid\tnum_images"
_COUNTS_LINE = re.compile(r"n\d{8}\t\d+")


def is_counts_tsv(path: str | Path) -> bool:
    """True when ``path`` holds a counts table as :func:`write_counts_tsv` writes it (its header,
    then ``wnid<TAB>count`` lines only), so ``images count --out`` may replace it. Any other file
    (an image tar, a split list, someone's notes) is never replaced. Reads at most 64 MB."""
    path = Path(path)
    if path.stat().st_size > 64 << 20:
        return False
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        return False
    return bool(lines) and lines[0] == COUNTS_HEADER and all(_COUNTS_LINE.fullmatch(x) for x in lines[1:])


def write_counts_tsv(counts: dict[str, int], path: str | Path | None = None) -> str:
    """``wnid<TAB>num_images`` with a header, sorted by wnid: the packaged fall11 counts format."""
    lines = [COUNTS_HEADER, *(f"{w}\t{counts[w]}" for w in sorted(counts))]
    text = "\n".join(lines) + "\n"
    if path is not None:
        atomic_write_text(path, text)
    return text


def select_rows(store: ImageStore, wnids: Sequence[str]) -> np.ndarray:
    """Row numbers of the images of ``wnids`` (in store order)."""
    wanted = np.isin(np.asarray(store.classes, dtype=object), np.asarray(list(wnids), dtype=object))
    return np.flatnonzero(wanted[store.class_index]) if len(store) else np.zeros(0, np.int64)
