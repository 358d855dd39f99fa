"""``imagenet-zsl run``: train every model of a recipe once, evaluate it on every split, summarise.

Output directory (``--out DIR``)::

    DIR/manifest.json              format imagenet-zsl/run-v1, tool "imagenet-zsl run", the recipe,
                                   the status of every cell, the class policy, the calibration, any
                                   feature-mismatch override and the sha256 of every summary file
    DIR/features/                  only with ``features: {simulate: ...}``: the SIMULATED features
    DIR/features.key.json          their cache key: the simulation config and its class lists' sha256
    DIR/models/NAME/               each trained model (``imagenet-zsl train``'s directory)
    DIR/models/NAME.key.json       its cache key: digest of (config, features manifest, semantics)
    DIR/classes/                   the class lists every model shares: SPLIT.txt when classes were
                                   dropped, seen.txt (GZSL seen classes), calibration.txt (the
                                   validation classes choosing γ), seen_training.txt (the classes
                                   models are fitted on when validation classes were carved out)
    DIR/classes_dropped.csv        wnid, set, action, models: the classes some model cannot represent
    DIR/cells/NAME__SPLIT/         one run directory per (model, split) (the model's own ``splits:``
                                   if it names some), exactly as ``evaluate`` writes
    DIR/cells/NAME__SPLIT.json     the cell's record: status, error, classes, provenance, the key it
                                   was computed with and the sha256 of its manifest
    DIR/summary.{md,csv,tex}       models x splits table (:mod:`imagenet_zsl.batch.summary`)
    DIR/hit_at_k.png               hit@K per split, one line per model

Order: the recipe and every name, file and class set it names are checked first; then the models
are trained (or loaded), then the classes of each split are fixed for every model at once
(``missing_semantics``), then the cells run. So every model of a split is scored on the same test
classes, label space, seen classes and validation classes, and a policy error comes before any cell.

Resumable: a model whose key file matches is not trained again, and a cell whose record says ``ok``
with the same key, and whose files still match its manifest's sha256s, is skipped, so a re-run
after a kill only does what is left (same bytes); a cell whose files were edited is computed again.
Failures are isolated: a model that fails to train, or a cell that fails to evaluate, is recorded
with its error and shown as failed in the table; the other cells still run and the command exits 1.
A full disk (or ``ulimit -f``) stops the run at once, naming the file. One ``run`` at a time writes
an ``--out``: a lock file ``.NAME.lock`` next to it makes a second one refuse.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import filelock
from tqdm import tqdm

from imagenet_zsl.batch.recipe import (
    RUN_FORMAT,
    RUN_TOOL,
    FeatureDirs,
    ModelSpec,
    Recipe,
    calibration_classes,
    check_features,
    check_model_splits,
    check_resources,
    input_paths,
    load_recipe,
    model_specs,
    split_paths,
)
from imagenet_zsl.batch.summary import (
    SUMMARY_FILES,
    pretraining_warnings,
    summary_rows,
    write_summary,
)
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.queries import ModelDirectory
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate, present_classes, representable_classes
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, check_same_features, describe_identity
from imagenet_zsl.features.shards import FeatureDir, shared_blocks
from imagenet_zsl.features.simulate import load_simulation_config, simulate
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_write_json,
    atomic_write_text,
    canonical_json,
    check_out_dir,
    file_record,
    read_manifest,
    sha256_file,
)
from imagenet_zsl.models.selection import split_seen_classes
from imagenet_zsl.models.training import train
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import NAMED_LABEL_SPACES, resolve_label_space

log = logging.getLogger(__name__)

CELL_FORMAT = "imagenet-zsl/run-cell-v1"
#: bump when a cell's outputs change for the same inputs, so old cells are recomputed
CELL_VERSION = 2
#: OS errors that stop the whole run (every later cell would hit them too)
FATAL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})
DROPPED_FILE = "classes_dropped.csv"
#: the class sets of a run besides its splits
SEEN_SET, CALIBRATION_SET = "seen", "calibration"
#: stands for the number of validation classes in a calibration legend until the class policy ran
COUNT = "<N>"


@dataclass
class Features:
    """The feature directories of a run: training, test per split, held-out seen (GZSL)."""

    train: Path
    test: dict[str, Path]
    seen: Path | None = None


@dataclass
class Plan:
    """A validated recipe with everything resolved, before any work."""

    recipe: Recipe
    recipe_path: Path
    out: Path
    splits: dict[str, Path]
    split_wnids: dict[str, list[str]]
    models: list[ModelSpec]
    #: the recipe's listed validation classes (None: none listed)
    val_wnids: list[str] | None = None
    allow_feature_mismatch: bool = False


@dataclass
class Calibration:
    """How the GZSL γ is chosen: the validation classes (before the class policy), where their
    images are, and the sentence the summary's legend prints."""

    wnids: list[str] | None = None
    features: Path | None = None
    carved: bool = False
    legend: str = ""


@dataclass
class RunResult:
    """What one ``run`` did: the models it trained, the cells it evaluated, skipped and lost."""

    out: Path
    trained: list[str] = field(default_factory=list)
    evaluated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: cell name -> its one-line error (in cell order)
    errors: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    table: str = ""


def _digest(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def cell_name(model: str, split: str) -> str:
    """Directory name of the (model, split) cell."""
    return f"{model}__{split}"


# ----------------------------------------------------------------------------- planning


def plan_run(recipe_path: str | Path, out: str | Path, allow_feature_mismatch: bool = False) -> Plan:
    """Validate the recipe and every name, file and class set it names; nothing is written."""
    recipe_path = Path(recipe_path)
    recipe = load_recipe(recipe_path)
    where = str(recipe_path)
    splits = split_paths(recipe, where)
    models = model_specs(recipe, where)
    check_model_splits(models, splits, where)
    check_resources(recipe, models, where)
    check_features(recipe, splits, where)
    split_wnids = {}
    for name, path in splits.items():
        split_wnids[name] = read_wnid_list(path)
        if not split_wnids[name]:
            raise UserInputError(f"{path}: split {name!r} is empty; it needs one class wnid per line")
    val_wnids = calibration_classes(recipe, split_wnids, where)
    _check_label_space_file(recipe.label_space, split_wnids, where)
    plan = Plan(recipe, recipe_path, Path(out), splits, split_wnids, models, val_wnids)
    plan.allow_feature_mismatch = allow_feature_mismatch
    plan.out = check_out_dir(out, RUN_TOOL, input_paths(recipe, recipe_path, splits, models))
    return plan


def _check_label_space_file(spec: str, split_wnids: dict[str, list[str]], where: str) -> None:
    """A label-space FILE holds every class of every split (a test class outside it could never
    be predicted); checked before any work."""
    if spec in NAMED_LABEL_SPACES:
        return
    listed = set(read_wnid_list(spec))
    for split, wnids in split_wnids.items():
        missing = sorted(set(wnids) - listed)
        if missing:
            raise UserInputError(
                f"{spec}: the label space lacks {len(missing)} classes of split {split!r} "
                f"({where}: label_space): {preview(missing)}; a label space must hold every test class"
            )


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[Path]:
    """Hold ``.NAME.lock`` next to ``out`` for the whole run; a second ``run`` on it refuses."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f".{out.name}.lock"
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise UserInputError(
            f"{out} is being written by another 'imagenet-zsl run' (lock {path}): wait for it to "
            "finish, or give another --out"
        ) from None
    try:
        yield path
    finally:
        lock.release()


def resolve_features(plan: Plan) -> Features:
    """The feature directories; SIMULATED ones are written to ``OUT/features`` once (cached)."""
    features = plan.recipe.features
    if isinstance(features, FeatureDirs):
        test = features.test
        tests = {s: Path(test[s] if isinstance(test, dict) else test) for s in plan.splits}
        return Features(Path(features.train), tests, Path(features.seen) if features.seen else None)
    path = Path(features.simulate)
    config = load_simulation_config(path)
    target = plan.out / "features"
    key_path = plan.out / "features.key.json"
    key = _simulation_key(config, path.parent)
    if read_manifest(target) is None or not key_path.is_file() or json.loads(key_path.read_text()) != key:
        key_path.unlink(missing_ok=True)
        simulate(config, target, base_dir=path.parent)
        atomic_write_json(key_path, key)
    seen = target / "seen_test"
    if plan.recipe.gzsl and not (seen / MANIFEST_NAME).is_file():
        raise UserInputError(
            f"gzsl needs held-out seen images ({path}: seen_test.images_per_class): set it above 0"
        )
    return Features(target / "train", {s: target / "test" for s in plan.splits}, seen)


def _simulation_key(config: Any, base_dir: Path) -> dict[str, Any]:
    """What the simulated features depend on: the config and the content of its class lists."""
    lists = {}
    for spec in [*config.train.classes, *config.test.classes]:
        path = Path(spec) if Path(spec).is_file() else base_dir / spec
        lists[spec] = sha256_file(path) if path.is_file() else spec
    return {"config": asdict(config), "class_lists": lists}


# ----------------------------------------------------------------------------- provenance


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
            fitted_on = (read_manifest(spec.fitted) or {}).get(MODEL_FEATURES_KEY)
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
                shared = _write_classes(plan.out / "classes" / "seen_training.txt", kept)
            spec.train.seen = str(shared)
        else:
            kept = [w for w in read_wnid_list(spec.train.seen) if w not in val]
            path = plan.out / "classes" / f"seen_training.{spec.name}.txt"
            spec.train.seen = str(_write_classes(path, kept))


# ----------------------------------------------------------------------------- models


def ensure_model(spec: ModelSpec, features: Features, out: Path) -> tuple[Path, str, bool]:
    """(model directory, its digest, whether it was trained now): trained unless its key matches."""
    if spec.fitted is not None:
        return spec.fitted, spec.digest(""), False
    assert spec.train is not None
    digest = spec.digest(sha256_file(features.train / MANIFEST_NAME))
    model_dir = out / "models" / spec.name
    key_path = out / "models" / f"{spec.name}.key.json"
    if key_path.is_file() and (model_dir / MANIFEST_NAME).is_file():
        try:
            if json.loads(key_path.read_text())["digest"] == digest:
                return model_dir, digest, False
        except (ValueError, KeyError):
            pass
    key_path.unlink(missing_ok=True)
    train(spec.train, features.train, model_dir, config_path=spec.config_path)
    atomic_write_json(key_path, {"digest": digest, "model": spec.name, "train_config": spec.train.as_dict()})
    return model_dir, digest, True


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if isinstance(err, UserInputError) else f"{type(err).__name__}: {text}"


def _stop_on_fatal(err: BaseException, where: Path) -> None:
    """A full disk (or file-size limit, read-only disk) stops the run: one line naming the file."""
    if isinstance(err, OSError) and err.errno in FATAL_ERRNOS:
        name = err.filename if err.filename is not None else where
        raise UserInputError(
            f"{err.strerror or 'disk error'} ({name}): free space (or raise 'ulimit -f') and re-run "
            "the same command; finished cells are kept"
        ) from err


def train_models(
    plan: Plan, features: Features, result: RunResult, echo: Callable[[str], None]
) -> tuple[dict[str, tuple[Path, str]], dict[str, str]]:
    """Train (or load) every model: ({name: (directory, digest)}, {name: error})."""
    trained: dict[str, tuple[Path, str]] = {}
    errors: dict[str, str] = {}
    for spec in plan.models:
        tic = time.perf_counter()
        try:
            model_dir, digest, fresh = ensure_model(spec, features, plan.out)
        except Exception as err:  # isolated: the model's cells are reported as failed
            _stop_on_fatal(err, plan.out / "models" / spec.name)
            errors[spec.name] = f"training failed: {_one_line(err)}"
            echo(f"model {spec.name}: {errors[spec.name]}")
            continue
        trained[spec.name] = (model_dir, digest)
        if fresh:
            result.trained.append(spec.name)
            echo(f"model {spec.name}: trained in {time.perf_counter() - tic:.1f} s")
    return trained, errors


# ----------------------------------------------------------------------------- class policy


@dataclass
class CellClasses:
    """The classes a cell evaluates: the files to pass, and what the class policy did."""

    model_dir: Path
    split_file: Path
    evaluated: int
    total: int
    #: split classes that left the split for every model (``drop``)
    excluded: list[str]
    #: split classes this model cannot represent, counted as misses (``count_as_miss``)
    missed: list[str] = field(default_factory=list)
    seen_file: Path | None = None
    val_file: Path | None = None
    val_features: Path | None = None
    #: the label space every model of the split shares (``label_space`` all/FILE), else the spec
    label_space: str = "split"


@dataclass
class ClassSets:
    """The classes every model of a split is scored on, and what left them (``missing_semantics``)."""

    #: set name (a split, "seen", "calibration") -> wnids, after the policy
    kept: dict[str, list[str]]
    #: set name -> wnid -> the models that cannot represent it
    missing: dict[str, dict[str, list[str]]]
    files: dict[str, Path] = field(default_factory=dict)
    #: (model, split) -> split classes counted as misses
    missed: dict[tuple[str, str], list[str]] = field(default_factory=dict)


def _unrepresentable(source: ModelDirectory, wnids: list[str]) -> list[str]:
    """The classes of ``wnids`` the model has no prototype for (e.g. no word vector)."""
    try:
        return representable_classes(source, wnids)[1]
    except UserInputError:  # not one of them
        return list(wnids)


def _class_sets(plan: Plan, features: Features, calibration: Calibration) -> dict[str, list[str]]:
    sets = dict(plan.split_wnids)
    if calibration.wnids is not None:
        sets[CALIBRATION_SET] = list(calibration.wnids)
    if plan.recipe.gzsl and features.seen is not None:
        val = set(calibration.wnids or ())
        sets[SEEN_SET] = [w for w in present_classes(FeatureDir(features.seen)) if w not in val]
    return sets


def find_missing(
    plan: Plan,
    sets: dict[str, list[str]],
    trained: dict[str, tuple[Path, str]],
    errors: dict[str, str],
) -> dict[str, dict[str, list[str]]]:
    """set name -> wnid -> models that cannot represent it, over the models using each set (a
    split: the models evaluated on it; seen and calibration classes: every model). A model that
    cannot give prototypes at all is moved to ``errors`` (its cells fail)."""
    missing: dict[str, dict[str, list[str]]] = {name: {} for name in sets}
    specs = {spec.name: spec for spec in plan.models}
    for name, (model_dir, _) in list(trained.items()):
        try:
            source = ModelDirectory(model_dir)
            for set_name, wnids in sets.items():
                if set_name in plan.splits and not specs[name].evaluates(set_name):
                    continue
                for wnid in _unrepresentable(source, wnids):
                    missing[set_name].setdefault(wnid, []).append(name)
        except Exception as err:  # e.g. a model that cannot give prototypes: its cells fail
            errors[name] = _one_line(err)
            del trained[name]
    return missing


class MissingSemanticsError(UserInputError):
    """``missing_semantics: error`` and a model cannot represent some classes: stops the run."""


def _check_error_policy(plan: Plan, missing: dict[str, dict[str, list[str]]], carved: bool) -> None:
    """``missing_semantics: error``: the first (model, set) with classes it cannot represent, one
    line, before any cell (carved validation classes are not the user's: they are dropped)."""
    for set_name, by_wnid in missing.items():
        if not by_wnid or (set_name == CALIBRATION_SET and carved):
            continue
        model = min({m for models in by_wnid.values() for m in models})
        wnids = sorted(w for w, models in by_wnid.items() if model in models)
        what = f"split {set_name!r}" if set_name in plan.splits else f"the {set_name} classes"
        raise MissingSemanticsError(
            f"model {model!r} cannot represent {len(wnids)} classes of {what} (no semantic vector): "
            f"{preview(wnids)}; set 'missing_semantics: drop' or 'count_as_miss' "
            f"({plan.recipe_path}: missing_semantics) or use other semantics"
        )


def apply_policy(
    plan: Plan, sets: dict[str, list[str]], missing: dict[str, dict[str, list[str]]], carved: bool
) -> ClassSets:
    """The classes every model is scored on, by ``missing_semantics``: ``drop`` removes what any
    model cannot represent from the set for every model; ``count_as_miss`` keeps split classes
    (a model counts their images as misses) and drops seen and validation classes; ``error``
    raises. The files written under ``OUT/classes`` are the ones every cell reads."""
    policy = plan.recipe.missing_semantics
    if policy == "error":
        _check_error_policy(plan, missing, carved)
    result = ClassSets(kept={}, missing=missing)
    for set_name, wnids in sets.items():
        gone = missing[set_name]
        is_split = set_name in plan.splits
        if policy == "count_as_miss" and is_split:
            result.kept[set_name] = list(wnids)
            for wnid, models in gone.items():
                for model in models:
                    result.missed.setdefault((model, set_name), []).append(wnid)
        else:
            result.kept[set_name] = [w for w in wnids if w not in gone]
        if not result.kept[set_name]:
            raise UserInputError(
                f"no class of the {set_name} classes is left: every one lacks a prototype in some model "
                f"({', '.join(sorted({m for ms in gone.values() for m in ms}))}); use other semantics"
            )
        if is_split and len(result.kept[set_name]) == len(wnids):
            result.files[set_name] = plan.splits[set_name]
        else:
            result.files[set_name] = _write_classes(
                plan.out / "classes" / f"{set_name}.txt", result.kept[set_name]
            )
    return result


def label_space_prefix(split: str) -> str:
    """The class-set name of a split's distractors (``label_space: all`` or FILE)."""
    return f"label space of {split}"


def fix_label_spaces(
    plan: Plan, features: Features, classes: ClassSets, trained: dict[str, tuple[Path, str]]
) -> None:
    """``label_space: all`` or FILE: one label space per split for every model of it. The space is
    resolved once (the split's kept classes, less the run's seen classes: the GZSL seen classes, or
    the training features' classes), and a distractor any of the split's models has no prototype
    for leaves it for all of them (listed; never an error: distractors are not test classes). The
    result is written to ``OUT/classes/label_space.SPLIT.txt`` and passed to every cell as a FILE."""
    spec = plan.recipe.label_space
    if spec == "split":
        return
    if SEEN_SET in classes.kept:
        seen = classes.kept[SEEN_SET]
    else:
        seen = present_classes(FeatureDir(features.train))
    where = f"{plan.recipe_path}: label_space"
    sources = {name: ModelDirectory(model_dir) for name, (model_dir, _) in trained.items()}
    for split in plan.splits:
        kept = classes.kept[split]
        space = resolve_label_space(spec, kept, seen, where)
        split_set = set(kept)
        distractors = [w for w in space if w not in split_set]
        gone: dict[str, list[str]] = {}
        for spec_model in plan.models:
            if spec_model.name in sources and spec_model.evaluates(split):
                for wnid in _unrepresentable(sources[spec_model.name], distractors):
                    gone.setdefault(wnid, []).append(spec_model.name)
        classes.missing[label_space_prefix(split)] = gone
        final = [w for w in space if w not in gone]
        classes.files[label_space_prefix(split)] = _write_classes(
            plan.out / "classes" / f"label_space.{split}.txt", final
        )


def dropped_rows(plan: Plan, classes: ClassSets) -> list[dict[str, str]]:
    """One row per (class, set) some model cannot represent: what happened to it and which models."""
    rows = []
    for set_name, by_wnid in classes.missing.items():
        counted = plan.recipe.missing_semantics == "count_as_miss" and set_name in plan.splits
        for wnid in sorted(by_wnid):
            rows.append(
                {
                    "wnid": wnid,
                    "set": set_name,
                    "action": "counted as miss" if counted else "dropped for every model",
                    "models": ";".join(sorted(by_wnid[wnid])),
                    "why": "no prototype (no semantic vector)",
                }
            )
    return rows


def _write_dropped(path: Path, rows: list[dict[str, str]]) -> Path:
    columns = ("wnid", "set", "action", "models", "why")
    lines = [",".join(columns)] + [",".join(row[c] for c in columns) for row in rows]
    return atomic_write_text(path, "\n".join(lines) + "\n")


def policy_note(plan: Plan, rows: list[dict[str, str]]) -> str | None:
    """The one line (summary legend and console warning) saying which classes left and why."""
    if not rows:
        return None
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["set"]] = counts.get(row["set"], 0) + 1
    models = sorted({m for row in rows for m in row["models"].split(";")})
    where = ", ".join(f"{name} {n}" for name, n in counts.items())
    policy = plan.recipe.missing_semantics
    what = (
        "are counted as misses for the models that cannot score them (seen and validation classes "
        "left every model)"
        if policy == "count_as_miss"
        else "left the evaluation of every model"
    )
    return (
        f"missing_semantics: {policy}: {len(rows)} classes without a prototype in {', '.join(models)} "
        f"{what} ({where}); listed in {DROPPED_FILE}"
    )


def cell_classes(
    plan: Plan, classes: ClassSets, calibration: Calibration, trained: dict[str, tuple[Path, str]]
) -> dict[str, dict[str, CellClasses]]:
    """Per model and split, the files and counts its cell is evaluated with."""
    out: dict[str, dict[str, CellClasses]] = {}
    for spec in plan.models:
        if spec.name not in trained:
            continue
        cells = out.setdefault(spec.name, {})
        for split, wnids in plan.split_wnids.items():
            if not spec.evaluates(split):
                continue
            missed = sorted(classes.missed.get((spec.name, split), []))
            kept = classes.kept[split]
            cells[split] = CellClasses(
                model_dir=trained[spec.name][0],
                split_file=classes.files[split],
                evaluated=len(kept),
                total=len(wnids),
                excluded=sorted(set(wnids) - set(kept)),
                missed=missed,
                seen_file=classes.files.get(SEEN_SET),
                val_file=classes.files.get(CALIBRATION_SET),
                val_features=calibration.features,
                label_space=str(classes.files.get(label_space_prefix(split), plan.recipe.label_space)),
            )
    return out


def _write_classes(path: Path, wnids: list[str]) -> Path:
    return atomic_write_text(path, "".join(f"{w}\n" for w in wnids))


# ----------------------------------------------------------------------------- cells


def _file_key(path: Path | None) -> str | None:
    return None if path is None else sha256_file(path)


def cell_key(plan: Plan, features: Features, model_digest: str, split: str, classes: CellClasses) -> str:
    """Everything a cell's bytes depend on; a finished cell with this key is skipped."""
    recipe = plan.recipe
    space = recipe.label_space
    return _digest(
        {
            "version": CELL_VERSION,
            "model": model_digest,
            "split": sha256_file(classes.split_file),
            "seen": _file_key(classes.seen_file),
            "validation": _file_key(classes.val_file),
            "validation_features": _file_key(classes.val_features and classes.val_features / MANIFEST_NAME),
            "count_as_miss": classes.missed,
            "label_space": space,
            "label_space_file": None
            if classes.label_space in NAMED_LABEL_SPACES
            else _file_key(Path(classes.label_space)),
            "allow_feature_mismatch": plan.allow_feature_mismatch,
            "test_features": sha256_file(features.test[split] / MANIFEST_NAME),
            "seen_features": None
            if features.seen is None or not recipe.gzsl
            else sha256_file(features.seen / MANIFEST_NAME),
            "settings": recipe.model_dump(
                mode="json", include={"ks", "gzsl", "graph", "label_frequency", "plots", "missing_semantics"}
            ),
        }
    )


def cell_problem(cell_dir: Path, manifest_sha256: str | None) -> str | None:
    """Why a finished cell's files cannot be trusted (None: its manifest, and every file the
    manifest lists, match their sha256s)."""
    manifest_path = cell_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        return f"{manifest_path} is missing"
    if manifest_sha256 is None or sha256_file(manifest_path) != manifest_sha256:
        return f"{manifest_path} changed"
    manifest = read_manifest(cell_dir) or {}
    outputs = manifest.get("outputs")
    if not isinstance(outputs, list):
        return f"{manifest_path} lists no files"
    for entry in outputs:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            return f"{manifest_path} has a malformed file entry"
        path = cell_dir / entry["path"]
        if not path.is_file() or sha256_file(path) != entry.get("sha256"):
            return f"{path} does not match its sha256 in the manifest"
    return None


def _finished(record_path: Path, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the record of a finished cell computed with ``key``, None) when it can be reused; else
    (None, why it is recomputed; None for a cell that simply has not run with this key)."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(record, dict) or record.get("status") != "ok" or record.get("key") != key:
        return None, None
    problem = cell_problem(record_path.with_suffix(""), record.get("manifest_sha256"))
    return (None, problem) if problem else (record, None)


def evaluate_cell(plan: Plan, features: Features, model: str, split: str, classes: CellClasses) -> Path:
    """Write the cell's run directory with ``evaluate`` (atomic: all or nothing); returns it."""
    recipe = plan.recipe
    out = plan.out / "cells" / cell_name(model, split)
    cfg = EvaluationConfig(
        features=features.test[split],
        split=classes.split_file,
        out=out,
        model=classes.model_dir,
        ks=list(recipe.ks),
        gzsl=recipe.gzsl,
        seen_features=features.seen if recipe.gzsl else None,
        seen_classes=classes.seen_file if recipe.gzsl else None,
        val_split=classes.val_file,
        val_features=classes.val_features,
        graph=recipe.graph,
        label_frequency=recipe.label_frequency,
        plots=recipe.plots,
        label_space=classes.label_space,
        count_as_miss=list(classes.missed),
        allow_feature_mismatch=plan.allow_feature_mismatch,
    )
    evaluate(cfg, progress=False)
    return out


def _record(plan: Plan, model: str, split: str, **fields: Any) -> dict[str, Any]:
    total = len(plan.split_wnids[split])
    record = {
        "format": CELL_FORMAT,
        "tool": RUN_TOOL,
        "model": model,
        "split": split,
        "run": f"cells/{cell_name(model, split)}",
        "classes": {"in_split": total, "evaluated": None, "excluded": [], "missed": []},
        "provenance": {"backbone": "–", "class_vectors": "–", "feature_override": None},
        "status": "failed",
        "error": None,
        "key": None,
        "manifest_sha256": None,
    }
    record.update(fields)
    return record


def _class_vectors(model_dir: Path) -> str:
    """The class-vector source a model directory records (``–``: a model without semantics)."""
    manifest = read_manifest(model_dir) or {}
    source = manifest.get("semantics_identity")
    if isinstance(source, dict):
        source = source.get("source") or source.get("name") or source.get("path")
    if not source:
        inputs = manifest.get("inputs")
        source = inputs.get("semantics") if isinstance(inputs, dict) else None
    return str(source) if source else "–"


# ----------------------------------------------------------------------------- the run


def run(
    recipe_path: str | Path,
    out: str | Path,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    allow_feature_mismatch: bool = False,
) -> RunResult:
    """Validate, then train, fix the classes, evaluate and summarise (see the module docstring)."""
    plan = plan_run(recipe_path, out, allow_feature_mismatch)
    with run_lock(plan.out):
        return _run_locked(plan, progress, echo)


def _run_locked(plan: Plan, progress: bool, echo: Callable[[str], None]) -> RunResult:
    result = RunResult(plan.out)
    plan.out.mkdir(parents=True, exist_ok=True)
    if read_manifest(plan.out) is None:
        _write_manifest(plan, records=[], outputs=[])
    features = resolve_features(plan)
    overrides = check_provenance(plan, features)
    calibration = plan_calibration(plan, features)
    trained, errors = train_models(plan, features, result, echo)
    sets = _class_sets(plan, features, calibration)
    classes = apply_policy(plan, sets, find_missing(plan, sets, trained, errors), calibration.carved)
    fix_label_spaces(plan, features, classes, trained)
    rows = dropped_rows(plan, classes)
    dropped_path = _write_dropped(plan.out / DROPPED_FILE, rows)
    note = policy_note(plan, rows)
    if note:
        echo(f"warning: {note}")
    context = RunContext(plan, features, cell_classes(plan, classes, calibration, trained), overrides)
    records = _run_cells(context, trained, errors, result, progress, echo)
    n_val = len(classes.kept.get(CALIBRATION_SET, ()))
    legend = calibration.legend.replace(COUNT, str(n_val))
    notes = [n for n in (note, legend, _label_space_note(plan), _override_note(overrides)) if n]
    _summarise(plan, records, result, echo, notes, extra=[dropped_path])
    return result


def _label_space_note(plan: Plan) -> str:
    space = plan.recipe.label_space
    what = {
        "split": "the split's classes",
        "all": "every ImageNet-21K class that is not a seen class (the 'All' protocol)",
    }.get(space, f"the classes of {space}")
    return f"label space ({plan.recipe_path}: label_space = {space}): test images are ranked against {what}"


def _override_note(overrides: dict[str, Any]) -> str | None:
    if not overrides:
        return None
    return (
        f"FEATURE MISMATCH ALLOWED (--allow-feature-mismatch) in {len(overrides)} cells "
        f"({', '.join(overrides)}): their models were fitted on features of another backbone"
    )


@dataclass
class RunContext:
    """What every cell of a run shares: the plan, features, class files and provenance."""

    plan: Plan
    features: Features
    classes: dict[str, dict[str, CellClasses]]
    overrides: dict[str, Any]
    backbones: dict[Path, str] = field(default_factory=dict)

    def backbone(self, split: str) -> str:
        path = self.features.test[split]
        if path not in self.backbones:
            self.backbones[path] = describe_identity(FeatureDir(path).identity)
        return self.backbones[path]


def _pending_cells(
    context: RunContext,
    trained: dict[str, tuple[Path, str]],
    errors: dict[str, str],
    result: RunResult,
    echo: Callable[[str], None],
) -> tuple[list[tuple[str, str]], dict[tuple[str, str], dict[str, Any]], list[tuple[str, str, str, Path]]]:
    """(every cell, the records of failed models and finished cells, the cells left to evaluate)."""
    plan = context.plan
    cells = [(spec.name, split) for spec in plan.models for split in plan.splits if spec.evaluates(split)]
    pending = []
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for model, split in cells:
        record_path = plan.out / "cells" / f"{cell_name(model, split)}.json"
        if model in errors:
            records[model, split] = _record(plan, model, split, error=errors[model])
            atomic_write_json(record_path, records[model, split])
            continue
        key = cell_key(plan, context.features, trained[model][1], split, context.classes[model][split])
        record, problem = _finished(record_path, key)
        if record is not None:
            records[model, split] = record
            result.skipped.append(cell_name(model, split))
            continue
        if problem:
            echo(f"cell {cell_name(model, split)}: computing it again: {problem}")
        pending.append((model, split, key, record_path))
    return cells, records, pending


def _evaluate_one(
    context: RunContext, model: str, split: str, key: str, result: RunResult, echo: Callable[[str], None]
) -> dict[str, Any]:
    """Evaluate one cell and return its record (a failure is recorded, a full disk stops the run)."""
    plan = context.plan
    cell = context.classes[model][split]
    counts = {
        "in_split": cell.total,
        "evaluated": cell.evaluated,
        "excluded": cell.excluded,
        "missed": cell.missed,
    }
    name = cell_name(model, split)
    origin = {
        "backbone": context.backbone(split),
        "class_vectors": _class_vectors(cell.model_dir),
        "feature_override": context.overrides.get(name),
    }
    try:
        cell_dir = evaluate_cell(plan, context.features, model, split, cell)
        manifest_sha256 = sha256_file(cell_dir / MANIFEST_NAME)
        result.evaluated.append(name)
        return _record(
            plan,
            model,
            split,
            classes=counts,
            provenance=origin,
            status="ok",
            key=key,
            manifest_sha256=manifest_sha256,
        )
    except Exception as err:  # isolated: recorded, shown as failed, the others still run
        _stop_on_fatal(err, plan.out / "cells" / name)
        record = _record(plan, model, split, classes=counts, provenance=origin, error=_one_line(err), key=key)
        echo(f"cell {name} failed: {record['error']}")
        return record


def _run_cells(
    context: RunContext,
    trained: dict[str, tuple[Path, str]],
    errors: dict[str, str],
    result: RunResult,
    progress: bool,
    echo: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Evaluate every (model, split) cell not finished yet; returns every cell's record."""
    plan = context.plan
    cells, records, pending = _pending_cells(context, trained, errors, result, echo)
    echo(f"{len(cells)} cells: {len(result.skipped)} already done, {len(pending)} to evaluate")
    # split by split, so every model of a split reads its test features once (kept in memory up
    # to the recipe's feature_memory_gb; larger splits are streamed once per model)
    split_rank = {split: i for i, split in enumerate(plan.splits)}
    pending.sort(key=lambda cell: split_rank[cell[1]])
    start = time.perf_counter()
    bar = tqdm(pending, desc="cells", unit="cell", disable=not progress)
    with contextlib.ExitStack() as stack:
        sharing: contextlib.ExitStack | None = None
        current_split = None
        for done, (model, split, key, record_path) in enumerate(bar):
            if split != current_split:
                if sharing is not None:
                    sharing.close()
                sharing = stack.enter_context(contextlib.ExitStack())
                sharing.enter_context(shared_blocks(int(plan.recipe.feature_memory_gb * 2**30)))
                current_split = split
            bar.set_postfix_str(cell_name(model, split))
            record = _evaluate_one(context, model, split, key, result, echo)
            atomic_write_json(record_path, record)
            records[model, split] = record
            if not progress:
                elapsed = time.perf_counter() - start
                left = elapsed / (done + 1) * (len(pending) - done - 1)
                echo(
                    f"  {done + 1}/{len(pending)} {cell_name(model, split)} {record['status']}; "
                    f"ETA {left:.0f} s"
                )
    for model, split in cells:
        if records[model, split]["status"] != "ok":
            result.errors[cell_name(model, split)] = records[model, split]["error"]
    result.failed = list(result.errors)
    return [records[c] for c in cells]


def _summarise(
    plan: Plan,
    records: list[dict[str, Any]],
    result: RunResult,
    echo: Callable[[str], None],
    notes: list[str],
    extra: list[Path],
) -> None:
    rows = summary_rows(plan.out, records, plan.recipe.ks, plan.recipe.gzsl)
    result.table, paths = write_summary(rows, plan.out, plan.recipe.ks, notes)
    outputs = [file_record(p, plan.out) for p in [*paths, *extra]]
    _write_manifest(plan, records, outputs, notes)
    result.files = [plan.out / MANIFEST_NAME, *paths, *extra]
    echo(result.table)
    for line in pretraining_warnings(rows):
        echo(f"warning: {line}")


def _write_manifest(
    plan: Plan, records: list[dict[str, Any]], outputs: list[dict[str, Any]], notes: list[str] | None = None
) -> None:
    atomic_write_json(
        plan.out / MANIFEST_NAME,
        {
            "format": RUN_FORMAT,
            "tool": RUN_TOOL,
            "recipe": {"path": str(plan.recipe_path), "sha256": sha256_file(plan.recipe_path)},
            "config": plan.recipe.as_dict(),
            "allow_feature_mismatch": plan.allow_feature_mismatch,
            "cells": [
                {k: r[k] for k in ("model", "split", "status", "error", "run")}
                | {"classes": r["classes"], "provenance": r.get("provenance")}
                for r in records
            ],
            "notes": notes or [],
            "outputs": outputs,
            "summary_files": [*SUMMARY_FILES, DROPPED_FILE],
        },
    )
