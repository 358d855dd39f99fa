"""Shards whose features are scored, never stored (issue 38 §1, the fused path): extraction hands
each finished shard's rows, rounded to float16 exactly as :func:`~imagenet_zsl.features.
shard_files.write_shard` would store them, to a *sink* (the scorer), then writes the shard's labels
and ids and its ``.done.json`` record. The record keeps the sha256 the feature (and logit) files
*would* have had (``unstored_sha256``: the same digests an extraction of the same images records
under ``sha256``), so a scored directory can be compared with a stored one without the 4 KB per
image of features ever reaching the disk."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_save_npy, atomic_write_json
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.features.shard_files import shard_file

#: the record key of the digests of the files a scored shard does not store
UNSTORED_KEY = "unstored_sha256"


@dataclass(frozen=True)
class ShardOutputs:
    """One shard's rows as a feature directory stores them: ``features`` (n, D) float16,
    ``labels`` (n,) int32 into the extraction's classes, ``ids`` (n,) str, ``logits`` (n, K)
    float16 or None; ``name`` is the shard's name (``s000003`` or a rank's ``r001-s000003``)."""

    name: str
    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    logits: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        name: str,
        features: np.ndarray,
        labels: np.ndarray,
        ids: Sequence[str] | np.ndarray,
        logits: np.ndarray | None = None,
    ) -> ShardOutputs:
        """The arrays converted exactly as ``write_shard`` converts them before saving."""
        n = len(labels)
        if features.ndim != 2 or features.shape[0] != n or len(ids) != n:
            raise ValueError(f"shard {name}: features {features.shape}, labels {n}, ids {len(ids)} disagree")
        return cls(
            name,
            np.ascontiguousarray(features, dtype=np.float16),
            np.asarray(labels, dtype=np.int32),
            np.asarray(ids, dtype=np.str_),
            None if logits is None else np.ascontiguousarray(logits, dtype=np.float16),
        )


#: what a fused run gives the extraction loop: called once per finished shard, before its record
#: is written (a crash inside it leaves the shard unfinished: a resumed run extracts and scores it
#: again, so the sink must give the same result twice, as a keyed search cache does)
ShardSink = Callable[[ShardOutputs], None]


def npy_sha256(array: np.ndarray) -> str:
    """sha256 of the ``.npy`` file ``atomic.atomic_save_npy`` would write for ``array`` (in memory)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return hashlib.sha256(buffer.getbuffer()).hexdigest()


def write_scored_shard(out_dir: str | Path, outputs: ShardOutputs, sink: ShardSink) -> dict[str, Any]:
    """Score one shard with ``sink``, then write its labels and ids (atomically) and, last, its
    ``.done.json`` record: ``{name, rows, sha256: {labels, ids}, unstored_sha256: {features[,
    logits]}}``. No feature or logit file is written."""
    out_dir = Path(out_dir)
    sink(outputs)
    record: dict[str, Any] = {"name": outputs.name, "rows": len(outputs.labels), "sha256": {}}
    for kind, array in (("labels", outputs.labels), ("ids", outputs.ids)):
        path = atomic_save_npy(out_dir / shard_file(outputs.name, kind), array)
        record["sha256"][kind] = sha256_file(path)
    unstored = {"features": npy_sha256(outputs.features)}
    if outputs.logits is not None:
        unstored["logits"] = npy_sha256(outputs.logits)
    record[UNSTORED_KEY] = unstored
    atomic_write_json(out_dir / f"{outputs.name}.done.json", record)
    return record
