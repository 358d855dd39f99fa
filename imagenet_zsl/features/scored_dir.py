"""The fused path's two views of test images that are scored, never stored (issue 38 §1):

- the *planned* directory (:func:`write_planned`): a feature directory holding the extraction's
  manifest fields (classes, dim, backbone, weights sha256, preprocessing, head) and every planned
  image as one shard of labels and ids, no features. It exists before any image is decoded, so a
  run checks provenance, training overlap and class sets on it and builds each cell's search from
  it (the label space and lookup depend on the classes, never on the rows);
- :class:`ShardView`: one freshly extracted shard, in memory, read as a
  :class:`~imagenet_zsl.features.feature_dir.FeatureDir` shard is read (the same blocks of the
  same float16 rows), under the record the finished scored directory will give it, so that the
  run's search caches it under the key a search of that directory looks for (a cached shard's
  row numbers are its own: no other shard need be finished, whichever process extracts it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_save_npy
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract import Begun
from imagenet_zsl.features.extract_record import ensure_head
from imagenet_zsl.features.scored_shards import UNSTORED_KEY, ShardOutputs, npy_sha256
from imagenet_zsl.features.shard_files import FeatureBlock, shard_file, write_manifest

#: the one shard of a planned directory
PLANNED_SHARD = "planned"


def write_planned(begun: Begun, path: Path) -> Path:
    """Write the planned directory of an extraction begun with :func:`~imagenet_zsl.features.
    extract.begin_extraction` to ``path`` (replacing one there): its manifest fields, head and
    planned images (labels (n,) int32, ids (n,) str); returns ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    work = begun.work
    arrays = {"labels": np.asarray(work.labels, dtype=np.int32), "ids": np.asarray(work.ids(), dtype=np.str_)}
    digests = {}
    for kind, array in arrays.items():
        digests[kind] = sha256_file(atomic_save_npy(path / shard_file(PLANNED_SHARD, kind), array))
    ensure_head(path, begun.setup.head)
    manifest = dict(begun.record["manifest"])
    shard = {"name": PLANNED_SHARD, "rows": len(work), "sha256": digests, UNSTORED_KEY: {}}
    manifest.update(
        shards=[shard],
        skipped=[],
        counts={"work_items": len(work), "images": len(work), "skipped": 0, "shards": 1},
    )
    write_manifest(path, manifest)
    return path


def shard_record(outputs: ShardOutputs) -> dict[str, Any]:
    """The record the scored directory's manifest will give ``outputs``' shard (the search cache
    keys a shard by it): what :func:`~imagenet_zsl.features.scored_shards.write_scored_shard`
    writes, computed in memory."""
    unstored = {"features": npy_sha256(outputs.features)}
    if outputs.logits is not None:
        unstored["logits"] = npy_sha256(outputs.logits)
    return {
        "name": outputs.name,
        "rows": len(outputs.labels),
        "sha256": {"labels": npy_sha256(outputs.labels), "ids": npy_sha256(outputs.ids)},
        UNSTORED_KEY: unstored,
    }


class ShardView:
    """One in-memory shard as the search reads a feature directory of that one shard: ``shards``
    holds its record, ``dim`` is the feature width."""

    def __init__(self, path: Path, outputs: ShardOutputs):
        self.path = Path(path)
        self.outputs = outputs
        self.shards = [shard_record(outputs)]
        self.dim = int(outputs.features.shape[1])
        self.has_logits = outputs.logits is not None

    @property
    def num_rows(self) -> int:
        return sum(int(s["rows"]) for s in self.shards)

    def _check(self, shard: str) -> None:
        if shard != self.outputs.name:
            raise UserInputError(f"{self.path}: shard {shard} is not in memory (only {self.outputs.name} is)")

    def shard_labels(self, shard: str) -> np.ndarray:
        """(n,) int64, as :meth:`FeatureDir.shard_labels` gives them."""
        self._check(shard)
        return np.asarray(self.outputs.labels, dtype=np.int64)

    def shard_ids(self, shard: str) -> np.ndarray:
        self._check(shard)
        return self.outputs.ids

    def shard_blocks(
        self,
        shard: str,
        rows: np.ndarray | None = None,
        block_rows: int = 65536,
        with_logits: bool = False,
        dtype: type = np.float32,
    ) -> Iterator[FeatureBlock]:
        """The blocks :meth:`FeatureDir.shard_blocks` gives of a stored shard: rows ``rows`` (None:
        all) in blocks of at most ``block_rows``, features converted to ``dtype``."""
        if block_rows < 1:
            raise UserInputError(f"block_rows {block_rows}: must be at least 1")
        self._check(shard)
        out, labels = self.outputs, self.shard_labels(shard)
        total = len(labels) if rows is None else len(rows)
        for start in range(0, total, block_rows):
            pick = slice(start, start + block_rows) if rows is None else rows[start : start + block_rows]
            yield FeatureBlock(
                np.asarray(out.features[pick], dtype=dtype),
                labels[pick],
                out.ids[pick],
                None
                if not with_logits or out.logits is None
                else np.asarray(out.logits[pick], dtype=np.float32),
            )
