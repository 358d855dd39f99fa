"""``imagenet-zsl run``: train every model of a recipe once, evaluate it on every split, summarise.

Output directory (``--out DIR``)::

    DIR/manifest.json              format imagenet-zsl/run-v2 (manifests.write_manifest): the recipe as
                                   input, its config and --allow-feature-mismatch as parameters, the
                                   status, classes and provenance of every cell, the legend's notes,
                                   and "files": size and sha256 of every other file under DIR
    DIR/recipe.yaml                only for a run built from flags (``run --models ... --splits ...``,
                                   :mod:`~imagenet_zsl.batch.flags`): the recipe it ran, which
                                   ``run DIR/recipe.yaml --out OTHER`` runs again
    DIR/head-only/                 only with test features alone (no ``features.train``): the
                                   models' training directory, the test features' identity and
                                   backbone head, no image (:mod:`~imagenet_zsl.batch.head_only`)
    DIR/features/                  only with ``features: {simulate: ...}``: the SIMULATED features
    DIR/features.key.json          their cache key: the simulation config and its class lists' sha256
    DIR/test-images/               only with ``features.test: {store: ..., backbone: ...}``: the test
                                   images scored while extracted (:mod:`~imagenet_zsl.batch.fused`):
                                   classes.txt (every split's classes), planned/ (the planned images'
                                   labels and ids, the extraction's identity), scored/ (the extracted
                                   images' labels, ids, skipped list and manifest; no features)
    DIR/models/NAME/               each trained model (``imagenet-zsl train``'s directory)
    DIR/models/NAME.key.json       its cache key: digest of (config, features manifest, semantics)
    DIR/classes/                   the class lists every model shares: SPLIT.txt when classes were
                                   dropped, seen.txt (GZSL seen classes), calibration.txt (the
                                   validation classes choosing γ), seen_training.txt (the classes
                                   the calibration copies are fitted on when validation classes
                                   were carved out), training.txt (the run's training classes:
                                   never in a label space), label_space.SPLIT.txt (all/FILE)
    DIR/calibration/NAME/          carved GZSL calibration: each model's copy fitted without the
                                   validation classes; NAME.key.json its key, NAME.gamma.json the
                                   γ it chose (applied to the model NAME)
    DIR/timings.json               the seconds of each fit ("fit_seconds": {"models/NAME",
                                   "calibration/NAME"}); not hashed by the manifest, the one file
                                   whose bytes differ between two runs of the same recipe
    DIR/classes_dropped.csv        wnid, set, action, models: the classes some model cannot represent
    DIR/cells/NAME__SPLIT/         one run directory per (model, split) (the model's own ``splits:``
                                   if it names some), exactly as ``evaluate`` writes
    DIR/cells/NAME__SPLIT.json     the cell's record: status, error, classes, provenance, its
                                   ``label_space`` (name, size, classes without a vector), the key
                                   it was computed with and the sha256 of its manifest
    DIR/summary.{md,csv,tex}       models x splits table (:mod:`imagenet_zsl.batch.summary`); with
                                   --published the published rows beside it, and summary.bib
    DIR/hit_at_k.png               hit@K per split, one line per model
    DIR/.search-cache/             while the run lasts: each model's searches of the held-out seen
                                   and validation images in the seen and validation label spaces,
                                   made by its first cell and reused by its other splits' cells

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
an ``--out``: a lock file ``.NAME.lock`` next to it makes a second one refuse; it is removed when
the run ends, done or failed (:func:`~imagenet_zsl.batch.plan.run_lock`).

The run directory is a resumable workspace, so it is not replaced in one rename as other outputs
are (a killed run would lose its finished cells): every part of it is atomic instead (each model
and cell directory through ``safe_output.atomic_directory``, every file through a temp file and a rename),
and its manifest is written last, once the summary is in place.

Several processes, on one machine or many: ``torchrun --nproc_per_node N [--nnodes M] -m
imagenet_zsl.cli run RECIPE --out DIR``. Rank 0 checks everything, holds the lock and writes the
shared files; each model is trained by one rank, its first pending cell evaluated by that rank (it
fills the shared search cache), the other cells spread round-robin (:mod:`~imagenet_zsl.batch.
ranks`); the cells of the recipe's ``data_parallel`` splits are searched by every rank, a share of
the test shards each, and merged by one (:mod:`~imagenet_zsl.batch.parallel`); test images scored
while extracted are extracted and scored by every rank, a block of shards each, before any cell
(:mod:`~imagenet_zsl.batch.fused`); rank 0 writes the summary and the manifest once every rank
is done. Which rank computes a cell never changes its bytes, so the summary is the bytes of a
one-process run, and a finished cell is reused whichever rank, in whichever run, computed it: a
run resumes with any number of processes. (The scores' last bits depend on a process's BLAS thread
count, in any run: torchrun gives each process one thread unless ``OMP_NUM_THREADS`` says
otherwise.)

Stages, one module each: :mod:`~imagenet_zsl.batch.plan` (recipe, lock, features),
:mod:`~imagenet_zsl.batch.calibration` (provenance and the GZSL validation classes),
:mod:`~imagenet_zsl.batch.training` (models), :mod:`~imagenet_zsl.batch.classes` (the class
policy), :mod:`~imagenet_zsl.batch.cells` and :mod:`~imagenet_zsl.batch.records` (evaluating cells,
their records and resume), :mod:`~imagenet_zsl.batch.summary` (the table); this module runs them
and writes the run's manifest.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.backbones import check_same_images, merged_notes, merged_records, merged_result
from imagenet_zsl.batch.calibration import (
    COUNT,
    FIT,
    Calibration,
    calibration_specs,
    carved_gammas,
    check_provenance,
    check_training_overlap,
    plan_calibration,
)
from imagenet_zsl.batch.cells import CellPlan, RunContext, evaluate_cells, plan_cells, record_failures
from imagenet_zsl.batch.classes import (
    CALIBRATION_SET,
    DROPPED_FILE,
    SEEN_SET,
    CellClasses,
    ClassSets,
    apply_policy,
    attach_label_spaces,
    cell_classes,
    class_sets,
    dropped_rows,
    find_missing,
    fix_label_spaces,
    policy_note,
    write_dropped,
    write_training_classes,
)
from imagenet_zsl.batch.console import quiet_echo, run_console
from imagenet_zsl.batch.faults import one_line
from imagenet_zsl.batch.fused import score_while_extracting
from imagenet_zsl.batch.parallel import evaluate_data_parallel
from imagenet_zsl.batch.plan import (
    Features,
    Plan,
    RunResult,
    backbone_plans,
    cell_name,
    plan_run,
    resolve_features,
    run_lock,
    write_recipe,
)
from imagenet_zsl.batch.ranks import Ranks, cell_phases, job_ranks, owner
from imagenet_zsl.batch.recipe import RUN_TOOL, ModelSpec, Recipe
from imagenet_zsl.batch.summary import (
    SUMMARY_FILES,
    SummaryTable,
    coverage_notes,
    split_coverage,
    summary_tables,
    write_results,
    write_summary,
)
from imagenet_zsl.batch.training import Trained, train_models, write_timings
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import select_columns
from imagenet_zsl.evaluation.run.cache import shared_search
from imagenet_zsl.evaluation.run.verify import verify_run_directory
from imagenet_zsl.manifests import MANIFEST_NAME, file_record, read_manifest, write_manifest

#: 2: written by manifests.write_manifest ("files" for "outputs", "software"; recipe under "inputs",
#: config and allow_feature_mismatch under "parameters")
RUN_FORMAT = "imagenet-zsl/run-v2"
#: the run's shared search cache (each model's seen and validation searches, reused by its
#: cells on every split); removed before the summary, so never in the manifest
SHARED_CACHE = ".search-cache"

__all__ = ["RUN_FORMAT", "run"]


def run(
    recipe_path: str | Path | None,
    out: str | Path,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    allow_feature_mismatch: bool = False,
    *,
    recipe: Recipe | None = None,
    verbose: bool = True,
    table: SummaryTable | None = None,
) -> RunResult:
    """Validate, then train, fix the classes, evaluate and summarise (see the module docstring).

    ``recipe``: one built from the command line's flags instead of ``recipe_path`` (written to
    ``OUT/recipe.yaml``). ``verbose``: every stage's line through ``echo``; else only warnings,
    failures and the table (:mod:`~imagenet_zsl.batch.console`). ``table``: the summary's printed
    columns (``--columns``; None: the paper table, :mod:`imagenet_zsl.evaluation.columns`) and
    whether the published rows of the same splits stand beside the run's (``--published``,
    :mod:`imagenet_zsl.evaluation.published_compare`).

    Under torchrun (``WORLD_SIZE`` > 1) every process calls this: rank 0 checks, holds the lock
    and writes the shared files; models and cells are spread over the ranks
    (:mod:`imagenet_zsl.batch.ranks`)."""
    with job_ranks() as ranks, contextlib.ExitStack() as lock, run_console(verbose):
        shown = ranks.echo(echo)
        say = Say(shown, shown if verbose else quiet_echo(shown))

        def prepare() -> tuple[Plan, list[_Prepared]]:
            plan = plan_run(recipe_path, out, allow_feature_mismatch, recipe)
            chosen = table or SummaryTable()
            select_columns(chosen.columns, [], plan.recipe.ks, plan.recipe.gzsl)  # a typo: one line, first
            plan.columns, plan.published = chosen.columns, chosen.published
            lock.enter_context(run_lock(plan.out))
            write_recipe(plan)
            plans = backbone_plans(plan)
            if len(plans) == 1:
                return plan, [_prepare(plan)]
            plan.out.mkdir(parents=True, exist_ok=True)
            if read_manifest(plan.out) is None:
                _write_manifest(plan, records=[])  # marks --out as this run's before any work
            prepared = [_prepare(p) for p in plans]
            check_same_images(plans, [p.features for p in prepared])
            return plan, prepared

        top, prepared = ranks.first(prepare)
        show = progress and ranks.primary
        if len(prepared) == 1:
            return _run_prepared(ranks, prepared[0], show, say)
        return _run_backbones(ranks, top, prepared, show, say)


@dataclass(frozen=True)
class Say:
    """How a run speaks: ``echo`` the table and warnings, ``info`` the stages' lines (``echo``
    itself when verbose, else :func:`~imagenet_zsl.batch.console.quiet_echo` of it)."""

    echo: Callable[[str], None]
    info: Callable[[str], None]


def _run_backbones(ranks: Ranks, top: Plan, prepared: list[_Prepared], progress: bool, say: Say) -> RunResult:
    """Each backbone's run (its own table kept in its directory), then one table over all of them
    in ``OUT`` (:mod:`~imagenet_zsl.batch.backbones`)."""
    results = []
    for part in prepared:
        say.info(f"backbone {part.plan.backbone}:")
        results.append(_run_prepared(ranks, part, progress, say, show_table=False))
    plans = [part.plan for part in prepared]
    result = merged_result(top, plans, results, ranks.primary)
    if ranks.primary:
        records = merged_records(plans, results)
        _summarise(top, records, result, say.echo, merged_notes(plans, results, records), extra=[])
    return result


@dataclass
class _Prepared:
    """Rank 0's checks before any training, handed to every rank."""

    plan: Plan
    features: Features
    overrides: dict[str, Any]
    calibration: Calibration
    #: carved calibration: the copy of each trained model fitted without the validation classes
    copies: dict[str, ModelSpec]


@dataclass
class _Classes:
    """Rank 0's class policy, handed to every rank (``trained``/``errors``: a model that cannot
    give prototypes at all moved to the errors)."""

    trained: dict[str, tuple[Path, str]]
    errors: dict[str, str]
    cells: dict[str, dict[str, CellClasses]]
    note: str | None
    dropped: Path
    n_val: int
    #: carved calibration: the number of calibration copies (one more fit per model)
    fits: int = 0


def _prepare(plan: Plan) -> _Prepared:
    plan.out.mkdir(parents=True, exist_ok=True)
    if read_manifest(plan.out) is None:
        _write_manifest(plan, records=[])  # marks --out as this run's before any work
    features = resolve_features(plan)
    overrides = check_provenance(plan, features)
    check_training_overlap(plan, features)
    calibration = plan_calibration(plan, features)
    copies = calibration_specs(plan, features, calibration)
    return _Prepared(plan, features, overrides, calibration, copies)


def _run_prepared(
    ranks: Ranks, prepared: _Prepared, progress: bool, say: Say, show_table: bool = True
) -> RunResult:
    plan, features = prepared.plan, prepared.features
    result = RunResult(plan.out, primary=ranks.primary)
    done = _train(ranks, prepared, result, say.info)
    classes = ranks.first(lambda: _fix_classes(prepared, done, say))
    context = RunContext(plan, features, classes.cells, prepared.overrides)
    cells = ranks.first(lambda: plan_cells(context, classes.trained, classes.errors, say.info))
    result.skipped = list(cells.skipped)
    _evaluate(ranks, context, cells, result, progress, say.info)
    record_failures(cells.cells, cells.records, result)
    if ranks.primary:
        attach_label_spaces(plan.out, cells.records, classes.cells)
        shutil.rmtree(plan.out / SHARED_CACHE, ignore_errors=True)
        legend = prepared.calibration.legend.replace(COUNT, str(classes.n_val))
        legend = legend.replace(FIT, f"{classes.fits} calibration fits")
        records = [cells.records[c] for c in cells.cells]
        coverage = split_coverage(plan.split_wnids, plan.splits, features.evaluated)
        for record in records:  # the copy the user holds: the test features' classes of each list
            held = coverage.get(record["split"])
            record["coverage"] = None if held is None else {k: v for k, v in held.items() if k != "missing"}
        notes = [classes.note, legend, _label_space_note(plan, records), _override_note(prepared.overrides)]
        notes += coverage_notes(coverage)
        result.records, result.notes = records, [n for n in notes if n]
        shown = say.echo if show_table else (lambda _: None)
        _summarise(plan, records, result, shown, result.notes, extra=[classes.dropped])
    return result


def _train(ranks: Ranks, prepared: _Prepared, result: RunResult, echo: Callable[[str], None]) -> Trained:
    """Every model (and its calibration copy) trained or loaded by the rank owning it; the outcomes
    handed to every rank, in the plan's order."""
    plan = prepared.plan

    def owns(index: int) -> bool:
        return owner(index, ranks.world) == ranks.rank

    mine = train_models(plan, prepared.features, echo, prepared.copies, owns)
    done = Trained()
    for part in ranks.gather(mine):
        done.models.update(part.models)
        done.errors.update(part.errors)
        done.calibration.update(part.calibration)
        done.fresh.extend(part.fresh)
        done.fit_seconds.update(part.fit_seconds)
    if ranks.primary:
        write_timings(plan.out, done.fit_seconds)
    names = [spec.name for spec in plan.models]
    result.trained = [n for n in names if n in done.fresh]
    done.models = {n: done.models[n] for n in names if n in done.models}
    done.errors = {n: done.errors[n] for n in names if n in done.errors}
    return done


def _fix_classes(prepared: _Prepared, done: Trained, say: Say) -> _Classes:
    """The class policy: every model of a split gets the same classes (written under OUT/classes);
    then, with a carved calibration, the γ of every model (a model whose γ cannot be chosen fails
    like one that cannot be trained)."""
    plan, features, calibration = prepared.plan, prepared.features, prepared.calibration
    trained, errors = dict(done.models), dict(done.errors)
    sets = class_sets(plan, features, calibration)
    classes = apply_policy(plan, sets, find_missing(plan, sets, trained, errors), calibration.carved)
    seen = write_training_classes(plan, features, classes, trained)
    fix_label_spaces(plan, classes, trained, seen)
    rows = dropped_rows(plan, classes)
    dropped = write_dropped(plan.out / DROPPED_FILE, rows)
    note = policy_note(plan, rows)
    if note:
        say.echo(f"warning: {note}")
    gammas: dict[str, dict[str, Any]] = {}
    if calibration.carved:
        copies = {n: done.calibration[n] for n in trained if n in done.calibration}
        gammas = _carved_gammas(plan, features, calibration, classes, copies, errors, say.echo)
        trained = {n: trained[n] for n in trained if n in gammas}
    cells = cell_classes(plan, classes, calibration, trained, gammas)
    n_val = len(classes.kept.get(CALIBRATION_SET, ()))
    return _Classes(trained, errors, cells, note, dropped, n_val, len(done.calibration))


def _carved_gammas(
    plan: Plan,
    features: Features,
    calibration: Calibration,
    classes: ClassSets,
    copies: dict[str, Path],
    errors: dict[str, str],
    echo: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Each model's γ, chosen by its calibration copy on the classes the policy kept; a failure is
    the model's error (its cells fail), the others go on."""
    val = Calibration(classes.kept.get(CALIBRATION_SET, []), calibration.features, True, "", calibration.seed)
    gammas: dict[str, dict[str, Any]] = {}
    for name, copy in copies.items():
        try:
            gammas.update(carved_gammas(plan, features, val, classes.kept[SEEN_SET], {name: copy}))
        except Exception as err:  # isolated: recorded, shown as failed, the others still run
            errors[name] = f"GZSL calibration failed: {one_line(err)}"
            echo(f"model {name}: {errors[name]}")
    return gammas


def _evaluate(
    ranks: Ranks,
    context: RunContext,
    cells: CellPlan,
    result: RunResult,
    progress: bool,
    echo: Callable[[str], None],
) -> None:
    """The pending cells, phase by phase (:func:`~imagenet_zsl.batch.ranks.cell_phases`), each
    rank its own, then the cells of the ``data_parallel`` splits one by one with every rank
    (:mod:`~imagenet_zsl.batch.parallel`); every record handed to every rank (``cells.records``,
    ``result.evaluated``)."""
    models = [spec.name for spec in context.plan.models]
    parallel = set(context.plan.recipe.data_parallel) if ranks.world > 1 else set()
    records: dict[tuple[str, str], dict[str, Any]] = {}
    if context.features.scored is not None:  # test images scored while extracted, before any cell
        score_while_extracting(context, cells.pending, ranks, echo)
    with shared_search(context.plan.out / SHARED_CACHE):
        alone = [cell for cell in cells.pending if cell[1] not in parallel]
        phases = cell_phases(alone, models, ranks.world)
        if ranks.world == 1:  # one process: the phases in order, under one progress bar
            phases = [[[cell for phase in phases for cell in phase[0]]]]
        for phase in phases:
            records.update(evaluate_cells(context, phase[ranks.rank], result, progress, echo))
            ranks.barrier()
        together = [cell for cell in cells.pending if cell[1] in parallel]
        records.update(evaluate_data_parallel(context, together, ranks, result, echo))
    evaluated: set[str] = set()
    for part_records, part_evaluated in ranks.gather((records, result.evaluated)):
        cells.records.update(part_records)
        evaluated.update(part_evaluated)
    result.evaluated = [cell_name(*c) for c in cells.cells if cell_name(*c) in evaluated]


def _label_space_note(plan: Plan, records: list[dict[str, Any]]) -> str:
    """What the label space is, and per split the classes in it / those with test images (as the
    cells counted them: the legend never says 'All' over a space that collapsed)."""
    space = plan.recipe.label_space
    what = {
        "split": "the split's classes",
        "all": "every ImageNet-21K class that is not a training class of the run (a class any model "
        "was fitted on, the training features' and the backbone head's classes, the GZSL seen classes; "
        "classes/training.txt), 20,842 with ILSVRC-2012 training (the 'All' protocol)",
    }.get(space, f"the classes of {space}")
    counts: dict[str, set[str]] = {}
    for record in records:
        found = record.get("classes") or {}
        if record.get("status") == "ok" and found.get("in_label_space") is not None:
            counts.setdefault(record["split"], set()).add(
                f"{found['in_label_space']}/{found['with_test_images']}"
            )
    sizes = "; ".join(f"{split} {', '.join(sorted(n))}" for split, n in counts.items())
    sizes = f"; classes in the label space / with test images: {sizes}" if sizes else ""
    where = f"{plan.recipe_path}: label_space = {space}"
    return f"label space ({where}): test images are ranked against {what}{sizes}"


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
    rows, results, table_notes = summary_tables(plan.out, records, plan.recipe.ks, plan.recipe.gzsl)
    notes = [*notes, *table_notes]
    published = results if plan.published else None
    result.table, paths = write_summary(rows, plan.out, plan.recipe.ks, notes, plan.columns, published)
    paths += write_results(plan.out, records, results)
    _write_manifest(plan, records, notes)
    result.files = [plan.out / MANIFEST_NAME, *paths, *extra]
    echo(result.table)  # its notes say which cells are not zero-shot (pretraining labels)


def _write_manifest(plan: Plan, records: list[dict[str, Any]], notes: list[str] | None = None) -> None:
    """The run's manifest, written last: every cell's status and provenance, the notes, and the
    size and sha256 of every file under the run (an ``ok`` cell's files from its verified manifest)."""
    write_manifest(
        plan.out,
        format=RUN_FORMAT,
        tool=RUN_TOOL,
        inputs={"recipe": file_record(plan.recipe_path)},
        parameters={
            "config": plan.recipe.as_dict(),
            "allow_feature_mismatch": plan.allow_feature_mismatch,
            "columns": plan.columns,
            "published": plan.published,
        },
        fields={
            "cells": [
                {k: r[k] for k in ("model", "split", "status", "error", "run")}
                | {"classes": r["classes"], "provenance": r.get("provenance")}
                | {"calibration": r.get("calibration"), "backbone": r.get("backbone")}
                | {"label_space": r.get("label_space")}
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
