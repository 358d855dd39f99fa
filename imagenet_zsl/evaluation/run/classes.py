"""The class lists of a run: wnid lists, feature-label lookups, per-class image counts and the
label space (:class:`LabelSpace`, :func:`resolve_space`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.queries import PrototypeFile, QuerySource
from imagenet_zsl.evaluation.run.config import EvaluationConfig
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.hierarchy.universe import training_wnids
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import TrainingClasses, resolve_label_space, training_classes

log = logging.getLogger("imagenet_zsl.evaluation.run")


def read_classes(path: str | Path, what: str = "split") -> list[str]:
    """A wnid list (:func:`imagenet_zsl.splits.io.read_wnid_list`) that must not be empty."""
    wnids = read_wnid_list(path)
    if not wnids:
        raise UserInputError(f"{path}: the {what} is empty; it needs one class wnid per line")
    return wnids


def _check_label_range(fd: FeatureDir, labels: np.ndarray) -> None:
    if len(labels) and (labels.min() < 0 or labels.max() >= len(fd.classes)):
        raise UserInputError(
            f"{fd.path}: labels outside the directory's {len(fd.classes)} classes "
            f"(min {labels.min()}, max {labels.max()}); the shards and manifest disagree"
        )


def class_lookup(fd: FeatureDir, wnids: Sequence[str], where: str) -> np.ndarray:
    """(len(fd.classes),) int64 mapping each feature label to its index in ``wnids`` (-1: skip).

    For the seen and validation classes, which must all have images: errors if a class of
    ``wnids`` is not in the feature directory or has no image there, or if a shard's labels fall
    outside the directory's label space.
    """
    position = {w: i for i, w in enumerate(fd.classes)}
    absent = [w for w in wnids if w not in position]
    if absent:
        raise UserInputError(
            f"{fd.path}: {len(absent)} classes of the {where} have no features here: "
            f"{preview(absent)}; extract them or drop them from the {where}"
        )
    labels = fd.labels()
    _check_label_range(fd, labels)
    lookup = np.full(len(fd.classes), -1, dtype=np.int64)
    lookup[[position[w] for w in wnids]] = np.arange(len(wnids))
    counts = np.bincount(labels, minlength=len(fd.classes))
    empty = [w for w in wnids if counts[position[w]] == 0]
    if empty:
        raise UserInputError(
            f"{fd.path}: {len(empty)} classes of the {where} have no images: {preview(empty)}; "
            f"drop them from the {where} or add their images"
        )
    return lookup


def test_lookup(fd: FeatureDir, space_wnids: Sequence[str], scored: Sequence[str]) -> np.ndarray:
    """(len(fd.classes),) int64: each feature class's index in the label space ``space_wnids`` when
    it is one of the ``scored`` split classes, else -1 (not a test image). Split classes absent
    from the directory are simply classes without test images."""
    _check_label_range(fd, fd.labels())
    index = {w: i for i, w in enumerate(space_wnids)}
    wanted = set(scored)
    return np.array([index[w] if w in wanted else -1 for w in fd.classes], dtype=np.int64)


def class_image_counts(
    fd: FeatureDir, wnids: Sequence[str], kept_ids: np.ndarray | None = None
) -> np.ndarray:
    """(len(wnids),) int64 test images of each class in ``fd`` (only ``kept_ids`` when given);
    reads labels (and ids) only."""
    position = {w: i for i, w in enumerate(fd.classes)}
    counts = np.zeros(len(fd.classes), dtype=np.int64)
    for shard in fd.shard_names():
        labels = fd.shard_labels(shard)
        if kept_ids is not None:
            labels = labels[np.isin(fd.shard_ids(shard), kept_ids)]
        counts += np.bincount(labels, minlength=len(fd.classes))[: len(fd.classes)]
    return np.array([counts[position[w]] if w in position else 0 for w in wnids], dtype=np.int64)


def missing_prototypes(source: QuerySource, wnids: Sequence[str]) -> list[str]:
    """The classes of ``wnids`` the source has no prototype for, in order.

    A prototype file has a prototype for exactly its wnids: one membership pass (linear; a 1M-line
    split took 21 s by bisection). A model says only whether a whole request fails, so its
    failed requests are bisected: a 21K-class label space with a few holes costs a few dozen
    calls, one with mostly holes about two per class."""
    if isinstance(source, PrototypeFile):
        vectors = source.vectors
        return [w for w in wnids if w not in vectors]
    return _bisect_missing(source, wnids)


def _bisect_missing(source: QuerySource, wnids: Sequence[str]) -> list[str]:
    if not wnids:
        return []
    try:
        source.prototypes(wnids)
        return []
    except UserInputError:
        if len(wnids) == 1:
            return list(wnids)
    half = len(wnids) // 2
    return _bisect_missing(source, wnids[:half]) + _bisect_missing(source, wnids[half:])


def representable_classes(source: QuerySource, wnids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split seen classes into those the model/prototype file can represent and those it cannot.

    The GZSL label space is defined by the training set, but a semantic model cannot score a seen
    class that has no word vector (it was also left out of its training). Such classes leave the
    seen label space with their images, and the run reports them; a split class without a
    prototype is an error unless the caller counts it as a miss (``count_as_miss``).
    """
    missing = set(missing_prototypes(source, list(wnids)))
    kept = [w for w in wnids if w not in missing]
    if not kept:
        raise UserInputError("no seen class has a prototype; check the model's class semantics")
    return kept, [w for w in wnids if w in missing]


def present_classes(fd: FeatureDir) -> list[str]:
    """Classes of a feature directory that have at least one image (label-space order)."""
    counts = np.bincount(fd.labels(), minlength=len(fd.classes))
    return [w for w, c in zip(fd.classes, counts, strict=True) if c > 0]


@dataclass(frozen=True)
class LabelSpace:
    """The ZSL label space of a run and what left it.

    ``wnids``: the label space, sorted (what the ``unseen`` top-k ids index); ``split``: the
    split's classes in file order; ``miss``: the ``count_as_miss`` classes (sorted; their test
    labels are ``len(wnids) + j``); ``seen``/``seen_source``: the seen classes kept out of it;
    ``without_prototype``: distractors (label-space classes outside the split) that left because
    the source has no prototype for them."""

    spec: str
    wnids: list[str]
    split: list[str]
    miss: list[str] = field(default_factory=list)
    seen_source: str = "none"
    seen_count: int = 0
    without_prototype: list[str] = field(default_factory=list)
    kept_without_prototype: bool = False

    @property
    def size(self) -> int:
        """The classes each test image is ranked against (metrics.json's
        ``classes_in_label_space``): the searched classes, and with ``kept_without_prototype`` the
        classes the model never predicts too (the count-as-miss split classes and the distractors
        without a prototype: ranked below every class, so searching without them gives the same
        ranks and hit@K)."""
        if not self.kept_without_prototype:
            return len(self.wnids)
        return len(self.wnids) + len(self.miss) + len(self.without_prototype)

    @property
    def scored(self) -> list[str]:
        """Split classes the model is scored on (in the label space)."""
        miss = set(self.miss)
        return [w for w in self.split if w not in miss]

    @property
    def eval_wnids(self) -> list[str]:
        """The class list test labels index: the label space, then the count-as-miss classes."""
        return list(self.wnids) + list(self.miss)


def check_count_as_miss(cfg: EvaluationConfig, split_wnids: Sequence[str]) -> list[str]:
    """The ``count_as_miss`` classes, sorted; each must be a split class."""
    miss = sorted({str(w) for w in cfg.count_as_miss})
    outside = sorted(set(miss) - set(split_wnids))
    if outside:
        raise UserInputError(
            f"count_as_miss: {len(outside)} classes are not in the split {cfg.split}: {preview(outside)}"
        )
    return miss


def check_test_images(cfg: EvaluationConfig, fd: FeatureDir, split: list[str], counts: np.ndarray) -> None:
    """A split with no test image at all in ``--features`` is one line; some classes without
    images are fine (they are distractors)."""
    if int(counts.sum()) == 0 and cfg.kept_images is not None:
        raise UserInputError(
            f"{cfg.kept_images}: none of the split's images are among the kept "
            "images; was the filter run on these features?"
        )
    if int(counts.sum()) == 0:
        raise UserInputError(
            f"{fd.path}: none of the {len(split)} classes of the split {cfg.split} has a "
            "test image here; point --features at the split's test images"
        )
    empty = [w for w, c in zip(split, counts, strict=True) if c == 0]
    if empty:
        log.info(
            "%d split classes have no test image in %s and stay in the label space as distractors: %s",
            len(empty),
            fd.path,
            preview(empty),
        )


def head_classes(fd: FeatureDir) -> list[str] | None:
    """The classes the features' backbone head classifies (its logits' classes; the stored
    ImageNet-1K head's), None when the features carry no head."""
    if fd.logit_classes:
        return list(fd.logit_classes)
    if fd.manifest.get("head") is not None:
        head = fd.head()
        return list(head.classes) if head is not None else None
    return None


def _seen_for_label_space(
    cfg: EvaluationConfig, source: QuerySource, seen_wnids: list[str] | None, head: Sequence[str] | None
) -> TrainingClasses:
    """The classes a zero-shot label space leaves out (:func:`training_classes`): the model's
    training classes, the run's (``cfg.training_classes``), the backbone head's and the GZSL seen
    classes; for ``all``/FILE, ILSVRC-2012's 1,000 too when the model does not record its training
    classes (so held-out images of only some seen classes never let the others in). The ``split``
    space checks only the known ones (the split is the choice). The GZSL validation classes are not
    among them (never trained on: distractors)."""
    listed = read_wnid_list(cfg.training_classes) if cfg.training_classes is not None else None
    model_seen = source.seen_wnids()
    unknown = model_seen is None and cfg.label_space != "split"
    parts = [
        ("the model's training classes", model_seen),
        ("the run's training classes", listed),
        ("the backbone head's classes", head),
        (
            "ILSVRC-2012 classes (the model does not record its training classes)",
            training_wnids() if unknown else None,
        ),
        ("GZSL seen classes", seen_wnids if cfg.gzsl else None),
    ]
    return training_classes(parts)


def resolve_space(
    cfg: EvaluationConfig,
    source: QuerySource,
    split_wnids: list[str],
    miss: list[str],
    seen_wnids: list[str] | None,
    head: Sequence[str] | None = None,
) -> LabelSpace:
    """The run's label space: resolved by :func:`resolve_label_space` without the count-as-miss
    classes; a split class without a prototype is an error (count it as a miss or drop it), a
    distractor without one leaves with a warning (with ``cfg.keep_without_prototype`` it stays,
    never predicted: it is not searched, and :attr:`LabelSpace.size` counts it)."""
    seen = _seen_for_label_space(cfg, source, seen_wnids, head)
    scored = LabelSpace(cfg.label_space, [], split_wnids, miss).scored
    excluded = set(miss)
    resolved = resolve_label_space(cfg.label_space, scored, seen.wnids, f"--label-space ({cfg.split})")
    wnids = [w for w in resolved if w not in excluded]
    missing = missing_prototypes(source, wnids)
    split_missing = sorted(set(missing) & set(scored))
    if split_missing:
        raise UserInputError(
            f"{len(split_missing)} classes of the split {cfg.split} have no prototype "
            f"({class_vectors_label(source.class_vectors)}): {preview(split_missing)}; drop them from "
            "the split or count them as misses (run recipe: count_as_miss)"
        )
    if missing:
        log.warning(
            "%d classes of the label space %r have no prototype and %s: %s",
            len(missing),
            cfg.label_space,
            "stay in it, never predicted" if cfg.keep_without_prototype else "leave it",
            preview(missing),
        )
    gone = set(missing)
    kept = [w for w in wnids if w not in gone]
    if not kept:
        raise UserInputError(f"--label-space {cfg.label_space}: no class is left in the label space")
    return LabelSpace(
        cfg.label_space,
        kept,
        split_wnids,
        miss,
        seen.source,
        len(seen),
        sorted(missing),
        bool(cfg.keep_without_prototype),
    )


def class_vectors_label(record: Any) -> str:
    """A short name for a class-vector source recorded as a string or a dict."""
    if isinstance(record, dict):
        for key in ("describe", "source", "name", "path"):
            if record.get(key):
                return str(record[key])
        return "unknown"
    return str(record) if record else "unknown"
