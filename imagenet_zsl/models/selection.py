"""Hyper-parameter choice on validation classes split from the seen classes — never on test classes.

The one grid search of the toolkit, used by ``imagenet-zsl train`` and by the attribute datasets'
GBU protocol. Both first describe their validation data as a :class:`ValidationSplit` — fit
classes (with their training images) and validation classes (with their images), optionally plus
held-out images of the fit classes — then :func:`search_hyperparameters` fits every grid point on
the fit classes and scores it on the validation images:

* mode "zsl": per-class hit@1 among the validation classes (Xian et al.'s criterion).
* mode "gzsl" (Le Cacheux et al., 2019): the harmonic mean H of seen/unseen per-class accuracy
  over fit ∪ validation classes after calibrated stacking, with the calibration γ chosen on the
  same validation data.

When the split holds held-out fit-class images, the calibration γ of the chosen point is returned
as well (in "zsl" mode it is chosen for the best point only). ImageNet splits its seen classes
with :func:`split_seen_data` (seeded, class-disjoint, e.g. 800/200 of ILSVRC as Xian et al.).

Scores are the toolkit's one rule (dot products, ties count against the model) via
:mod:`imagenet_zsl.scoring`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel, create
from imagenet_zsl.models.common import blas_threads, check_seen_data, gram_flops
from imagenet_zsl.scoring import choose_gamma, gzsl_from_scores, hit_at_k, true_ranks
from imagenet_zsl.scoring.vectors import map_scores

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)
MODES = ("zsl", "gzsl")
#: images scored per block when validating (bounds the (block, E) query temporaries)
SCORE_BLOCK = 16384


@dataclass
class ValidationSplit:
    """Seen-class data divided for choosing hyper-parameters; test data never enters it.

    ``fit``: the training images of the fit classes (every grid point is fitted on them).
    ``features`` (N, D) and ``logits`` (N, K) or None: the image array the validation ``rows``
    (M,) index — held-out images of fit classes and images of the validation classes.
    ``labels`` (M,): each validation image's class as an index into ``wnids`` (C,), the fit and
    validation classes in one order; ``is_fit`` (C,) bool marks the fit classes.
    """

    fit: SeenData
    features: np.ndarray
    rows: np.ndarray
    labels: np.ndarray
    wnids: list[str]
    is_fit: np.ndarray
    logits: np.ndarray | None = None

    @property
    def fit_wnids(self) -> list[str]:
        return [w for w, f in zip(self.wnids, self.is_fit, strict=True) if f]

    @property
    def val_wnids(self) -> list[str]:
        return [w for w, f in zip(self.wnids, self.is_fit, strict=True) if not f]

    @property
    def calibrates(self) -> bool:
        """True when held-out fit-class images allow choosing the GZSL calibration γ."""
        return bool(self.is_fit[self.labels].any())


@dataclass
class SearchResult:
    """Outcome of a grid search: every point's parameters and score, the best one, its model.

    ``points`` are the grid values of each point, ``params`` the full hyper-parameters it was
    fitted with (base parameters included), ``scores``/``gammas`` its validation score and (in
    "gzsl" mode) calibration γ. ``gamma``/``validation_h``: the best point's γ and validation H
    when the split calibrates, else None. ``best_model``: the best point's fitted model.
    """

    best_params: dict[str, Any]
    best_score: float
    mode: str
    fit_wnids: list[str]
    val_wnids: list[str]
    points: list[dict[str, Any]]
    params: list[dict[str, Any]]
    scores: list[float]
    gammas: list[float | None]
    gamma: float | None = None
    validation_h: float | None = None
    best_model: ZSLModel | None = field(default=None, repr=False)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One record per grid point: its grid values, ``score`` and (gzsl mode) ``gamma``."""
        return [
            {**point, "score": score, **({"gamma": gamma} if gamma is not None else {})}
            for point, score, gamma in zip(self.points, self.scores, self.gammas, strict=True)
        ]

    def summary(self) -> dict[str, Any]:
        """JSON-ready record for a model manifest."""
        return {
            "mode": self.mode,
            "best_params": self.best_params,
            "best_score": self.best_score,
            "gamma": self.gamma,
            "fit_classes": len(self.fit_wnids),
            "val_classes": sorted(self.val_wnids),
            "grid": self.rows,
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
    """(N,) bool mask holding out a seeded round(fraction · n_c) images of every class c: at least
    one when n_c >= 2 (and fraction > 0), never all of them. Vectorised (one lexsort)."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    keys = rng.random(labels.size)
    order = np.lexsort((keys, labels))
    sorted_labels = labels[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_labels)) + 1]
    counts = np.diff(np.r_[starts, labels.size])
    take = np.rint(counts * fraction).astype(np.int64)
    take = np.where((take == 0) & (counts >= 2) & (fraction > 0), 1, take)
    take = np.minimum(take, counts - 1).clip(min=0)
    rank = np.arange(labels.size) - np.repeat(starts, counts)
    mask = np.zeros(labels.size, dtype=bool)
    mask[order[rank < np.repeat(take, counts)]] = True
    return mask


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid (keys sorted: a stable order, so ties go to the first)."""
    keys = sorted(grid)
    for key in keys:
        if not isinstance(grid[key], list | tuple) or not grid[key]:
            raise UserInputError(f"grid entry {key!r} must be a non-empty list of values")
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def _subset(data: SeenData, rows: np.ndarray, classes: np.ndarray) -> SeenData:
    """The images ``rows`` (increasing) of the classes ``classes``: a row source over the same
    features (a ShardRows subset reads nothing)."""
    labels = np.searchsorted(classes, np.asarray(data.labels)[rows])
    return data.subset(rows, labels, [data.seen_wnids[i] for i in classes])


def split_classes_with_images(
    counts: np.ndarray, val_fraction: float, seed: int, fit_images: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(fit, validation) sorted class indices when only the classes with images (``counts`` (S,)
    > 0) can validate — a stored backbone head stands in for the images of the others: seeded
    ``round(val_fraction · S)`` validation classes among them (at most all of them, keeping one
    with images among the fit classes when ``fit_images``: GZSL holds some of its images out);
    every other class fits. Fewer than 2 validation classes is a one-line error."""
    if not 0 < val_fraction < 1:
        raise UserInputError(f"val_fraction must be in (0, 1), got {val_fraction}")
    num_seen = len(counts)
    candidates = np.flatnonzero(counts > 0)
    n_val = min(round(val_fraction * num_seen), len(candidates) - int(fit_images), num_seen - 2)
    if n_val < 2:
        need = 2 + int(fit_images)
        raise UserInputError(
            f"select: choosing hyper-parameters needs images of at least {need} seen classes to "
            f"validate on, {len(candidates)} of the {num_seen} have some; add images, or drop the "
            "select block (the stored backbone head needs no image)"
        )
    order = np.random.default_rng(seed).permutation(candidates)
    val = np.sort(order[:n_val])
    return np.setdiff1d(np.arange(num_seen), val), val


def split_seen_data(
    data: SeenData,
    val_fraction: float,
    seed: int,
    seen_holdout: float | None = None,
    images_optional: bool = False,
) -> ValidationSplit:
    """ImageNet's validation split: seeded validation classes (:func:`split_seen_classes`) and,
    with ``seen_holdout``, a seeded share of each fit class's images held out (:func:`holdout_images`).

    ``images_optional`` (the models use a stored backbone head): seen classes may have no image;
    the validation classes are then drawn from those that have (:func:`split_classes_with_images`)."""
    _, labels = check_seen_data("selection", data, images_optional=images_optional)
    if images_optional:
        counts = np.bincount(labels, minlength=len(data.seen_wnids))
        fit_classes, val_classes = split_classes_with_images(
            counts, val_fraction, seed, seen_holdout is not None
        )
    else:
        fit_classes, val_classes = split_seen_classes(len(data.seen_wnids), val_fraction, seed)
    fit_rows = np.flatnonzero(np.isin(labels, fit_classes))
    val_rows = np.flatnonzero(np.isin(labels, val_classes))
    seen_rows = np.zeros(0, np.int64)
    if seen_holdout is not None:
        held = holdout_images(labels[fit_rows], seen_holdout, seed)
        seen_rows, fit_rows = fit_rows[held], fit_rows[~held]
    rows = np.concatenate([seen_rows, val_rows])
    # fit ∪ validation classes are all seen classes: labels index seen_wnids directly
    return ValidationSplit(
        fit=_subset(data, fit_rows, fit_classes),
        features=data.features,
        rows=rows,
        labels=labels[rows],
        wnids=list(data.seen_wnids),
        is_fit=np.isin(np.arange(len(data.seen_wnids)), fit_classes),
        logits=data.logits,
    )


def score_images(
    model: ZSLModel,
    features: np.ndarray,
    wnids: list[str],
    rows: np.ndarray | None = None,
    logits: np.ndarray | None = None,
) -> np.ndarray:
    """(M, C) float32 scores of the images ``rows`` (default: all) of ``features`` (N, D) against
    ``wnids`` (C,) by the model's own rule (:meth:`ZSLModel.scores`: ``embed_images(x) ·
    class_prototypes(c)``, the max over the maps when :meth:`ZSLModel.score_maps` > 1), the
    prototypes built once, in blocks of ``SCORE_BLOCK`` images; NaN/Inf is a user error."""
    features = features if hasattr(features, "shape") else np.asarray(features)  # a row source
    logits = logits if logits is None or hasattr(logits, "shape") else np.asarray(logits)
    rows = np.arange(len(features)) if rows is None else np.asarray(rows)
    exact = type(model).scores is not ZSLModel.scores  # a model with a rule of its own
    prototypes = None if exact else np.asarray(model.class_prototypes(wnids), dtype=np.float32)
    out = np.empty((len(rows), len(wnids)), np.float32)
    for start in range(0, len(rows), SCORE_BLOCK):
        part = rows[start : start + SCORE_BLOCK]
        block_logits = None if logits is None else logits[part]
        if prototypes is None:
            out[start : start + SCORE_BLOCK] = model.scores(features[part], wnids, block_logits)
            continue
        queries = model.embed_images(features[part], block_logits)
        out[start : start + SCORE_BLOCK] = map_scores(queries, prototypes, model.score_maps())
    if not np.isfinite(out).all():
        raise UserInputError(f"{model.name}: produced NaN/Inf scores")
    return out


def zsl_score(model: ZSLModel, split: ValidationSplit) -> float:
    """Per-class hit@1 on the validation classes' images among the validation classes only."""
    val_columns = np.flatnonzero(~split.is_fit)
    which = np.flatnonzero(np.isin(split.labels, val_columns))
    scores = score_images(
        model, split.features, [split.wnids[c] for c in val_columns], split.rows[which], split.logits
    )
    labels = np.searchsorted(val_columns, split.labels[which])
    return hit_at_k(
        true_ranks(labels, scores=scores).strict, labels, [1], num_classes=len(val_columns), per_class=True
    )[1]


def zsl_scorer(model: ZSLModel, data: SeenData, y: Any = None) -> float:
    """A scikit-learn scorer (``scoring=zsl_scorer``): per-class hit@1 of ``model`` on the images
    of ``data`` among ``data``'s classes only, ties counted against the model — the criterion of
    the "zsl" mode. With ``GridSearchCV(..., cv=GroupKFold(k))`` and ``groups=data.labels`` the
    classes of a test fold are the ones its model was not fitted on. ``y`` is ignored (the labels
    are in ``data``)."""
    labels = np.asarray(data.labels, dtype=np.int64)
    scores = score_images(model, data.features, list(data.seen_wnids), logits=data.logits)
    ranks = true_ranks(labels, scores=scores).strict
    return float(hit_at_k(ranks, labels, [1], num_classes=len(data.seen_wnids), per_class=True)[1])


def calibration(model: ZSLModel, split: ValidationSplit) -> tuple[float, float]:
    """(γ, H): the calibrated-stacking γ maximising per-class H@1 on every validation image."""
    scores = score_images(model, split.features, split.wnids, split.rows, split.logits)
    gz = gzsl_from_scores(scores, split.labels, split.is_fit, m=2)
    return choose_gamma(gz, k=1, per_class=True)


def _check_names(cls: type[ZSLModel], names: set[str]) -> None:
    unknown = sorted(names - set(cls.defaults))
    if unknown:
        raise UserInputError(
            f"{cls.name}: unknown hyper-parameters {preview(unknown)}; it has {preview(sorted(cls.defaults))}"
        )


def search_hyperparameters(
    name: str,
    grid: dict[str, list[Any]] | None,
    split: ValidationSplit,
    semantics: ClassVectors | None,
    graph: ClassGraph | None = None,
    *,
    mode: str = "zsl",
    base_params: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> SearchResult:
    """Fit every grid point on ``split.fit``, score it on the validation images (see module).

    ``base_params`` are fixed for every point (grid values override them); ``grid=None`` uses the
    model class's ``grid``. Ties go to the first point in :func:`grid_points` order. ``progress``
    receives one line per point (default: the log).
    """
    if mode not in MODES:
        raise UserInputError(f"selection mode must be one of {MODES}, got {mode!r}")
    cls = MODELS.get(name)
    grid = dict(cls.grid if grid is None else grid)
    base = dict(base_params or {})
    _check_names(cls, set(base) | set(grid))
    points = grid_points(grid) if grid else [{}]
    param_sets = [{**base, **point} for point in points]
    for params in param_sets:
        create(cls.name, **params)  # every point's values checked before any fit
    with blas_threads(gram_flops(split.fit)):
        return _search(cls, points, param_sets, split, semantics, graph, mode, progress or log.info)


def _search(
    cls: type[ZSLModel],
    points: list[dict[str, Any]],
    param_sets: list[dict[str, Any]],
    split: ValidationSplit,
    semantics: ClassVectors | None,
    graph: ClassGraph | None,
    mode: str,
    report: Callable[[str], None],
) -> SearchResult:
    criterion = "H" if mode == "gzsl" else "top-1"
    all_params, scores, gammas = [], [], []
    best: tuple[float, int, ZSLModel | None] = (-np.inf, -1, None)
    fitted = cls.fit_many(param_sets, split.fit, semantics, graph)  # shares work between points
    progress = tqdm(fitted, total=len(points), desc=f"{cls.name} grid", disable=None, leave=False)
    for i, (params, model) in enumerate(zip(param_sets, progress, strict=True)):
        gamma = None
        if mode == "zsl":
            value = zsl_score(model, split)
        else:
            gamma, value = calibration(model, split)
        all_params.append(params)
        scores.append(float(value))
        gammas.append(gamma)
        report(f"{cls.name} {params}: val {criterion} {value:.4f}")
        if value > best[0]:
            best = (float(value), i, model)
    result = SearchResult(
        best_params=all_params[best[1]],
        best_score=best[0],
        mode=mode,
        fit_wnids=split.fit_wnids,
        val_wnids=split.val_wnids,
        points=points,
        params=all_params,
        scores=scores,
        gammas=gammas,
        best_model=best[2],
    )
    if mode == "gzsl":
        result.gamma, result.validation_h = gammas[best[1]], best[0]
    elif split.calibrates:
        result.gamma, result.validation_h = calibration(best[2], split)
    return result
