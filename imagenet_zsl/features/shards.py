"""The on-disk feature format shared by extraction, simulation, filtering, models and evaluation.

A feature directory holds fixed-size shards plus one ``manifest.json``::

    DIR/manifest.json                 format, classes (the label space), dim, shards, provenance
    DIR/<shard>.features.npy          (n, D) float16 image features
    DIR/<shard>.labels.npy            (n,)   int32, index into manifest["classes"]
    DIR/<shard>.ids.npy               (n,)   unicode image ids, e.g. "n01440764/n01440764_10026.JPEG"
    DIR/<shard>.logits.npy            (n, K) float16, optional: backbone's 1K-class logits
    DIR/<shard>.done.json             written last: rows and sha256 of each file (resume marker)

Shard names sort in work order (``r{rank:03d}-s{index:06d}``). A shard exists only once its
``.done.json`` is written, so an interrupted run leaves at most temp files that are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_save_npy,
    atomic_write_json,
    sha256_file,
)

FORMAT = "imagenet-zsl/features-v1"
SHARD_FILES = ("features", "labels", "ids", "logits")


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


class FeatureDir:
    """Read-only view of a feature directory; streams blocks with bounded memory.

    ``classes`` is the label space (list of wnids): ``labels`` index into it.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest_path = self.path / MANIFEST_NAME
        if not manifest_path.exists():
            raise UserInputError(
                f"{manifest_path}: no feature manifest; point to a directory written by "
                "'imagenet-zsl extract' or 'imagenet-zsl simulate' (after --merge for torchrun runs)"
            )
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as err:
            raise UserInputError(f"{manifest_path}: not valid JSON ({err})") from err
        if self.manifest.get("format") != FORMAT:
            raise UserInputError(
                f"{manifest_path}: format is {self.manifest.get('format')!r}, expected {FORMAT!r}"
            )
        self.classes: list[str] = list(self.manifest["classes"])
        self.dim: int = int(self.manifest["dim"])
        self.shards: list[dict[str, Any]] = list(self.manifest["shards"])
        logits = self.manifest.get("logits") or {}
        self.logit_classes: list[str] | None = logits.get("classes")

    @property
    def num_rows(self) -> int:
        return sum(int(s["rows"]) for s in self.shards)

    @property
    def has_logits(self) -> bool:
        return self.logit_classes is not None

    @property
    def simulated(self) -> bool:
        return bool(self.manifest.get("simulated", False))

    def _load(self, name: str, kind: str, mmap: bool = True) -> np.ndarray:
        path = self.path / f"{name}.{kind}.npy"
        if not path.exists():
            raise UserInputError(f"{path}: shard file listed in the manifest is missing")
        return np.load(path, mmap_mode="r" if mmap and kind != "ids" else None, allow_pickle=False)

    def iter_shards(self, with_logits: bool = False) -> Iterator[FeatureBlock]:
        """One block per shard, features as float32."""
        for shard in self.shards:
            name = shard["name"]
            logits = None
            if with_logits:
                if not self.has_logits:
                    raise UserInputError(f"{self.path}: features were extracted without logits")
                logits = np.asarray(self._load(name, "logits"), dtype=np.float32)
            yield FeatureBlock(
                features=np.asarray(self._load(name, "features"), dtype=np.float32),
                labels=np.asarray(self._load(name, "labels"), dtype=np.int64),
                ids=self._load(name, "ids"),
                logits=logits,
            )

    def iter_blocks(self, block_rows: int = 65536, with_logits: bool = False) -> Iterator[FeatureBlock]:
        """Blocks of at most ``block_rows`` rows in shard order (memory bounded by the block)."""
        for block in self.iter_shards(with_logits=with_logits):
            for start in range(0, len(block), block_rows):
                stop = start + block_rows
                yield FeatureBlock(
                    block.features[start:stop],
                    block.labels[start:stop],
                    block.ids[start:stop],
                    None if block.logits is None else block.logits[start:stop],
                )

    def labels(self) -> np.ndarray:
        """All labels (int64), without reading features."""
        parts = [np.asarray(self._load(s["name"], "labels"), dtype=np.int64) for s in self.shards]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

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
        for block in self.iter_shards(with_logits=with_logits):
            if keep is not None:
                mask = keep[block.labels]
                block = FeatureBlock(
                    block.features[mask],
                    block.labels[mask],
                    block.ids[mask],
                    None if block.logits is None else block.logits[mask],
                )
            parts.append(block)
        if not parts:
            empty = np.zeros((0, self.dim), np.float32)
            return FeatureBlock(empty, np.zeros(0, np.int64), np.zeros(0, np.str_))
        return FeatureBlock(
            np.concatenate([p.features for p in parts]),
            np.concatenate([p.labels for p in parts]),
            np.concatenate([p.ids for p in parts]),
            None if not with_logits else np.concatenate([p.logits for p in parts]),
        )

    def verify(self) -> list[str]:
        """Problems found (missing files, sha256 mismatches); empty list when all is well."""
        problems = []
        for shard in self.shards:
            for kind, digest in shard.get("sha256", {}).items():
                path = self.path / f"{shard['name']}.{kind}.npy"
                if not path.exists():
                    problems.append(f"{path}: missing")
                elif sha256_file(path) != digest:
                    problems.append(f"{path}: sha256 mismatch")
        return problems
