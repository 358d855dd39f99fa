"""Class-vector files: npz (``ClassVectors.save``) or parquet (``wnid`` + one float column per dim).

The parquet file holds only classes with a vector; the classes without one are listed in its
schema metadata (``imagenet_zsl.missing``), so nothing is silently zero-filled either way.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.semantics.class_vectors import ClassVectors

MISSING_KEY = b"imagenet_zsl.missing"
SOURCE_KEY = b"imagenet_zsl.source"


def save_class_vectors(vectors: ClassVectors, path: str | Path) -> Path:
    """Write ``vectors`` as .npz or .parquet (by suffix), atomically."""
    path = Path(path)
    if path.suffix == ".npz":
        return vectors.save(path)
    if path.suffix != ".parquet":
        raise UserInputError(f"{path}: class vectors are written as .npz or .parquet")
    # deferred: only a .parquet file needs pyarrow (train or evaluate on .npz vectors never loads it)
    import pyarrow as pa
    import pyarrow.parquet as pq  # deferred: as pyarrow above

    columns = {"wnid": pa.array(vectors.wnids, type=pa.string())}
    width = len(str(max(vectors.dim - 1, 0)))
    for j in range(vectors.dim):
        columns[f"e{j:0{width}d}"] = pa.array(vectors.matrix[:, j], type=pa.float32())
    table = pa.table(columns).replace_schema_metadata(
        {
            MISSING_KEY: json.dumps(vectors.missing).encode(),
            SOURCE_KEY: vectors.source.encode(),
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def is_class_vector_file(spec: object) -> bool:
    """True when ``spec`` names a class-vector file (``labels vectors|encode`` output), not word vectors.

    An ``.npz`` is always one; a ``.parquet`` is one when it has a ``wnid`` column (a word-vector
    vocabulary parquet has none). Only the schema is read.
    """
    if not isinstance(spec, str | Path):
        return False
    path = Path(spec)
    if path.suffix == ".npz":
        return True
    if path.suffix != ".parquet" or not path.is_file():
        return False
    # deferred: only a .parquet file needs pyarrow (train or evaluate on .npz vectors never loads it)
    import pyarrow.parquet as pq

    try:
        return "wnid" in pq.read_schema(path).names
    except Exception:  # not readable as parquet: let the word-vector loader report it
        return False


def is_class_vector_output(path: str | Path) -> bool:
    """True when ``path`` is a class-vector file as this toolkit writes it, so an ``--out`` there
    may be replaced (``safe_output.check_out_file``): an ``.npz`` whose members are ``wnids.npy`` and
    ``matrix.npy`` (and optionally ``missing.npy``, ``source.npy``), or a ``.parquet`` with a
    ``wnid`` column and this toolkit's schema metadata. Only the zip directory or the parquet
    schema is read (nothing is unpickled)."""
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
            return (
                {"wnids.npy", "matrix.npy"}
                <= names
                <= {
                    "wnids.npy",
                    "matrix.npy",
                    "missing.npy",
                    "source.npy",
                }
            )
        if path.suffix == ".parquet":
            # deferred: only a .parquet file needs pyarrow (train or evaluate on .npz vectors never loads it)
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            return "wnid" in schema.names and MISSING_KEY in (schema.metadata or {})
    except Exception:  # noqa: BLE001 - unreadable: not ours, so not replaced
        return False
    return False


def load_class_vector_file(path: str | Path) -> ClassVectors:
    """Read a file written by ``save_class_vectors``."""
    path = Path(path)
    if path.suffix == ".npz":
        return ClassVectors.load(path)
    regular_input_file(path, "class-vector file")
    # deferred: only a .parquet file needs pyarrow (train or evaluate on .npz vectors never loads it)
    import pyarrow as pa
    import pyarrow.parquet as pq  # deferred: as pyarrow above

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types on corrupt files
        raise UserInputError(f"{path}: not a readable parquet file: {err}") from err
    if "wnid" not in table.column_names:
        raise UserInputError(f"{path}: a class-vector parquet needs a 'wnid' column")
    if not (
        pa.types.is_string(wnid_type := table.schema.field("wnid").type)
        or pa.types.is_large_string(wnid_type)
    ):
        raise UserInputError(
            f"{path}: the 'wnid' column must hold strings, not {table.schema.field('wnid').type}"
        )
    meta = table.schema.metadata or {}
    dims = [c for c in table.column_names if c != "wnid"]
    columns = [table.column(c).to_numpy(zero_copy_only=False) for c in dims]
    bad = next((c for c, values in zip(dims, columns, strict=True) if values.dtype.kind not in "fiu"), None)
    if bad is not None:
        raise UserInputError(f"{path}: column {bad!r} must hold numbers (one float column per dimension)")
    matrix = np.column_stack(columns) if columns else np.zeros((len(table), 0))
    try:
        missing = json.loads(meta.get(MISSING_KEY, b"[]"))
        vectors = ClassVectors(
            wnids=[str(w) for w in table.column("wnid").to_pylist()],
            matrix=matrix,
            missing=missing if isinstance(missing, list) else [],
            source=meta.get(SOURCE_KEY, str(path).encode()).decode("utf-8", "replace"),
        )
    except (ValueError, RecursionError) as err:  # duplicate wnids, unreadable metadata
        raise UserInputError(f"{path}: not a class-vector parquet ({str(err)[:200]})") from None
    vectors.require_finite(str(path))
    return vectors
