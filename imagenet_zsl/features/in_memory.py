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
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.manifests import MANIFEST_NAME, file_record

log = logging.getLogger(__name__)


@dataclass
class LoadedFeatures:
    """One in-memory copy of a feature directory: features (N, D) float16, labels (N,) int64
    into ``classes``, ids (N,) str. Loaded with ``features=False``, ``features`` is (N, 0) and
    ``dim`` still gives the directory's D."""

    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    classes: list[str]
    manifest_record: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)  # the feature directory's manifest
    path: Path | None = None
    feature_dim: int | None = None  # D when ``features`` was not read

    @property
    def dim(self) -> int:
        return int(self.features.shape[1] if self.feature_dim is None else self.feature_dim)


def _check_one_backbone(fdir: FeatureDir) -> None:
    """Refuse directories whose shards come from different backbones (different dims or names)."""
    directory, manifest, dim = fdir.path, fdir.manifest, fdir.dim
    names = {s.get("backbone") for s in fdir.shards if "backbone" in s}
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
    for name, shape in fdir.stray_feature_files().items():
        if len(shape) != 2 or shape[1] != dim:
            foreign.append(f"{name}.features.npy ({shape[-1] if shape else '?'}-d)")
        else:
            log.warning("%s: not listed in the manifest; ignored", directory / f"{name}.features.npy")
    if foreign:
        raise UserInputError(
            f"{directory}: shard files of another backbone are mixed in ({preview(foreign)}; "
            f"the manifest says {dim}-d): move them to their own directory"
        )


def load_features(path: str | Path, progress: bool = False, *, features: bool = True) -> LoadedFeatures:
    """Read a feature directory once into float16 memory, validating labels and backbones.

    5,000 classes x 300 images x 2048-d = 6.1 GB: one float16 (N, D) array, filled shard by shard
    (never a second copy). ``features=False`` reads only ids and labels (N x ~60 bytes): what the
    fine-tuning paths need, which train on the images themselves. Every problem is a one-line
    UserInputError naming the file.
    """
    fdir = FeatureDir(path)
    directory = fdir.path
    _check_one_backbone(fdir)
    if not fdir.classes:
        raise UserInputError(f"{directory / MANIFEST_NAME}: 'classes' is empty; nothing to filter")
    total = fdir.num_rows
    if total == 0:
        raise UserInputError(f"{directory}: the feature directory holds no images")
    want_features = features
    features = np.empty((total, fdir.dim if want_features else 0), dtype=np.float16)
    labels = np.empty(total, dtype=np.int64)
    ids: list[np.ndarray] = []
    start = 0
    num_classes = len(fdir.classes)
    for name in tqdm(fdir.shard_names(), desc="load features", unit="shard", disable=not progress):
        rows = fdir.rows_of(name)
        block_labels = fdir.shard_labels(name)
        bad = (block_labels < 0) | (block_labels >= num_classes)
        if bad.any():
            raise UserInputError(
                f"{directory / f'{name}.labels.npy'}: {int(bad.sum())} images have no valid label "
                f"(values {preview(np.unique(block_labels[bad]).tolist(), 4)}; expected "
                f"0..{num_classes - 1}); the filter needs a class for every image: remove them or "
                "fix the labels"
            )
        target = features[start : start + rows]
        if want_features:
            target[...] = fdir.array(name, "features")
        if want_features and not np.isfinite(target).all():
            raise UserInputError(
                f"{directory / f'{name}.features.npy'}: features contain NaN or inf (or overflow "
                "float16); re-extract this shard"
            )
        labels[start : start + rows] = block_labels
        ids.append(fdir.shard_ids(name).astype(np.str_))
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
        features,
        labels,
        all_ids,
        list(fdir.classes),
        record,
        dict(fdir.manifest),
        directory,
        feature_dim=None if want_features else int(fdir.dim),
    )
