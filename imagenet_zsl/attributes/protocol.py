"""Xian et al.'s GBU protocol on one attribute dataset: choose on validation classes, test once.

For one (dataset, model, split, validation split):

1. Hyper-parameters: every point of the model's grid is fitted on the validation task's train
   classes and scored by per-class top-1 on its val classes (``select: zsl``, GBU), or by H on
   validation GZSL after calibrated stacking (``select: gzsl``, Le Cacheux et al. 2019); the best
   wins, ties to the first grid point. Test images are never looked at.
2. Calibrated stacking: with the chosen hyper-parameters, γ maximises H on validation GZSL
   (held-out images of the train classes + images of the val classes).
3. The model is refitted on all seen (trainval) classes and evaluated once: ZSL per-class top-1 on
   the unseen classes; on the Proposed Split also GZSL seen/unseen per-class accuracy and H at
   γ = 0 and at the chosen γ, and AUSUC.
4. Optionally (``--test-dataset``, GBU Table 4) the same fitted model is also tested on another
   dataset with the same classes and attributes (AWA1 ↔ AWA2): ZSL and GZSL on that dataset's
   test images, and (an extra, per run) a paired t-test (``scipy.stats.ttest_rel``) of the unseen
   classes' per-class top-1 on the training dataset's test images against the other dataset's.
   GBU's own test pairs the results of many methods run both ways; ``attributes table`` computes
   it from such runs (:func:`imagenet_zsl.attributes.table.gbu_ttest`).

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
import pandas as pd
from scipy import stats

from imagenet_zsl.atomic import atomic_write_json, atomic_write_text, canonical_json
from imagenet_zsl.attributes.dataset import AttributeDataset, Task
from imagenet_zsl.attributes.outputs import RESULTS_NAME, RUN_FORMAT, RUN_TOOL, finished_results
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.prototypes import mean_vectors
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel, create
from imagenet_zsl.models.persistence import save_model
from imagenet_zsl.models.selection import (
    SearchResult,
    ValidationSplit,
    score_images,
    search_hyperparameters,
)
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.scoring import (
    GZSLTopK,
    gzsl_from_scores,
    gzsl_metrics,
    metrics_from_scores,
    true_ranks,
)
from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)
#: selection mode → the validation score's name in results.json and validation.csv
VAL_CRITERIA = {"zsl": "val_top1_per_class", "gzsl": "val_H_calibrated"}


# --------------------------------------------------------------------------- models
SEMANTICS = ("attributes", "visual")


def semantics_for(cls: type[ZSLModel], ds: AttributeDataset, kind: str = "attributes") -> ClassVectors:
    """Attribute vectors as ClassVectors (class names as "wnids"); binary ones for DAP/IAP.

    ``kind="visual"``: Chao et al.'s idealised semantics (ECCV 2016, Sec. 6, G-attr): each class's
    vector is the mean res101 feature of ALL its images (unseen classes' test images included: an
    oracle that bounds what better semantics could give, never a zero-shot result), computed by
    :func:`imagenet_zsl.features.prototypes.mean_vectors` like ``labels visual-prototypes``."""
    if kind not in SEMANTICS:
        raise UserInputError(f"--semantics must be one of {', '.join(SEMANTICS)}, got {kind!r}")
    binary = getattr(cls, "semantics_kind", "continuous") == "binary"
    if kind == "visual":
        if binary:
            raise UserInputError(
                f"--semantics visual: {cls.name} needs binary attributes; use a model with "
                "continuous class vectors"
            )
        features = ds.images.features
        return mean_vectors(
            [(features, ds.images.labels)],
            ds.class_names,
            features.shape[1],
            source=f"{ds.name} visual prototypes (G-attr)",
            where=str(ds.images.path),
        )
    if binary:
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


def zsl_per_class(model: ZSLModel, ds: AttributeDataset, task: Task) -> np.ndarray:
    """(U,) ZSL top-1 of each unseen class (``task.unseen`` order) on its test images (NaN: none)."""
    scores = score(model, ds, task.test_unseen, task.unseen)
    labels = np.searchsorted(task.unseen, ds.images.labels[task.test_unseen])
    hit = true_ranks(labels, scores=scores).strict == 0
    counts = np.bincount(labels, minlength=len(task.unseen))
    hits = np.bincount(labels, weights=hit, minlength=len(task.unseen))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)


def check_cross_dataset(ds: AttributeDataset, other: AttributeDataset, protocol: str) -> Task:
    """``other``'s task for testing a model fitted on ``ds``: same classes (names, order), same
    number of attributes and the same unseen classes, else a UserInputError naming both."""
    culprit = f"--test-dataset {other.name}"
    if other.name == ds.name:
        raise UserInputError(f"{culprit}: must differ from --dataset {ds.name}")
    if other.class_names != ds.class_names:
        differ = sorted(set(other.class_names) ^ set(ds.class_names))
        detail = f"classes differ: {preview(differ)}" if differ else "classes are in another order"
        raise UserInputError(f"{culprit}: not the classes of {ds.name} ({detail})")
    if other.split.num_attributes != ds.split.num_attributes:
        raise UserInputError(
            f"{culprit}: {other.split.num_attributes} attributes, {ds.name} has {ds.split.num_attributes}"
        )
    mine, theirs = ds.task(protocol), other.task(protocol)
    if not np.array_equal(mine.unseen, theirs.unseen):
        raise UserInputError(f"{culprit}: its {protocol.upper()} unseen classes differ from {ds.name}'s")
    return theirs


def cross_dataset(
    model: ZSLModel, ds: AttributeDataset, other: AttributeDataset, protocol: str, gamma: float
) -> dict[str, Any]:
    """GBU Table 4: the model fitted on ``ds`` tested on ``other``'s test images (ZSL; GZSL on the
    PS at γ = 0 and at ``ds``'s calibrated γ) and the paired t-test of the per-class ZSL top-1
    (``ds``'s test images vs ``other``'s; the same unseen classes pair up). The class vectors
    stay ``ds``'s (xlsa17's AWA1 and AWA2 share the 85-attribute matrix)."""
    task = check_cross_dataset(ds, other, protocol)
    own = zsl_per_class(model, ds, ds.task(protocol))
    cross = zsl_per_class(model, other, task)
    both = np.isfinite(own) & np.isfinite(cross)
    statistic, pvalue = float("nan"), float("nan")
    if both.sum() > 1 and np.any(own[both] != cross[both]):
        test = stats.ttest_rel(own[both], cross[both])
        statistic, pvalue = float(test.statistic), float(test.pvalue)
    result: dict[str, Any] = {
        "test_dataset": other.name,
        "zsl": zsl_accuracy(model, other, task),
        "gzsl": None,
        "ttest": {
            "own_mean": float(own[both].mean()) if both.any() else None,
            "cross_mean": float(cross[both].mean()) if both.any() else None,
            "classes": int(both.sum()),
            "statistic": statistic if np.isfinite(statistic) else None,
            "pvalue": pvalue if np.isfinite(pvalue) else None,
        },
        "per_class": [
            {"class": ds.class_names[c], "own_zsl_top1": float(a), "cross_zsl_top1": float(b)}
            for c, a, b in zip(task.unseen, own, cross, strict=True)
        ],
    }
    if task.test_seen is not None:
        gz = gzsl_metrics(gzsl_topk(model, other, task), ks=(1,), gamma=gamma)
        direct, calibrated = gz["per_class"][1], gz["calibrated"]["per_class"][1]
        result["gzsl"] = {
            "seen": direct["seen"],
            "unseen": direct["unseen"],
            "H": direct["H"],
            "seen_cs": calibrated["seen"],
            "unseen_cs": calibrated["unseen"],
            "H_cs": calibrated["H"],
        }
    return result


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
    zsl_hit = true_ranks(zsl_labels, scores=zsl_scores).strict == 0
    gz_hits: dict[str, np.ndarray] = {}
    classes = np.union1d(task.seen, task.unseen)
    if task.test_seen is not None:
        images = np.concatenate([task.test_seen, task.test_unseen])
        scores = score(model, ds, images, classes)
        labels = np.searchsorted(classes, ds.images.labels[images])
        seen_cols = np.isin(classes, task.seen)
        for name, g in (("gzsl", 0.0), ("gzsl_cs", gamma)):
            shifted = scores - np.where(seen_cols, g, 0.0).astype(np.float32)
            gz_hits[name] = (true_ranks(labels, scores=shifted).strict == 0, labels)
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
    #: "zsl": choose by per-class top-1 on the val classes (GBU); "gzsl": by H after calibrated
    #: stacking on validation GZSL (Le Cacheux et al. 2019; needs the Proposed Split)
    select: str = "zsl"
    #: also test on this dataset (same classes and attributes, GBU Table 4's AWA1 ↔ AWA2)
    test_dataset: str | None = None
    #: "attributes", or "visual": class vectors = mean visual features (Chao et al.'s G-attr)
    semantics: str = "attributes"

    def key(self) -> dict[str, Any]:
        key = json.loads(canonical_json(asdict(self)))
        if key["select"] == "zsl":  # the default stays out: runs finished before it existed resume
            del key["select"]
        if key["test_dataset"] is None:  # likewise
            del key["test_dataset"]
        if key["semantics"] == "attributes":  # likewise
            del key["semantics"]
        return key


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
    if config.select not in ("zsl", "gzsl"):
        raise UserInputError(f"--select must be zsl or gzsl, got {config.select!r}")
    if config.select == "gzsl" and config.split != "ps":
        raise UserInputError(
            "--select gzsl needs held-out images of the seen classes: use --split ps (the Standard "
            "Split has none)"
        )
    val_task = ds.val_task(config.split, config.val_split, seed=config.seed)
    fixed = dict(config.params)
    if "seed" in cls.defaults:
        fixed.setdefault("seed", config.seed)
    grid = cls.grid if config.grid is None else config.grid
    result = search_hyperparameters(
        cls.name,
        {k: v for k, v in grid.items() if k not in fixed},
        validation_split(ds, val_task, calibrate=config.split == "ps"),
        semantics,
        mode=config.select,
        base_params=fixed,
        progress=progress,
    )
    return result, val_task


def run_protocol(
    ds: AttributeDataset,
    config: RunConfig,
    progress: Callable[[str], None] | None = None,
    test_ds: AttributeDataset | None = None,
) -> dict[str, Any]:
    """The full protocol (see module doc) → results dict; writes nothing. ``test_ds`` (named by
    ``config.test_dataset``) adds the cross-dataset test (step 4)."""
    if (test_ds.name if test_ds is not None else None) != config.test_dataset:
        raise ValueError("run_protocol: test_ds must be the dataset named by config.test_dataset")
    if test_ds is not None:
        check_cross_dataset(ds, test_ds, config.split)  # before any fitting
    cls = MODELS.get(config.model)
    semantics = semantics_for(cls, ds, config.semantics)
    search, val_task = select_hyperparameters(cls, ds, config, semantics, progress)
    best_params = search.best_params
    criterion = VAL_CRITERIA[config.select]
    grid_rows = [
        {"params": params, criterion: value}
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
            "criterion": criterion,
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
    if config.semantics != "attributes":  # results of attribute runs keep their bytes
        results["semantics"] = config.semantics
    if test_ds is not None:
        results["cross_dataset"] = cross_dataset(model, ds, test_ds, config.split, gamma)
    results["_model"] = model
    results["_per_class"] = per_class_table(model, ds, task, gamma)
    return results


def run_to_directory(
    ds: AttributeDataset,
    config: RunConfig,
    out: str | Path,
    progress: Callable[[str], None] | None = None,
    resume: bool = True,
    test_ds: AttributeDataset | None = None,
) -> dict[str, Any]:
    """Run the protocol into ``out`` (atomic; skipped when ``out`` holds the same finished run,
    verified against its manifest)."""
    out = Path(out)
    if resume:
        previous = finished_results(out, RUN_FORMAT, config.key())
        if previous is not None:
            return previous
    results = run_protocol(ds, config, progress, test_ds=test_ds)
    model = results.pop("_model")
    per_class = results.pop("_per_class")
    sources = [ds.images.path, ds.split.path]
    if test_ds is not None:
        sources += [test_ds.images.path, test_ds.split.path]
    sources = [p for p in sources if p is not None]
    with atomic_directory(out, tool=RUN_TOOL, inputs=sources) as tmp:
        atomic_write_json(tmp / RESULTS_NAME, results)
        _write_csv(tmp / "validation.csv", _validation_rows(results["validation"]["grid"]))
        _write_csv(tmp / "per_class.csv", per_class)
        if "cross_dataset" in results:
            _write_csv(tmp / "per_class_cross.csv", results["cross_dataset"]["per_class"])
        _save_model(model, tmp / "model")
        write_manifest(
            tmp,
            format=RUN_FORMAT,
            tool=RUN_TOOL,
            inputs=[file_record(p) for p in sources],
            parameters=config.key(),
        )
    return results


def _validation_rows(grid: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """validation.csv: one row per grid point, its parameters as ``param_<name>`` columns."""
    return [
        {
            **{f"param_{k}": v for k, v in row["params"].items()},
            **{k: v for k, v in row.items() if k != "params"},
        }
        for row in grid
    ]


def _save_model(model: ZSLModel, path: Path) -> None:
    """The fitted final model (``load_model`` reads it back); a model the registry cannot
    serialise is reported, the results are still written."""
    try:
        save_model(model, path)
    except (TypeError, ValueError) as err:
        log.warning("model not saved (%s): %s", type(model).__name__, err)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    atomic_write_text(path, pd.DataFrame(list(rows)).to_csv(index=False, float_format="%.6g"))
