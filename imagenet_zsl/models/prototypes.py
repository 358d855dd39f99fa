"""Chao et al.'s idealised semantics (ECCV 2016, Sec. 6, "G-attr"): the class vector of each class
is the mean of its visual features, which bounds what better semantics could give a model.

:func:`visual_prototypes` streams a feature directory (through :class:`FeatureDir`, the one reader
of shard files) and returns a :class:`ClassVectors` whose rows are the per-class means, in the
directory's class order; classes without images are listed as ``missing``. Written with
``ClassVectors.save`` it is a class-vectors file like any other, so ``semantics: FILE.npz`` in a
model config gives the "visual semantics" row of any model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.semantics.class_vectors import ClassVectors

#: rows per block when streaming the feature directory
BLOCK_ROWS = 65536


def visual_prototypes(features_dir: str | Path) -> ClassVectors:
    """(C, D) per-class mean features of every class with images in ``features_dir`` (float64
    sums, float32 result); classes of the manifest without images become ``missing``."""
    features = FeatureDir(features_dir)
    num_classes = len(features.classes)
    sums = np.zeros((num_classes, features.dim))
    counts = np.zeros(num_classes, np.int64)
    for block in features.iter_blocks(BLOCK_ROWS):
        values = np.asarray(block.features, dtype=np.float64)
        if not np.isfinite(values).all():
            raise UserInputError(f"{features_dir}: features contain NaN or Inf; re-extract them")
        np.add.at(sums, block.labels, values)
        counts += np.bincount(block.labels, minlength=num_classes)
    have = counts > 0
    if not have.any():
        raise UserInputError(f"{features_dir}: no images; point --features at an extracted directory")
    wnids = [w for w, h in zip(features.classes, have, strict=True) if h]
    missing = [w for w, h in zip(features.classes, have, strict=True) if not h]
    means = (sums[have] / counts[have, None]).astype(np.float32)
    return ClassVectors(wnids, means, missing=missing, source=f"visual-prototypes:{Path(features_dir).name}")
