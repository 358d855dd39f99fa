"""ImageNet as users hold it, read in place: per-synset tars, a folder tree, a flat labelled folder,
webdataset shards, parquet files, or ImageNet-21K-P's three folders.

Layouts (detected automatically, or forced with ``layout=``; one class each in
:mod:`imagenet_zsl.images.layouts`)::

    tars  STORE/<wnid>.tar            fall11 release: one uncompressed tar of JPEGs per synset
    tree  STORE/<wnid>/**/<image>     extracted folders (also ILSVRC-2012 train)
    flat  STORE/<image> or STORE.tar  ILSVRC-2012 val: images + a labels file, either the devkit
                                      ground truth (1-based ILSVRC2012_ID per line, line i labels
                                      ILSVRC2012_val_<i:08d>.JPEG) or ``filename<TAB>wnid`` lines
    wds   STORE/*.tar shards          webdataset: KEY.jpg|webp + KEY.cls + KEY.json per sample
    parquet STORE/**/*.parquet        image + label columns, label names in the files' metadata
    in21k-p STORE/{train,val,small_classes}/<wnid>/<image>   ImageNet-21K-P, one store

Tars are never extracted: the index records each member's data offset, so an image is one
``pread``. The index (class, source, member, offset, size per image) is built once and cached as
Parquet in the cache directory (``$IMAGENET_ZSL_CACHE``, else ``$XDG_CACHE_HOME/imagenet-zsl``,
else ``~/.cache/imagenet-zsl``) under a key made of the store's absolute path, the layout, the
labels file's sha256 and the sizes/mtimes of the tars (mtimes of the class folders, of the flat
folder): adding, replacing or removing a tar or a class folder's files rebuilds it.

Modules: :mod:`.scan` (one tar or folder), :mod:`.layouts` (which sources, which wnid),
:mod:`.index` (the index arrays, built and cached); this module opens a store and reads it.

Only image files count (by suffix, case-insensitive: .jpeg .jpg .jpe .jfif .png .bmp .gif .webp
.tif .tiff .ppm .pgm); every other file (.heic, no suffix, hidden files, macOS ``._*`` forks) is
not read, and is counted per source in the index (``skipped-files``) and in one warning. FIFOs and
other non-regular files are skipped without being opened.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from imagenet_zsl.atomic import atomic_write_bytes, atomic_write_text
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.declared import incomplete_store
from imagenet_zsl.images.index import StoreIndex, build_index, index_key
from imagenet_zsl.images.layouts import (
    LAYOUTS,
    ParquetLayout,
    check_layout_name,
    detect_layout,
    make_layout,
    read_val_labels,
)
from imagenet_zsl.images.ledger import ledger_totals, summary_line
from imagenet_zsl.images.parquet_files import RowReader
from imagenet_zsl.images.scan import IMAGE_SUFFIXES, is_image_name, source_path
from imagenet_zsl.paths import CACHE_ENV, cache_dir

__all__ = [
    "IMAGE_SUFFIXES",
    "LAYOUTS",
    "ImageStore",
    "StoreReader",
    "detect_layout",
    "is_counts_tsv",
    "is_image_name",
    "open_store",
    "read_val_labels",
    "select_rows",
    "skipped_file_count",
    "warn_problems",
    "write_counts_tsv",
]

log = logging.getLogger(__name__)


def _index_path(key: str) -> Path | None:
    """Where the index with ``key`` is cached; None (with a warning) if no cache dir can be made."""
    try:
        return cache_dir() / "index" / f"{key}.parquet"
    except OSError as err:
        log.warning("cannot create the cache directory (%s); set %s to a writable folder", err, CACHE_ENV)
        return None


@dataclass
class ImageStore:
    """An opened store: where it is (``root``), its ``layout`` name, its index cache ``key`` and
    its :class:`~imagenet_zsl.images.index.StoreIndex` (one row per image; its arrays and lists are
    also attributes of the store: ``classes``, ``sources``, ``class_index``, ``source_index``,
    ``member``, ``offset``, ``size``, ``problems``, ``ledger``, the last two recorded in every
    extraction manifest). ``incomplete``: what the store lacks of what it declares
    (:func:`~imagenet_zsl.images.declared.incomplete_store`), non-empty only when opened with
    ``allow_incomplete``."""

    root: Path
    layout: str
    key: str
    index: StoreIndex
    incomplete: list[dict] = field(default_factory=list)

    classes = property(lambda self: self.index.classes)
    sources = property(lambda self: self.index.sources)
    class_index = property(lambda self: self.index.class_index)
    source_index = property(lambda self: self.index.source_index)
    member = property(lambda self: self.index.member)
    offset = property(lambda self: self.index.offset)
    size = property(lambda self: self.index.size)
    problems = property(lambda self: self.index.problems)
    ledger = property(lambda self: self.index.ledger)

    def __len__(self) -> int:
        return len(self.index.member)

    def counts(self, include_empty: bool = False) -> dict[str, int]:
        """Images per wnid (zero-byte files are not images and are not counted by default; a
        parquet row's size is unknown, -1, until read)."""
        keep = slice(None) if include_empty else self.size != 0
        counts = np.bincount(self.class_index[keep], minlength=len(self.classes))
        return {wnid: int(c) for wnid, c in zip(self.classes, counts, strict=True) if c > 0}

    def image_ids(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Stable ids ``"<wnid>/<member>"`` (as a unicode array) for ``rows`` (default all)."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        wnids = np.asarray(self.classes, dtype=np.str_)[self.class_index[rows]]
        return np.char.add(np.char.add(wnids, "/"), self.member[rows].astype(np.str_))

    def summary(self) -> str:
        """The ledger in one line (:func:`~imagenet_zsl.images.ledger.summary_line`)."""
        return summary_line(self.layout, self.ledger, self.incomplete)

    def ledger_record(self) -> dict:
        """The ledger as the extraction manifest keeps it: the summary line, the totals, one entry
        per source, and what the store lacks of what it declares (read with --allow-incomplete)."""
        return {
            "summary": self.summary(),
            "totals": ledger_totals(self.ledger),
            "sources": self.ledger,
            "incomplete": self.incomplete,
        }

    def reader(self) -> StoreReader:
        return StoreReader(str(self.root), list(self.sources), self.layout)

    def to_parquet_bytes(self) -> bytes:
        return self.index.to_parquet_bytes({"root": str(self.root), "layout": self.layout, "key": self.key})

    @classmethod
    def from_parquet(cls, path: Path) -> ImageStore:
        meta, index = StoreIndex.from_parquet(path)
        return cls(root=Path(meta["root"]), layout=meta["layout"], key=meta["key"], index=index)


class StoreReader:
    """Reads one image's bytes; picklable, so DataLoader workers each open their own files.

    Tar members (fall11 tars, webdataset shards) are read with ``os.pread`` on a small LRU of
    open descriptors (no tarfile parsing, no extraction); parquet rows by row group
    (:class:`~imagenet_zsl.images.parquet_files.RowReader`); plain files are opened non-blocking
    and must be regular files (a FIFO put in place of an image never blocks a worker).
    """

    def __init__(self, root: str, sources: list[str], layout: str, max_open: int = 64):
        self.root = root
        self.sources = sources
        self.layout = layout
        self.max_open = max_open
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._rows = RowReader() if layout == ParquetLayout.name else None

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
        """The image's bytes; may be shorter than ``size`` if a tar is truncated. ``offset`` is the
        data offset in a tar, the row in a parquet file, -1 for a plain file."""
        if self._rows is not None:
            return self._rows.read(self._path(source), offset)
        if offset >= 0:
            return os.pread(self._fd(source), size, offset)
        fd = os.open(os.path.join(self._path(source), member), os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file (a FIFO or device?)")
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


def _wait_for(cached: Path, seconds: float) -> None:
    """Wait up to ``seconds`` for another process to write the index ``cached``."""
    log.info("waiting for the store index %s to be built by another process", cached)
    deadline = time.monotonic() + seconds
    while not cached.exists() and time.monotonic() < deadline:
        time.sleep(2.0)


def _load_cached(cached: Path) -> ImageStore | None:
    """The store whose index is cached at ``cached``; None (rebuild) if it cannot be read."""
    try:
        store = ImageStore.from_parquet(cached)
    except Exception as err:  # noqa: BLE001 - a broken cache file is rebuilt, never trusted
        log.warning("ignoring unreadable index cache %s (%s); rebuilding", cached, err)
        return None
    log.debug("store index loaded from %s", cached)
    return store


def _save_index(store: ImageStore, cached: Path) -> None:
    try:
        atomic_write_bytes(cached, store.to_parquet_bytes())
        classes = len(store.classes)
        log.info("indexed %d images in %d classes; index cached at %s", len(store), classes, cached)
    except OSError as err:
        log.warning(
            "could not cache the store index at %s (%s); set %s to a writable folder", cached, err, CACHE_ENV
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
    allow_incomplete: bool = False,
) -> ImageStore:
    """Open an image store, building (once) or loading its cached index, and log its ledger's
    summary line (a warning when a source is damaged).

    ``wait_for_cache_s``: wait up to this long for another process (e.g. local rank 0 of a
    torchrun job) to finish building the index instead of scanning the store again in parallel.
    A store that lacks what it declares (a gap in a numbered series, fewer shards or images than
    its metadata says) is one error line unless ``allow_incomplete``, which keeps the findings in
    ``store.incomplete`` (and the summary line).
    """
    root = Path(path).expanduser().resolve()
    check_layout_name(layout)  # a bad name first, even for a store that does not exist
    if not root.exists():
        raise UserInputError(f"{root}: image store not found (give --store PATH)")
    kind = make_layout(layout, root, val_labels)
    sources = kind.sources(root)
    key = index_key(root, kind, sources)
    cached = _index_path(key) if use_cache else None
    reuse = cached is not None and not rebuild
    if reuse and wait_for_cache_s > 0 and not cached.exists():
        _wait_for(cached, wait_for_cache_s)
    store = _load_cached(cached) if reuse and cached.exists() else None
    fresh = store is None
    if store is None:
        store = ImageStore(root, kind.name, key, build_index(root, kind, sources, progress))
    warn_problems(store)
    if fresh and not len(store):
        raise UserInputError(f"{root}: the store holds no image files")
    if fresh and cached is not None:
        _save_index(store, cached)  # before the completeness check: --allow-incomplete reuses it
    _check_complete(store, allow_incomplete)
    return store


def _check_complete(store: ImageStore, allow_incomplete: bool) -> None:
    """Refuse a store that lacks what it declares (unless allowed), then log the summary line."""
    findings = incomplete_store(store.root, store.layout, store.ledger)
    if findings and not allow_incomplete:
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        raise UserInputError(
            f"{store.root}: the store is incomplete: {findings[0]['detail']}{more}; complete the "
            "download, or pass --allow-incomplete to read it as it is (recorded in the manifest; a run "
            "recipe: allow_incomplete: true under features.test)"
        )
    store.incomplete = findings
    damaged = findings or any(entry["damage"] for entry in store.ledger)
    log.log(logging.WARNING if damaged else logging.INFO, "%s", store.summary())


def warn_problems(store: ImageStore, limit: int = 5) -> None:
    """Log one warning per recorded problem (the first ``limit``) and a summary of the rest; the
    files not read as images (``skipped-files``, per source) are summed into one warning."""
    _warn_skipped_files(store)
    problems = [p for p in store.problems if p["kind"] != "skipped-files"]
    for problem in problems[:limit]:
        kind = problem["kind"]
        what = "damaged tar" if kind in ("damaged-tar", "truncated-tar") else kind.replace("-", " ")
        where = source_path(store.root, problem["source"])
        if problem.get("path"):  # a file in a folder store: name the file, not only its folder
            where = where / problem["path"]
        log.warning("%s: %s: %s", where, what, problem["detail"])
    if len(problems) > limit:
        log.warning(
            "%s: %d more damaged or skipped entries (listed in the store index and the extraction manifest)",
            store.root,
            len(problems) - limit,
        )


def skipped_file_count(store: ImageStore) -> dict[str, int]:
    """Files of the store not read as images, by suffix (``(none)`` for no suffix)."""
    total: dict[str, int] = {}
    for problem in store.problems:
        if problem["kind"] == "skipped-files":
            for suffix, count in problem["suffixes"].items():
                total[suffix] = total.get(suffix, 0) + int(count)
    return dict(sorted(total.items()))


def _warn_skipped_files(store: ImageStore) -> None:
    by_suffix = skipped_file_count(store)
    if not by_suffix:
        return
    records = [p for p in store.problems if p["kind"] == "skipped-files"]
    examples = [str(source_path(store.root, p["source"]) / p["examples"][0]) for p in records[:2]]
    log.warning(
        "%s: %d files not read as images (%s), e.g. %s; counted in the store index and the extraction "
        "manifest (image suffixes: %s)",
        store.root,
        sum(by_suffix.values()),
        ", ".join(f"{k} {v}" for k, v in by_suffix.items()),
        ", ".join(examples),
        " ".join(sorted(IMAGE_SUFFIXES)),
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
