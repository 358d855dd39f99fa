"""Hyper-parameter choice on validation classes split from the seen classes — never on test classes.

The seen classes are split (seeded, class-disjoint) into fit classes and validation classes, e.g.
800/200 of ILSVRC as Xian et al.; every grid point is fitted on the fit classes' images and scored
on the validation classes:

* mode "zsl": per-class hit@1 among the validation classes (Xian et al.'s criterion).
* mode "gzsl" (Le Cacheux et al., 2019): a seeded share of each fit class's images is held out as
  seen-class validation images; the score is the harmonic mean H of seen/unseen per-class accuracy
  over fit ∪ validation classes after calibrated stacking, with the calibration γ chosen on the same
  validation data. The chosen γ is returned with the result.

Scores are the toolkit's one rule (dot products, ties count against the model) via
:mod:`imagenet_zsl.scoring`.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.base import SeenData, ZSLModel
from imagenet_zsl.models.common import check_seen_data

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)
MODES = ("zsl", "gzsl")


@dataclass
class SearchResult:
    """Outcome of a grid search: the best point, every point's score, the validation classes."""

    best_params: dict[str, Any]
    best_score: float
    rows: list[dict[str, Any]]
    mode: str
    fit_wnids: list[str]
    val_wnids: list[str]
    gamma: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-ready record for a model manifest."""
        return {
            "mode": self.mode, "best_params": self.best_params, "best_score": self.best_score,
            "gamma": self.gamma, "fit_classes": len(self.fit_wnids),
            "val_classes": sorted(self.val_wnids), "grid": self.rows,
        }


def split_seen_classes(num_seen: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit, validation) sorted class indices; seeded, class-disjoint, both non-empty."""
    if not 0 < val_fraction < 1:
        raise UserInputError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if num_seen < 3:
        raise UserInputError(f"need at least 3 seen classes to split off validation classes, have {num_seen}")
    n_val = int(np.clip(round(val_fraction * num_seen), 1, num_seen - 2))
    order = np.random.default_rng(seed).permutation(num_seen)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def holdout_images(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Bool mask: a seeded ``fraction`` of each class's images (at least one, never all)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(labels), bool)
    for cls in np.unique(labels):
        rows = np.flatnonzero(labels == cls)
        take = int(np.clip(round(fraction * len(rows)), 1 if len(rows) > 1 else 0, len(rows) - 1))
        mask[rng.choice(rows, take, replace=False)] = True
    return mask


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid (keys sorted: a stable order, so ties go to the first)."""
    keys = sorted(grid)
    for key in keys:
        if not isinstance(grid[key], list | tuple) or not grid[key]:
            raise UserInputError(f"grid entry {key!r} must be a non-empty list of values")
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def _subset(data: SeenData, rows: np.ndarray, classes: np.ndarray) -> SeenData:
    labels = np.searchsorted(classes, np.asarray(data.labels)[rows])
    return SeenData(
        features=np.asarray(data.features)[rows], labels=labels.astype(np.int64),
        seen_wnids=[data.seen_wnids[i] for i in classes],
        logits=None if data.logits is None else np.asarray(data.logits)[rows],
        logit_classes=data.logit_classes,
    )


def _scores(model: ZSLModel, data: SeenData, rows: np.ndarray, wnids: list[str],
            block: int = 16384) -> np.ndarray:
    prototypes = np.asarray(model.class_prototypes(wnids), dtype=np.float32)
    out = np.empty((len(rows), len(wnids)), np.float32)
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        logits = None if data.logits is None else np.asarray(data.logits)[part]
        queries = model.embed_images(np.asarray(data.features)[part], logits)
        out[start : start + block] = np.asarray(queries, dtype=np.float32) @ prototypes.T
    if not np.isfinite(out).all():
        raise UserInputError(f"{model.name}: produced NaN/Inf validation scores")
    return out


def search_hyperparameters(
    name: str,
    grid: dict[str, list[Any]] | None,
    data: SeenData,
    semantics: ClassVectors | None,
    graph: ClassGraph | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
    *,
    mode: str = "zsl",
    base_params: dict[str, Any] | None = None,
    seen_holdout: float = 0.2,
) -> SearchResult:
    """Fit every grid point on the fit classes, score it on the validation classes (see module).

    ``base_params`` are fixed for every point (grid values override them); ``grid=None`` uses the
    model class's ``grid``. Ties go to the first point in :func:`grid_points` order.
    """
    from tqdm import tqdm

    from imagenet_zsl.scoring import (
        choose_gamma,
        gzsl_from_scores,
        per_class_rates,
        ranks_from_scores,
    )
    from imagenet_zsl.models.registry import create, model_class

    if mode not in MODES:
        raise UserInputError(f"selection mode must be one of {MODES}, got {mode!r}")
    cls = model_class(name)
    grid = dict(getattr(cls, "grid", {}) if grid is None else grid)
    points = grid_points(grid) if grid else [{}]
    base = dict(base_params or {})
    _, labels = check_seen_data(cls.name, data)
    fit_classes, val_classes = split_seen_classes(len(data.seen_wnids), val_fraction, seed)
    fit_rows = np.flatnonzero(np.isin(labels, fit_classes))
    val_rows = np.flatnonzero(np.isin(labels, val_classes))
    fit_wnids = [data.seen_wnids[i] for i in fit_classes]
    val_wnids = [data.seen_wnids[i] for i in val_classes]
    seen_rows = np.zeros(0, np.int64)
    if mode == "gzsl":
        held = holdout_images(labels[fit_rows], seen_holdout, seed)
        seen_rows, fit_rows = fit_rows[held], fit_rows[~held]
    fit_data = _subset(data, fit_rows, fit_classes)
    rows: list[dict[str, Any]] = []
    best: tuple[float, int, float | None] = (-np.inf, -1, None)
    for i, point in enumerate(tqdm(points, desc=f"{cls.name} grid", disable=None, leave=False)):
        model = create(cls.name, **{**base, **point})
        model.fit(fit_data, semantics, graph)
        gamma = None
        if mode == "zsl":
            scores = _scores(model, data, val_rows, val_wnids)
            val_labels = np.searchsorted(val_classes, labels[val_rows])
            ranks = ranks_from_scores(scores, val_labels)
            value = per_class_rates(ranks, val_labels, [1], len(val_wnids))[1]
        else:
            joint = np.union1d(fit_classes, val_classes)
            image_rows = np.concatenate([seen_rows, val_rows])
            scores = _scores(model, data, image_rows, [data.seen_wnids[c] for c in joint])
            joint_labels = np.searchsorted(joint, labels[image_rows])
            gz = gzsl_from_scores(scores, joint_labels, np.isin(joint, fit_classes), m=2)
            gamma, value = choose_gamma(gz, k=1, per_class=True)
        rows.append({**point, "score": float(value), **({"gamma": gamma} if gamma is not None else {})})
        log.info("%s %s: validation %s %.4f", cls.name, point, "H" if mode == "gzsl" else "hit@1", value)
        if value > best[0]:
            best = (float(value), i, gamma)
    best_params = {**base, **points[best[1]]}
    return SearchResult(best_params, best[0], rows, mode, fit_wnids, val_wnids, best[2])
