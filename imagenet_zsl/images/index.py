"""The index of an image store (one row per image: class, source, member, offset, size), built
by scanning its sources in parallel and cached as Parquet under a key that changes with the store."""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from imagenet_zsl.atomic import canonical_json
from imagenet_zsl.checksums import sha256_bytes
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.layouts import Layout, sample_key
from imagenet_zsl.images.scan import Scan, source_path

#: 2: problems (damaged tars, skipped entries); 3: wds, parquet, in21k-p, skipped files;
#: 4: parquet rows without a usable path are ``<file>/row<N>``, ids unique across sources;
#: 5: the per-source ledger (members, images, metadata, skipped by reason, bytes unread, damage)
INDEX_VERSION = 5


@dataclass
class StoreIndex:
    """The images of a store, one row per image, sorted by (source, offset, member).

    Arrays (length n): ``class_index`` int32 into ``classes`` (sorted wnids present),
    ``source_index`` int32 into ``sources`` (tar files or folders, relative to the store),
    ``member`` (object, name inside the tar / path inside the folder), ``offset`` int64 (data
    offset inside the tar, -1 for plain files), ``size`` int64 (bytes). ``problems``: damaged
    tars and skipped entries found while indexing (see :class:`~imagenet_zsl.images.scan.Scan`).
    ``ledger``: one entry per source, in ``sources`` order (:func:`~imagenet_zsl.images.scan.
    new_ledger`: members seen, images indexed, metadata read, skipped by reason, bytes unread,
    damage), whose ``images`` add up to the number of rows.
    """

    classes: list[str]
    sources: list[str]
    class_index: np.ndarray
    source_index: np.ndarray
    member: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    problems: list[dict] = field(default_factory=list)
    ledger: list[dict] = field(default_factory=list)

    def to_parquet_bytes(self, meta: dict[str, Any]) -> bytes:
        """The index as Parquet, with ``meta`` (root, layout, key) in the schema metadata."""
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
            **meta,
            "version": INDEX_VERSION,
            "classes": self.classes,
            "sources": self.sources,
            "problems": self.problems,
            "ledger": self.ledger,
        }
        table = table.replace_schema_metadata({"imagenet_zsl": canonical_json(meta)})
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        return buffer.getvalue()

    @classmethod
    def from_parquet(cls, path: Path) -> tuple[dict[str, Any], StoreIndex]:
        """(metadata, index) of a cached index; ValueError when written by another version."""
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[b"imagenet_zsl"])
        if meta.get("version") != INDEX_VERSION:
            raise ValueError("index version changed")
        index = cls(
            classes=list(meta["classes"]),
            sources=list(meta["sources"]),
            class_index=table["class_index"].to_numpy().astype(np.int32),
            source_index=table["source_index"].to_numpy().astype(np.int32),
            member=table["member"].to_numpy(zero_copy_only=False).astype(object),
            offset=table["offset"].to_numpy().astype(np.int64),
            size=table["size"].to_numpy().astype(np.int64),
            problems=list(meta.get("problems", [])),
            ledger=list(meta.get("ledger", [])),
        )
        return meta, index


def index_key(root: Path, layout: Layout, sources: list[str]) -> str:
    """Cache key: store path, layout, labels file, and each source's size and mtime (of the link
    itself for a dangling one, which is a source its scan records)."""
    listing = []
    for name in sources:
        path = source_path(root, name)
        try:
            stat = os.stat(path)
        except OSError:
            stat = os.lstat(path)
        size = stat.st_size if path.is_file() else None
        listing.append([name, size, stat.st_mtime_ns])
    material = {
        "version": INDEX_VERSION,
        "root": str(root),
        "layout": layout.name,
        "labels_sha256": layout.labels_sha256(),
        "sources": listing,
    }
    return sha256_bytes(canonical_json(material).encode())[:24]


def _scan_all(root: Path, layout: Layout, sources: list[str], progress: bool) -> list[Scan]:
    workers = min(16, max(1, len(sources)), (os.cpu_count() or 1) * 4)
    with ThreadPoolExecutor(workers) as pool:
        return list(
            tqdm(
                pool.map(lambda source: layout.scan(root, source), sources),
                total=len(sources),
                desc="indexing store",
                unit="src",
                disable=not progress or len(sources) < 2,
            )
        )


def _check_unique_ids(
    root: Path,
    classes: list[str],
    class_index: np.ndarray,
    names: np.ndarray,
    source_index: np.ndarray,
    sources: list[str],
) -> None:
    """Refuse a store where two images share an id ``<wnid>/<member>`` (their features would be
    one row): one line naming the id and the two sources holding it. Arrays of length n."""
    if len(names) < 2:
        return
    order = np.lexsort((source_index, names, class_index))
    same = (class_index[order][1:] == class_index[order][:-1]) & (names[order][1:] == names[order][:-1])
    hits = np.flatnonzero(same)
    if not len(hits):
        return
    first, second = order[hits[0]], order[hits[0] + 1]
    image_id = f"{classes[class_index[first]]}/{names[first]}" if classes else f"{names[first]}"
    one, two = (sources[source_index[i]] or root.name for i in (first, second))
    where = f"twice in {one}" if one == two else f"in both {one} and {two}"
    what = "image id" if classes else "image key"
    raise UserInputError(
        f"{root}: {what} {image_id} is {where} ({len(hits)} repeated in all); each image needs "
        "its own id: remove the copies, or index the parts as separate stores"
    )


def build_index(root: Path, layout: Layout, sources: list[str], progress: bool) -> StoreIndex:
    """Scan every source of the store at ``root`` and index its images; every source gets its
    ledger entry (:class:`StoreIndex`)."""
    scans = _scan_all(root, layout, sources, progress)
    class_of = [layout.wnids(root, found) for found in scans]
    classes = sorted({w for wnids in class_of for w in wnids})
    position = {w: i for i, w in enumerate(classes)}
    class_index = np.fromiter((position[w] for wnids in class_of for w in wnids), dtype=np.int32)
    source_index = np.concatenate(
        [np.full(len(s.members), i, np.int32) for i, s in enumerate(scans)] or [np.zeros(0, np.int32)]
    )
    member = np.array([m for s in scans for m in s.members], dtype=object)
    offset = np.array([o for s in scans for o in s.offsets], dtype=np.int64)
    size = np.array([z for s in scans for z in s.sizes], dtype=np.int64)
    names = member.astype(np.str_) if len(member) else member
    _check_unique_ids(root, classes, class_index, names, source_index, sources)
    if layout.ids_span_classes and len(member):  # a key or image name is one image of the store
        keys = np.array([sample_key(layout.name, m) for m in member.tolist()], dtype=np.str_)
        _check_unique_ids(root, [], np.zeros(len(keys), np.int32), keys, source_index, sources)
    # deterministic order: by source, then tar offset (sequential reads), then member name
    order = np.lexsort((names, offset, source_index))
    return StoreIndex(
        classes=classes,
        sources=sources,
        class_index=class_index[order],
        source_index=source_index[order],
        member=member[order],
        offset=offset[order],
        size=size[order],
        problems=[problem for found in scans for problem in found.problems],
        ledger=[found.ledger for found in scans],
    )
