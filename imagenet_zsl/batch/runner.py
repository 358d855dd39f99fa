"""``imagenet-zsl run``: train every model of a recipe once, evaluate it on every split, summarise.

Output directory (``--out DIR``)::

    DIR/manifest.json              format imagenet-zsl/run-v1, tool "imagenet-zsl run", the recipe,
                                   the status of every cell and the sha256 of every summary file
    DIR/features/                  only with ``features: {simulate: ...}``: the SIMULATED features
    DIR/features.key.json          their cache key: the simulation config and its class lists' sha256
    DIR/models/NAME/               each trained model (``imagenet-zsl train``'s directory)
    DIR/models/NAME.key.json       its cache key: digest of (config, features manifest, semantics)
    DIR/classes/NAME/SPLIT.txt     the classes evaluated when ``missing_semantics: drop`` dropped some
    DIR/cells/NAME__SPLIT/         one run directory per (model, split) (the model's own ``splits:``
                                   if it names some), exactly as ``evaluate`` writes
    DIR/cells/NAME__SPLIT.json     the cell's record: status, error, classes evaluated / in the split,
                                   the excluded wnids, and the key it was computed with
    DIR/summary.{md,csv,tex}       models x splits table (:mod:`imagenet_zsl.batch.summary`)
    DIR/hit_at_k.png               hit@K per split, one line per model

Resumable: a model whose key file matches is not trained again, and a cell whose record says ``ok``
with the same key is skipped, so a re-run after a kill only does what is left (same bytes).
Failures are isolated: a model that fails to train, or a cell that fails to evaluate, is recorded
with its error and shown as failed in the table; the other cells still run and the command exits 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from imagenet_zsl.batch.recipe import (
    RUN_FORMAT,
    RUN_TOOL,
    FeatureDirs,
    ModelSpec,
    Recipe,
    check_features,
    check_model_splits,
    input_paths,
    load_recipe,
    model_specs,
    split_paths,
)
from imagenet_zsl.batch.summary import SUMMARY_FILES, pretraining_warnings, summary_rows, write_summary
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.queries import ModelDirectory
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate, representable_classes
from imagenet_zsl.features.shards import shared_blocks
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
from imagenet_zsl.models.training import train
from imagenet_zsl.splits.io import read_wnid_list

log = logging.getLogger(__name__)

CELL_FORMAT = "imagenet-zsl/run-cell-v1"
#: bump when a cell's outputs change for the same inputs, so old cells are recomputed
CELL_VERSION = 1


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
    val_wnids: list[str] | None = None


@dataclass
class RunResult:
    """What one ``run`` did: the models it trained, the cells it evaluated, skipped and lost."""

    out: Path
    trained: list[str] = field(default_factory=list)
    evaluated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    table: str = ""


def _digest(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def cell_name(model: str, split: str) -> str:
    """Directory name of the (model, split) cell."""
    return f"{model}__{split}"


# ----------------------------------------------------------------------------- planning


def plan_run(recipe_path: str | Path, out: str | Path) -> Plan:
    """Validate the recipe and every input it names; nothing is written."""
    recipe_path = Path(recipe_path)
    recipe = load_recipe(recipe_path)
    where = str(recipe_path)
    splits = split_paths(recipe, where)
    models = model_specs(recipe, where)
    check_model_splits(models, splits, where)
    check_features(recipe, splits, where)
    split_wnids = {}
    for name, path in splits.items():
        split_wnids[name] = read_wnid_list(path)
        if not split_wnids[name]:
            raise UserInputError(f"{path}: split {name!r} is empty; it needs one class wnid per line")
    val_wnids = None
    if recipe.calibration is not None:
        if not recipe.gzsl:
            raise UserInputError(f"calibration chooses the GZSL γ ({where}: calibration): add 'gzsl: true'")
        if not Path(recipe.calibration.classes).is_file():
            raise UserInputError(
                f"{recipe.calibration.classes}: validation classes not found ({where}: calibration.classes)"
            )
        val_wnids = read_wnid_list(recipe.calibration.classes)
    plan = Plan(recipe, recipe_path, Path(out), splits, split_wnids, models, val_wnids)
    plan.out = check_out_dir(out, RUN_TOOL, input_paths(recipe, recipe_path, splits, models))
    return plan


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


# ----------------------------------------------------------------------------- class policy


@dataclass
class CellClasses:
    """The classes a cell evaluates: the split file to pass and the excluded wnids."""

    model_dir: Path
    split_file: Path
    evaluated: int
    total: int
    excluded: list[str]
    val_file: Path | None = None


def _kept(source: ModelDirectory, wnids: list[str], what: str) -> tuple[list[str], list[str]]:
    try:
        return representable_classes(source, wnids)
    except UserInputError:
        raise UserInputError(
            f"no class of {what} has a prototype; check the model's class semantics"
        ) from None


def apply_policy(plan: Plan, spec: ModelSpec, model_dir: Path) -> dict[str, CellClasses]:
    """Per split of the model, the classes ``model_dir`` can represent; ``missing_semantics: error``
    raises."""
    name = spec.name
    recipe = plan.recipe
    source = ModelDirectory(model_dir)
    out: dict[str, CellClasses] = {}
    val_file = Path(recipe.calibration.classes) if recipe.calibration is not None else None
    if plan.val_wnids is not None and val_file is not None:
        kept, excluded = _kept(source, plan.val_wnids, f"the validation classes {val_file}")
        _check_policy(plan, name, val_file.stem, excluded)
        if excluded:
            val_file = _write_classes(plan.out / "classes" / name / f"{val_file.stem}.txt", kept)
    for split, wnids in plan.split_wnids.items():
        if not spec.evaluates(split):
            continue
        kept, excluded = _kept(source, wnids, f"split {split}")
        _check_policy(plan, name, split, excluded)
        split_file = plan.splits[split]
        if excluded:
            split_file = _write_classes(plan.out / "classes" / name / f"{split}.txt", kept)
        out[split] = CellClasses(model_dir, split_file, len(kept), len(wnids), excluded, val_file)
    return out


class MissingSemanticsError(UserInputError):
    """``missing_semantics: error`` and a model cannot represent some classes: stops the run."""


def _check_policy(plan: Plan, name: str, split: str, excluded: list[str]) -> None:
    if excluded and plan.recipe.missing_semantics == "error":
        raise MissingSemanticsError(
            f"model {name!r} cannot represent {len(excluded)} classes of {split!r} (no semantic vector): "
            f"{preview(excluded)}; set 'missing_semantics: drop' ({plan.recipe_path}: missing_semantics) "
            "or use other semantics"
        )


def _write_classes(path: Path, wnids: list[str]) -> Path:
    return atomic_write_text(path, "".join(f"{w}\n" for w in wnids))


# ----------------------------------------------------------------------------- cells


def cell_key(plan: Plan, features: Features, model_digest: str, split: str, classes: CellClasses) -> str:
    """Everything a cell's bytes depend on; a finished cell with this key is skipped."""
    recipe = plan.recipe
    return _digest(
        {
            "version": CELL_VERSION,
            "model": model_digest,
            "split": sha256_file(classes.split_file),
            "validation": None if classes.val_file is None else sha256_file(classes.val_file),
            "test_features": sha256_file(features.test[split] / MANIFEST_NAME),
            "seen_features": None
            if features.seen is None or not recipe.gzsl
            else sha256_file(features.seen / MANIFEST_NAME),
            "settings": recipe.model_dump(
                mode="json", include={"ks", "gzsl", "calibration", "graph", "label_frequency", "plots"}
            ),
        }
    )


def _finished(record_path: Path, key: str) -> bool:
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return False
    cell_dir = record_path.with_suffix("")
    return record.get("status") == "ok" and record.get("key") == key and (cell_dir / MANIFEST_NAME).is_file()


def evaluate_cell(plan: Plan, features: Features, model: str, split: str, classes: CellClasses) -> None:
    """Write the cell's run directory with ``evaluate`` (atomic: all or nothing)."""
    recipe = plan.recipe
    calibration = recipe.calibration
    model_dir = classes.model_dir
    cfg = EvaluationConfig(
        features=features.test[split],
        split=classes.split_file,
        out=plan.out / "cells" / cell_name(model, split),
        model=model_dir,
        ks=list(recipe.ks),
        gzsl=recipe.gzsl,
        seen_features=features.seen if recipe.gzsl else None,
        val_split=classes.val_file,
        val_features=Path(calibration.features) if calibration and calibration.features else None,
        graph=recipe.graph,
        label_frequency=recipe.label_frequency,
        plots=recipe.plots,
    )
    evaluate(cfg, progress=False)


def _record(plan: Plan, model: str, split: str, **fields: Any) -> dict[str, Any]:
    total = len(plan.split_wnids[split])
    record = {
        "format": CELL_FORMAT,
        "tool": RUN_TOOL,
        "model": model,
        "split": split,
        "run": f"cells/{cell_name(model, split)}",
        "classes": {"in_split": total, "evaluated": None, "excluded": []},
        "status": "failed",
        "error": None,
        "key": None,
    }
    record.update(fields)
    return record


# ----------------------------------------------------------------------------- the run


def run(
    recipe_path: str | Path,
    out: str | Path,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> RunResult:
    """Validate, then train, evaluate and summarise (see the module docstring); returns what it did."""
    plan = plan_run(recipe_path, out)
    result = RunResult(plan.out)
    plan.out.mkdir(parents=True, exist_ok=True)
    if read_manifest(plan.out) is None:
        _write_manifest(plan, records=[], outputs=[])
    features = resolve_features(plan)
    trained: dict[str, tuple[Path, str]] = {}
    errors: dict[str, str] = {}
    for spec in plan.models:
        tic = time.perf_counter()
        try:
            model_dir, digest, fresh = ensure_model(spec, features, plan.out)
        except Exception as err:  # isolated: the model's cells are reported as failed
            errors[spec.name] = f"training failed: {_one_line(err)}"
            echo(f"model {spec.name}: {errors[spec.name]}")
            continue
        trained[spec.name] = (model_dir, digest)
        if fresh:
            result.trained.append(spec.name)
            echo(f"model {spec.name}: trained in {time.perf_counter() - tic:.1f} s")
    classes = {}
    specs = {spec.name: spec for spec in plan.models}
    for name, (model_dir, _) in list(trained.items()):
        try:
            classes[name] = apply_policy(plan, specs[name], model_dir)
        except MissingSemanticsError:
            raise
        except Exception as err:  # e.g. a model that cannot give prototypes: its cells fail
            errors[name] = _one_line(err)
            del trained[name]
    records = _run_cells(plan, features, trained, classes, errors, result, progress, echo)
    _summarise(plan, records, result, echo)
    return result


def _run_cells(
    plan: Plan,
    features: Features,
    trained: dict[str, tuple[Path, str]],
    classes: dict[str, dict[str, CellClasses]],
    errors: dict[str, str],
    result: RunResult,
    progress: bool,
    echo: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Evaluate every (model, split) cell not finished yet; returns every cell's record."""
    cells = [(spec.name, split) for spec in plan.models for split in plan.splits if spec.evaluates(split)]
    pending = []
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for model, split in cells:
        record_path = plan.out / "cells" / f"{cell_name(model, split)}.json"
        if model in errors:
            records[model, split] = _record(plan, model, split, error=errors[model])
            atomic_write_json(record_path, records[model, split])
            continue
        model_dir, digest = trained[model]
        key = cell_key(plan, features, digest, split, classes[model][split])
        if _finished(record_path, key):
            records[model, split] = json.loads(record_path.read_text())
            result.skipped.append(cell_name(model, split))
        else:
            pending.append((model, split, key, record_path))
    echo(f"{len(cells)} cells: {len(result.skipped)} already done, {len(pending)} to evaluate")
    # split by split, so every model of a split reads its test features once (kept in memory up
    # to the recipe's feature_memory_gb; larger splits are streamed once per model)
    split_rank = {split: i for i, split in enumerate(plan.splits)}
    pending.sort(key=lambda cell: split_rank[cell[1]])
    start = time.perf_counter()
    bar = tqdm(pending, desc="cells", unit="cell", disable=not progress)
    sharing: contextlib.ExitStack | None = None
    current_split = None
    for done, (model, split, key, record_path) in enumerate(bar):
        if split != current_split:
            if sharing is not None:
                sharing.close()
            sharing = contextlib.ExitStack()
            sharing.enter_context(shared_blocks(int(plan.recipe.feature_memory_gb * 2**30)))
            current_split = split
        bar.set_postfix_str(cell_name(model, split))
        cell = classes[model][split]
        counts = {"in_split": cell.total, "evaluated": cell.evaluated, "excluded": cell.excluded}
        try:
            evaluate_cell(plan, features, model, split, cell)
            record = _record(plan, model, split, classes=counts, status="ok", key=key)
            result.evaluated.append(cell_name(model, split))
        except Exception as err:  # isolated: recorded, shown as failed, the others still run
            record = _record(plan, model, split, classes=counts, error=_one_line(err), key=key)
            echo(f"cell {cell_name(model, split)} failed: {record['error']}")
        atomic_write_json(record_path, record)
        records[model, split] = record
        if not progress:
            elapsed = time.perf_counter() - start
            left = elapsed / (done + 1) * (len(pending) - done - 1)
            echo(
                f"  {done + 1}/{len(pending)} {cell_name(model, split)} {record['status']}; ETA {left:.0f} s"
            )
    if sharing is not None:
        sharing.close()
    result.failed = [cell_name(m, s) for (m, s), r in records.items() if r["status"] != "ok"]
    return [records[c] for c in cells]


def _summarise(
    plan: Plan, records: list[dict[str, Any]], result: RunResult, echo: Callable[[str], None]
) -> None:
    rows = summary_rows(plan.out, records, plan.recipe.ks, plan.recipe.gzsl)
    result.table, paths = write_summary(rows, plan.out, plan.recipe.ks)
    outputs = [file_record(p, plan.out) for p in paths]
    _write_manifest(plan, records, outputs)
    result.files = [plan.out / MANIFEST_NAME, *paths]
    echo(result.table)
    for line in pretraining_warnings(rows):
        echo(f"warning: {line}")


def _write_manifest(plan: Plan, records: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> None:
    atomic_write_json(
        plan.out / MANIFEST_NAME,
        {
            "format": RUN_FORMAT,
            "tool": RUN_TOOL,
            "recipe": {"path": str(plan.recipe_path), "sha256": sha256_file(plan.recipe_path)},
            "config": plan.recipe.as_dict(),
            "cells": [
                {k: r[k] for k in ("model", "split", "status", "error", "run")} | {"classes": r["classes"]}
                for r in records
            ],
            "outputs": outputs,
            "summary_files": list(SUMMARY_FILES),
        },
    )
