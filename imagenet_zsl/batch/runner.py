"""``imagenet-zsl run``: train every model of a recipe once, evaluate it on every split, summarise.

Output directory (``--out DIR``)::

    DIR/manifest.json              format imagenet-zsl/run-v2 (io.write_manifest): the recipe as
                                   input, its config and --allow-feature-mismatch as parameters, the
                                   status, classes and provenance of every cell, the legend's notes,
                                   and "files": size and sha256 of every other file under DIR
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

The run directory is a resumable workspace, so it is not replaced in one rename as other outputs
are (a killed run would lose its finished cells): every part of it is atomic instead (each model
and cell directory through ``io.atomic_directory``, every file through a temp file and a rename),
and its manifest is written last, once the summary is in place.

Stages, one module each: :mod:`~imagenet_zsl.batch.plan` (recipe, lock, features),
:mod:`~imagenet_zsl.batch.calibration` (provenance and the GZSL validation classes),
:mod:`~imagenet_zsl.batch.training` (models), :mod:`~imagenet_zsl.batch.classes` (the class
policy), :mod:`~imagenet_zsl.batch.cells` and :mod:`~imagenet_zsl.batch.records` (evaluating cells,
their records and resume), :mod:`~imagenet_zsl.batch.summary` (the table); this module runs them
and writes the run's manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.calibration import COUNT, check_provenance, plan_calibration
from imagenet_zsl.batch.cells import RunContext, run_cells
from imagenet_zsl.batch.classes import (
    CALIBRATION_SET,
    DROPPED_FILE,
    apply_policy,
    cell_classes,
    class_sets,
    dropped_rows,
    find_missing,
    fix_label_spaces,
    policy_note,
    write_dropped,
)
from imagenet_zsl.batch.plan import Plan, RunResult, plan_run, resolve_features, run_lock
from imagenet_zsl.batch.recipe import RUN_TOOL
from imagenet_zsl.batch.summary import SUMMARY_FILES, pretraining_warnings, summary_rows, write_summary
from imagenet_zsl.batch.training import train_models
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.report import verify_run_directory
from imagenet_zsl.io import MANIFEST_NAME, file_record, read_manifest, write_manifest

#: 2: written by io.write_manifest ("files" for "outputs", "software"; recipe under "inputs",
#: config and allow_feature_mismatch under "parameters")
RUN_FORMAT = "imagenet-zsl/run-v2"

__all__ = ["RUN_FORMAT", "run"]


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
        _write_manifest(plan, records=[])  # marks --out as this run's before any work
    features = resolve_features(plan)
    overrides = check_provenance(plan, features)
    calibration = plan_calibration(plan, features)
    trained, errors = train_models(plan, features, result, echo)
    sets = class_sets(plan, features, calibration)
    classes = apply_policy(plan, sets, find_missing(plan, sets, trained, errors), calibration.carved)
    fix_label_spaces(plan, features, classes, trained)
    rows = dropped_rows(plan, classes)
    dropped_path = write_dropped(plan.out / DROPPED_FILE, rows)
    note = policy_note(plan, rows)
    if note:
        echo(f"warning: {note}")
    context = RunContext(plan, features, cell_classes(plan, classes, calibration, trained), overrides)
    records = run_cells(context, trained, errors, result, progress, echo)
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
    _write_manifest(plan, records, notes)
    result.files = [plan.out / MANIFEST_NAME, *paths, *extra]
    echo(result.table)
    for line in pretraining_warnings(rows):
        echo(f"warning: {line}")


def _write_manifest(plan: Plan, records: list[dict[str, Any]], notes: list[str] | None = None) -> None:
    """The run's manifest, written last: every cell's status and provenance, the notes, and the
    size and sha256 of every file under the run (an ``ok`` cell's files from its verified manifest)."""
    write_manifest(
        plan.out,
        format=RUN_FORMAT,
        tool=RUN_TOOL,
        inputs={"recipe": file_record(plan.recipe_path)},
        parameters={"config": plan.recipe.as_dict(), "allow_feature_mismatch": plan.allow_feature_mismatch},
        fields={
            "cells": [
                {k: r[k] for k in ("model", "split", "status", "error", "run")}
                | {"classes": r["classes"], "provenance": r.get("provenance")}
                for r in records
            ],
            "notes": notes or [],
            "summary_files": [*SUMMARY_FILES, DROPPED_FILE],
        },
        known_sha256=_cell_hashes(plan.out, records),
    )


def _cell_hashes(out: Path, records: list[dict[str, Any]]) -> dict[str, str]:
    """relative path -> sha256 of the files of every ``ok`` cell, from its manifest: this run fully
    verified the cell (a reused one) or just wrote it, so its gigabytes of top-k lists are not hashed
    again (the verifier checks their sizes here). A cell that no longer verifies is hashed anew."""
    known: dict[str, str] = {}
    for record in records:
        if record.get("status") != "ok":
            continue
        try:
            manifest = verify_run_directory(out / record["run"])
        except UserInputError:
            continue
        known[f"{record['run']}/{MANIFEST_NAME}"] = str(record["manifest_sha256"])
        known.update({f"{record['run']}/{entry['path']}": entry["sha256"] for entry in manifest["files"]})
    return known
