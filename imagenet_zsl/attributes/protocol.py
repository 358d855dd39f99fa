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

import itertools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.attributes.dataset import AttributeDataset, Task
from imagenet_zsl.errors import UserInputError, preview
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
from imagenet_zsl.models.base import SeenData, ZSLModel
from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)
RESULTS_NAME = "results.json"


# --------------------------------------------------------------------------- models
def available_models() -> dict[str, type[ZSLModel]]:
    """The shared model registry (the same estimators as ImageNet, plus DAP/IAP)."""
    from imagenet_zsl.models.registry import MODELS

    return dict(MODELS)


def model_class(name: str) -> type[ZSLModel]:
    from imagenet_zsl.models.registry import model_class as registry_class

    return registry_class(name)


def param_grid(
    cls: type[ZSLModel],
    fixed: dict[str, Any] | None = None,
    grid: dict[str, list[Any]] | None = None,
) -> list[dict[str, Any]]:
    """Grid points (dicts): ``grid`` (default: the model's own ``grid``) minus ``fixed`` keys."""
    fixed = fixed or {}
    grid = getattr(cls, "grid", {}) if grid is None else grid
    unknown = (set(fixed) | set(grid)) - set(cls.defaults)
    if unknown:
        raise UserInputError(
            f"{cls.name}: unknown hyper-parameters {preview(sorted(unknown))}; "
            f"it has {preview(sorted(cls.defaults))}"
        )
    grid = {k: list(v) for k, v in grid.items() if k not in fixed}
    keys = sorted(grid)
    return [{**fixed, **dict(zip(keys, values, strict=True))}
            for values in itertools.product(*(grid[k] for k in keys))]


def semantics_for(cls: type[ZSLModel], ds: AttributeDataset) -> ClassVectors:
    """Attribute vectors as ClassVectors (class names as "wnids"); binary ones for DAP/IAP."""
    if getattr(cls, "semantics_kind", "continuous") == "binary":
        return ClassVectors(ds.class_names, ds.split.binary().T, source=f"{ds.name} binary att")
    return ClassVectors(ds.class_names, ds.split.att.T, source=f"{ds.name} att")


# --------------------------------------------------------------------------- scoring
def fit_model(
    cls: type[ZSLModel], params: dict[str, Any], ds: AttributeDataset, task: Task,
    semantics: ClassVectors,
) -> ZSLModel:
    labels = np.searchsorted(task.seen, ds.images.labels[task.train])
    data = SeenData(
        features=ds.images.features[task.train],
        labels=labels.astype(np.int64),
        seen_wnids=[ds.class_names[i] for i in task.seen],
    )
    from imagenet_zsl.models.registry import create

    return create(cls.name, **params).fit(data, semantics)


def score(model: ZSLModel, ds: AttributeDataset, images: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """(len(images), len(classes)) dot-product scores, the toolkit's one scoring rule."""
    queries = model.embed_images(ds.images.features[images])
    prototypes = model.class_prototypes([ds.class_names[i] for i in classes])
    scores = np.asarray(queries, dtype=np.float32) @ np.asarray(prototypes, dtype=np.float32).T
    if not np.all(np.isfinite(scores)):
        raise UserInputError(f"{getattr(model, 'name', model)}: produced NaN/Inf scores")
    return scores


def zsl_accuracy(model: ZSLModel, ds: AttributeDataset, task: Task) -> dict[str, float]:
    """ZSL top-1 among the unseen classes: per class (GBU's number) and per image."""
    from imagenet_zsl.scoring import metrics_from_scores

    scores = score(model, ds, task.test_unseen, task.unseen)
    labels = np.searchsorted(task.unseen, ds.images.labels[task.test_unseen])
    result = metrics_from_scores(scores, labels, ks=(1,))
    return {"top1_per_class": result["per_class"][1], "top1_flat": result["flat"][1]}


def gzsl_topk(model: ZSLModel, ds: AttributeDataset, task: Task):
    """GZSL top-2 lists over seen ∪ unseen classes (ds class order) for the task's test images."""
    from imagenet_zsl.scoring import gzsl_from_scores

    classes = np.union1d(task.seen, task.unseen)
    images = np.concatenate([task.test_seen, task.test_unseen])
    scores = score(model, ds, images, classes)
    labels = np.searchsorted(classes, ds.images.labels[images])
    return gzsl_from_scores(scores, labels, np.isin(classes, task.seen), m=2)


def per_class_table(model: ZSLModel, ds: AttributeDataset, task: Task, gamma: float) -> list[dict]:
    """Per-class accuracies: ZSL (unseen only) and GZSL at γ = 0 and the chosen γ."""
    from imagenet_zsl.scoring import ranks_from_scores

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
    cls: type[ZSLModel], ds: AttributeDataset, config: RunConfig, semantics: ClassVectors,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], ZSLModel, Task]:
    """Grid search on validation classes → (best params, grid rows, best model, val task)."""
    val_task = ds.val_task(config.split, config.val_split, seed=config.seed)
    fixed = dict(config.params)
    if "seed" in cls.defaults:
        fixed.setdefault("seed", config.seed)
    rows: list[dict[str, Any]] = []
    best: tuple[float, dict[str, Any], ZSLModel] | None = None
    for params in param_grid(cls, fixed, config.grid):
        model = fit_model(cls, params, ds, val_task, semantics)
        accuracy = zsl_accuracy(model, ds, val_task)["top1_per_class"]
        rows.append({"params": params, "val_top1_per_class": accuracy})
        if progress:
            progress(f"{cls.name} {params}: val top-1 {accuracy:.4f}")
        if best is None or accuracy > best[0]:
            best = (accuracy, params, model)
    assert best is not None
    return best[1], rows, best[2], val_task


def run_protocol(
    ds: AttributeDataset, config: RunConfig, progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The full protocol (see module doc) → results dict; writes nothing."""
    from imagenet_zsl.scoring import choose_gamma, gzsl_metrics

    cls = model_class(config.model)
    semantics = semantics_for(cls, ds)
    best_params, grid_rows, val_model, val_task = select_hyperparameters(
        cls, ds, config, semantics, progress
    )
    gamma, val_h = 0.0, None
    if config.split == "ps":
        gamma, val_h = choose_gamma(gzsl_topk(val_model, ds, val_task))
    task = ds.task(config.split)
    model = fit_model(cls, best_params, ds, task, semantics)
    results: dict[str, Any] = {
        "config": config.key(),
        "dataset": ds.name, "model": cls.name or config.model, "split": config.split,
        "val_split": config.val_split,
        "params": best_params,
        "classes": {"seen": int(task.seen.size), "unseen": int(task.unseen.size)},
        "images": {
            "train": int(task.train.size), "test_unseen": int(task.test_unseen.size),
            "test_seen": None if task.test_seen is None else int(task.test_seen.size),
        },
        "validation": {
            "grid": grid_rows,
            "classes": {"train": int(val_task.seen.size), "val": int(val_task.unseen.size)},
            "gamma": gamma, "gzsl_H": val_h,
        },
        "zsl": zsl_accuracy(model, ds, task),
        "gzsl": None,
    }
    if task.test_seen is not None:
        gz = gzsl_metrics(gzsl_topk(model, ds, task), ks=(1,), gamma=gamma)
        direct, calibrated = gz["per_class"][1], gz["calibrated"]["per_class"][1]
        results["gzsl"] = {
            "seen": direct["seen"], "unseen": direct["unseen"], "H": direct["H"],
            "ausuc": direct["ausuc"], "gamma": gamma,
            "seen_cs": calibrated["seen"], "unseen_cs": calibrated["unseen"],
            "H_cs": calibrated["H"],
        }
    results["_model"] = model
    results["_per_class"] = per_class_table(model, ds, task, gamma)
    return results


def run_to_directory(
    ds: AttributeDataset, config: RunConfig, out: str | Path,
    progress: Callable[[str], None] | None = None, resume: bool = True,
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
        _write_csv(tmp / "validation.csv", [
            {**{f"param_{k}": v for k, v in row["params"].items()},
             "val_top1_per_class": row["val_top1_per_class"]}
            for row in results["validation"]["grid"]
        ])
        _write_csv(tmp / "per_class.csv", per_class)
        _save_model(model, tmp / "model")
        inputs = [file_record(p) for p in (ds.images.path, ds.split.path) if p is not None]
        atomic_write_json(tmp / MANIFEST_NAME, {
            "format": "imagenet-zsl/attribute-run",
            "tool": "imagenet-zsl attributes run",
            "command": command_line(),
            "inputs": inputs,
            "parameters": config.key(),
            "outputs": sorted([p.name for p in tmp.iterdir()] + [MANIFEST_NAME]),
            "versions": software_versions(),
        })
    return results


def _save_model(model: ZSLModel, path: Path) -> None:
    """The fitted final model (``load_model`` reads it back); a model the registry cannot
    serialise is reported, the results are still written."""
    from imagenet_zsl.models.registry import save_model

    try:
        save_model(model, path)
    except (TypeError, ValueError) as err:
        log.warning("model not saved (%s): %s", type(model).__name__, err)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    import pandas as pd

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
