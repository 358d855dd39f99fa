"""Helpers for evaluation tests: tiny feature directories in the shared shard format."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard

#: 6 test (unseen) classes, 2 validation classes, 2 seen classes
TEST = [f"n0000000{i}" for i in range(6)]
VAL = ["n00000006", "n00000007"]
SEEN = ["n00000008", "n00000009"]
CLASSES = TEST + VAL + SEEN
DIM = len(CLASSES)


def one_hot(labels: np.ndarray) -> np.ndarray:
    return np.eye(DIM, dtype=np.float32)[labels]


def write_feature_dir(
    path: Path,
    labels: np.ndarray,
    features: np.ndarray,
    shard_rows: int = 7,
    classes: list[str] | None = None,
) -> Path:
    """Feature dir in the shared format, split into shards of ``shard_rows`` rows."""
    classes = CLASSES if classes is None else classes
    path.mkdir(parents=True)
    records = []
    for index, start in enumerate(range(0, len(labels), shard_rows)):
        rows = slice(start, start + shard_rows)
        ids = [
            f"{classes[lab] if lab < len(classes) else 'x'}/{start + i}.JPEG"
            for i, lab in enumerate(labels[rows])
        ]
        records.append(write_shard(path, shard_name(0, index), features[rows], labels[rows], ids))
    write_manifest(path, {"classes": classes, "dim": int(features.shape[1]), "shards": records})
    return path


def write_model_dir(path: Path, **fields) -> Path:
    """A model directory whose manifest verifies (``models.persistence.read_manifest``), for tests
    that stand a model in through ``model_source.load_model``; ``fields`` go beside the model's name."""
    from imagenet_zsl.manifests import write_manifest as write_directory_manifest
    from imagenet_zsl.models.persistence import MODEL_FILES, MODEL_FORMAT

    path.mkdir(parents=True)
    for name in MODEL_FILES:
        (path / name).write_bytes(b"{}")
    inputs = fields.pop("inputs", None)
    write_directory_manifest(
        path,
        format=MODEL_FORMAT,
        tool="imagenet-zsl train",
        inputs=inputs,
        fields={"model": "scaled", "params": {"scale": 2.0}, **fields},
    )
    return path
