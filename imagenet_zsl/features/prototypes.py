"""Chao et al.'s idealised semantics (ECCV 2016, Sec. 6, "G-attr"): the class vector of each class
is the mean of its visual features, which bounds what better semantics could give a model.

:func:`visual_prototypes` streams a feature directory (through :class:`FeatureDir`, the one reader
of shard files) and returns a :class:`ClassVectors` whose rows are the per-class means, in the
directory's class order; classes without images are listed as ``missing``. Written with
``ClassVectors.save`` it is a class-vectors file like any other, so ``semantics: FILE.npz`` in a
model config gives the "visual semantics" row of any model. :func:`mean_vectors` is the shared
core; the attribute datasets use it on in-memory features (``attributes run --semantics visual``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.semantics.class_vectors import ClassVectors

#: rows per block when streaming the feature directory
BLOCK_ROWS = 65536


def mean_vectors(
    blocks: Iterable[tuple[np.ndarray, np.ndarray]],
    classes: Sequence[str],
    dim: int,
    source: str,
    where: str,
) -> ClassVectors:
    """Per-class means of (features (n, D), labels (n,) indexing ``classes``) blocks: float64 sums,
    float32 (C', D) result for the C' classes with images; the others become ``missing``. NaN/Inf
    features or no image at all are a UserInputError naming ``where``."""
    sums = np.zeros((len(classes), dim))
    counts = np.zeros(len(classes), np.int64)
    for features, labels in blocks:
        values = np.asarray(features, dtype=np.float64)
        if not np.isfinite(values).all():
            raise UserInputError(f"{where}: features contain NaN or Inf; re-extract them")
        np.add.at(sums, labels, values)
        counts += np.bincount(labels, minlength=len(classes))
    have = counts > 0
    if not have.any():
        raise UserInputError(f"{where}: no images; point --features at an extracted directory")
    names = [w for w, h in zip(classes, have, strict=True) if h]
    missing = [w for w, h in zip(classes, have, strict=True) if not h]
    means = (sums[have] / counts[have, None]).astype(np.float32)
    return ClassVectors(names, means, missing=missing, source=source)


def visual_prototypes(features_dir: str | Path) -> ClassVectors:
    """(C, D) per-class mean features of every class with images in ``features_dir`` (float64
    sums, float32 result); classes of the manifest without images become ``missing``."""
    features = FeatureDir(features_dir)
    return mean_vectors(
        ((block.features, block.labels) for block in features.iter_blocks(BLOCK_ROWS)),
        features.classes,
        features.dim,
        source=f"visual-prototypes:{Path(features_dir).name}",
        where=str(features_dir),
    )
