"""Xian et al.'s GBU protocol on one attribute dataset: choose on validation classes, test once.

For one (dataset, model, split, validation split):

1. Hyper-parameters: every point of the model's grid is fitted on the validation task's train
   classes and scored by per-class top-1 on its val classes (ZSL); the best wins, ties to the
   first grid point. Test images are never looked at.
2. Calibrated stacking: with the chosen hyper-parameters, γ maximises H on validation GZSL
   (held-out images of the train classes + images of the val classes).
3. The model is refitted on all seen (trainval) classes and evaluated once: ZSL per-class top-1 on
   the unseen classes; on the Proposed Split also GZSL seen/unseen per-class accuracy and H at
   γ = 0 and at the chosen γ, and AUSUC.

Models come from the shared model registry (the same estimators as ImageNet) and get the class
attribute vectors as semantics (``att`` columns, or binary attributes for DAP/IAP); metrics come
from :mod:`imagenet_zsl.scoring`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.attributes.dataset import AttributeDataset, Task
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_write_json,
    atomic_write_text,
    canonical_json,
    command_line,
    file_record,
    software_versions,
)
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel, create
from imagenet_zsl.models.registry import save_model
from imagenet_zsl.models.selection import (
    SearchResult,
    ValidationSplit,
    score_images,
    search_hyperparameters,
)
from imagenet_zsl.scoring import (
    GZSLTopK,
    gzsl_from_scores,
    gzsl_metrics,
    metrics_from_scores,
    ranks_from_scores,
)
from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)
RESULTS_NAME = "results.json"


# --------------------------------------------------------------------------- models
def semantics_for(cls: type[ZSLModel], ds: AttributeDataset) -> ClassVectors:
    """Attribute vectors as ClassVectors (class names as "wnids"); binary ones for DAP/IAP."""
    if getattr(cls, "semantics_kind", "continuous") == "binary":
        return ClassVectors(ds.class_names, ds.split.binary().T, source=f"{ds.name} binary att")
    return ClassVectors(ds.class_names, ds.split.att.T, source=f"{ds.name} att")


def task_data(ds: AttributeDataset, task: Task) -> SeenData:
    """The training images of ``task`` as SeenData (labels index ``task.seen``)."""
    labels = np.searchsorted(task.seen, ds.images.labels[task.train])
    return SeenData(
        features=ds.images.features[task.train],
        labels=labels.astype(np.int64),
        seen_wnids=[ds.class_names[i] for i in task.seen],
    )


def fit_model(
    cls: type[ZSLModel],
    params: dict[str, Any],
    ds: AttributeDataset,
    task: Task,
    semantics: ClassVectors,
) -> ZSLModel:
    return create(cls.name, **params).fit(task_data(ds, task), semantics)


def validation_split(ds: AttributeDataset, task: Task, calibrate: bool) -> ValidationSplit:
    """A validation task as the shared selection's split: fit on ``task.seen``; validate on the
    val classes' images, plus (``calibrate``) the held-out train-class images for γ."""
    classes = np.union1d(task.seen, task.unseen)
    held = task.test_seen if calibrate and task.test_seen is not None else np.zeros(0, np.int64)
    rows = np.concatenate([held, task.test_unseen])
    return ValidationSplit(
        fit=task_data(ds, task),
        features=ds.images.features,
        rows=rows,
        labels=np.searchsorted(classes, ds.images.labels[rows]),
        wnids=[ds.class_names[c] for c in classes],
        is_fit=np.isin(classes, task.seen),
    )


# --------------------------------------------------------------------------- scoring
def score(model: ZSLModel, ds: AttributeDataset, images: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """(len(images), len(classes)) dot-product scores, the toolkit's one scoring rule."""
    return score_images(model, ds.images.features, [ds.class_names[i] for i in classes], rows=images)


def zsl_accuracy(model: ZSLModel, ds: AttributeDataset, task: Task) -> dict[str, float]:
    """ZSL top-1 among the unseen classes: per class (GBU's number) and per image."""
    scores = score(model, ds, task.test_unseen, task.unseen)
    labels = np.searchsorted(task.unseen, ds.images.labels[task.test_unseen])
    result = metrics_from_scores(scores, labels, ks=(1,))
    return {"top1_per_class": result["per_class"][1], "top1_flat": result["flat"][1]}


def gzsl_topk(model: ZSLModel, ds: AttributeDataset, task: Task) -> GZSLTopK:
    """GZSL top-2 lists over seen ∪ unseen classes (ds class order) for the task's test images."""
    classes = np.union1d(task.seen, task.unseen)
    images = np.concatenate([task.test_seen, task.test_unseen])
    scores = score(model, ds, images, classes)
    labels = np.searchsorted(classes, ds.images.labels[images])
    return gzsl_from_scores(scores, labels, np.isin(classes, task.seen), m=2)


def per_class_table(model: ZSLModel, ds: AttributeDataset, task: Task, gamma: float) -> list[dict]:
    """Per-class accuracies: ZSL (unseen only) and GZSL at γ = 0 and the chosen γ."""
    rows = []
    zsl_scores = score(model, ds, task.test_unseen, task.unseen)
    zsl_labels = np.searchsorted(task.unseen, ds.images.labels[task.test_unseen])
    zsl_hit = ranks_from_scores(zsl_scores, zsl_labels) == 0
    gz_hits: dict[str, np.ndarray] = {}
    classes = np.union1d(task.seen, task.unseen)
    if task.test_seen is not None:
        images = np.concatenate([task.test_seen, task.test_unseen])
        scores = score(model, ds, images, classes)
        labels = np.searchsorted(classes, ds.images.labels[images])
        seen_cols = np.isin(classes, task.seen)
        for name, g in (("gzsl", 0.0), ("gzsl_cs", gamma)):
            shifted = scores - np.where(seen_cols, g, 0.0).astype(np.float32)
            gz_hits[name] = (ranks_from_scores(shifted, labels) == 0, labels)
    seen = set(task.seen.tolist())
    for c in classes:
        role = "seen" if c in seen else "unseen"
        row: dict[str, Any] = {"class": ds.class_names[c], "role": role}
        if role == "unseen":
            mine = zsl_labels == np.searchsorted(task.unseen, c)
            row["images"] = int(mine.sum())
            row["zsl_top1"] = float(zsl_hit[mine].mean()) if mine.any() else float("nan")
        for name, (hit, labels) in gz_hits.items():
            mine = labels == np.searchsorted(classes, c)
            row["test_images"] = int(mine.sum())
            row[name + "_top1"] = float(hit[mine].mean()) if mine.any() else float("nan")
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the protocol
@dataclass
class RunConfig:
    """What one run evaluates; also the identity used to resume (same config → skip)."""

    dataset: str
    model: str
    split: str = "ps"
    val_split: int = 1
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] | None = None
    att_splits: str | None = None

    def key(self) -> dict[str, Any]:
        return json.loads(canonical_json(asdict(self)))


def select_hyperparameters(
    cls: type[ZSLModel],
    ds: AttributeDataset,
    config: RunConfig,
    semantics: ClassVectors,
    progress: Callable[[str], None] | None = None,
) -> tuple[SearchResult, Task]:
    """The shared grid search (:mod:`imagenet_zsl.models.selection`) on the validation task:
    ``config.params`` (and the seed) are fixed and leave the grid; on the Proposed Split the
    held-out train-class images also choose the calibration γ. → (search result, val task)."""
    val_task = ds.val_task(config.split, config.val_split, seed=config.seed)
    fixed = dict(config.params)
    if "seed" in cls.defaults:
        fixed.setdefault("seed", config.seed)
    grid = getattr(cls, "grid", {}) if config.grid is None else config.grid
    result = search_hyperparameters(
        cls.name,
        {k: v for k, v in grid.items() if k not in fixed},
        validation_split(ds, val_task, calibrate=config.split == "ps"),
        semantics,
        base_params=fixed,
        progress=progress,
    )
    return result, val_task


def run_protocol(
    ds: AttributeDataset,
    config: RunConfig,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The full protocol (see module doc) → results dict; writes nothing."""
    cls = MODELS.get(config.model)
    semantics = semantics_for(cls, ds)
    search, val_task = select_hyperparameters(cls, ds, config, semantics, progress)
    best_params = search.best_params
    grid_rows = [
        {"params": params, "val_top1_per_class": value}
        for params, value in zip(search.params, search.scores, strict=True)
    ]
    gamma = 0.0 if search.gamma is None else search.gamma
    val_h = search.validation_h
    task = ds.task(config.split)
    model = fit_model(cls, best_params, ds, task, semantics)
    results: dict[str, Any] = {
        "config": config.key(),
        "dataset": ds.name,
        "model": cls.name or config.model,
        "split": config.split,
        "val_split": config.val_split,
        "params": best_params,
        "classes": {"seen": int(task.seen.size), "unseen": int(task.unseen.size)},
        "images": {
            "train": int(task.train.size),
            "test_unseen": int(task.test_unseen.size),
            "test_seen": None if task.test_seen is None else int(task.test_seen.size),
        },
        "validation": {
            "grid": grid_rows,
            "classes": {"train": int(val_task.seen.size), "val": int(val_task.unseen.size)},
            "gamma": gamma,
            "gzsl_H": val_h,
        },
        "zsl": zsl_accuracy(model, ds, task),
        "gzsl": None,
    }
    if task.test_seen is not None:
        gz = gzsl_metrics(gzsl_topk(model, ds, task), ks=(1,), gamma=gamma)
        direct, calibrated = gz["per_class"][1], gz["calibrated"]["per_class"][1]
        results["gzsl"] = {
            "seen": direct["seen"],
            "unseen": direct["unseen"],
            "H": direct["H"],
            "ausuc": direct["ausuc"],
            "gamma": gamma,
            "seen_cs": calibrated["seen"],
            "unseen_cs": calibrated["unseen"],
            "H_cs": calibrated["H"],
        }
    results["_model"] = model
    results["_per_class"] = per_class_table(model, ds, task, gamma)
    return results


def run_to_directory(
    ds: AttributeDataset,
    config: RunConfig,
    out: str | Path,
    progress: Callable[[str], None] | None = None,
    resume: bool = True,
) -> dict[str, Any]:
    """Run the protocol into ``out`` (atomic; skipped when ``out`` holds the same finished run)."""
    out = Path(out)
    done = out / RESULTS_NAME
    if resume and done.is_file():
        previous = json.loads(done.read_text())
        if previous.get("config") == config.key():
            log.info("%s: already finished with the same configuration, kept", out)
            return previous
    results = run_protocol(ds, config, progress)
    model = results.pop("_model")
    per_class = results.pop("_per_class")
    with atomic_directory(out, tool="imagenet-zsl attributes run") as tmp:
        atomic_write_json(tmp / RESULTS_NAME, results)
        _write_csv(
            tmp / "validation.csv",
            [
                {
                    **{f"param_{k}": v for k, v in row["params"].items()},
                    "val_top1_per_class": row["val_top1_per_class"],
                }
                for row in results["validation"]["grid"]
            ],
        )
        _write_csv(tmp / "per_class.csv", per_class)
        _save_model(model, tmp / "model")
        inputs = [file_record(p) for p in (ds.images.path, ds.split.path) if p is not None]
        atomic_write_json(
            tmp / MANIFEST_NAME,
            {
                "format": "imagenet-zsl/attribute-run",
                "tool": "imagenet-zsl attributes run",
                "command": command_line(),
                "inputs": inputs,
                "parameters": config.key(),
                "outputs": sorted([p.name for p in tmp.iterdir()] + [MANIFEST_NAME]),
                "versions": software_versions(),
            },
        )
    return results


def _save_model(model: ZSLModel, path: Path) -> None:
    """The fitted final model (``load_model`` reads it back); a model the registry cannot
    serialise is reported, the results are still written."""
    try:
        save_model(model, path)
    except (TypeError, ValueError) as err:
        log.warning("model not saved (%s): %s", type(model).__name__, err)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    import pandas as pd  # heavy: imported when a run is written

    atomic_write_text(path, pd.DataFrame(list(rows)).to_csv(index=False, float_format="%.6g"))


def load_results(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """results.json of each run directory (searched recursively below each given path)."""
    found: list[dict[str, Any]] = []
    for given in paths:
        given = Path(given)
        if given.is_file() and given.name == RESULTS_NAME:
            files = [given]
        elif given.is_dir():
            files = sorted(given.rglob(RESULTS_NAME))
        else:
            raise UserInputError(f"{given}: not a run directory or results.json")
        if not files:
            raise UserInputError(f"{given}: no {RESULTS_NAME} below it (run `attributes run` first)")
        for file in files:
            try:
                data = json.loads(file.read_text())
            except json.JSONDecodeError as err:
                raise UserInputError(f"{file}: not valid JSON: {err}") from err
            if not {"dataset", "model", "split", "zsl"} <= set(data):
                raise UserInputError(f"{file}: not an attributes run result")
            data["_path"] = str(file.parent)
            found.append(data)
    return found
