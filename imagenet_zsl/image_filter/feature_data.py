"""One in-memory copy of a feature directory, checked for what the filter relies on.

The filter needs every image once, with a valid label, from ONE backbone: ``load_features``
refuses directories that mix backbones (different dims or names), duplicate ids, labels outside
the label space and non-finite features, before any training starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.io import MANIFEST_NAME, file_record

log = logging.getLogger(__name__)


@dataclass
class LoadedFeatures:
    """One in-memory copy of a feature directory: features (N, D) float16, labels (N,) int64
    into ``classes``, ids (N,) str."""

    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    classes: list[str]
    manifest_record: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)  # the feature directory's manifest
    path: Path | None = None

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])


def _npy_shape(path: Path) -> tuple[int, ...]:
    """Shape from the .npy header only (no data read)."""
    return tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)


def _check_one_backbone(directory: Path, manifest: dict[str, Any]) -> None:
    """Refuse directories whose shards come from different backbones (different dims or names)."""
    dim = int(manifest["dim"])
    shards = manifest["shards"]
    listed = {s["name"] for s in shards}
    names = {s.get("backbone") for s in shards if "backbone" in s}
    top = manifest.get("backbone")
    if isinstance(top, dict):
        if top.get("dim") is not None and int(top["dim"]) != dim:
            raise UserInputError(
                f"{directory / MANIFEST_NAME}: backbone {top.get('name')!r} is {top['dim']}-d but "
                f"the manifest's dim is {dim}; the directory mixes backbones: re-extract it"
            )
        top = top.get("name")
    if top is not None and names and names != {top}:
        names.add(top)
    if len(names) > 1:
        raise UserInputError(
            f"{directory}: shards come from different backbones ({preview(sorted(map(str, names)))});"
            " extract each backbone into its own directory and filter one at a time"
        )
    foreign = []
    for path in sorted(directory.glob("*.features.npy")):
        name = path.name[: -len(".features.npy")]
        shape = _npy_shape(path)
        if name in listed:
            if len(shape) != 2 or shape[1] != dim:
                raise UserInputError(
                    f"{path}: features have shape {shape} but the manifest says {dim}-d; shards "
                    "from different backbones are mixed in this directory: re-extract into an "
                    "empty directory"
                )
        elif len(shape) != 2 or shape[1] != dim:
            foreign.append(f"{path.name} ({shape[-1]}-d)")
        else:
            log.warning("%s: not listed in the manifest; ignored", path)
    if foreign:
        raise UserInputError(
            f"{directory}: shard files of another backbone are mixed in ({preview(foreign)}; "
            f"the manifest says {dim}-d): move them to their own directory"
        )


def load_features(path: str | Path, progress: bool = False) -> LoadedFeatures:
    """Read a feature directory once into float16 memory, validating labels and backbones.

    5,000 classes x 300 images x 2048-d = 6.1 GB: one float16 (N, D) array, filled shard by shard
    (never a second copy). Every problem is a one-line UserInputError naming the file.
    """
    fdir = FeatureDir(path)
    directory = fdir.path
    _check_one_backbone(directory, fdir.manifest)
    if not fdir.classes:
        raise UserInputError(f"{directory / MANIFEST_NAME}: 'classes' is empty; nothing to filter")
    total = fdir.num_rows
    if total == 0:
        raise UserInputError(f"{directory}: the feature directory holds no images")
    features = np.empty((total, fdir.dim), dtype=np.float16)
    labels = np.empty(total, dtype=np.int64)
    ids: list[np.ndarray] = []
    start = 0
    num_classes = len(fdir.classes)
    for shard in tqdm(fdir.shards, desc="load features", unit="shard", disable=not progress):
        name, rows = shard["name"], int(shard["rows"])
        files = {kind: directory / f"{name}.{kind}.npy" for kind in ("features", "labels", "ids")}
        for kind, file in files.items():
            if not file.exists():
                raise UserInputError(
                    f"{file}: shard {kind} listed in the manifest is missing; re-run the "
                    "extraction (it resumes) or restore the file"
                )
        block = np.load(files["features"], mmap_mode="r", allow_pickle=False)
        block_labels = np.load(files["labels"], allow_pickle=False)
        block_ids = np.load(files["ids"], allow_pickle=False)
        if not (len(block) == len(block_labels) == len(block_ids) == rows):
            raise UserInputError(
                f"{files['features']}: shard has {len(block)} feature rows, {len(block_labels)} "
                f"labels and {len(block_ids)} ids but the manifest says {rows}; re-extract it"
            )
        if not np.issubdtype(block_labels.dtype, np.integer):
            raise UserInputError(f"{files['labels']}: labels must be integers, got {block_labels.dtype}")
        bad = (block_labels < 0) | (block_labels >= num_classes)
        if bad.any():
            raise UserInputError(
                f"{files['labels']}: {int(bad.sum())} images have no valid label (values "
                f"{preview(np.unique(block_labels[bad]).tolist(), 4)}; expected 0..{num_classes - 1}"
                "); the filter needs a class for every image: remove them or fix the labels"
            )
        target = features[start : start + rows]
        target[...] = block
        if not np.isfinite(target).all():
            raise UserInputError(
                f"{files['features']}: features contain NaN or inf (or overflow float16); "
                "re-extract this shard"
            )
        labels[start : start + rows] = block_labels
        ids.append(block_ids.astype(np.str_))
        start += rows
    all_ids = np.concatenate(ids)
    unique, counts = np.unique(all_ids, return_counts=True)
    if len(unique) != len(all_ids):
        raise UserInputError(
            f"{directory}: {int((counts > 1).sum())} image ids occur more than once (e.g. "
            f"{preview(unique[counts > 1][:4].tolist(), 4)}); each image must be extracted once"
        )
    record = file_record(directory / MANIFEST_NAME)
    return LoadedFeatures(
        features, labels, all_ids, list(fdir.classes), record, dict(fdir.manifest), directory
    )
