"""The layouts an image store comes in, one class each, and the one place that picks one.

    tars  STORE/<wnid>.tar            fall11 release: one uncompressed tar of JPEGs per synset
    tree  STORE/<wnid>/**/<image>     extracted folders (also ILSVRC-2012 train)
    flat  STORE/<image> or STORE.tar  ILSVRC-2012 val: images + a labels file (:func:`read_val_labels`)

A layout says which sources (tars or folders, relative to the store) a store has, how one is
scanned, and which wnid each image found there belongs to; :func:`make_layout` builds one by name
(``auto``: :func:`detect_layout`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import ClassVar, Protocol

from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.images.scan import Scan, is_image_name, scan_folder, scan_tar, source_path
from imagenet_zsl.io import sha256_file

WNID_RE = re.compile(r"^n\d{8}$")
WNID_TAR_RE = re.compile(r"^(n\d{8})\.tar$")


class Layout(Protocol):
    """How a store's images are laid out: its sources, their scan, each image's wnid."""

    name: ClassVar[str]

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
    if source_path(root, source).is_file():
        return scan_tar(root, source)
    return scan_folder(root, source, recursive=recursive)


def _named_sources(root: Path, layout: str, wanted: re.Pattern, files: bool) -> list[str]:
    """The entries of ``root`` named like ``wanted`` (files or folders), sorted; a store that is
    itself a file is its one source ''."""
    if root.is_file():
        return [""]
    with os.scandir(root) as entries:
        names = [e.name for e in entries if (e.is_file() if files else e.is_dir()) and wanted.match(e.name)]
    if not names:
        what = "<wnid>.tar files" if files else "<wnid>/ folders"
        raise UserInputError(f"{root}: no {what} found for --layout {layout}")
    return sorted(names)


class TarsLayout:
    """fall11: one uncompressed ``<wnid>.tar`` per synset, read in place."""

    name: ClassVar[str] = "tars"

    def __init__(self, root: Path, val_labels: str | Path | None = None):
        pass

    def labels_sha256(self) -> str | None:
        return None

    def sources(self, root: Path) -> list[str]:
        return _named_sources(root, self.name, WNID_TAR_RE, files=True)

    def scan(self, root: Path, source: str) -> Scan:
        return _scan_any(root, source, recursive=True)

    def wnids(self, root: Path, found: Scan) -> list[str]:
        tar_name = source_path(root, found.source).name
        match = WNID_TAR_RE.match(tar_name)
        if match is None:
            raise UserInputError(f"{root}: --layout tars needs <wnid>.tar files, not {tar_name}")
        return [match.group(1)] * len(found.members)


class TreeLayout:
    """Extracted class folders ``<wnid>/**/<image>``."""

    name: ClassVar[str] = "tree"

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


#: the layouts by name (``--layout``): the one registry
_REGISTRY: dict[str, type[TarsLayout | TreeLayout | FlatLayout]] = {
    cls.name: cls for cls in (TarsLayout, TreeLayout, FlatLayout)
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


def _count_entries(root: Path) -> tuple[int, int, int]:
    """(``<wnid>.tar`` files, ``<wnid>/`` folders, image files) directly in ``root``."""
    tars = dirs = images = 0
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir() and WNID_RE.match(entry.name):
                dirs += 1
            elif entry.is_file() and WNID_TAR_RE.match(entry.name):
                tars += 1
            elif entry.is_file() and is_image_name(entry.name):
                images += 1
    return tars, dirs, images


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
    tars, dirs, images = _count_entries(root)
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
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: labels file not found (give --val-labels FILE)")
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    rows = [(i, ln) for i, ln in enumerate(lines, 1) if ln and not ln.startswith("#")]
    if not rows:
        raise UserInputError(f"{path}: labels file is empty")
    if all(ln.isdigit() for _, ln in rows):
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
        if name in labels and labels[name] != wnid:
            raise UserInputError(f"{path}:{line_no}: {name} is labelled twice ({labels[name]}, {wnid})")
        labels[name] = wnid
    return labels
