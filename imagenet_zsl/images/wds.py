"""Webdataset shards as an image store: ``timm/imagenet-22k-wds``, ``imagenet-w21-wds`` and
``imagenet-w21-webp-wds`` as downloaded from the Hugging Face hub.

A shard (``imagenet22k-train-0000.tar``) is an uncompressed tar whose members are grouped into
samples by key (the member name up to the first dot of its base name, as webdataset groups them):
``KEY.jpg`` or ``KEY.webp`` (the image), ``KEY.cls`` (the class index, as text) and ``KEY.json``
(metadata naming the wnid: ``class_name``, ``wnid`` or ``synset``). Images are read in place
by offset, like the fall11 tars.

The class index → wnid map is the dataset's: the ``.json`` wnid of each sample, and, when the
store folder holds one, a class-index file (``*synsets.txt`` or ``classes.txt``: one wnid a line,
line i = class i, as timm ships ``imagenet22k_synsets.txt``). Every sample is checked against
it: a ``.cls`` that names another wnid than its ``.json`` (directly, through the class-index file,
or through another sample with the same ``.cls``) is a one-line error naming the shard and key.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import NamedTuple

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.scan import (
    Scan,
    is_image_name,
    printable,
    scan_tar,
    skipped_files_problem,
    source_path,
)

WNID_RE = re.compile(r"^n\d{8}$")
#: the json fields that may name a sample's wnid, in the order they are looked up
WNID_FIELDS = ("class_name", "wnid", "synset")
#: class-index files looked for in the store folder (one wnid a line, line i = class index i)
CLASS_INDEX_RE = re.compile(r"^(?:.*synsets|classes)\.txt$")
_META_MAX = 1 << 20  # a .cls or .json larger than this is not metadata


class SampleLabel(NamedTuple):
    """What one sample says of its class: its key, ``.cls`` index and ``.json`` wnid/label."""

    key: str
    cls: int | None
    wnid: str | None
    json_label: int | None


def split_key(name: str) -> tuple[str, str]:
    """(key, extension) of a member as webdataset groups them: the base name up to its first dot."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext.lower() if dot else "")


def _parse_cls(shard: str, key: str, data: bytes) -> int:
    text = data.decode("ascii", "replace").strip()
    if not text.isascii() or not text.isdigit():
        raise UserInputError(f"{shard}: sample {key}: .cls is {text[:20]!r}, not a class index")
    return int(text)


def _parse_json(shard: str, key: str, data: bytes) -> tuple[str | None, int | None]:
    try:
        meta = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"{shard}: sample {key}: .json is not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise UserInputError(f"{shard}: sample {key}: .json is not an object")
    wnid = next((meta[f] for f in WNID_FIELDS if isinstance(meta.get(f), str)), None)
    if wnid is not None and not WNID_RE.match(wnid):
        raise UserInputError(f"{shard}: sample {key}: .json names {wnid!r}, not a wnid (n########)")
    label = meta.get("label")
    return wnid, label if isinstance(label, int) and not isinstance(label, bool) else None


def _read_meta(tar: tarfile.TarFile, shard: str, samples: dict[str, dict]) -> list[str]:
    """Read every sample's ``.cls`` and ``.json`` into ``samples``; the other non-image members."""
    others = []
    for info in tar:
        if not info.isfile():
            continue
        key, ext = split_key(info.name)
        if ext in ("cls", "json") and info.size <= _META_MAX:
            handle = tar.extractfile(info)
            data = handle.read() if handle is not None else b""
            entry = samples.setdefault(key, {})
            if ext == "cls":
                entry["cls"] = _parse_cls(shard, key, data)
            else:
                entry["wnid"], entry["label"] = _parse_json(shard, key, data)
        elif not is_image_name(info.name):
            others.append(info.name)
    return others


def scan_shard(root: Path, source: str) -> Scan:
    """The images of one shard (read in place by offset, as :func:`scan_tar` finds them), each
    with its :class:`SampleLabel`; samples without an image, non-image members and damage are
    recorded as problems."""
    found = scan_tar(root, source)
    found.problems = [p for p in found.problems if p["kind"] != "skipped-files"]
    shard = str(source_path(root, source))
    samples: dict[str, dict] = {}
    try:
        with tarfile.open(source_path(root, source), "r:", encoding="utf-8", errors="surrogateescape") as tar:
            others = _read_meta(tar, shard, samples)
    except (tarfile.TarError, OSError):
        others = []  # damage is already recorded by scan_tar; keep the samples read before it
    keys = [split_key(m)[0] for m in found.members]
    found.labels = []
    for key in keys:
        entry = samples.get(key, {})
        found.labels.append(SampleLabel(key, entry.get("cls"), entry.get("wnid"), entry.get("label")))
    imaged = set(keys)
    orphans = sorted(k for k in samples if k not in imaged)
    skipped = skipped_files_problem(source, [*others, *(f"{k}.cls/.json" for k in orphans)])
    if skipped is not None:
        skipped["detail"] += f"; {len(orphans)} samples have no image" if orphans else ""
        found.problems.append(skipped)
    return found


def read_class_index(root: Path) -> tuple[list[str] | None, str | None]:
    """The store's class-index file (wnids by class index) and its name; (None, None) if none."""
    if root.is_file():
        root = root.parent
    names = sorted(p.name for p in root.iterdir() if p.is_file() and CLASS_INDEX_RE.match(p.name))
    if not names:
        return None, None
    if len(names) > 1:
        raise UserInputError(f"{root}: several class-index files ({', '.join(names)}); keep one")
    path = root / names[0]
    try:
        lines = path.read_text(encoding="utf-8").split()
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    bad = [w for w in lines if not WNID_RE.match(w)]
    if bad:
        raise UserInputError(f"{path}: {printable(bad[0])!r} is not a wnid; expected one wnid a line")
    return lines, str(path)


class ClassMap:
    """The class index → wnid map of one webdataset store, checked sample by sample."""

    def __init__(self, index: list[str] | None, index_file: str | None):
        self.index = index
        self.index_file = index_file
        self.seen: dict[int, tuple[str, str, str]] = {}  # cls → (wnid, shard, key)

    def wnid(self, shard: str, label: SampleLabel) -> str:
        """The sample's wnid; a UserInputError naming the shard and key on any disagreement."""
        where = f"{shard}: sample {label.key}"
        if label.cls is not None and label.json_label is not None and label.cls != label.json_label:
            raise UserInputError(f"{where}: .cls says {label.cls} but .json label says {label.json_label}")
        by_index = self._from_index(where, label.cls)
        wnid = label.wnid or by_index
        if wnid is None:
            raise UserInputError(
                f"{where}: no wnid: the .json names none ({'/'.join(WNID_FIELDS)}) and the store has no "
                "class-index file (*synsets.txt, one wnid a line); a flat val tar needs --val-labels"
            )
        if by_index is not None and by_index != wnid:
            raise UserInputError(
                f"{where}: .cls {label.cls} is {by_index} in {self.index_file} but the .json says {wnid}"
            )
        if label.cls is not None:
            first = self.seen.setdefault(label.cls, (wnid, shard, label.key))
            if first[0] != wnid:
                raise UserInputError(
                    f"{where}: .cls {label.cls} with .json {wnid}, but {first[1]} sample {first[2]} has "
                    f".cls {label.cls} with .json {first[0]}"
                )
        return wnid

    def _from_index(self, where: str, cls: int | None) -> str | None:
        if self.index is None or cls is None:
            return None
        if not 0 <= cls < len(self.index):
            raise UserInputError(
                f"{where}: .cls {cls} is outside the {len(self.index)} classes of {self.index_file}"
            )
        return self.index[cls]
