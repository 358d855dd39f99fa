"""Parquet files as an image store: ``timm/imagenet-w21-p`` (ImageNet-21K-P, winter21, webp) as
the Hugging Face hub distributes it, or any parquet release in the ``datasets`` image format.

A file holds an image column (a struct with ``bytes``, and usually ``path``, as ``datasets``
writes an ``Image`` feature; or plain binary) and an int ``label`` column. The label index → wnid
map is the dataset's own metadata: the ``huggingface`` schema metadata that ``datasets`` writes
into every file (the ``label`` feature's ``ClassLabel`` names), else the dataset card
(``README.md`` in the store folder, ``dataset_info.features`` YAML). The names must be wnids;
where they are not (human-readable names), a class-index file (``*synsets.txt``, one wnid a line,
line i = label i, as timm ships ``imagenet21k_miil_w21_synsets.txt``) in the store folder or in a
folder holding parquet files (the hub's ``data/``) gives the wnids instead, with as many lines as
there are names; copies in several of these folders must be identical. Every file must carry the
same map.

An image is located by (file, row); the reader loads the row group holding it (the files are
compressed page by page, so there is no byte offset to read) and keeps the last one, so reading
in store order decodes each row group once.
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.scan import Scan, source_path
from imagenet_zsl.images.wds import read_class_index

WNID_RE = re.compile(r"^n\d{8}$")
IMAGE_COLUMNS = ("image", "jpg", "webp", "png", "img")


def _card_names(root: Path) -> list[str] | None:
    """ClassLabel names of ``label`` in the dataset card (README.md YAML front matter), or None."""
    card = (root.parent if root.is_file() else root) / "README.md"
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    try:
        front = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError as err:
        raise UserInputError(f"{card}: the dataset card's YAML header is not valid ({err})") from None
    infos = front.get("dataset_info") if isinstance(front, dict) else None
    for info in infos if isinstance(infos, list) else [infos]:
        for feature in (info or {}).get("features") or []:
            if isinstance(feature, dict) and feature.get("name") == "label":
                names = ((feature.get("dtype") or {}).get("class_label") or {}).get("names")
                if isinstance(names, dict):
                    return [str(names[k]) for k in sorted(names, key=int)]
                if isinstance(names, list):
                    return [str(n) for n in names]
    return None


def _schema_names(metadata: dict[bytes, bytes] | None) -> list[str] | None:
    """ClassLabel names of ``label`` in the ``huggingface`` schema metadata, or None."""
    raw = (metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        features = json.loads(raw)["info"]["features"]
    except (ValueError, KeyError, TypeError):
        return None
    label = features.get("label") if isinstance(features, dict) else None
    names = label.get("names") if isinstance(label, dict) else None
    return [str(n) for n in names] if isinstance(names, list) else None


def image_column(schema: Any, where: str) -> str:
    """The name of the image column of a parquet schema (struct with bytes, or binary)."""
    for name in IMAGE_COLUMNS:
        index = schema.get_field_index(name)
        if index < 0:
            continue
        kind = schema.field(index).type
        if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0:
            return name
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return name
    raise UserInputError(
        f"{where}: no image column ({', '.join(IMAGE_COLUMNS)}: a struct with 'bytes', or binary); "
        f"columns: {', '.join(schema.names)}"
    )


def find_class_index(folders: list[Path]) -> tuple[list[str] | None, str | None]:
    """The class-index file found in ``folders`` (the store folder first, then those holding
    parquet files) and its wnids; (None, None) if none; copies that differ are refused."""
    found: list[tuple[list[str], str]] = []
    for folder in dict.fromkeys(folders):
        index, index_file = read_class_index(folder)
        if index_file is not None:
            found.append((index, index_file))
    for index, index_file in found[1:]:
        if index != found[0][0]:
            raise UserInputError(
                f"{index_file}: a class-index file that differs from {found[0][1]}; keep one (in the "
                "store folder or beside the parquet files), or make them the same"
            )
    return found[0] if found else (None, None)


class ClassNames:
    """The label → wnid map of a parquet store, the same in every file; ``folders``: where a
    class-index file may be (the store folder and the folders holding parquet files)."""

    def __init__(self, root: Path, folders: list[Path] | None = None):
        self.root = root
        self.card = _card_names(root)
        self.index, self.index_file = find_class_index([root, *(folders or [])])
        self.names: list[str] | None = None
        self.origin = ""

    def check(self, where: str, metadata: dict[bytes, bytes] | None) -> None:
        """Take (first file) or compare (the others) the map that ``where`` carries."""
        names, origin = _schema_names(metadata), f"{where} (huggingface schema metadata)"
        if names is None:
            names, origin = self.card, f"{self.root / 'README.md'} (dataset card)"
        if names is None:
            raise UserInputError(
                f"{where}: no class names for 'label': neither the 'huggingface' schema metadata nor "
                "a dataset card README.md beside the files lists them"
            )
        bad = [n for n in names if not WNID_RE.match(n)]
        if bad and self.index is not None:
            if len(self.index) != len(names):
                raise UserInputError(
                    f"{self.index_file}: {len(self.index)} wnids, but {origin} lists {len(names)} labels"
                )
            names, origin, bad = self.index, f"{self.index_file} (class-index file)", []
        if bad:
            raise UserInputError(
                f"{origin}: label names must be wnids (n########), e.g. {bad[0]!r}; or put a class-index "
                "file (*synsets.txt, one wnid a line) in the store folder or beside the parquet files"
            )
        if self.names is None:
            self.names, self.origin = names, origin
        elif names != self.names:
            raise UserInputError(f"{origin}: its label names differ from those of {self.origin}")

    def wnid(self, where: str, label: int) -> str:
        assert self.names is not None
        if not 0 <= label < len(self.names):
            raise UserInputError(f"{where}: label {label} is outside the {len(self.names)} class names")
        return self.names[label]


def scan_parquet(root: Path, source: str) -> Scan:
    """The rows of one parquet file: member = the base name of the image's ``path``, else (no path,
    or names repeated in the file) ``<file, relative, no .parquet>/row<N>`` so that ids stay unique
    across files; offset = the row number in the file, size -1 (unknown until read); ``labels``:
    (label, metadata) per row."""
    path = source_path(root, source)
    try:
        handle = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise UserInputError(f"{path}: not a readable parquet file ({str(err)[:120]})") from None
    schema = handle.schema_arrow
    column = image_column(schema, str(path))
    if schema.get_field_index("label") < 0:
        raise UserInputError(f"{path}: no 'label' column (columns: {', '.join(schema.names)})")
    wanted = ["label"]
    kind = schema.field(column).type
    has_path = pa.types.is_struct(kind) and kind.get_field_index("path") >= 0
    if has_path:
        wanted.append(f"{column}.path")
    table = handle.read(columns=wanted)
    labels = table.column("label").to_pylist()
    paths = table.column(column).combine_chunks().field("path").to_pylist() if has_path else []
    rows = len(labels)
    members = [p.rsplit("/", 1)[-1] if p else "" for p in paths] if has_path else [""] * rows
    if not all(members) or len(set(members)) != rows:
        stem = source.removesuffix(".parquet") if source else path.stem  # unique across files
        members = [f"{stem}/row{r:08d}" for r in range(rows)]
    if any(label is None for label in labels):
        raise UserInputError(f"{path}: row {labels.index(None)} has no label")
    scan = Scan(source, members, list(range(rows)), [-1] * rows)
    scan.labels = [(int(label), schema.metadata) for label in labels]
    return scan


class RowReader:
    """Image bytes by (file, row), keeping the last row group read (one per worker process)."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[Any, str, list[int]]] = {}
        self._group: tuple[str, int, list[bytes | None]] | None = None

    def _file(self, path: str) -> tuple[Any, str, list[int]]:
        opened = self._files.get(path)
        if opened is None:
            handle = pq.ParquetFile(path)
            starts, total = [], 0
            for group in range(handle.num_row_groups):
                starts.append(total)
                total += handle.metadata.row_group(group).num_rows
            opened = (handle, image_column(handle.schema_arrow, path), [*starts, total])
            if len(self._files) >= 8:
                self._files.clear()
            self._files[path] = opened
        return opened

    def read(self, path: str, row: int) -> bytes:
        """The bytes of row ``row`` of ``path`` (b"" for a null image)."""
        handle, column, starts = self._file(path)
        if not 0 <= row < starts[-1]:
            raise OSError(f"row {row} is outside the {starts[-1]} rows of {path}")
        group = bisect.bisect_right(starts, row) - 1
        if self._group is None or self._group[:2] != (path, group):
            values = handle.read_row_group(group, columns=[column]).column(column).combine_chunks()
            if hasattr(values, "field"):
                values = values.field("bytes")
            self._group = (path, group, values.to_pylist())
        data = self._group[2][row - starts[group]]
        return data or b""

    def __getstate__(self) -> dict:
        return {"_files": {}, "_group": None}
