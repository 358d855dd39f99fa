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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.metadata import card_configs, is_wnid, parse_json, read_dataset_card, shown
from imagenet_zsl.images.scan import Scan, not_regular, source_path
from imagenet_zsl.images.wds import read_class_index
from imagenet_zsl.paths import regular_input_file

IMAGE_COLUMNS = ("image", "jpg", "webp", "png", "img")
_DECIMAL = frozenset("0123456789")


def _checked_names(names: Any, where: str) -> list[str] | None:
    """Class names as a list (label i = names[i]): a list of strings, or a mapping whose keys are
    exactly the decimal labels 0..n-1 (no gap, no repeat, no other key); each name once. None
    when ``names`` is absent; anything else is one line naming ``where``."""
    if names is None:
        return None
    if isinstance(names, dict):
        keys = [str(k) for k in names]
        if not all(k and set(k) <= _DECIMAL and len(k) <= 9 for k in keys):
            bad = next(k for k in keys if not (k and set(k) <= _DECIMAL and len(k) <= 9))
            raise UserInputError(f"{where}: class label key {shown(bad)} is not a label number")
        by_label = {int(k): v for k, v in zip(keys, names.values(), strict=True)}
        if len(by_label) != len(keys):
            raise UserInputError(f"{where}: a class label number is given twice (e.g. '0' and '00')")
        missing = next((i for i in range(len(by_label)) if i not in by_label), None)
        if missing is not None:
            raise UserInputError(
                f"{where}: class labels must be 0..{len(by_label) - 1} without a gap; "
                f"label {missing} has no name"
            )
        names = [by_label[i] for i in range(len(by_label))]
    if not isinstance(names, list):
        raise UserInputError(f"{where}: class names are {type(names).__name__}, not a list")
    first: dict[str, int] = {}
    for label, name in enumerate(names):
        if not isinstance(name, str):
            raise UserInputError(f"{where}: the name of label {label} is {shown(name)}, not a string")
        if name in first:
            raise UserInputError(
                f"{where}: labels {first[name]} and {label} are both named {shown(name)}; each class once"
            )
        first[name] = label
    return list(names)


def _card_names(root: Path) -> list[str] | None:
    """ClassLabel names of ``label`` in the dataset card (README.md YAML front matter), or None."""
    front, card = read_dataset_card(root.parent if root.is_file() else root)
    for info in card_configs(front):
        features = info.get("features")
        for feature in features if isinstance(features, list) else []:
            if isinstance(feature, dict) and feature.get("name") == "label":
                dtype = feature.get("dtype")
                class_label = dtype.get("class_label") if isinstance(dtype, dict) else None
                names = class_label.get("names") if isinstance(class_label, dict) else None
                return _checked_names(names, f"{card} (dataset card, label names)")
    return None


def _schema_names(metadata: dict[bytes, bytes] | None, where: str) -> list[str] | None:
    """ClassLabel names of ``label`` in the ``huggingface`` schema metadata, or None when the
    metadata names none; metadata that is not valid JSON is one line naming the file."""
    raw = (metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    info = parse_json(raw, f"{where} (huggingface schema metadata)")
    inner = info.get("info") if isinstance(info, dict) else None
    features = inner.get("features") if isinstance(inner, dict) else None
    label = features.get("label") if isinstance(features, dict) else None
    names = label.get("names") if isinstance(label, dict) else None
    return _checked_names(names, f"{where} (huggingface schema metadata, label names)")


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
    class-index file may be (the store folder and the folders holding parquet files). The sources
    must agree: a card that lists other names than a file's metadata, or wnid names that a
    class-index file numbers otherwise, is one line naming both."""

    def __init__(self, root: Path, folders: list[Path] | None = None):
        self.root = root
        self.card = _card_names(root)
        self.card_file = (root.parent if root.is_file() else root) / "README.md"
        self.index, self.index_file = find_class_index([root, *(folders or [])])
        self.names: list[str] | None = None
        self.origin = ""

    def check(self, where: str, metadata: dict[bytes, bytes] | None) -> None:
        """Take (first file) or compare (the others) the map that ``where`` carries."""
        names, origin = _schema_names(metadata, where), f"{where} (huggingface schema metadata)"
        card = f"{self.card_file} (dataset card)"
        if names is not None and self.card is not None and names != self.card:
            raise UserInputError(f"{origin}: its label names differ from those of {card}")
        if names is None:
            names, origin = self.card, card
        if names is None:
            raise UserInputError(
                f"{where}: no class names for 'label': neither the 'huggingface' schema metadata nor "
                "a dataset card README.md beside the files lists them"
            )
        names, origin = self._as_wnids(names, origin)
        if self.names is None:
            self.names, self.origin = names, origin
        elif names != self.names:
            raise UserInputError(f"{origin}: its label names differ from those of {self.origin}")

    def _as_wnids(self, names: list[str], origin: str) -> tuple[list[str], str]:
        """The wnids of ``names``: themselves when they are wnids (and agree with a class-index
        file, if any), else the class-index file's, line for label."""
        bad = [n for n in names if not is_wnid(n)]
        if self.index is not None and len(self.index) != len(names):
            raise UserInputError(
                f"{self.index_file}: {len(self.index)} wnids, but {origin} lists {len(names)} labels"
            )
        if not bad:
            if self.index is not None and self.index != names:
                label = next(i for i, (a, b) in enumerate(zip(self.index, names, strict=True)) if a != b)
                raise UserInputError(
                    f"{self.index_file}: label {label} is {self.index[label]}, but {origin} "
                    f"names it {names[label]}"
                )
            return names, origin
        if self.index is not None:
            return self.index, f"{self.index_file} (class-index file)"
        raise UserInputError(
            f"{origin}: label names must be wnids (n########), e.g. {shown(bad[0])}; or put a class-index "
            "file (*synsets.txt, one wnid a line) in the store folder or beside the parquet files"
        )

    def wnid(self, where: str, label: int) -> str:
        assert self.names is not None
        if not 0 <= label < len(self.names):
            raise UserInputError(f"{where}: label {label} is outside the {len(self.names)} class names")
        return self.names[label]


def _check_label_type(path: Path, schema: Any) -> None:
    """A float, bool, string, list or map ``label`` column is one line naming the file and its
    type (a float label 1.7 is not a class index)."""
    if schema.get_field_index("label") < 0:
        raise UserInputError(f"{path}: no 'label' column (columns: {', '.join(schema.names)})")
    kind = schema.field(schema.get_field_index("label")).type
    if not pa.types.is_integer(kind):
        raise UserInputError(
            f"{path}: the 'label' column holds {kind}, not integers (class indices); labels are never "
            "rounded or converted"
        )


def _read_columns(handle: Any, column: str, has_path: bool) -> tuple[list[Any], list[Any]]:
    """(labels, image paths) as Python values; pyarrow's errors on damaged data propagate."""
    table = handle.read(columns=["label", f"{column}.path"] if has_path else ["label"])
    labels = table.column("label").to_pylist()
    paths = table.column(column).combine_chunks().field("path").to_pylist() if has_path else []
    return labels, paths


def _open_parquet(scan: Scan, path: Path) -> Any:
    """The opened file, or None with the damage in the ledger: a FIFO is never opened; a file
    pyarrow cannot open (a truncated download has no footer) is counted, not fatal."""
    try:
        regular_input_file(path, "parquet file")
    except UserInputError:
        kind = not_regular(path)
        scan.ledger["damage"] = f"{kind}: not read"
        scan.problems.append({"kind": "not-a-regular-file", "detail": f"{kind}; skipped unopened"})
        return None
    try:
        return pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        size = path.stat().st_size
        scan.ledger["damage"] = f"not a readable parquet file ({str(err)[:120]})"
        scan.ledger["bytes_unread"] = size
        scan.problems.append(
            {"kind": "damaged-parquet", "detail": f"{scan.ledger['damage']}; {size:,} bytes unread"}
        )
        return None


def scan_parquet(root: Path, source: str) -> Scan:
    """The rows of one parquet file: member = the base name of the image's ``path``, else (no path,
    or names repeated in the file) ``<file, relative, no .parquet>/row<N>`` so that ids stay unique
    across files; offset = the row number in the file, size -1 (unknown until read); ``labels``:
    the label per row, ``meta``: the file's schema metadata. A file that cannot be read is counted
    in the ledger as damaged, never fatal."""
    path = source_path(root, source)
    scan = Scan(source, [], [], [])
    handle = _open_parquet(scan, path)
    if handle is None:
        return scan.finish()
    schema = handle.schema_arrow
    column = image_column(schema, str(path))
    _check_label_type(path, schema)
    kind = schema.field(column).type
    has_path = pa.types.is_struct(kind) and kind.get_field_index("path") >= 0
    try:
        labels, paths = _read_columns(handle, column, has_path)
    except Exception as err:  # noqa: BLE001 - damaged pages or values: counted, as a damaged tar is
        scan.ledger["damage"] = f"damaged parquet data ({str(err)[:120]})"
        scan.ledger["bytes_unread"] = path.stat().st_size
        scan.problems.append({"kind": "damaged-parquet", "detail": scan.ledger["damage"]})
        return scan.finish()
    if any(label is None for label in labels):
        raise UserInputError(f"{path}: row {labels.index(None)} has no label")
    rows = len(labels)
    members = [p.rsplit("/", 1)[-1] if p else "" for p in paths] if has_path else [""] * rows
    if not all(members) or len(set(members)) != rows:
        stem = source.removesuffix(".parquet") if source else path.stem  # unique across files
        members = [f"{stem}/row{r:08d}" for r in range(rows)]
    scan.ledger["members"] = rows
    for row, member in enumerate(members):
        scan.add(member, row, -1)
    scan.labels = labels
    scan.meta = schema.metadata
    return scan.finish()


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
