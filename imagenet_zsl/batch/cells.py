"""Evaluating a run's cells: every (model, split) not finished yet, split by split (so every model
of a split reads its test features once), each written by ``evaluate`` into its own atomic run
directory and recorded; a failing cell is recorded and the others still run."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from imagenet_zsl.atomic import atomic_write_json
from imagenet_zsl.batch.classes import CellClasses
from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import Features, Plan, RunResult, cell_name
from imagenet_zsl.batch.records import cell_key, cell_record, class_vectors, finished_record
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import overwriting
from imagenet_zsl.evaluation.run import VAL_SEEN_FRACTION, EvaluationConfig, evaluate
from imagenet_zsl.evaluation.run.verify import METRICS_NAME
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.identity import describe_identity
from imagenet_zsl.features.shared_blocks import shared_blocks
from imagenet_zsl.manifests import MANIFEST_NAME


def cell_config(
    plan: Plan, features: Features, model: str, split: str, classes: CellClasses
) -> EvaluationConfig:
    """What ``evaluate`` gets for the cell (its run directory: ``cells/NAME__SPLIT``)."""
    recipe = plan.recipe
    given = classes.gamma
    return EvaluationConfig(
        features=features.evaluated(split),
        split=classes.split_file,
        out=plan.out / "cells" / cell_name(model, split),
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
        keep_without_prototype=recipe.missing_semantics == "keep",
        training_classes=classes.training_file,
        allow_feature_mismatch=plan.allow_feature_mismatch,
        gamma=None if given is None else given["gamma"],
        gamma_source=given,
        hold_calibration_rows=given is not None,
        val_seen_fraction=VAL_SEEN_FRACTION,
        seed=int(given["seen_rows"]["seed"]) if given is not None else _listed_seed(recipe.calibration),
    )


def _listed_seed(calibration: Any) -> int:
    """The seed of the held-out seen rows that choose γ with listed validation classes: the
    recipe's ``calibration.seed`` (0 without a calibration block)."""
    return int(calibration.seed) if calibration not in (None, False) else 0


def label_space_counts(cell_dir: Path) -> dict[str, int | None]:
    """The cell's ``in_label_space`` (classes each test image is ranked against) and
    ``with_test_images`` (of them, the classes with test images), from its metrics.json."""
    try:
        space = json.loads((cell_dir / METRICS_NAME).read_text())["label_space"]
        return {
            "in_label_space": int(space["classes_in_label_space"]),
            "with_test_images": int(space["classes_with_test_images"]),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {"in_label_space": None, "with_test_images": None}


def evaluate_cell(plan: Plan, features: Features, model: str, split: str, classes: CellClasses) -> Path:
    """Write the cell's run directory with ``evaluate`` (atomic: all or nothing); returns it."""
    cfg = cell_config(plan, features, model, split, classes)
    with overwriting():  # the run's own cell: recomputed when its files no longer match (records.py)
        evaluate(cfg, progress=False)
    return Path(cfg.out)


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


#: a cell left to evaluate: (model, split, its key, its record's path)
PendingCell = tuple[str, str, str, Path]


@dataclass
class CellPlan:
    """The cells of a run: every cell (plan order), the records of failed models' and finished
    cells, the cells left to evaluate (split by split) and the finished ones skipped."""

    cells: list[tuple[str, str]]
    records: dict[tuple[str, str], dict[str, Any]]
    pending: list[PendingCell]
    skipped: list[str]


def plan_cells(
    context: RunContext,
    trained: dict[str, tuple[Path, str]],
    errors: dict[str, str],
    echo: Callable[[str], None],
) -> CellPlan:
    """Which cells are finished (reused), failed with their model, or left to evaluate; writes the
    records of failed models' cells."""
    plan = context.plan
    cells = [(spec.name, split) for spec in plan.models for split in plan.splits if spec.evaluates(split)]
    pending = []
    skipped = []
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for model, split in cells:
        record_path = plan.out / "cells" / f"{cell_name(model, split)}.json"
        if model in errors:
            records[model, split] = cell_record(plan, model, split, error=errors[model])
            atomic_write_json(record_path, records[model, split])
            continue
        key = cell_key(plan, context.features, trained[model][1], split, context.classes[model][split])
        record, problem = finished_record(record_path, key)
        if record is not None:
            records[model, split] = record
            skipped.append(cell_name(model, split))
            continue
        if problem:
            echo(f"cell {cell_name(model, split)}: computing it again: {problem}")
        pending.append((model, split, key, record_path))
    # split by split, so every model of a split reads its test features once (kept in memory up
    # to the recipe's feature_memory_gb; larger splits are streamed once per model)
    split_rank = {split: i for i, split in enumerate(plan.splits)}
    pending.sort(key=lambda cell: split_rank[cell[1]])
    echo(f"{len(cells)} cells: {len(skipped)} already done, {len(pending)} to evaluate")
    return CellPlan(cells, records, pending, skipped)


def _evaluate_one(
    context: RunContext, model: str, split: str, key: str, result: RunResult, echo: Callable[[str], None]
) -> dict[str, Any]:
    """Evaluate one cell and return its record (a failure is recorded, a full disk stops the run)."""
    plan = context.plan
    cell = context.classes[model][split]
    counts: dict[str, Any] = {
        "in_split": cell.total,
        "evaluated": cell.evaluated,
        "excluded": cell.excluded,
        "missed": cell.missed,
        "in_label_space": None,
        "with_test_images": None,
    }
    name = cell_name(model, split)
    origin = {
        "backbone": context.backbone(split),
        "class_vectors": class_vectors(cell.model_dir),
        "feature_override": context.overrides.get(name),
    }
    try:
        cell_dir = evaluate_cell(plan, context.features, model, split, cell)
        manifest_sha256 = sha256_file(cell_dir / MANIFEST_NAME)
        result.evaluated.append(name)
        counts.update(label_space_counts(cell_dir))
        return cell_record(
            plan,
            model,
            split,
            classes=counts,
            provenance=origin,
            calibration=cell.gamma,
            status="ok",
            key=key,
            manifest_sha256=manifest_sha256,
        )
    except Exception as err:  # isolated: recorded, shown as failed, the others still run
        stop_on_fatal(err, plan.out / "cells" / name)
        record = cell_record(
            plan,
            model,
            split,
            classes=counts,
            provenance=origin,
            calibration=cell.gamma,
            error=one_line(err),
            key=key,
        )
        echo(f"cell {name} failed: {record['error']}")
        return record


def evaluate_cells(
    context: RunContext,
    todo: list[PendingCell],
    result: RunResult,
    progress: bool,
    echo: Callable[[str], None],
) -> dict[tuple[str, str], dict[str, Any]]:
    """Evaluate the cells ``todo`` (split by split) and write their records; returns them."""
    plan = context.plan
    records: dict[tuple[str, str], dict[str, Any]] = {}
    start = time.perf_counter()
    bar = tqdm(todo, desc="cells", unit="cell", disable=not progress)
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
                left = elapsed / (done + 1) * (len(todo) - done - 1)
                echo(
                    f"  {done + 1}/{len(todo)} {cell_name(model, split)} {record['status']}; ETA {left:.0f} s"
                )
    return records


def record_failures(
    cells: list[tuple[str, str]], records: dict[tuple[str, str], dict[str, Any]], result: RunResult
) -> None:
    """``result.errors`` / ``failed``: every cell not ``ok``, in cell order, with its error."""
    for model, split in cells:
        if records[model, split]["status"] != "ok":
            result.errors[cell_name(model, split)] = records[model, split]["error"]
    result.failed = list(result.errors)
