"""Choosing the GZSL calibration γ with one model, to apply it to another (Le Cacheux et al. 2019,
§3.2): a model fitted without the validation classes ranks the held-out images of the validation
classes (playing unseen) and of the other seen classes (playing seen); γ maximises flat (per-image)
H@1, the averaging of the calibrated H the tables print.
``run`` then retrains the model on every seen class and subtracts this γ from the retrained
model's seen-class scores (:attr:`~imagenet_zsl.evaluation.run.config.EvaluationConfig.gamma`), so
its ZSL numbers are those of a ZSL run. Only the seeded calibration rows
(:func:`~imagenet_zsl.evaluation.run.config.calibration_rows`) are used here; the others are the
seen test images of every cell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl import scoring as M
from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.model_source import ModelDirectory
from imagenet_zsl.evaluation.run.cache import SearchCache
from imagenet_zsl.evaluation.run.classes import class_lookup, representable_classes
from imagenet_zsl.evaluation.run.config import VAL_SEEN_FRACTION, calibration_rows
from imagenet_zsl.evaluation.run.gzsl import build_gzsl
from imagenet_zsl.evaluation.run.search_sets import SearchContext, SetResult, search_set
from imagenet_zsl.evaluation.search import DEFAULT_BLOCK_ROWS
from imagenet_zsl.features.feature_dir import FeatureDir

#: the averagings of H@1 that can choose γ: "flat" per image, "per_class" (Xian et al.)
H_AVERAGING = frozenset({"flat", "per_class"})


@dataclass(frozen=True)
class CarvedCalibration:
    """The images and classes that choose γ: ``features`` holds the held-out seen images;
    ``seen`` are the classes the calibration model was fitted on, ``validation`` the carved ones
    (disjoint); the rows of ``features`` drawn by ``calibration_rows(n, fraction, seed)`` are used."""

    features: Path
    seen: Sequence[str]
    validation: Sequence[str]
    fraction: float = VAL_SEEN_FRACTION
    seed: int = 0
    #: classes kept per image: max(K) + 1 of the run (the γ thresholds need only the top 1)
    m: int = 2
    block_rows: int = DEFAULT_BLOCK_ROWS
    device: str = "auto"
    #: the averaging of H@1 that γ maximises: "flat" (per image, as the tables' calibrated H) or
    #: "per_class"; a field, so a γ chosen by another averaging is a different cache key
    h_averaging: str = "flat"


def _held(result: SetResult, held: Any, what: str, features: Path) -> SetResult:
    kept = result.take(held[result.rows])
    if len(kept.labels) == 0:
        raise UserInputError(
            f"{features}: no held-out image of the {what} is among the calibration rows; "
            "add held-out seen images (more per class) to choose the GZSL γ"
        )
    return kept


def choose_carved_gamma(model: Path, calibration: CarvedCalibration) -> dict[str, Any]:
    """γ chosen with ``model`` (fitted on ``calibration.seen`` only) on the calibration rows:
    {gamma, validation_H, h_averaging, validation_images {unseen, seen}, validation_classes
    {unseen, seen}}; validation_H is averaged as ``calibration.h_averaging`` says.
    Classes the model has no prototype for leave the validation and seen sets."""
    source = ModelDirectory(model)
    fd = FeatureDir(calibration.features)
    seen, _ = representable_classes(source, list(calibration.seen))
    validation, _ = representable_classes(source, list(calibration.validation))
    device = resolve_device(calibration.device)
    spaces = {
        "seen": source.searcher(seen, calibration.m, device),
        "val_unseen": source.searcher(validation, calibration.m, device),
    }
    context = SearchContext(source, SearchCache(None), calibration.block_rows, progress=False)
    held = calibration_rows(fd.num_rows, calibration.fraction, calibration.seed)
    val_lookup = class_lookup(fd, validation, "carved validation classes")
    val = _held(search_set("val", fd, val_lookup, spaces, context), held, "validation classes", fd.path)
    seen_lookup = class_lookup(fd, seen, "calibration seen classes")
    val_seen = _held(search_set("val_seen", fd, seen_lookup, spaces, context), held, "seen classes", fd.path)
    gz = build_gzsl((val,), val_seen, len(validation), len(seen), "val_unseen")
    if calibration.h_averaging not in H_AVERAGING:
        raise ValueError(f"h_averaging must be one of {sorted(H_AVERAGING)}, got {calibration.h_averaging!r}")
    gamma, h = M.choose_gamma(gz, k=1, per_class=calibration.h_averaging == "per_class")
    return {
        "gamma": float(gamma),
        "validation_H": float(h),
        "h_averaging": calibration.h_averaging,
        "validation_images": {"unseen": int(len(val.labels)), "seen": int(len(val_seen.labels))},
        "validation_classes": {"unseen": len(validation), "seen": len(seen)},
    }
