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
import scipy.sparse as sp

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.semantics.class_vectors import ClassVectors

#: rows per block when streaming the feature directory
BLOCK_ROWS = 65536
#: rows per sparse product in :func:`add_rows_by_label` ((C + rows) x D float64 at a time)
_SUM_CHUNK = 4096


def add_rows_by_label(sums: np.ndarray, labels: np.ndarray, values: np.ndarray) -> None:
    """``sums[labels[i]] += values[i]`` for every row i, in place, with ``np.add.at``'s bits.

    ``sums`` (C, D) float64, ``labels`` (n,) ints in [0, C), ``values`` (n, D) (cast to float64).
    Why not ``np.add.at``: it took 1.1 s per 16,384 x 2,048 block (about 90 s per pass over the
    1.28M ILSVRC images); this takes 0.2 s. Each chunk is one sparse product whose row c lists
    c's running sum first, then c's rows in their order, with weights 1: scipy's CSR product adds
    them one after another, the order ``np.add.at`` adds in, so every sum has the same bits.
    """
    num = len(sums)
    for start in range(0, len(labels), _SUM_CHUNK):
        chunk = np.asarray(labels[start : start + _SUM_CHUNK], dtype=np.int64)
        block = np.asarray(values[start : start + _SUM_CHUNK], dtype=np.float64)
        indptr = np.zeros(num + 1, np.int64)
        np.cumsum(np.bincount(chunk, minlength=num) + 1, out=indptr[1:])
        indices = np.empty(num + len(chunk), np.int64)
        indices[indptr[:-1]] = np.arange(num)  # each row starts with its running sum
        rest = np.ones(len(indices), bool)
        rest[indptr[:-1]] = False
        indices[rest] = num + np.argsort(chunk, kind="stable")  # then its rows, in row order
        operator = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(num, len(indices)))
        sums[:] = operator @ np.vstack([sums, block])


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
        add_rows_by_label(sums, labels, values)
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
