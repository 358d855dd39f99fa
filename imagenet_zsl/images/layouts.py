"""The layouts an image store comes in, one class each, and the one place that picks one.

    tars     STORE/<wnid>.tar            fall11 release: one uncompressed tar of JPEGs per synset
    tree     STORE/<wnid>/**/<image>     extracted folders (also ILSVRC-2012 train)
    flat     STORE/<image> or STORE.tar  ILSVRC-2012 val: images + a labels file (:func:`read_val_labels`)
    wds      STORE/*.tar shards          webdataset (timm/imagenet-22k-wds, imagenet-w21-[webp-]wds):
                                         KEY.jpg|webp + KEY.cls + KEY.json (:mod:`.wds`)
    parquet  STORE/**/*.parquet          timm/imagenet-w21-p: image + label columns (:mod:`.parquet_files`)
    in21k-p  STORE/{imagenet21k_}train|val|small_classes/<wnid>/<image>: ImageNet-21K-P, one store
             (auto-detected from the imagenet21k_ names or small_classes: bare train/ + val/ is
             also ImageNet-1k's two stores, so detection asks which)

A layout says which sources (tars or folders, relative to the store) a store has, how one is
scanned, and which wnid each image found there belongs to; :func:`make_layout` builds one by name
(``auto``: :func:`detect_layout`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import ClassVar, Protocol

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.images.parquet_files import ClassNames, scan_parquet
from imagenet_zsl.images.scan import Scan, is_image_name, scan_folder, scan_tar, source_path
from imagenet_zsl.images.wds import ClassMap, read_class_index, scan_shard, split_key
from imagenet_zsl.paths import regular_input_file

#: every pattern here is used with ``fullmatch`` (a name ending in a newline matches none)
WNID_RE = re.compile(r"n[0-9]{8}")
WNID_TAR_RE = re.compile(r"(n[0-9]{8})\.tar")
TAR_RE = re.compile(r"[^.].*\.tar", re.DOTALL)
SHARD_RE = re.compile(r"(?!n[0-9]{8}\.tar\Z)[^.].*\.tar", re.DOTALL)
PARQUET_RE = re.compile(r"[^.].*\.parquet", re.DOTALL)
#: the three folders of ImageNet-21K-P (with or without the ``imagenet21k_`` prefix)
IN21KP_RE = re.compile(r"(?:imagenet21k_)?(?:train|val|small_classes)")
#: the folders that auto-detection takes for ImageNet-21K-P: bare ``train``/``val`` are also
#: PyTorch's ImageNet-1k layout (two stores), so they need ``small_classes`` beside them
IN21KP_SURE_RE = re.compile(r"(?:imagenet21k_(?:train|val|small_classes)|small_classes)")


class Layout(Protocol):
    """How a store's images are laid out: its sources, their scan, each image's wnid.
    ``ids_span_classes``: an image's name is unique in the whole store, whatever its class (a
    webdataset key, a parquet image name), not only within its class."""

    name: ClassVar[str]
    ids_span_classes: ClassVar[bool]

    def __init__(self, root: Path, val_labels: str | Path | None = None) -> None: ...

    def labels_sha256(self) -> str | None:
        """The sha256 of the labels file the layout reads (part of the index cache key), or None."""
        ...

    def sources(self, root: Path) -> list[str]:
        """Sources (relative names, sorted) of the store at ``root``; '' is ``root`` itself."""
        ...

    def scan(self, root: Path, source: str) -> Scan:
        """The images found in one source."""
        ...

    def wnids(self, root: Path, found: Scan) -> list[str]:
        """The wnid of each image of ``found`` (in ``found.members`` order)."""
        ...


def _scan_any(root: Path, source: str, recursive: bool) -> Scan:
    if not source_path(root, source).is_dir():  # a tar, or a FIFO named like one (recorded unopened)
        return scan_tar(root, source)
    return scan_folder(root, source, recursive=recursive)


def _named_sources(root: Path, layout: str, wanted: re.Pattern, files: bool) -> list[str]:
    """The entries of ``root`` named like ``wanted`` (files or folders), sorted; a store that is
    itself a file is its one source ''. A FIFO or dangling link named like a file source is a
    source too: its scan records it, unopened, in the ledger (never silently left out)."""
    if root.is_file():
        return [""]
    with os.scandir(root) as entries:
        names = [
            e.name for e in entries if (not e.is_dir() if files else e.is_dir()) and wanted.fullmatch(e.name)
        ]
    if not names:
        what = "<wnid>.tar files" if files else "<wnid>/ folders"
        raise UserInputError(f"{root}: no {what} found for --layout {layout}")
    return sorted(names)


class TarsLayout:
    """fall11: one uncompressed ``<wnid>.tar`` per synset, read in place. Every other ``.tar`` of
    the store is refused by name: its images have no wnid (a forced ``--layout tars`` never
    silently leaves out a store's webdataset shards)."""

    name: ClassVar[str] = "tars"
    ids_span_classes: ClassVar[bool] = False

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        pass

    def labels_sha256(self) -> str | None:
        return None

    def sources(self, root: Path) -> list[str]:
        sources = _named_sources(root, self.name, WNID_TAR_RE, files=True)
        if not root.is_file():
            with os.scandir(root) as entries:
                others = sorted(e.name for e in entries if not e.is_dir() and SHARD_RE.fullmatch(e.name))
            if others:
                raise UserInputError(
                    f"{root}: --layout tars reads <wnid>.tar files, but {preview(others, 3)} "
                    f"({len(others)} other .tar files) are not named by a wnid; move them out of the "
                    "store, or pass --layout wds to read every .tar as a webdataset shard"
                )
        return sources

    def scan(self, root: Path, source: str) -> Scan:
        return _scan_any(root, source, recursive=True)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        tar_name = source_path(root, found.source).name
        match = WNID_TAR_RE.fullmatch(tar_name)
        if match is None:
            raise UserInputError(f"{root}: --layout tars needs <wnid>.tar files, not {tar_name}")
        return [match.group(1)] * len(found.members)


class TreeLayout:
    """Extracted class folders ``<wnid>/**/<image>``."""

    name: ClassVar[str] = "tree"
    ids_span_classes: ClassVar[bool] = False

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        pass

    def labels_sha256(self) -> str | None:
        return None

    def sources(self, root: Path) -> list[str]:
        return _named_sources(root, self.name, WNID_RE, files=False)

    def scan(self, root: Path, source: str) -> Scan:
        return _scan_any(root, source, recursive=True)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        return [found.source] * len(found.members)


class FlatLayout:
    """One folder (or tar) of images labelled by a file (``--val-labels``)."""

    name: ClassVar[str] = "flat"
    ids_span_classes: ClassVar[bool] = False

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        if val_labels is None:
            raise UserInputError(f"{root}: --layout flat needs --val-labels FILE")
        self.labels = read_val_labels(val_labels)
        self._sha256 = sha256_file(val_labels)

    def labels_sha256(self) -> str | None:
        return self._sha256

    def sources(self, root: Path) -> list[str]:
        return [""]

    def scan(self, root: Path, source: str) -> Scan:
        return _scan_any(root, source, recursive=False)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        wnids = [self.labels.get(m.rsplit("/", 1)[-1]) for m in found.members]
        unlabeled = [m for m, w in zip(found.members, wnids, strict=True) if w is None]
        if unlabeled:
            raise UserInputError(
                f"{root}: {len(unlabeled)} images have no label in the --val-labels file, "
                f"e.g. {preview(unlabeled, 3)}; give a labels file covering every image"
            )
        return [w for w in wnids if w is not None]  # all of them: none is unlabelled


class WdsLayout:
    """Webdataset shards ``*.tar``: samples KEY.jpg|webp + KEY.cls + KEY.json, read in place; the
    class index → wnid map is checked sample by sample (:class:`~.wds.ClassMap`). Forced, it reads
    every ``.tar`` of the store as a shard, ``<wnid>.tar`` files included; a key is one sample of
    the whole store (the same key in two shards is refused, naming both)."""

    name: ClassVar[str] = "wds"
    ids_span_classes: ClassVar[bool] = True

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        self.index, self.index_file = read_class_index(root)
        self._sha256 = sha256_file(self.index_file) if self.index_file else None
        self.classes = ClassMap(self.index, self.index_file)

    def labels_sha256(self) -> str | None:
        return self._sha256

    def sources(self, root: Path) -> list[str]:
        if root.is_file():
            return [""]
        with os.scandir(root) as entries:
            names = [e.name for e in entries if not e.is_dir() and TAR_RE.fullmatch(e.name)]
        if not names:
            raise UserInputError(f"{root}: no webdataset *.tar shards found for --layout wds")
        return sorted(names)

    def scan(self, root: Path, source: str) -> Scan:
        return scan_shard(root, source)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        shard = source_path(root, found.source).name
        return [self.classes.wnid(shard, label) for label in found.labels or []]


class ParquetLayout:
    """Parquet files ``**/*.parquet`` with an image and a ``label`` column; label names from the
    dataset's metadata (:class:`~.parquet_files.ClassNames`). An image name is one image of the
    whole store (the same name in two files is refused, naming both)."""

    name: ClassVar[str] = "parquet"
    ids_span_classes: ClassVar[bool] = True

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        folders = sorted({(root / name).parent for name in self.sources(root)})  # the class index
        self.classes = ClassNames(root, folders)
        card = (root.parent if root.is_file() else root) / "README.md"
        files = [f for f in (card if card.is_file() else None, self.classes.index_file) if f]
        self._sha256 = "+".join(sha256_file(f) for f in files) or None

    def labels_sha256(self) -> str | None:
        return self._sha256  # the card's and class-index file's; the files' own change size/mtime

    def sources(self, root: Path) -> list[str]:
        if root.is_file():
            return [""]
        names = sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*.parquet")
            if not p.is_dir()
            and PARQUET_RE.fullmatch(p.name)
            and not any(x.startswith(".") for x in p.relative_to(root).parts)
        )
        if not names:
            raise UserInputError(f"{root}: no *.parquet files found for --layout parquet")
        return names

    def scan(self, root: Path, source: str) -> Scan:
        return scan_parquet(root, source)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        where = str(source_path(root, found.source))
        labels = found.labels or []
        if labels:
            self.classes.check(where, found.meta)
        return [self.classes.wnid(where, label) for label in labels]


class In21kPLayout:
    """ImageNet-21K-P: ``train``, ``val`` and ``small_classes`` folders (``imagenet21k_`` prefix
    optional) of ``<wnid>/`` class folders, read as one store; the ids are ``<wnid>/<file>`` as in
    a tree store, so an image held in two of the folders is refused."""

    name: ClassVar[str] = "in21k-p"
    ids_span_classes: ClassVar[bool] = False

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        self._seen: dict[tuple[str, str], str] = {}  # (wnid, file name) → the source holding it

    def labels_sha256(self) -> str | None:
        return None

    def sources(self, root: Path) -> list[str]:
        parts = [] if root.is_file() else _named_sources(root, self.name, IN21KP_RE, files=False)
        sources = [f"{part}/{wnid}" for part in parts for wnid in _wnid_dirs(root / part)]
        if not sources:
            raise UserInputError(
                f"{root}: no train/val/small_classes folders of <wnid>/ folders found for --layout in21k-p"
            )
        return sorted(sources)

    def scan(self, root: Path, source: str) -> Scan:
        return scan_folder(root, source, recursive=True)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        wnid = found.source.rsplit("/", 1)[-1]
        for member in found.members:
            first = self._seen.setdefault((wnid, member), found.source)
            if first != found.source:
                raise UserInputError(
                    f"{root}: {wnid}/{member} is in both {first} and {found.source}; ImageNet-21K-P "
                    "holds each image once: remove one copy"
                )
        return [wnid] * len(found.members)


def _wnid_dirs(folder: Path) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if e.is_dir() and WNID_RE.fullmatch(e.name))


def sample_key(layout: str, member: str) -> str:
    """What names one image in the whole store for a layout whose ids span classes: a webdataset
    sample's key (``k1`` of ``k1.jpg``), a parquet image's name as it is."""
    return split_key(member)[0] if layout == WdsLayout.name else member


#: the layouts by name (``--layout``): the one registry
_REGISTRY: dict[str, type[Layout]] = {
    cls.name: cls for cls in (TarsLayout, TreeLayout, FlatLayout, WdsLayout, ParquetLayout, In21kPLayout)
}
LAYOUTS = tuple(_REGISTRY)


def check_layout_name(name: str) -> None:
    """Refuse a ``--layout`` that is neither ``auto`` nor a registered layout."""
    if name != "auto" and name not in _REGISTRY:
        raise UserInputError(f"--layout {name!r}: choose one of auto, {', '.join(LAYOUTS)}")


def make_layout(name: str, root: Path, val_labels: str | Path | None = None) -> Layout:
    """The layout ``name`` (``auto``: :func:`detect_layout`) of the store at ``root``."""
    check_layout_name(name)
    if name == "auto":
        name = detect_layout(root, val_labels)
    return _REGISTRY[name](root, val_labels)


def _count_entries(root: Path) -> dict[str, int]:
    """How many entries of each kind ``root`` holds directly: ``tars`` (``<wnid>.tar``), ``dirs``
    (``<wnid>/``), ``images``, ``shards`` (other ``.tar``), ``parquet``, ``in21k-p`` folders
    (bare ``train``/``val`` count as ``in21k-p`` only beside an unambiguous one, else ``splits``)."""
    counts = dict.fromkeys(("tars", "dirs", "images", "shards", "parquet", "in21k-p", "splits"), 0)
    with os.scandir(root) as entries:
        for entry in entries:
            kind = _entry_kind(entry)
            if kind is not None:
                counts[kind] += 1
    if counts["in21k-p"]:
        counts["in21k-p"], counts["splits"] = counts["in21k-p"] + counts["splits"], 0
    if not any(counts.values()) and (root / "data").is_dir():  # the hub's data/*.parquet layout
        counts["parquet"] = sum(1 for p in (root / "data").rglob("*.parquet") if PARQUET_RE.fullmatch(p.name))
    return counts


def _entry_kind(entry: os.DirEntry) -> str | None:
    """The kind of one directory entry for :func:`_count_entries` (None: not a store entry)."""
    if entry.is_dir():
        if WNID_RE.fullmatch(entry.name):
            return "dirs"
        if IN21KP_RE.fullmatch(entry.name):
            return "in21k-p" if IN21KP_SURE_RE.fullmatch(entry.name) else "splits"
        return None
    if not entry.is_file():
        return None  # FIFOs, sockets: never opened
    for kind, pattern in (("tars", WNID_TAR_RE), ("shards", SHARD_RE), ("parquet", PARQUET_RE)):
        if pattern.fullmatch(entry.name):
            return kind
    return "images" if is_image_name(entry.name) else None


def _detect_file(root: Path, val_labels: str | Path | None) -> str:
    """The layout of a store that is one file: a tar (fall11, flat val or one shard) or a parquet."""
    if PARQUET_RE.fullmatch(root.name):
        return "parquet"
    if not root.name.endswith(".tar"):
        raise UserInputError(f"{root}: a store file must be a .tar archive or a .parquet file")
    if val_labels is not None:
        return "flat"
    return "tars" if WNID_TAR_RE.fullmatch(root.name) else "wds"


def detect_layout(root: Path, val_labels: str | Path | None = None) -> str:
    """Guess the layout of ``root``; ambiguous or empty stores raise a UserInputError."""
    if not root.exists():
        raise UserInputError(f"{root}: image store not found (give --store PATH)")
    if root.is_file():
        return _detect_file(root, val_labels)
    if not root.is_dir():
        raise UserInputError(f"{root}: neither a folder nor a file (a FIFO or device?); give a store folder")
    if val_labels is not None:
        return "flat"
    counts = _count_entries(root)
    found = [k for k in ("tars", "dirs", "shards", "parquet", "in21k-p", "splits") if counts[k]]
    if len(found) > 1:
        listed = " and ".join(f"{_KIND_TEXT[k]} ({counts[k]})" for k in found)
        choices = " or ".join(f"--layout {_KIND_LAYOUT[k]}" for k in found)
        raise UserInputError(f"{root}: holds both {listed}; pass {choices}")
    if found == ["splits"]:
        _refuse_train_val(root)
    if found:
        return _KIND_LAYOUT[found[0]]
    if counts["images"]:
        raise UserInputError(
            f"{root}: a flat folder of {counts['images']} images needs labels: pass --val-labels FILE "
            "(devkit ILSVRC2012_validation_ground_truth.txt or 'filename<TAB>wnid' lines)"
        )
    raise UserInputError(
        f"{root}: no <wnid>.tar files, <wnid>/ folders, webdataset .tar shards, .parquet files, "
        "ImageNet-21K-P train/val/small_classes folders or images found; point --store to the folder "
        "holding them"
    )


def _refuse_train_val(root: Path) -> None:
    """Bare ``train``/``val`` folders: ImageNet-1k's two stores, or ImageNet-21K-P's; ask which."""
    parts = sorted(p.name for p in root.iterdir() if p.is_dir() and IN21KP_RE.fullmatch(p.name))
    raise UserInputError(
        f"{root}: holds {' and '.join(f'{p}/' for p in parts)} folders, as ImageNet-1k does: each is "
        f"a store of its own (pass {' or '.join(f'--store {root / p}' for p in reversed(parts))}), "
        "or pass --layout in21k-p to read ImageNet-21K-P's folders as one store"
    )


_KIND_LAYOUT = {
    "tars": "tars",
    "dirs": "tree",
    "shards": "wds",
    "parquet": "parquet",
    "in21k-p": "in21k-p",
    "splits": "in21k-p",
}
_KIND_TEXT = {
    "tars": "<wnid>.tar files",
    "dirs": "<wnid>/ folders",
    "shards": "webdataset .tar shards",
    "parquet": ".parquet files",
    "in21k-p": "ImageNet-21K-P folders",
    "splits": "train/val folders",
}


def _devkit_labels(path: Path, rows: list[tuple[int, str]]) -> dict[str, str]:
    """Devkit ground truth: line i holds the 1-based ILSVRC2012_ID of ``ILSVRC2012_val_<i>.JPEG``."""
    wnids = ilsvrc2012_wnids()
    labels: dict[str, str] = {}
    for number, (line_no, text) in enumerate(rows, 1):
        class_id = int(text)
        if not 1 <= class_id <= len(wnids):
            raise UserInputError(f"{path}:{line_no}: ILSVRC2012_ID {class_id} is outside 1..{len(wnids)}")
        labels[f"ILSVRC2012_val_{number:08d}.JPEG"] = wnids[class_id - 1]
    return labels


def read_val_labels(path: str | Path) -> dict[str, str]:
    """Image file name → wnid from the devkit ground truth or a ``filename<TAB>wnid`` file.

    Devkit format: one 1-based ILSVRC2012_ID per line; line i labels ``ILSVRC2012_val_<i:08d>.JPEG``
    and ids map to wnids through the packaged devkit-order ``ilsvrc2012_wnids.txt``.
    """
    path = regular_input_file(path, "--val-labels file")  # a FIFO would block, /dev/zero never end
    lines = [ln.strip() for ln in _read_utf8(path).splitlines()]
    rows = [(i, ln) for i, ln in enumerate(lines, 1) if ln and not ln.startswith("#")]
    if not rows:
        raise UserInputError(f"{path}: labels file is empty")
    for line_no, text in rows:
        odd = next((ch for ch in text if ch.isdigit() and not ch.isascii()), None)
        if odd is not None:
            raise UserInputError(
                f"{path}:{line_no}: {text[:60]!r} holds the non-ASCII digit {odd!r} (U+{ord(odd):04X}); "
                "write ILSVRC2012_IDs and file names with ASCII digits 0-9"
            )
    if all(_ASCII_DIGITS.fullmatch(ln) for _, ln in rows):
        return _devkit_labels(path, rows)
    labels: dict[str, str] = {}
    for line_no, text in rows:
        parts = text.split("\t") if "\t" in text else text.split()
        if len(parts) != 2:
            raise UserInputError(
                f"{path}:{line_no}: expected 'filename<TAB>wnid' or one ILSVRC2012_ID per line, "
                f"got {text[:60]!r}"
            )
        name, wnid = parts[0].strip().rsplit("/", 1)[-1], parts[1].strip()
        if not WNID_RE.fullmatch(wnid):
            raise UserInputError(f"{path}:{line_no}: {wnid[:30]!r} is not a wnid (n########)")
        if name in labels and labels[name] != wnid:
            raise UserInputError(f"{path}:{line_no}: {name} is labelled twice ({labels[name]}, {wnid})")
        labels[name] = wnid
    return labels


_ASCII_DIGITS = re.compile(r"[0-9]+")


def _read_utf8(path: Path) -> str:
    """The text of a labels file, or one line naming the first byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserInputError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x}, e.g. Latin-1); save the "
            "labels file as UTF-8 or ASCII"
        ) from None
