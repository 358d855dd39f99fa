"""The on-disk feature format shared by extraction, simulation, filtering, models and evaluation.

A feature directory holds fixed-size shards plus one ``manifest.json``::

    DIR/manifest.json                 format, classes (the label space), dim, shards, provenance
    DIR/<shard>.features.npy          (n, D) float16 image features
    DIR/<shard>.labels.npy            (n,)   int32, index into manifest["classes"]
    DIR/<shard>.ids.npy               (n,)   unicode image ids, e.g. "n01440764/n01440764_10026.JPEG"
    DIR/<shard>.logits.npy            (n, K) float16, optional: backbone's 1K-class logits
    DIR/<shard>.done.json             written last: rows and sha256 of each file (resume marker)
    DIR/head.npz                      optional: the backbone's own classifier (weight (K, D), bias
                                      (K,), classes), its sha256 in manifest["head"]

Shard names sort in work order (``r{rank:03d}-s{index:06d}``). A shard exists only once its
``.done.json`` is written, so an interrupted run leaves at most temp files that are ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.identity import feature_identity
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_save_npy,
    atomic_write_json,
    atomic_write_text,
    cache_dir,
    sha256_bytes,
    sha256_file,
)

FORMAT = "imagenet-zsl/features-v1"
SHARD_FILES = ("features", "labels", "ids", "logits")
log = logging.getLogger(__name__)


def shard_name(rank: int, index: int) -> str:
    return f"r{rank:03d}-s{index:06d}"


@dataclass
class FeatureBlock:
    """A block of rows: features (n, D) float32, labels (n,) int64, ids (n,), logits or None."""

    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    logits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)


def write_shard(
    out_dir: str | Path,
    name: str,
    features: np.ndarray,
    labels: np.ndarray,
    ids: Sequence[str] | np.ndarray,
    logits: np.ndarray | None = None,
) -> dict[str, Any]:
    """Write one shard atomically (each file temp+rename, ``.done.json`` last); return its record."""
    out_dir = Path(out_dir)
    n = len(labels)
    if features.ndim != 2 or features.shape[0] != n or len(ids) != n:
        raise ValueError(
            f"shard {name}: features {features.shape}, labels {len(labels)}, ids {len(ids)} disagree"
        )
    arrays = {
        "features": np.asarray(features, dtype=np.float16),
        "labels": np.asarray(labels, dtype=np.int32),
        "ids": np.asarray(ids, dtype=np.str_),
    }
    if logits is not None:
        arrays["logits"] = np.asarray(logits, dtype=np.float16)
    record: dict[str, Any] = {"name": name, "rows": int(n), "sha256": {}}
    for kind, array in arrays.items():
        path = out_dir / f"{name}.{kind}.npy"
        atomic_save_npy(path, array)
        record["sha256"][kind] = sha256_file(path)
    atomic_write_json(out_dir / f"{name}.done.json", record)
    return record


def encode_head(head: BackboneHead) -> bytes:
    """The bytes of ``head.npz``: ``weight`` (K, D) float32, ``bias`` (K,) float32, ``classes``
    (K,) unicode; the same head always gives the same bytes (no timestamps)."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        weight=np.ascontiguousarray(head.weight, dtype=np.float32),
        bias=np.ascontiguousarray(head.bias, dtype=np.float32),
        classes=np.asarray(head.classes, dtype=np.str_),
    )
    return buffer.getvalue()


def check_head_file(out_dir: str | Path, record: Any) -> str | None:
    """What is wrong with the head file that manifest record ``record`` describes (None: fine)."""
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        return "the manifest's 'head' record has no sha256"
    if record.get("file", HEAD_FILE) != HEAD_FILE:
        return f"the manifest's head file must be {HEAD_FILE!r}, not {record.get('file')!r}"
    path = Path(out_dir) / HEAD_FILE
    if not path.is_file():
        return f"{path}: the backbone head listed in the manifest is missing"
    if sha256_file(path) != record["sha256"]:
        return f"{path}: sha256 does not match the manifest (the head was changed after extraction)"
    return None


def finished_shard(out_dir: str | Path, name: str, verify: bool = False) -> dict[str, Any] | None:
    """The shard's record if it was completely written (and, with ``verify``, its hashes match)."""
    marker = Path(out_dir) / f"{name}.done.json"
    if not marker.exists():
        return None
    record = json.loads(marker.read_text())
    if verify:
        for kind, digest in record["sha256"].items():
            path = Path(out_dir) / f"{name}.{kind}.npy"
            if not path.exists() or sha256_file(path) != digest:
                return None
    return record


def write_manifest(out_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """Write the directory manifest; ``classes``, ``dim`` and ``shards`` are required keys."""
    for key in ("classes", "dim", "shards"):
        if key not in manifest:
            raise ValueError(f"feature manifest needs '{key}'")
    manifest = {"format": FORMAT, **manifest}
    return atomic_write_json(Path(out_dir) / MANIFEST_NAME, manifest)


class SharedBlocks:
    """Decoded (float32) feature blocks kept in memory up to ``max_bytes``, read-only, so that
    several consumers of the same shards in one process (every model of a batch run on one split)
    read and convert each shard once. Blocks that do not fit are streamed as usual."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.used = 0
        self.reads = 0  # shards read from disk while sharing (for tests and logs)
        self._blocks: dict[tuple, list[FeatureBlock]] = {}

    def get(self, key: tuple) -> list[FeatureBlock] | None:
        return self._blocks.get(key)

    def put(self, key: tuple, blocks: list[FeatureBlock]) -> list[FeatureBlock]:
        self.reads += 1
        size = sum(b.features.nbytes + (0 if b.logits is None else b.logits.nbytes) for b in blocks)
        for block in blocks:  # shared by several readers: nobody may change them in place
            for array in (block.features, block.logits, block.labels, block.ids):
                if array is not None:
                    array.flags.writeable = False
        if self.used + size <= self.max_bytes:
            self._blocks[key] = blocks
            self.used += size
        return blocks


_SHARED_BLOCKS: SharedBlocks | None = None


@contextlib.contextmanager
def shared_blocks(max_bytes: int) -> Iterator[SharedBlocks]:
    """Within the block, :meth:`FeatureDir.shard_blocks` keeps what it reads (up to ``max_bytes``)
    for the next reader of the same rows; memory is released on exit."""
    global _SHARED_BLOCKS
    previous, _SHARED_BLOCKS = _SHARED_BLOCKS, SharedBlocks(max_bytes)
    try:
        yield _SHARED_BLOCKS
    finally:
        _SHARED_BLOCKS = previous


#: in-process record of shard files whose sha256 matched the manifest, keyed by
#: (path, device, inode, size, mtime_ns, ctime_ns): a second read of an unchanged file is free
_VERIFIED: dict[tuple, str] = {}
_VERIFIED_CACHE_DIR = "verified-shards"


def _file_key(path: Path) -> tuple:
    """What changes whenever a file's bytes may have changed (ctime cannot be set back by users)."""
    st = path.stat()
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _marker(key: tuple) -> Path | None:
    """The on-disk note that ``key``'s file was verified (shared between runs); None without a cache."""
    try:
        root = cache_dir() / _VERIFIED_CACHE_DIR
    except OSError:
        return None
    return root / sha256_bytes(repr(key).encode())[:40]


def _known_good(key: tuple, digest: str) -> bool:
    if _VERIFIED.get(key) == digest:
        return True
    marker = _marker(key)
    try:
        if marker is not None and marker.read_text() == digest:
            _VERIFIED[key] = digest
            return True
    except OSError:
        pass
    return False


def _remember_good(key: tuple, digest: str) -> None:
    _VERIFIED[key] = digest
    marker = _marker(key)
    if marker is None:
        return
    try:
        atomic_write_text(marker, digest)
    except OSError:  # a read-only cache only costs a re-hash next time
        pass


def _manifest_problem(manifest: Any) -> str | None:
    """What makes ``manifest`` unusable as a feature manifest (None when it is fine)."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    classes = manifest.get("classes")
    if classes is None:
        return "no 'classes' list (the label space the shards' labels index)"
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return "'classes' must be a list of wnids"
    if not isinstance(manifest.get("dim"), int) or isinstance(manifest.get("dim"), bool):
        return "no integer 'dim' (the feature dimension)"
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        return "no 'shards' list"
    for i, shard in enumerate(shards):
        if not isinstance(shard, dict) or not isinstance(shard.get("name"), str):
            return f"shards[{i}] has no 'name'"
        if not isinstance(shard.get("rows"), int) or shard["rows"] < 0:
            return f"shards[{i}] ({shard['name']}) has no row count 'rows'"
        if "/" in shard["name"] or shard["name"].startswith("."):
            return f"shards[{i}]: {shard['name']!r} is not a plain shard name"
        digests = shard.get("sha256")
        if digests is not None and not (
            isinstance(digests, dict)
            and all(k in SHARD_FILES and isinstance(v, str) and len(v) == 64 for k, v in digests.items())
        ):
            return f"shards[{i}] ({shard['name']}): 'sha256' must map each shard file kind to a hex digest"
    return None


#: the shard files every shard has (logits are optional)
_REQUIRED_FILES = ("features", "labels", "ids")


def _unverifiable(shards: list[dict[str, Any]]) -> list[str]:
    """Names of the shards whose manifest record lacks the sha256 of a required file."""
    return [s["name"] for s in shards if not all(k in (s.get("sha256") or {}) for k in _REQUIRED_FILES)]


class FeatureDir:
    """Read-only view of a feature directory: the ONLY code that opens shard files.

    ``classes`` is the label space (list of wnids): ``labels`` index into it. Every shard file is
    checked before its first use: present, sha256 equal to the manifest's record (hashed once per
    file version, see :data:`_VERIFIED`; also noted in the cache directory so the next run does
    not hash again), a readable ``.npy`` with the manifest's row count (and ``dim`` columns for
    features). Any failure is a one-line :class:`UserInputError` naming the file.

    Reading API (all arrays as stored unless said otherwise):

    - :meth:`shard_names`, :meth:`rows_of` — the shards in order and their row counts;
    - :meth:`shard_labels` (n,) int64, :meth:`shard_ids` (n,) str — one shard, no features read;
    - :meth:`labels`, :meth:`ids` — the same over all shards;
    - :meth:`array` — one verified file (features/logits memory-mapped, float16);
    - :meth:`read_rows` — a :class:`FeatureBlock` of selected rows of one shard (float32);
    - :meth:`shard_blocks` — selected rows of one shard in blocks of at most ``block_rows``;
    - :meth:`iter_shards`, :meth:`iter_blocks`, :meth:`load` — whole directory;
    - :meth:`first_row`, :meth:`stray_feature_files`, :meth:`verify`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest_path = self.path / MANIFEST_NAME
        if not manifest_path.is_file():
            raise UserInputError(
                f"{manifest_path}: no feature manifest; point to a directory written by "
                "'imagenet-zsl extract' or 'imagenet-zsl simulate' (after --merge for torchrun runs)"
            )
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserInputError(f"{manifest_path}: not valid JSON ({err})") from err
        if not isinstance(self.manifest, dict) or self.manifest.get("format") != FORMAT:
            found = self.manifest.get("format") if isinstance(self.manifest, dict) else None
            raise UserInputError(f"{manifest_path}: format is {found!r}, expected {FORMAT!r}")
        problem = _manifest_problem(self.manifest)
        if problem:
            raise UserInputError(
                f"{manifest_path}: {problem}; the feature manifest is incomplete or damaged: "
                "re-run the extraction (or 'imagenet-zsl extract --merge DIR')"
            )
        self.classes: list[str] = list(self.manifest["classes"])
        self.dim: int = int(self.manifest["dim"])
        self.shards: list[dict[str, Any]] = list(self.manifest["shards"])
        unverifiable = _unverifiable(self.shards)
        if unverifiable:
            log.warning(
                "%s: the manifest records no sha256 for %d of %d shards (%s): they are read UNVERIFIED; "
                "re-extract to get verified shards",
                manifest_path,
                len(unverifiable),
                len(self.shards),
                preview(unverifiable),
            )
        self._records = {s["name"]: s for s in self.shards}
        logits = self.manifest.get("logits") or {}
        self.logit_classes: list[str] | None = logits.get("classes") if isinstance(logits, dict) else None

    @property
    def num_rows(self) -> int:
        return sum(int(s["rows"]) for s in self.shards)

    @property
    def has_logits(self) -> bool:
        return self.logit_classes is not None

    @property
    def simulated(self) -> bool:
        return bool(self.manifest.get("simulated", False))

    @property
    def identity(self) -> dict[str, Any]:
        """Which backbone, weights, preprocessing and layer made these features
        (:func:`~imagenet_zsl.features.identity.feature_identity`)."""
        return feature_identity(self.manifest)

    @property
    def has_head(self) -> bool:
        """Whether the manifest lists a backbone head (``head.npz``)."""
        return self.manifest.get("head") is not None

    def head(self) -> BackboneHead | None:
        """The backbone's own classifier stored by ``extract`` (:class:`~imagenet_zsl.features.head.
        BackboneHead`: weight (K, D), bias (K,), the K wnids in output order), verified against the
        manifest's sha256; None when the directory has none (simulated features, backbones without
        an ImageNet-1K head, directories written before heads were stored)."""
        record = self.manifest.get("head")
        if record is None:
            return None
        problem = check_head_file(self.path, record)
        if problem:
            raise UserInputError(f"{problem}; restore it or re-extract the features into a new directory")
        path = self.path / HEAD_FILE
        try:
            with np.load(path, allow_pickle=False) as data:
                head = BackboneHead(data["weight"], data["bias"], [str(c) for c in data["classes"]])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise UserInputError(
                f"{path}: not a readable backbone head ({str(err)[:120]}); re-extract"
            ) from None
        if head.dim != self.dim:
            raise UserInputError(
                f"{path}: the head reads {head.dim}-d features but the manifest says {self.dim}-d; re-extract"
            )
        return head

    def shard_names(self) -> list[str]:
        """The shards' names in row order."""
        return [s["name"] for s in self.shards]

    def rows_of(self, shard: str) -> int:
        """Row count of ``shard`` per the manifest."""
        return int(self._record(shard)["rows"])

    # -- the one place shard files are opened ------------------------------------------------------

    def _record(self, shard: str) -> dict[str, Any]:
        try:
            return self._records[shard]
        except KeyError:
            raise UserInputError(f"{self.path}: no shard {shard!r} in the manifest") from None

    def _checked_path(self, shard: str, kind: str) -> Path:
        """The file of ``shard``'s ``kind``, after checking it exists and matches its sha256."""
        path = self.path / f"{shard}.{kind}.npy"
        if not path.is_file():
            raise UserInputError(
                f"{path}: shard {kind} listed in the manifest is missing; re-run the extraction "
                "(it resumes) or restore the file"
            )
        digest = (self._record(shard).get("sha256") or {}).get(kind)
        if digest is None:
            return path  # written before shards were hashed: shape checks only
        key = _file_key(path)
        if not _known_good(key, digest):
            if sha256_file(path) != digest:
                raise UserInputError(
                    f"{path}: sha256 does not match the manifest: the shard is corrupted or was "
                    "changed after extraction; restore it or re-extract (delete its .done.json and "
                    "re-run the extract command)"
                )
            _remember_good(key, digest)
        return path

    def array(self, shard: str, kind: str, mmap: bool = True) -> np.ndarray:
        """One verified shard file: ``features``/``logits`` (n, D)/(n, K) float16 (memory-mapped
        unless ``mmap`` is False), ``labels`` (n,) int, ``ids`` (n,) str."""
        if kind not in SHARD_FILES:
            raise ValueError(f"kind must be one of {SHARD_FILES}, got {kind!r}")
        if kind == "logits" and not self.has_logits:
            raise UserInputError(f"{self.path}: features were extracted without logits")
        path = self._checked_path(shard, kind)
        try:
            array = np.load(path, mmap_mode="r" if mmap and kind != "ids" else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise UserInputError(
                f"{path}: not a readable .npy file (truncated or garbled: {str(err)[:120]}); "
                "restore it or re-extract the shard"
            ) from None
        rows = self.rows_of(shard)
        if array.ndim < 1 or len(array) != rows:
            raise UserInputError(
                f"{path}: holds {array.shape[0] if array.ndim else 0} rows but the manifest says {rows}; "
                "the shard is damaged or from another run: re-extract it"
            )
        if kind == "features" and (array.ndim != 2 or array.shape[1] != self.dim):
            raise UserInputError(
                f"{path}: features have shape {tuple(array.shape)} but the manifest says "
                f"{self.dim}-d; shards from different backbones are mixed in this directory: "
                "re-extract into an empty directory"
            )
        if kind == "labels" and not np.issubdtype(array.dtype, np.integer):
            raise UserInputError(f"{path}: labels must be integers, got {array.dtype}")
        if kind == "ids" and array.dtype.kind != "U":
            raise UserInputError(f"{path}: ids must be strings, got {array.dtype}")
        return array

    # -- per shard ---------------------------------------------------------------------------------

    def shard_labels(self, shard: str) -> np.ndarray:
        """(n,) int64 labels of one shard (into ``classes``), without reading features."""
        return np.asarray(self.array(shard, "labels"), dtype=np.int64)

    def shard_ids(self, shard: str) -> np.ndarray:
        """(n,) image ids of one shard, without reading features."""
        return self.array(shard, "ids")

    def read_rows(
        self, shard: str, rows: np.ndarray | slice | None = None, with_logits: bool = False
    ) -> FeatureBlock:
        """Rows ``rows`` (indices or a slice into the shard; None: all) of one shard as float32."""
        rows = slice(None) if rows is None else rows
        features = self.array(shard, "features")
        logits = self.array(shard, "logits") if with_logits else None
        return FeatureBlock(
            features=np.asarray(features[rows], dtype=np.float32),
            labels=self.shard_labels(shard)[rows],
            ids=self.shard_ids(shard)[rows],
            logits=None if logits is None else np.asarray(logits[rows], dtype=np.float32),
        )

    def shard_blocks(
        self,
        shard: str,
        rows: np.ndarray | None = None,
        block_rows: int = 65536,
        with_logits: bool = False,
    ) -> Iterator[FeatureBlock]:
        """The selected ``rows`` (sorted indices; None: all) of one shard in blocks of at most
        ``block_rows`` rows, features float32: memory bounded by one block."""
        if block_rows < 1:
            raise UserInputError(f"block_rows {block_rows}: must be at least 1")
        cache = _SHARED_BLOCKS
        if cache is not None:
            key = (
                str(self.path.resolve()),
                shard,
                json.dumps(self._record(shard).get("sha256") or {}, sort_keys=True),
                None if rows is None else hashlib.sha256(np.asarray(rows).tobytes()).hexdigest(),
                block_rows,
                with_logits,
            )
            blocks = cache.get(key)
            if blocks is None:
                blocks = cache.put(key, list(self._read_blocks(shard, rows, block_rows, with_logits)))
            yield from blocks
            return
        yield from self._read_blocks(shard, rows, block_rows, with_logits)

    def _read_blocks(
        self, shard: str, rows: np.ndarray | None, block_rows: int, with_logits: bool
    ) -> Iterator[FeatureBlock]:
        features = self.array(shard, "features")
        logits = self.array(shard, "logits") if with_logits else None
        labels, ids = self.shard_labels(shard), self.shard_ids(shard)
        total = len(labels) if rows is None else len(rows)
        for start in range(0, total, block_rows):
            pick = slice(start, start + block_rows) if rows is None else rows[start : start + block_rows]
            yield FeatureBlock(
                np.asarray(features[pick], dtype=np.float32),
                labels[pick],
                ids[pick],
                None if logits is None else np.asarray(logits[pick], dtype=np.float32),
            )

    # -- whole directory ---------------------------------------------------------------------------

    def iter_shards(self, with_logits: bool = False) -> Iterator[FeatureBlock]:
        """One block per shard, features as float32."""
        for name in self.shard_names():
            yield self.read_rows(name, with_logits=with_logits)

    def iter_blocks(self, block_rows: int = 65536, with_logits: bool = False) -> Iterator[FeatureBlock]:
        """Blocks of at most ``block_rows`` rows in shard order (memory bounded by the block)."""
        for name in self.shard_names():
            yield from self.shard_blocks(name, None, block_rows, with_logits)

    def labels(self) -> np.ndarray:
        """All labels (int64), without reading features."""
        parts = [self.shard_labels(name) for name in self.shard_names()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def ids(self) -> np.ndarray:
        """All image ids (str), without reading features."""
        parts = [self.shard_ids(name) for name in self.shard_names()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.str_)

    def first_row(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The first image's features (1, D) float32 (and logits (1, K) or None), reading one row."""
        names = [s["name"] for s in self.shards if int(s["rows"]) > 0]
        if not names:
            raise UserInputError(f"{self.path}: the feature directory holds no images")
        block = self.read_rows(names[0], slice(0, 1), with_logits=self.has_logits)
        return block.features, block.logits

    def load(self, classes: Sequence[str] | None = None, with_logits: bool = False) -> FeatureBlock:
        """All rows (optionally only those of ``classes``) in memory as one block."""
        keep = None
        if classes is not None:
            unknown = sorted(set(classes) - set(self.classes))
            if unknown:
                raise UserInputError(
                    f"{self.path}: {len(unknown)} requested classes have no features here, "
                    f"e.g. {', '.join(unknown[:5])}"
                )
            keep = np.isin(np.arange(len(self.classes)), [self.classes.index(c) for c in classes])
        parts: list[FeatureBlock] = []
        for name in self.shard_names():
            if keep is None:
                parts.append(self.read_rows(name, with_logits=with_logits))
            else:
                mask = keep[self.shard_labels(name)]
                parts.append(self.read_rows(name, np.flatnonzero(mask), with_logits=with_logits))
        if not parts:
            empty = np.zeros((0, self.dim), np.float32)
            return FeatureBlock(empty, np.zeros(0, np.int64), np.zeros(0, np.str_))
        return FeatureBlock(
            np.concatenate([p.features for p in parts]),
            np.concatenate([p.labels for p in parts]),
            np.concatenate([p.ids for p in parts]),
            None if not with_logits else np.concatenate([p.logits for p in parts]),
        )

    def stray_feature_files(self) -> dict[str, tuple[int, ...]]:
        """``*.features.npy`` files NOT listed in the manifest → their shape (header only; an
        unreadable one maps to ``()``): leftovers of another run or backbone."""
        listed = set(self._records)
        found: dict[str, tuple[int, ...]] = {}
        for path in sorted(self.path.glob("*.features.npy")):
            name = path.name[: -len(".features.npy")]
            if name in listed:
                continue
            try:
                found[name] = tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)
            except (ValueError, OSError, EOFError):
                found[name] = ()
        return found

    def verify(self) -> list[str]:
        """Problems found (missing, corrupted or malformed shard files); empty when all is well."""
        problems = []
        for shard in self.shards:
            for kind in shard.get("sha256") or {"features": None, "labels": None, "ids": None}:
                try:
                    self.array(shard["name"], kind)
                except UserInputError as err:
                    problems.append(str(err).split(";")[0])
        return problems
