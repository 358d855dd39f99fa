"""The class policy (``missing_semantics``): every model of a split is scored on the same test
classes, label space, seen classes and validation classes. A class some model cannot represent
(no prototype) leaves the set for every model (``drop``), is counted as a miss (``count_as_miss``:
a split class; a distractor leaves the label space), stays in the label space as a class the model
never predicts, its test images misses (``keep``: the literature's full label space, e.g. All =
20,842 with word vectors for 18,925) or stops the run before any cell (``error``); the shared lists
are written under ``OUT/classes``. Each cell's record names its label space and its size
(:func:`label_space_record`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_json, atomic_write_text
from imagenet_zsl.batch.calibration import Calibration, run_training_classes
from imagenet_zsl.batch.faults import one_line
from imagenet_zsl.batch.plan import Features, Plan, write_classes
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.model_source import ModelDirectory
from imagenet_zsl.evaluation.run import present_classes
from imagenet_zsl.evaluation.run.classes import missing_prototypes
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.splits.label_space import resolve_label_space

DROPPED_FILE = "classes_dropped.csv"
#: the policies that keep a split class some model cannot represent (its images: misses)
MISSES = ("count_as_miss", "keep")
#: the class sets of a run besides its splits
SEEN_SET, CALIBRATION_SET = "seen", "calibration"


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
    #: carved calibration: the γ the model's calibration copy chose, and how (applied as is)
    gamma: dict[str, Any] | None = None
    #: ``OUT/classes/training.txt``: the classes no label space of the run holds
    training_file: Path | None = None
    #: the cell record's ``label_space``: name, size and classes without a vector
    #: (:func:`label_space_record`)
    space_record: dict[str, Any] = field(default_factory=dict)


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
    #: split -> the size of its label space before the policy (``label_space`` all/FILE)
    space_full: dict[str, int] = field(default_factory=dict)


def class_sets(plan: Plan, features: Features, calibration: Calibration) -> dict[str, list[str]]:
    sets = dict(plan.split_wnids)
    if calibration.wnids is not None:
        sets[CALIBRATION_SET] = list(calibration.wnids)
    if plan.recipe.gzsl and features.seen is not None:
        # carved validation classes stay seen classes: the models are retrained on them
        val = set() if calibration.carved else set(calibration.wnids or ())
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
                for wnid in missing_prototypes(source, wnids):
                    missing[set_name].setdefault(wnid, []).append(name)
        except Exception as err:  # e.g. a model that cannot give prototypes: its cells fail
            errors[name] = one_line(err)
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
    model cannot represent from the set for every model; ``count_as_miss`` and ``keep`` keep split
    classes (a model counts their images as misses) and drop seen and validation classes; ``error``
    raises. The files written under ``OUT/classes`` are the ones every cell reads."""
    policy = plan.recipe.missing_semantics
    if policy == "error":
        _check_error_policy(plan, missing, carved)
    result = ClassSets(kept={}, missing=missing)
    for set_name, wnids in sets.items():
        gone = missing[set_name]
        is_split = set_name in plan.splits
        if policy in MISSES and is_split:
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
            result.files[set_name] = write_classes(
                plan.out / "classes" / f"{set_name}.txt", result.kept[set_name]
            )
    return result


def label_space_prefix(split: str) -> str:
    """The class-set name of a split's distractors (``label_space: all`` or FILE)."""
    return f"label space of {split}"


TRAINING_FILE = "training.txt"


def write_training_classes(
    plan: Plan, features: Features, classes: ClassSets, trained: dict[str, tuple[Path, str]]
) -> list[str]:
    """The run's training classes (:func:`~imagenet_zsl.batch.calibration.run_training_classes`),
    written to ``OUT/classes/training.txt`` (every cell leaves them out of its label space, so a
    cell's label space is the same with and without GZSL); returns them."""
    models = {name: model_dir for name, (model_dir, _) in trained.items()}
    seen = run_training_classes(plan, features, models, classes.kept.get(SEEN_SET)).wnids
    classes.files[TRAINING_FILE] = write_classes(plan.out / "classes" / TRAINING_FILE, seen)
    return seen


def fix_label_spaces(
    plan: Plan, classes: ClassSets, trained: dict[str, tuple[Path, str]], seen: list[str]
) -> None:
    """``label_space: all`` or FILE: one label space per split for every model of it. The space is
    resolved once (the split's kept classes, less every class of the run's
    :func:`~imagenet_zsl.batch.calibration.run_training_classes`: what any model was trained on,
    the training features' and the backbone head's classes, the GZSL seen classes), and a
    distractor any of the split's models has no prototype for leaves it for all of them (listed;
    never an error: distractors are not test classes), unless ``missing_semantics: keep`` (it stays:
    a class the model never predicts). The result is written to
    ``OUT/classes/label_space.SPLIT.txt`` and passed to every cell as a FILE."""
    spec = plan.recipe.label_space
    if spec == "split":
        return
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
                for wnid in missing_prototypes(sources[spec_model.name], distractors):
                    gone.setdefault(wnid, []).append(spec_model.name)
        classes.missing[label_space_prefix(split)] = gone
        classes.space_full[split] = len(space)
        keep = plan.recipe.missing_semantics == "keep"
        final = [w for w in space if keep or w not in gone]
        classes.files[label_space_prefix(split)] = write_classes(
            plan.out / "classes" / f"label_space.{split}.txt", final
        )


def dropped_rows(plan: Plan, classes: ClassSets) -> list[dict[str, str]]:
    """One row per (class, set) some model cannot represent: what happened to it and which models."""
    rows = []
    policy = plan.recipe.missing_semantics
    for set_name, by_wnid in classes.missing.items():
        action = "dropped for every model"
        if policy in MISSES and set_name in plan.splits:
            action = "counted as miss"
        elif policy == "keep" and set_name.startswith(label_space_prefix("")):
            action = "kept in the label space (never predicted)"
        for wnid in sorted(by_wnid):
            rows.append(
                {
                    "wnid": wnid,
                    "set": set_name,
                    "action": action,
                    "models": ";".join(sorted(by_wnid[wnid])),
                    "why": "no prototype (no semantic vector)",
                }
            )
    return rows


def write_dropped(path: Path, rows: list[dict[str, str]]) -> Path:
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
    what = {
        "count_as_miss": "are counted as misses for the models that cannot score them (seen and "
        "validation classes left every model)",
        "keep": "stay in the label space, never predicted by the models that cannot score them, their "
        "test images counted as misses (seen and validation classes left every model)",
    }.get(policy, "left the evaluation of every model")
    return (
        f"missing_semantics: {policy}: {len(rows)} classes without a prototype in {', '.join(models)} "
        f"{what} ({where}); listed in {DROPPED_FILE}"
    )


def cell_classes(
    plan: Plan,
    classes: ClassSets,
    calibration: Calibration,
    trained: dict[str, tuple[Path, str]],
    gammas: dict[str, dict[str, Any]],
) -> dict[str, dict[str, CellClasses]]:
    """Per model and split, the files and counts its cell is evaluated with (``gammas``: the
    carved calibration's γ record per model; the cells then get no validation classes)."""
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
                val_file=None if calibration.carved else classes.files.get(CALIBRATION_SET),
                val_features=None if calibration.carved else calibration.features,
                label_space=str(classes.files.get(label_space_prefix(split), plan.recipe.label_space)),
                gamma=gammas.get(spec.name),
                training_file=classes.files.get(TRAINING_FILE),
                space_record=label_space_record(plan, classes, spec.name, split),
            )
    return out


def label_space_record(plan: Plan, classes: ClassSets, model: str, split: str) -> dict[str, Any]:
    """The cell record's ``label_space``: ``name`` (split, all, or the FILE's stem), ``full`` (the
    classes of the space before the policy: All is 20,842 with ILSVRC-2012 training), ``size`` (the
    classes each test image is ranked against, as a table names the space: ``full`` less those the
    policy removed for every model), ``without_vector`` (classes of ``full`` some model, or with
    ``count_as_miss``/``keep`` this model, has no prototype for: removed, counted as misses, or
    kept and never predicted) and ``missing_semantics``. With ``drop`` and a word-vector model, All
    is ``size`` 18,925 and ``without_vector`` 1,917; with ``keep`` ``size`` 20,842."""
    spec, policy = plan.recipe.label_space, plan.recipe.missing_semantics
    wnids = plan.split_wnids[split]
    outside = classes.missing.get(label_space_prefix(split), {})
    removed = set(wnids) - set(classes.kept[split])
    if policy != "keep":
        removed |= set(outside)
    lacking = set(classes.missed.get((model, split), ()))
    if policy in MISSES:
        lacking |= {w for w, models in outside.items() if model in models and w not in removed}
    full = classes.space_full.get(split, len(wnids))
    name = spec if spec in ("split", "all") else Path(spec).stem
    return {
        "name": name,
        "full": full,
        "size": full - len(removed),
        "without_vector": len(removed | lacking),
        "missing_semantics": policy,
    }


def attach_label_spaces(
    out: Path, records: dict[tuple[str, str], dict[str, Any]], cells: dict[str, dict[str, CellClasses]]
) -> None:
    """Each cell record gets its ``label_space`` (:func:`label_space_record`), in memory and in
    ``cells/NAME__SPLIT.json`` (rewritten, atomically, only when it lacks it)."""
    for (model, split), record in records.items():
        cell = cells.get(model, {}).get(split)
        if cell is None or record.get("label_space") == cell.space_record:
            continue
        record["label_space"] = cell.space_record
        atomic_write_json(out / "cells" / f"{Path(record['run']).name}.json", record)
