"""Chao et al.'s upper bound (ECCV 2016, Table 5): a classifier trained with labels of ALL classes.

Zero-shot numbers are only meaningful next to what full supervision would reach on the same test
images. Here a multinomial logistic regression (the seen-class classifier of
:func:`imagenet_zsl.models.seen_classifier.train_softmax`, not a copy) is trained on every class,
seen and unseen:

* training images: the protocol's training images of the seen classes (PS ``trainval_loc``) plus
  a seeded share of each unseen class's test images (1 − the dataset's seen-test fraction, i.e. 80%
  on AWA2, as Chao et al.'s 80/20 split);
* test images: the seen classes' test images (PS ``test_seen_loc``) and the held-out rest of the
  unseen classes' images.

Reported like a GBU run, so it becomes a row "upper bound (all classes supervised)" of the tables:
ZSL = per-class top-1 among the unseen classes on the held-out unseen images; GZSL (PS) = per-class
top-1 of the seen/unseen test images among all classes, H and AUSUC. No calibration is needed
(both groups were trained on), so the calibrated columns repeat γ = 0. Note the unseen test set is
the held-out share only (the zero-shot rows use all unseen images): the same distribution, fewer
images. The result is deterministic for a given seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_write_json
from imagenet_zsl.attributes.dataset import AttributeDataset, Task
from imagenet_zsl.attributes.outputs import (
    RESULTS_NAME,
    UPPER_BOUND_FORMAT,
    UPPER_BOUND_TOOL,
    finished_results,
)
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.models.seen_classifier import augment, train_softmax
from imagenet_zsl.models.selection import holdout_images
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.scoring import gzsl_from_scores, gzsl_metrics, metrics_from_scores

#: the row name in `attributes table` and the demo's GBU table
UPPER_BOUND_LABEL = "upper bound (all classes supervised)"
TOOL = UPPER_BOUND_TOOL


@dataclass
class UpperBoundConfig:
    """What one upper-bound run computes (also its resume identity)."""

    dataset: str
    split: str = "ps"
    seed: int = 0
    #: L2 weight of the softmax classifier (on standardised features) and L-BFGS iterations
    reg: float = 1e-4
    max_iter: int = 200
    att_splits: str | None = None

    def check(self) -> None:
        if not self.reg >= 0 or not np.isfinite(self.reg):
            raise UserInputError(f"--reg must be a finite number >= 0, got {self.reg}")
        if self.max_iter < 1:
            raise UserInputError(f"--max-iter must be >= 1, got {self.max_iter}")


@dataclass
class UpperBoundSplit:
    """Image indices (into the dataset) of the all-classes training and test sets."""

    classes: np.ndarray  # (C,) sorted class indices: seen ∪ unseen
    train: np.ndarray  # seen training images + the unseen classes' training share
    test_seen: np.ndarray | None
    test_unseen: np.ndarray  # the held-out share of the unseen classes' images


def split_images(ds: AttributeDataset, task: Task, seed: int) -> UpperBoundSplit:
    """Every unseen class gives round((1 − f)·n) of its images to training, f = the dataset's
    seen-test fraction (at least one image stays for testing when a class has two or more)."""
    unseen_images = task.test_unseen
    held = holdout_images(ds.images.labels[unseen_images], ds.seen_test_fraction(), seed)
    return UpperBoundSplit(
        classes=np.union1d(task.seen, task.unseen),
        train=np.sort(np.concatenate([task.train, unseen_images[~held]])),
        test_seen=task.test_seen,
        test_unseen=unseen_images[held],
    )


def upper_bound(ds: AttributeDataset, config: UpperBoundConfig) -> dict[str, Any]:
    """Train the all-classes classifier and evaluate it (see module doc) → results dict, whose
    layout matches ``attributes run``'s results.json (``zsl``, ``gzsl``) plus ``upper_bound``."""
    config.check()
    task = ds.task(config.split)
    parts = split_images(ds, task, config.seed)
    features, all_labels = ds.images.features, ds.images.labels
    labels = np.searchsorted(parts.classes, all_labels[parts.train])
    weights = train_softmax(
        np.asarray(features[parts.train], dtype=np.float32),
        labels,
        len(parts.classes),
        config.reg,
        config.max_iter,
        seed=config.seed,
    )  # (D + 1, C)

    def scores(images: np.ndarray, columns: np.ndarray) -> np.ndarray:
        return augment(features[images]) @ weights[:, np.searchsorted(parts.classes, columns)]

    zsl_labels = np.searchsorted(task.unseen, all_labels[parts.test_unseen])
    zsl_metrics = metrics_from_scores(scores(parts.test_unseen, task.unseen), zsl_labels, ks=(1,))
    results: dict[str, Any] = {
        "config": asdict(config),
        "dataset": ds.name,
        "model": UPPER_BOUND_LABEL,
        "split": config.split,
        "val_split": 1,
        "params": {"reg": config.reg, "max_iter": config.max_iter},
        "classes": {"seen": int(task.seen.size), "unseen": int(task.unseen.size)},
        "images": {
            "train": int(parts.train.size),
            "train_unseen": int(parts.train.size - task.train.size),
            "test_unseen": int(parts.test_unseen.size),
            "test_seen": None if parts.test_seen is None else int(parts.test_seen.size),
        },
        "upper_bound": {
            "classifier": "softmax (models.seen_classifier.train_softmax) on all classes",
            "unseen_test_fraction": ds.seen_test_fraction(),
        },
        "zsl": {"top1_per_class": zsl_metrics["per_class"][1], "top1_flat": zsl_metrics["flat"][1]},
        "gzsl": None,
    }
    if parts.test_seen is not None:
        images = np.concatenate([parts.test_seen, parts.test_unseen])
        gz = gzsl_from_scores(
            scores(images, parts.classes),
            np.searchsorted(parts.classes, all_labels[images]),
            np.isin(parts.classes, task.seen),
            m=2,
        )
        direct = gzsl_metrics(gz, ks=(1,))["per_class"][1]
        results["gzsl"] = {
            "seen": direct["seen"],
            "unseen": direct["unseen"],
            "H": direct["H"],
            "ausuc": direct["ausuc"],
            "gamma": 0.0,
            "seen_cs": direct["seen"],
            "unseen_cs": direct["unseen"],
            "H_cs": direct["H"],
        }
    return results


def upper_bound_to_directory(
    ds: AttributeDataset, config: UpperBoundConfig, out: str | Path, resume: bool = True
) -> dict[str, Any]:
    """Run :func:`upper_bound` into ``out`` (atomic; results.json and a manifest); a finished run
    with the same configuration is kept."""
    out = Path(out)
    if resume:
        previous = finished_results(out, UPPER_BOUND_FORMAT, asdict(config))
        if previous is not None:
            return previous
    config.check()
    with atomic_directory(out, tool=TOOL, inputs=_sources(ds)) as tmp:
        results = upper_bound(ds, config)
        atomic_write_json(tmp / RESULTS_NAME, results)
        write_manifest(
            tmp,
            format=UPPER_BOUND_FORMAT,
            tool=TOOL,
            inputs=[file_record(p) for p in _sources(ds)],
            parameters=asdict(config),
        )
    return results


def _sources(ds: AttributeDataset) -> Sequence[Path]:
    return [p for p in (ds.images.path, ds.split.path) if p is not None]
