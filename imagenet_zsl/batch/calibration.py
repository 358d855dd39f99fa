"""Provenance and calibration, fixed before any training: every model must have been fitted on
features of the test features' identity (``--allow-feature-mismatch`` records an override), and
the GZSL γ is chosen on validation classes, listed or carved out of the seen classes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_json
from imagenet_zsl.batch.plan import CALIBRATION_DIR, Features, Plan, cell_name, digest, write_classes
from imagenet_zsl.batch.recipe import ModelSpec
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.model_source import ModelDirectory
from imagenet_zsl.evaluation.run import VAL_SEEN_FRACTION, present_classes
from imagenet_zsl.evaluation.run.calibrate import CarvedCalibration, choose_carved_gamma
from imagenet_zsl.evaluation.run.classes import head_classes
from imagenet_zsl.evaluation.run.inputs import TrainingFeatures, check_held_out_seen
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, check_same_features
from imagenet_zsl.manifests import MANIFEST_NAME
from imagenet_zsl.models.persistence import read_manifest as read_model_manifest
from imagenet_zsl.models.selection import split_seen_classes
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import TrainingClasses, training_classes

#: stands for the number of validation classes in a calibration legend until the class policy ran
COUNT = "<N>"
#: stands for the number of calibration fits in a calibration legend, until they ran
FIT = "<FIT>"


@dataclass
class Calibration:
    """How the GZSL γ is chosen: the validation classes (before the class policy), where their
    images are, and the sentence the summary's legend prints."""

    wnids: list[str] | None = None
    features: Path | None = None
    carved: bool = False
    legend: str = ""
    #: carved: the seed of the classes carved and of the held-out rows that choose γ
    seed: int = 0


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
    Le Cacheux et al.'s protocol (§3.2), a seeded ``fraction`` of the seen classes carved out as
    validation classes; a copy of every trained model is fitted without them
    (:func:`calibration_specs`) and chooses γ (:mod:`imagenet_zsl.evaluation.run.calibrate`),
    then every model is fitted on all seen classes (exactly as without GZSL, so the ZSL numbers do
    not move) and γ is subtracted from its seen-class scores. Not possible with fitted model
    directories (trained on every seen class outside the run)."""
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
            f"calibrated H: γ maximises flat (per-image) H@1 on the {COUNT} validation classes of "
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
    if round(fraction * len(seen)) < 1:
        raise UserInputError(
            f"calibration fraction {fraction:g} of the {len(seen)} seen classes holds no class "
            f"({where}: calibration.fraction): give at least {1 / max(len(seen), 1):.2g}"
        )
    _, val_index = split_seen_classes(len(seen), fraction, seed)
    val = [seen[i] for i in val_index]
    legend = (
        f"calibrated H: γ maximises flat (per-image) H@1 on {COUNT} validation classes carved from the "
        f"{len(seen)} seen classes ({fraction:.0%}, seed {seed}), scored by a copy of each model fitted "
        "without them: half of the held-out seen images (seeded) choose γ (the validation classes' as "
        "unseen, the others' as seen); each model is then retrained on all seen classes, so its ZSL numbers "
        "are those of a ZSL run, and γ is subtracted from the retrained model's seen-class scores "
        "(Le Cacheux et al.'s protocol: γ chosen with the carved model, applied to the retrained one); "
        f"GZSL S uses the other half of the held-out seen images; this costs one more fit per model "
        f"({FIT}; their seconds: timings.json)"
    )
    return Calibration(val, features.seen, True, legend, seed)


def calibration_specs(plan: Plan, features: Features, calibration: Calibration) -> dict[str, ModelSpec]:
    """The copy of every trained model that chooses γ (carved calibration only): the same config
    fitted on its seen classes less the validation classes (``train.seen``, written under
    ``OUT/classes``); {} otherwise. The models themselves stay as in a ZSL run."""
    if not calibration.carved:
        return {}
    val = set(calibration.wnids or ())
    shared = None
    specs: dict[str, ModelSpec] = {}
    for spec in plan.models:
        if spec.train is None:
            continue
        train = spec.train.model_copy(deep=True)
        if spec.train.seen is None:
            if shared is None:
                kept = [w for w in present_classes(FeatureDir(features.train)) if w not in val]
                shared = write_classes(plan.out / "classes" / "seen_training.txt", kept)
            train.seen = str(shared)
        else:
            kept = [w for w in read_wnid_list(spec.train.seen) if w not in val]
            path = plan.out / "classes" / f"seen_training.{spec.name}.txt"
            train.seen = str(write_classes(path, kept))
        specs[spec.name] = replace(spec, train=train)
    return specs


# ----------------------------------------------------------------------------- training classes


def run_training_classes(
    plan: Plan, features: Features, trained: dict[str, Path] | None = None, gzsl_seen: list[str] | None = None
) -> TrainingClasses:
    """The classes no label space of the run may hold (:func:`~imagenet_zsl.splits.label_space.
    training_classes`): every model's training classes (``trained``: name -> model directory;
    else the fitted ones), the training features' classes, the backbone head's classes (of the
    training and test features) and the GZSL seen classes."""
    models = trained if trained is not None else {s.name: s.fitted for s in plan.models if s.fitted}
    model_seen: set[str] = set()
    for model_dir in models.values():
        model_seen.update(ModelDirectory(model_dir).seen_wnids() or ())
    heads: set[str] = set()
    for path in {features.train, *features.test.values()}:
        heads.update(head_classes(FeatureDir(path)) or ())
    if gzsl_seen is None and plan.recipe.gzsl and features.seen is not None:
        gzsl_seen = present_classes(FeatureDir(features.seen))
    parts = [
        ("the models' training classes", sorted(model_seen)),
        ("the training features' classes", present_classes(FeatureDir(features.train))),
        ("the backbone head's classes", sorted(heads)),
        ("GZSL seen classes", gzsl_seen if plan.recipe.gzsl else None),
    ]
    return training_classes(parts)


def check_training_overlap(plan: Plan, features: Features) -> None:
    """Before any training: no split holds a training class (one line naming the split file and a
    wnid), and the held-out seen images are not training images (GZSL S would be measured on
    images the models were fitted on)."""
    where = str(plan.recipe_path)
    if plan.recipe.gzsl and features.seen is not None:
        training = TrainingFeatures.of_directory(features.train, f"features.train {features.train}")
        check_held_out_seen(FeatureDir(features.seen), training, f"{where}: features.seen")
    seen = set(run_training_classes(plan, features).wnids)
    for split, wnids in plan.split_wnids.items():
        clash = sorted(set(wnids) & seen)
        if clash:
            raise UserInputError(
                f"{plan.splits[split]}: split {split!r} holds {len(clash)} training classes, e.g. {clash[0]} "
                f"({where}: splits): a zero-shot test class is never a training class; drop them"
            )


# ----------------------------------------------------------------------------- carved γ


def carved_gammas(
    plan: Plan,
    features: Features,
    calibration: Calibration,
    seen: list[str],
    copies: dict[str, Path],
) -> dict[str, dict[str, Any]]:
    """Per model, the γ its calibration copy (``copies``: name -> directory) chose
    (:func:`~imagenet_zsl.evaluation.run.calibrate.choose_carved_gamma`) on the validation classes
    and the other ``seen`` classes the class policy kept, with how it was chosen: the record every
    cell of the model applies and shows (no timing: the same inputs give the same bytes; the
    extra fit's seconds are in ``OUT/timings.json``). Cached in ``OUT/calibration/NAME.gamma.json``
    under its inputs' digest."""
    assert calibration.carved and features.seen is not None
    val = list(calibration.wnids or ())
    others = [w for w in seen if w not in set(val)]
    setup = CarvedCalibration(
        features.seen, others, val, VAL_SEEN_FRACTION, calibration.seed, max(plan.recipe.ks) + 1
    )
    records: dict[str, dict[str, Any]] = {}
    for name, model_dir in copies.items():
        key = digest(
            {
                "model": sha256_file(model_dir / MANIFEST_NAME),
                "seen_features": sha256_file(features.seen / MANIFEST_NAME),
                "setup": {**asdict(setup), "features": str(setup.features)},
            }
        )
        path = model_dir.parent / f"{name}.gamma.json"
        chosen = _cached(path, key)
        if chosen is None:
            chosen = choose_carved_gamma(model_dir, setup)
            atomic_write_json(path, {"key": key, "chosen": chosen})
        records[name] = {
            **chosen,
            "chosen_with": f"{CALIBRATION_DIR}/{name}",
            "protocol": "Le Cacheux et al. 2019 §3.2: γ chosen with the model fitted without the "
            "validation classes, applied to the model retrained on all seen classes",
            "seen_rows": {"fraction": VAL_SEEN_FRACTION, "seed": calibration.seed},
        }
    return records


def _cached(path: Path, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data.get("chosen") if isinstance(data, dict) and data.get("key") == key else None
