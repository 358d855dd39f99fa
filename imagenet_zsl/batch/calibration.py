"""Provenance and calibration, fixed before any training: every model must have been fitted on
features of the test features' identity (``--allow-feature-mismatch`` records an override), and
the GZSL γ is chosen on validation classes, listed or carved out of the seen classes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.plan import Features, Plan, cell_name, write_classes
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.run import present_classes
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, check_same_features
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.models.registry import read_manifest as read_model_manifest
from imagenet_zsl.models.selection import split_seen_classes
from imagenet_zsl.splits.io import read_wnid_list

#: stands for the number of validation classes in a calibration legend until the class policy ran
COUNT = "<N>"


@dataclass
class Calibration:
    """How the GZSL γ is chosen: the validation classes (before the class policy), where their
    images are, and the sentence the summary's legend prints."""

    wnids: list[str] | None = None
    features: Path | None = None
    carved: bool = False
    legend: str = ""


def check_provenance(plan: Plan, features: Features) -> dict[str, Any]:
    """Every model was fitted on features of the test features' identity (before any training).

    A model trained by the run is fitted on ``features.train``; a fitted model directory records
    its features' identity under ``feature_identity`` (older ones do not: not checked). Returns
    the overrides (``--allow-feature-mismatch``) by cell name, for the manifest and the table."""
    overrides: dict[str, Any] = {}
    identities = {path: FeatureDir(path).identity for path in {*features.test.values(), features.train}}
    if plan.recipe.gzsl and features.seen is not None:
        identities[features.seen] = FeatureDir(features.seen).identity
    for spec in plan.models:
        if spec.fitted is not None:
            fitted_on = read_model_manifest(spec.fitted).get(MODEL_FEATURES_KEY)
            fitted_on = fitted_on if isinstance(fitted_on, dict) else None
        else:
            fitted_on = identities[features.train]
        for split in plan.splits:
            if not spec.evaluates(split):
                continue
            others = [features.test[split]]
            if plan.recipe.gzsl and features.seen is not None:
                others.append(features.seen)
            for other in others:
                record = check_same_features(
                    fitted_on,
                    identities[other],
                    f"model {spec.name}",
                    f"features {other}",
                    plan.allow_feature_mismatch,
                )
                if record is not None:
                    overrides.setdefault(cell_name(spec.name, split), record)
    return overrides


# ----------------------------------------------------------------------------- calibration


def plan_calibration(plan: Plan, features: Features) -> Calibration:
    """The validation classes choosing the GZSL γ (see :class:`Calibration`).

    Listed (``calibration.classes``): checked against the seen classes. Default with ``gzsl``:
    Le Cacheux et al.'s protocol, a seeded ``fraction`` of the seen classes carved out as
    validation classes and held out of every model's training (their held-out images play the
    unseen classes; half of the other seen classes' held-out images play the seen ones). Not
    possible with fitted model directories (trained on every seen class outside the run)."""
    recipe = plan.recipe
    where = str(plan.recipe_path)
    if not recipe.gzsl:
        return Calibration()
    if recipe.calibration is False:
        return Calibration(legend=f"calibrated H: – (calibration: false in {where})")
    seen = present_classes(FeatureDir(features.seen)) if features.seen is not None else []
    if plan.val_wnids is not None:
        assert recipe.calibration
        clash = sorted(set(plan.val_wnids) & set(seen))
        if clash:
            raise UserInputError(
                f"{len(clash)} validation classes are seen classes ({where}: calibration.classes): "
                f"{preview(clash)}; validation classes must be disjoint from the seen classes"
            )
        listed = recipe.calibration.features
        legend = (
            f"calibrated H: γ maximises H on the {COUNT} validation classes of "
            f"{recipe.calibration.classes} (recipe calibration.classes) against held-out seen images, "
            "then is subtracted from the seen classes' scores of the test images"
        )
        return Calibration(list(plan.val_wnids), Path(listed) if listed else None, False, legend)
    fitted = [spec.name for spec in plan.models if spec.fitted is not None]
    if fitted:
        return Calibration(
            legend=f"calibrated H: – (fitted models {', '.join(fitted)} were trained outside this run; "
            f"name validation classes held out of their training: calibration.classes in {where})"
        )
    fraction = 0.2 if recipe.calibration is None else recipe.calibration.fraction
    seed = 0 if recipe.calibration is None else recipe.calibration.seed
    _, val_index = split_seen_classes(len(seen), fraction, seed)
    val = [seen[i] for i in val_index]
    _hold_out_of_training(plan, features, set(val))
    legend = (
        f"calibrated H: γ maximises H on {COUNT} validation classes carved from the {len(seen)} "
        f"seen classes ({fraction:.0%}, seed {seed}; Le Cacheux et al.'s GZSL protocol) and held out "
        "of every model's training and of the GZSL seen classes: their held-out images act as unseen, "
        "half of the other seen classes' held-out images as seen; γ is then subtracted from the seen "
        "classes' scores of the test images (no retraining on the validation classes)"
    )
    return Calibration(val, features.seen, True, legend)


def _hold_out_of_training(plan: Plan, features: Features, val: set[str]) -> None:
    """Fit every trained model on its seen classes less the validation classes (``train.seen``)."""
    shared = None
    for spec in plan.models:
        if spec.train is None:
            continue
        if spec.train.seen is None:
            if shared is None:
                kept = [w for w in present_classes(FeatureDir(features.train)) if w not in val]
                shared = write_classes(plan.out / "classes" / "seen_training.txt", kept)
            spec.train.seen = str(shared)
        else:
            kept = [w for w in read_wnid_list(spec.train.seen) if w not in val]
            path = plan.out / "classes" / f"seen_training.{spec.name}.txt"
            spec.train.seen = str(write_classes(path, kept))
