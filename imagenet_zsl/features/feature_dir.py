"""The reader of feature directories (format in :mod:`imagenet_zsl.features.shard_files`)."""

from __future__ import annotations

import hashlib
import json
import logging
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features import shared_blocks
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.identity import feature_identity
from imagenet_zsl.features.shard_checks import (
    FLOAT_DTYPES,
    check_ids_match,
    check_shard_file,
    check_unique_ids,
    head_problem,
    read_feature_manifest,
    unverifiable,
)
from imagenet_zsl.features.shard_files import SHARD_FILES, FeatureBlock, check_head_file, shard_file
from imagenet_zsl.manifests import MANIFEST_NAME

log = logging.getLogger(__name__)


class FeatureDir:
    """Read-only view of a feature directory: the ONLY code that opens shard files.

    ``classes`` is the label space (list of wnids): ``labels`` index into it. Opening checks the
    manifest (:func:`~imagenet_zsl.features.shard_checks.read_feature_manifest`: every listed
    file present with its size). Every shard file is checked before its first use: sha256 equal
    to the manifest's record (hashed once per file version, also noted in the cache directory so
    the next run does not hash again), a readable ``.npy`` with the manifest's row count (and
    ``dim`` columns for features). Any failure is a one-line :class:`UserInputError` naming the
    file.

    Reading API (all arrays as stored unless said otherwise):

    - :meth:`shard_names`, :meth:`rows_of` — the shards in order and their row counts;
    - :meth:`shard_labels` (n,) int64, :meth:`shard_ids` (n,) str — one shard, no features read;
    - :meth:`labels`, :meth:`ids` — the same over all shards;
    - :meth:`array` — one verified file (features/logits memory-mapped, float16);
    - :meth:`read_rows` — a :class:`FeatureBlock` of selected rows of one shard (float32);
    - :meth:`shard_blocks` — selected rows of one shard in blocks of at most ``block_rows``;
    - :meth:`iter_shards`, :meth:`iter_blocks`, :meth:`load` — whole directory;
    - :meth:`mapped` — selected rows of the whole directory as a :class:`ShardRows`, read on demand;
    - :meth:`first_row`, :meth:`stray_feature_files`, :meth:`verify`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.manifest: dict[str, Any] = read_feature_manifest(self.path)
        self.classes: list[str] = list(self.manifest["classes"])
        self.dim: int = int(self.manifest["dim"])
        self.shards: list[dict[str, Any]] = list(self.manifest["shards"])
        unchecked = unverifiable(self.shards)
        if unchecked:
            log.warning(
                "%s: the manifest records no sha256 for %d of %d shards (%s): they are read UNVERIFIED; "
                "re-extract to get verified shards",
                self.path / MANIFEST_NAME,
                len(unchecked),
                len(self.shards),
                preview(unchecked),
            )
        self._records = {s["name"]: s for s in self.shards}
        logits = self.manifest.get("logits") or {}
        self.logit_classes: list[str] | None = logits.get("classes") if isinstance(logits, dict) else None
        self._head: tuple[BackboneHead | None] | None = None  # (head,) once read and verified
        self._ids_checked: set[str] = set()  # shards whose labels agree with their image ids

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

    def head(self) -> BackboneHead | None:
        """The backbone's own classifier stored by ``extract`` (:class:`~imagenet_zsl.features.head.
        BackboneHead`: weight (K, D), bias (K,), the K wnids in output order), verified against the
        manifest's sha256; None when the directory has none (simulated features, backbones without
        an ImageNet-1K head, directories written before heads were stored). Read and verified once
        per FeatureDir: ``train`` asks for it twice (may the model take it; the seen data)."""
        if self._head is None:
            self._head = (self._read_head(),)
        return self._head[0]

    def _read_head(self) -> BackboneHead | None:
        record = self.manifest.get("head")
        if record is None:
            return None
        problem = check_head_file(self.path, record)
        if problem:
            raise UserInputError(f"{problem}; restore it or re-extract the features into a new directory")
        path = self.path / HEAD_FILE
        try:
            with np.load(path, allow_pickle=False) as data:
                weight, bias, classes = data["weight"], data["bias"], data["classes"]
                problem = head_problem(weight, bias, classes)
                if problem:
                    raise ValueError(problem)
                head = BackboneHead(weight, bias, [str(c) for c in classes])
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            raise UserInputError(
                f"{path}: not a readable backbone head ({str(err)[:160]}); re-extract"
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
        path = self.path / shard_file(shard, kind)
        if not path.is_file():
            raise UserInputError(
                f"{path}: shard {kind} listed in the manifest is missing; re-run the extraction "
                "(it resumes) or restore the file"
            )
        digest = (self._record(shard).get("sha256") or {}).get(kind)
        if digest is None:
            return path  # written before shards were hashed: shape checks only
        check_shard_file(path, digest)
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
        problem = self._shape_problem(kind, array)
        if problem:
            raise UserInputError(f"{path}: {problem}")
        return array

    def _shape_problem(self, kind: str, array: np.ndarray) -> str | None:
        """What is wrong with the dtype or width of a shard file of ``kind`` (None: fine)."""
        if kind == "features" and (array.ndim != 2 or array.shape[1] != self.dim):
            return (
                f"features have shape {tuple(array.shape)} but the manifest says {self.dim}-d; "
                "shards from different backbones are mixed in this directory: re-extract into "
                "an empty directory"
            )
        width = len(self.logit_classes or ())
        if kind == "logits" and (array.ndim != 2 or array.shape[1] != width):
            return f"logits have shape {tuple(array.shape)} but the manifest lists {width} logit classes"
        if kind in ("features", "logits") and array.dtype.str[1:] not in FLOAT_DTYPES:
            return f"{kind} must be float16, float32 or float64, not {array.dtype}; re-extract"
        if kind == "labels":
            if not np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
                return f"labels must be integers, got {array.dtype}"
            if len(array) and (int(array.min()) < 0 or int(array.max()) >= len(self.classes)):
                bad = int(array.min()) if int(array.min()) < 0 else int(array.max())
                return (
                    f"labels outside the directory's {len(self.classes)} classes: label {bad} does not "
                    f"index the manifest's {len(self.classes)} classes; the labels and the manifest "
                    "come from different runs: re-extract"
                )
        if kind == "ids" and array.dtype.kind != "U":
            return f"ids must be strings, got {array.dtype}"
        return None

    # -- per shard ---------------------------------------------------------------------------------

    def shard_labels(self, shard: str) -> np.ndarray:
        """(n,) int64 labels of one shard (into ``classes``), without reading features. The first
        time per shard, the labels are checked against the image ids (:func:`check_ids_match`);
        the first time per directory, that no image id is in two shards (:func:`check_unique_ids`,
        reading every shard's ids)."""
        labels = np.asarray(self.array(shard, "labels"), dtype=np.int64)
        if shard not in self._ids_checked:
            if not self._ids_checked:  # once per directory: no image id in two shards
                check_unique_ids(self.path, self.shard_names(), self.shard_ids)
            ids_path = self.path / shard_file(shard, "ids")
            check_ids_match(ids_path, self.array(shard, "ids"), labels, self.classes)
            self._ids_checked.add(shard)
        return labels

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
        dtype: type = np.float32,
    ) -> Iterator[FeatureBlock]:
        """The selected ``rows`` (sorted indices; None: all) of one shard in blocks of at most
        ``block_rows`` rows, features float32: memory bounded by one block. ``dtype=np.float16``:
        the features as stored (a block of contiguous rows is then a view of the memory map,
        read when used), for a search that converts them on its device."""
        if block_rows < 1:
            raise UserInputError(f"block_rows {block_rows}: must be at least 1")
        cache = shared_blocks.active()
        if cache is not None:
            key = (
                str(self.path.resolve()),
                shard,
                json.dumps(self._record(shard).get("sha256") or {}, sort_keys=True),
                None if rows is None else hashlib.sha256(np.asarray(rows).tobytes()).hexdigest(),
                block_rows,
                with_logits,
                np.dtype(dtype).str,
            )
            blocks = cache.get(key)
            if blocks is None:
                blocks = cache.put(key, list(self._read_blocks(shard, rows, block_rows, with_logits, dtype)))
            yield from blocks
            return
        yield from self._read_blocks(shard, rows, block_rows, with_logits, dtype)

    def _read_blocks(
        self, shard: str, rows: np.ndarray | None, block_rows: int, with_logits: bool, dtype: type
    ) -> Iterator[FeatureBlock]:
        features = self.array(shard, "features")
        logits = self.array(shard, "logits") if with_logits else None
        labels, ids = self.shard_labels(shard), self.shard_ids(shard)
        total = len(labels) if rows is None else len(rows)
        for start in range(0, total, block_rows):
            pick = slice(start, start + block_rows) if rows is None else rows[start : start + block_rows]
            yield FeatureBlock(
                np.asarray(features[pick], dtype=dtype),
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
        if all("unstored_sha256" in s and "features" not in (s.get("sha256") or {}) for s in self.shards):
            # scored while extracted (issue 38 §1): no row is stored; the probe needs the width only
            logits = np.zeros((1, len(self.logit_classes)), np.float32) if self.logit_classes else None
            return np.zeros((1, self.dim), np.float32), logits
        block = self.read_rows(names[0], slice(0, 1), with_logits=self.has_logits)
        return block.features, block.logits

    def load(self, classes: Sequence[str] | None = None, with_logits: bool = False) -> FeatureBlock:
        """All rows (optionally only those of ``classes``) in memory as one block."""
        keep = None
        if classes is not None:
            keep = np.isin(np.arange(len(self.classes)), self._class_indices(classes))
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

    def mapped(
        self, classes: Sequence[str] | None = None, with_logits: bool = False
    ) -> tuple[ShardRows, np.ndarray, ShardRows | None]:
        """The rows of ``classes`` (None: all) WITHOUT reading features: (features :class:`ShardRows`
        (N, D), labels (N,) int64 into ``classes``-of-the-directory, logits ShardRows (N, K) or None).
        Memory: the labels and the selected row indices (16 B per image); the shards stay memory-
        mapped as stored (float16) and rows are converted to float32 only when read."""
        keep = (
            None if classes is None else np.isin(np.arange(len(self.classes)), self._class_indices(classes))
        )
        maps, logit_maps, rows, labels = [], [], [], []
        for name in self.shard_names():
            shard_labels = self.shard_labels(name)
            picked = np.arange(len(shard_labels)) if keep is None else np.flatnonzero(keep[shard_labels])
            if not len(picked):
                continue
            maps.append(self.array(name, "features"))
            if with_logits:
                logit_maps.append(self.array(name, "logits"))
            rows.append(picked)
            labels.append(shard_labels[picked])
        features = ShardRows(maps, rows) if maps else ShardRows([np.zeros((0, self.dim), np.float16)], [[]])
        logits = None
        if with_logits:
            width = len(self.logit_classes or ())
            logits = (
                ShardRows(logit_maps, rows) if maps else ShardRows([np.zeros((0, width), np.float16)], [[]])
            )
        return features, np.concatenate(labels) if labels else np.zeros(0, np.int64), logits

    def _class_indices(self, classes: Sequence[str]) -> list[int]:
        unknown = sorted(set(classes) - set(self.classes))
        if unknown:
            raise UserInputError(
                f"{self.path}: {len(unknown)} requested classes have no features here, "
                f"e.g. {', '.join(unknown[:5])}"
            )
        position = {w: i for i, w in enumerate(self.classes)}
        return [position[c] for c in classes]

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


class ShardRows:
    """Selected rows of a feature directory's shards, read on demand: an (N, D) matrix whose rows
    are converted to float32 only when read.

    Why: ``train`` on ImageNet-1K (1.28M x 2048) cannot hold a float32 copy (10.5 GB) within 8 GB.
    Each shard file stays memory-mapped as stored (float16, file-backed pages of the OS page cache:
    shared and reclaimable, never anonymous memory), and this object holds only the selected row
    indices (int64, 8 B per image). ``rows[a:b]``, ``rows[positions]`` (int array, any order) and
    ``rows[mask]`` give float32 arrays; :meth:`take` gives a subset without reading anything;
    ``np.asarray(rows)`` reads everything (for small data and tests only).
    ``columns`` (optional) restricts the columns read (the seen classes' logits)."""

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, maps: list[np.ndarray], rows: list[np.ndarray], columns: np.ndarray | None = None):
        self._maps = maps  # per shard: (n_i, D) as stored (memory map)
        self._rows = [np.asarray(r, dtype=np.int64) for r in rows]  # per shard: selected rows
        self._columns = None if columns is None else np.asarray(columns, dtype=np.int64)
        self._offsets = np.cumsum([0] + [len(r) for r in self._rows])  # (shards + 1,)
        width = int(maps[0].shape[1]) if maps else 0
        self.shape = (int(self._offsets[-1]), width if columns is None else len(self._columns))
        self.size = self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self[0 : len(self)].astype(dtype or np.float32, copy=False)

    def columns(self, columns: np.ndarray) -> ShardRows:
        """The same rows restricted to ``columns`` (indices into the stored columns)."""
        return ShardRows(self._maps, self._rows, columns)

    def take(self, positions: np.ndarray) -> ShardRows:
        """The rows at ``positions`` (increasing int indices or a bool mask), nothing read."""
        positions = _positions(positions, len(self))
        if len(positions) > 1 and np.any(np.diff(positions) <= 0):
            raise ValueError("bug: ShardRows.take needs increasing positions")
        cuts = np.searchsorted(positions, self._offsets)
        rows = [r[positions[cuts[i] : cuts[i + 1]] - self._offsets[i]] for i, r in enumerate(self._rows)]
        return ShardRows(self._maps, rows, self._columns)

    def __getitem__(self, key: slice | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self._read_range(start, max(start, stop))
            key = np.arange(start, stop, step)
        positions = _positions(key, len(self))
        out = np.empty((len(positions), self.shape[1]), np.float32)
        shard = np.searchsorted(self._offsets, positions, side="right") - 1
        for i in np.unique(shard):
            pick = np.flatnonzero(shard == i)
            local = self._rows[i][positions[pick] - self._offsets[i]]
            order = np.argsort(local, kind="stable")  # increasing reads of the memory map
            out[pick[order]] = self._read(i, local[order])
        return out

    def _read_range(self, start: int, stop: int) -> np.ndarray:
        parts = []
        first = int(np.searchsorted(self._offsets, start, side="right")) - 1
        for i in range(max(first, 0), len(self._rows)):
            lo, hi = max(start, self._offsets[i]), min(stop, self._offsets[i + 1])
            if lo >= hi:
                if self._offsets[i] >= stop:
                    break
                continue
            local = self._rows[i][lo - self._offsets[i] : hi - self._offsets[i]]
            parts.append(self._read(i, local))
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros((0, self.shape[1]), np.float32)

    def _read(self, shard: int, local: np.ndarray) -> np.ndarray:
        """float32 rows ``local`` (int indices into shard ``shard``) of the stored array."""
        source = self._maps[shard]
        if len(local) and local[-1] - local[0] + 1 == len(local) and np.all(np.diff(local) == 1):
            block = source[int(local[0]) : int(local[-1]) + 1]  # contiguous: a plain slice
        else:
            block = source[local]
        if self._columns is not None:
            block = block[:, self._columns]
        return np.asarray(block, dtype=np.float32)


def _positions(key: np.ndarray, length: int) -> np.ndarray:
    """int64 positions from int indices or a bool mask of ``length``."""
    key = np.asarray(key)
    if key.dtype == bool:
        if key.shape != (length,):
            raise IndexError(f"boolean index of shape {key.shape} for {length} rows")
        return np.flatnonzero(key)
    positions = key.astype(np.int64).ravel()
    if len(positions) and (positions.min() < 0 or positions.max() >= length):
        raise IndexError(f"row index out of range for {length} rows")
    return positions
