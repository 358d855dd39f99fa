"""Generated ``res101.mat`` files with the real image layout, for tests, demos and dry runs.

The per-image ResNet-101 features of xlsa17 cannot be shipped, but their *layout* is fixed by the
real ``att_splits.mat``: one row per real image index, and each location list holds images of a
known class set. ``synthetic_images`` builds exactly that layout with low-dimensional features
whose class means are a random linear image of the class attributes (plus class-specific and
per-image noise), so zero-shot transfer is possible and methods can be told apart.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import scipy.io

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.attributes.xlsa17 import AttSplits, ClassLists, Res101, strip_mat_timestamp


def _draw(rng: np.random.Generator, classes: np.ndarray, n: int) -> np.ndarray:
    """``n`` labels from ``classes``, every class at least once when n allows (seeded)."""
    labels = rng.choice(classes, size=n)
    first = min(n, classes.size)
    labels[rng.permutation(n)[:first]] = rng.permutation(classes)[:first]
    return labels


def synthetic_labels(split: AttSplits, lists: ClassLists, seed: int = 0) -> np.ndarray:
    """(N,) 0-based labels consistent with every location list of ``split``.

    trainval/test-seen images get seen classes, test-unseen images unseen classes; where the file
    has ``train_loc``/``val_loc`` (all images of trainclasses1/valclasses1, as released), those
    images get classes of that list, so every list of the real file stays truthful.
    """
    rng = np.random.default_rng(seed)
    index = {n: i for i, n in enumerate(split.class_names)}
    ids = {
        key: np.array(sorted(index[n] for n in names), dtype=np.int64)
        for key, names in (("seen", lists.trainval), ("unseen", lists.test))
    }
    locs = split.locs
    num_images = 1 + max(int(loc.max()) for loc in locs.values() if loc.size)
    labels = _draw(rng, np.arange(split.num_classes), num_images)
    if "train_loc" in locs and "val_loc" in locs and 1 in lists.val:
        for key, names in (("train_loc", lists.train[1]), ("val_loc", lists.val[1])):
            classes = np.array(sorted(index[n] for n in names), dtype=np.int64)
            labels[locs[key]] = _draw(rng, classes, locs[key].size)
        covered = np.union1d(locs["train_loc"], locs["val_loc"])
        rest = np.setdiff1d(np.union1d(locs["trainval_loc"], locs["test_seen_loc"]), covered)
        labels[rest] = _draw(rng, ids["seen"], rest.size)
    else:
        seen_images = np.concatenate([locs["trainval_loc"], locs["test_seen_loc"]])
        labels[seen_images] = _draw(rng, ids["seen"], seen_images.size)
    labels[locs["test_unseen_loc"]] = _draw(rng, ids["unseen"], locs["test_unseen_loc"].size)
    return labels


def synthetic_images(
    split: AttSplits,
    lists: ClassLists,
    dim: int = 16,
    seed: int = 0,
    class_noise: float = 0.3,
    image_noise: float = 0.6,
    with_files: bool = False,
) -> Res101:
    """Features (N, dim) = P·att_c + class noise + image noise; labels from ``synthetic_labels``."""
    rng = np.random.default_rng(seed + 1)
    labels = synthetic_labels(split, lists, seed)
    att = split.att / np.maximum(np.linalg.norm(split.att, axis=0, keepdims=True), 1e-12)
    projection = rng.standard_normal((dim, split.num_attributes)) * np.sqrt(split.num_attributes / dim)
    means = (projection @ att).T  # (C, dim)
    means += class_noise * rng.standard_normal(means.shape)
    features = means[labels] + image_noise * rng.standard_normal((labels.size, dim))
    files = None
    if with_files:
        files = [f"{split.class_names[c]}/{i + 1:06d}.jpg" for i, c in enumerate(labels)]
    return Res101(features=features.astype(np.float32), labels=labels, image_files=files)


def save_res101(path: str | Path, images: Res101) -> Path:
    """Write MATLAB v5 ``res101.mat`` in the release layout (features D x N, 1-based labels)."""
    variables = {
        "features": np.ascontiguousarray(images.features.T, dtype=np.float32),
        "labels": (images.labels.astype(np.float64) + 1).reshape(-1, 1),
    }
    if images.image_files is not None:
        cells = np.empty((len(images.image_files), 1), dtype=object)
        for i, name in enumerate(images.image_files):
            cells[i, 0] = name
        variables["image_files"] = cells
    buffer = io.BytesIO()
    scipy.io.savemat(buffer, variables, do_compression=False)
    path = Path(path)
    atomic_write_bytes(path, strip_mat_timestamp(buffer.getvalue()))
    images.path = path
    return path
