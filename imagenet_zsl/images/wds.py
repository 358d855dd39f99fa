"""Webdataset shards as an image store: ``timm/imagenet-22k-wds``, ``imagenet-w21-wds`` and
``imagenet-w21-webp-wds`` as downloaded from the Hugging Face hub.

A shard (``imagenet22k-train-0000.tar``) is an uncompressed tar whose members are grouped into
samples by key (the member name up to the first dot of its base name, as webdataset groups them):
``KEY.jpg`` or ``KEY.webp`` (the image), ``KEY.cls`` (the class index, as text) and ``KEY.json``
(metadata naming the wnid: ``class_name``, ``wnid`` or ``synset``). Images are read in place
by offset, like the fall11 tars. A sample is one image: a second image member of a sample
(``KEY.jpg`` and ``KEY.png``) is counted in the ledger (``extra-image-in-sample``), not indexed.

The class index → wnid map is the dataset's: the ``.json`` wnid of each sample, and, when the
store folder holds one, a class-index file (``*synsets.txt`` or ``classes.txt``: one wnid a line,
line i = class i, as timm ships ``imagenet22k_synsets.txt``). Every sample is checked against
it: a ``.cls`` that names another wnid than its ``.json`` (directly, through the class-index file,
or through another sample with the same ``.cls``), a ``.json`` whose wnid fields disagree, is a
one-line error naming the shard and key.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.metadata import WNID, is_wnid, read_class_index_file, shown
from imagenet_zsl.images.metadata import parse_json as json_value
from imagenet_zsl.images.scan import (
    Scan,
    TarEntry,
    TarListing,
    is_image_name,
    member_problem,
    open_tar_source,
    printable,
    source_path,
)

__all__ = ["WNID", "ClassMap", "SampleLabel", "read_class_index", "scan_shard", "split_key"]

#: the json fields that may name a sample's wnid; every one present must name the same wnid
WNID_FIELDS = ("class_name", "wnid", "synset")
#: class-index files looked for in the store folder (one wnid a line, line i = class index i)
CLASS_INDEX_RE = re.compile(r"(?:.*synsets|classes)\.txt")
#: a .cls: a class index of at most 9 ASCII digits (a 5,000-digit one is not a class index)
CLS_RE = re.compile(rb"[0-9]{1,9}")
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


def parse_cls(shard: str, key: str, data: bytes) -> int:
    """The class index a ``.cls`` holds: ASCII digits (at most 9), surrounding whitespace allowed."""
    text = data.strip(b" \t\r\n")
    if CLS_RE.fullmatch(text) is None:
        raise UserInputError(
            f"{shard}: sample {printable(key)}: .cls is {shown(text[:20])}, not a class index"
        )
    return int(text)


def parse_sample_json(shard: str, key: str, data: bytes) -> tuple[str | None, int | None]:
    """(wnid, label) a sample's ``.json`` names: every field of :data:`WNID_FIELDS` present must
    be the same wnid, and ``label``, if present, a non-negative integer."""
    where = f"{shard}: sample {printable(key)}: .json"
    meta = json_value(data, where)
    if not isinstance(meta, dict):
        raise UserInputError(f"{where} is not an object")
    wnid = None
    for name in WNID_FIELDS:
        if name not in meta:
            continue
        value = meta[name]
        if not is_wnid(value):
            raise UserInputError(f"{where} field {name!r} is {shown(value)}, not a wnid (n########)")
        if wnid is not None and value != wnid:
            raise UserInputError(f"{where} names two wnids: {wnid} and {name!r} {value}")
        wnid = value
    label = meta.get("label")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool) or label < 0):
        raise UserInputError(f"{where} 'label' is {shown(label)}, not a class index (an integer >= 0)")
    return wnid, label


def _read(handle: BinaryIO, entry: TarEntry) -> bytes:
    handle.seek(entry.data)
    return handle.read(entry.size)


def _expected_members(groups: dict[str, list[tuple[TarEntry, str]]], last: str | None) -> frozenset | None:
    """The extensions most samples of a shard have (the last one, possibly cut, left out)."""
    shapes = Counter(frozenset(ext for _, ext in members) for key, members in groups.items() if key != last)
    return shapes.most_common(1)[0][0] if shapes else None


def _cut_sample(groups: dict[str, list[tuple[TarEntry, str]]], listing: TarListing) -> str | None:
    """The key of the sample a damaged shard's end cuts short, or None: the last sample is kept
    only when it has the members most other samples have (with no other sample to compare: an
    image, a .cls and a .json); holding the truncated member, it is cut. Never guessed whole."""
    if listing.damage is None or not listing.entries:
        return None
    last = split_key(listing.entries[-1].name)[0]
    members = groups.get(last)
    if members is None:
        return None
    if listing.truncated is not None and any(entry is listing.truncated for entry, _ in members):
        return last
    shape = frozenset(ext for _, ext in members)
    expected = _expected_members(groups, last)
    if expected is None:
        whole = {"cls", "json"} <= shape and any(ext not in ("cls", "json") for ext in shape)
        return None if whole else last
    return None if expected == shape else last


def _classify(scan: Scan, listing: TarListing) -> dict[str, list[tuple[TarEntry, str]]]:
    """Count every member in the ledger; the members that may belong to a sample, by key."""
    groups: dict[str, list[tuple[TarEntry, str]]] = {}
    for entry in listing.entries:
        scan.ledger["members"] += 1
        reason = member_problem(entry, listing)
        if reason is not None and reason != "truncated":
            scan.skip(reason, entry.name)
            continue
        key, ext = split_key(entry.name)
        if reason is None and ext not in ("cls", "json") and not is_image_name(entry.name):
            scan.skip("not-an-image", entry.name)
            continue
        groups.setdefault(key, []).append((entry, ext))
    return groups


def _read_sample(
    scan: Scan, handle: BinaryIO, shard: str, key: str, members: list[tuple[TarEntry, str]]
) -> SampleLabel | None:
    """Index one sample's image (counting its other members); its label, or None without image."""
    images = [entry for entry, ext in members if ext not in ("cls", "json")]
    if not images:
        for entry, _ in members:
            scan.skip("no-image-in-sample", entry.name)
        return None
    for extra in images[1:]:
        scan.skip("extra-image-in-sample", extra.name)
    values: dict[str, Any] = {}
    for entry, ext in members:
        if ext not in ("cls", "json"):
            continue
        if entry.size > _META_MAX:
            scan.skip("metadata-too-large", entry.name)
            continue
        if ext in values:
            raise UserInputError(f"{shard}: sample {printable(key)} holds two .{ext} members")
        data = _read(handle, entry)
        values[ext] = parse_cls(shard, key, data) if ext == "cls" else parse_sample_json(shard, key, data)
        scan.ledger["metadata"] += 1
    scan.add(images[0].name, images[0].data, images[0].size)
    wnid, label = values.get("json", (None, None))
    return SampleLabel(key, values.get("cls"), wnid, label)


def scan_shard(root: Path, source: str) -> Scan:
    """The images of one shard (read in place by offset), each with its :class:`SampleLabel`;
    every member counted in the ledger: images, metadata, and the skipped by reason. In a damaged
    shard the sample its end cuts short is counted (``cut-by-damage``), never guessed at."""
    scan, listing = open_tar_source(root, source, "webdataset shard")
    scan.labels = []
    if listing is None:
        return scan.finish()
    shard = str(source_path(root, source))
    groups = _classify(scan, listing)
    cut = _cut_sample(groups, listing)
    with open(source_path(root, source), "rb") as handle:
        for key, members in groups.items():
            if key == cut:
                for entry, _ in members:
                    scan.skip("truncated" if entry is listing.truncated else "cut-by-damage", entry.name)
                continue
            label = _read_sample(scan, handle, shard, key, members)
            if label is not None:
                scan.labels.append(label)
    _sort_by_offset(scan)
    return scan.finish()


def _sort_by_offset(scan: Scan) -> None:
    """Members, offsets, sizes and labels in tar order (samples were read key by key)."""
    order = sorted(range(len(scan.members)), key=scan.offsets.__getitem__)
    scan.members = [scan.members[i] for i in order]
    scan.offsets = [scan.offsets[i] for i in order]
    scan.sizes = [scan.sizes[i] for i in order]
    scan.labels = [scan.labels[i] for i in order] if scan.labels else []


def read_class_index(root: Path) -> tuple[list[str] | None, str | None]:
    """The store's class-index file (wnids by class index) and its name; (None, None) if none."""
    if root.is_file():
        root = root.parent
    names = sorted(p.name for p in root.iterdir() if CLASS_INDEX_RE.fullmatch(p.name) and not p.is_dir())
    if not names:
        return None, None
    if len(names) > 1:
        raise UserInputError(f"{root}: several class-index files ({', '.join(names)}); keep one")
    path = root / names[0]
    return read_class_index_file(path), str(path)


class ClassMap:
    """The class index → wnid map of one webdataset store, checked sample by sample."""

    def __init__(self, index: list[str] | None, index_file: str | None):
        self.index = index
        self.index_file = index_file
        self.seen: dict[int, tuple[str, str, str]] = {}  # cls → (wnid, shard, key)

    def wnid(self, shard: str, label: SampleLabel) -> str:
        """The sample's wnid; a UserInputError naming the shard and key on any disagreement."""
        where = f"{shard}: sample {printable(label.key)}"
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
