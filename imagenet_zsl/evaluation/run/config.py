"""What ``imagenet-zsl evaluate`` takes (:class:`EvaluationConfig`) and the names every step shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from imagenet_zsl.evaluation.search import DEFAULT_BLOCK_ROWS
from imagenet_zsl.scoring import DEFAULT_KS

TOOL = "imagenet-zsl evaluate"
#: the label space each image set's true classes live in (its "own" space)
OWN_SPACE = {"test": "unseen", "seen": "seen", "val": "val_unseen", "val_seen": "seen"}
#: the seeded share of the held-out seen images that chooses γ, the rest being the GZSL seen test
#: images (:func:`calibration_rows`): ``evaluate``'s default, ``run``'s carved calibration always
VAL_SEEN_FRACTION = 0.5


@dataclass
class EvaluationConfig:
    """Everything ``imagenet-zsl evaluate`` takes; see :mod:`imagenet_zsl.evaluation.run` for the roles."""

    features: Path
    split: Path
    out: Path
    model: Path | None = None
    prototypes: Path | None = None
    l2_normalize: bool = False
    ks: Sequence[int] = DEFAULT_KS
    gzsl: bool = False
    seen_features: Path | None = None
    seen_classes: Path | None = None
    val_split: Path | None = None
    val_features: Path | None = None
    val_seen_features: Path | None = None
    val_seen_fraction: float = VAL_SEEN_FRACTION
    seed: int = 0
    #: a GZSL calibration γ chosen outside this evaluation (``run``: with the model fitted without
    #: its carved validation classes, Le Cacheux et al.), subtracted as is from this model's
    #: seen-class scores; exclusive with ``val_split``. ``gamma_source`` (JSON) says how it was
    #: chosen and is copied into metrics.json's ``gzsl.calibration``
    gamma: float | None = None
    gamma_source: dict[str, Any] | None = None
    #: with ``gamma``: the seeded ``val_seen_fraction`` of the seen rows (:func:`calibration_rows`)
    #: chose it, so they leave the seen test images
    hold_calibration_rows: bool = False
    #: "auto" (WordNet when installed, else no breakdown), "wordnet", "imagenet", "none", or a
    #: TSV of parent<TAB>child edges
    graph: str = "auto"
    label_frequency: bool = True
    plots: bool = True
    block_rows: int = DEFAULT_BLOCK_ROWS
    #: "exact" (the fixed-shape BLAS search) or "faiss" (faiss's flat index proposes candidates, the
    #: exact scores decide: the same bytes; :class:`imagenet_zsl.evaluation.search.FaissCandidates`)
    search: Literal["exact", "faiss"] = "exact"
    #: where the search runs: "auto" (a CUDA GPU when torch sees one), "cpu", "cuda" or "cuda:N"
    #: (:func:`imagenet_zsl.devices.resolve_device`)
    device: str = "auto"
    #: output of ``imagenet-zsl images filter``: evaluate only the test images it kept
    kept_images: Path | None = None
    #: the classes each test image is ranked against: "split", "all" or a wnid list file
    #: (:func:`imagenet_zsl.splits.label_space.resolve_label_space`)
    label_space: str = "split"
    #: a wnid list of training classes that no zero-shot label space may hold, besides the model's,
    #: the backbone head's and the GZSL seen classes (``run``: every class of the run's
    #: :func:`~imagenet_zsl.batch.calibration.run_training_classes`, the same with or without GZSL)
    training_classes: Path | None = None
    #: split classes the model has no prototype for: they leave the label space, and their test
    #: images count as misses in every denominator (the ``count_as_miss`` policy of ``run``)
    count_as_miss: Sequence[str] = ()
    #: label-space classes without a prototype stay in the label space as classes the model never
    #: predicts (``run``'s ``missing_semantics: keep``): a distractor without one is not searched
    #: (it would rank below every class: the same ranks and hit@K) but counts in
    #: ``classes_in_label_space``, as do the ``count_as_miss`` classes
    keep_without_prototype: bool = False
    #: evaluate features whose identity differs from the model's training features (or from
    #: each other); the override is recorded in metrics.json and the manifest
    allow_feature_mismatch: bool = False


def calibration_rows(num_rows: int, fraction: float, seed: int) -> np.ndarray:
    """(num_rows,) bool: the held-out seen rows that choose γ (the others are seen test images).
    The one rule of ``evaluate``'s ``--val-seen-fraction`` and of ``run``'s carved calibration, so
    both pick the same rows for the same seed."""
    return np.random.default_rng(seed).random(num_rows) < fraction


def input_paths(cfg: EvaluationConfig) -> list[Path | None]:
    """Every path the run reads: ``--out`` may neither contain nor lie inside one of them."""
    return [
        cfg.features,
        cfg.split,
        cfg.model,
        cfg.prototypes,
        cfg.seen_features,
        cfg.seen_classes,
        cfg.val_split,
        cfg.val_features,
        cfg.val_seen_features,
        cfg.kept_images,
        cfg.training_classes,
        None if str(cfg.label_space) in ("split", "all") else Path(cfg.label_space),
    ]
