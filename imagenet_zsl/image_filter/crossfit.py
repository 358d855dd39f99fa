"""Cross-fitting: judge every image with classifiers that never saw it (k folds x S seeds).

For every seed the images get stratified folds (:func:`~imagenet_zsl.image_filter.folds.
stratified_folds`); for every fold a classifier is trained on the other folds and predicts the
held-out one. An image is kept when it is judged and correct under every seed. Per-(seed, fold)
predictions are saved in a work directory, so an interrupted run resumes where it stopped.

Torch is imported inside the functions that compute: through :mod:`.outputs` the split builder's
``image_quality`` pool filter and ``evaluate --kept-images`` load this module and never need torch,
and ``images filter --finetune-last-block`` tunes OpenMP before torch loads.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from imagenet_zsl.atomic import atomic_save_npy, atomic_write_text, canonical_json
from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.image_filter.classifiers import (
    FoldData,
    predict_linear,
    ridge_fold_model,
    ridge_stats,
    train_softmax_fold,
)
from imagenet_zsl.image_filter.folds import fold_moments, stratified_folds
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT, FilterParams

if TYPE_CHECKING:  # torch is imported lazily so that `imagenet-zsl --help` and pool filters stay fast
    import torch

log = logging.getLogger(__name__)

#: ``fold_trainer(train_rows (n,), test_rows (m,), seed) -> predictions (m,) int32``
FoldTrainer = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


class FoldCache:
    """Per-(seed, fold) held-out predictions on disk so an interrupted run resumes.

    ``key`` identifies what produced them; a work directory with another key is wiped.
    ``directory=None`` keeps nothing.
    """

    def __init__(self, directory: Path | None, key: dict[str, Any]):
        self.directory = directory
        if directory is None:
            return
        key_text = canonical_json(key)
        key_file = directory / "key.json"
        if directory.exists() and (not key_file.exists() or key_file.read_text() != key_text):
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if not key_file.exists():
            atomic_write_text(key_file, key_text)

    def _path(self, seed: int, f: int) -> Path:
        assert self.directory is not None
        return self.directory / f"seed{seed}-fold{f}.npy"

    def get(self, seed: int, f: int, rows: int) -> np.ndarray | None:
        """The saved predictions (rows,) of fold ``f`` under ``seed``, or None."""
        if self.directory is None or not self._path(seed, f).exists():
            return None
        try:
            found = np.load(self._path(seed, f), allow_pickle=False)
        except (ValueError, OSError):
            return None
        return found if found.shape == (rows,) else None

    def put(self, seed: int, f: int, predictions: np.ndarray) -> None:
        if self.directory is not None:
            atomic_save_npy(self._path(seed, f), predictions)


class CrossFitFilter:
    """Judge every image with classifiers that never saw it (k folds, stratified, seeded).

    ``fit(features (N, D) float16/float32 ndarray, labels (N,) ints in [0, C), num_classes C)``
    sets, for S = ``params.seeds`` seeds ``params.seed, params.seed + 1, ...``:

    - ``folds_`` (S, N) int8: fold of each row, -1 where the class has fewer images than folds
    - ``predicted_`` (S, N) int32: held-out prediction, -1 where not judged
    - ``judged_`` (N,) bool, ``correct_`` (S, N) bool
    - ``keep_`` (N,) bool: judged and correct under every seed (the image-level decision)
    - ``device_``: the torch device the classifiers ran on

    ``fold_trainer`` replaces the feature classifier: ``fold_trainer(train_rows (n,), test_rows
    (m,), seed) -> predictions (m,) int32`` (e.g. :class:`~imagenet_zsl.features.finetune.
    LastBlockFinetuner`, which trains on the images); describe it in ``cache_key`` for resume.
    """

    def __init__(
        self,
        params: FilterParams | None = None,
        *,
        work_dir: Path | None = None,
        cache_key: dict[str, Any] | None = None,
        progress: bool = False,
        fold_trainer: FoldTrainer | None = None,
    ):
        self.params = (params or FilterParams()).validate()
        self.work_dir = work_dir
        self.cache_key = cache_key or {}
        self.progress = progress
        self.fold_trainer = fold_trainer

    def fit(self, features: np.ndarray, labels: np.ndarray, num_classes: int) -> CrossFitFilter:
        params = self.params
        labels = np.asarray(labels, dtype=np.int64)
        _check_inputs(features, labels, num_classes, params.folds)
        device = resolve_device(params.device)
        self.device_ = device
        if self.fold_trainer is None:
            _warn_if_slow(params, device, len(labels), features.shape[1], num_classes)
        data = _fold_data(features, labels, num_classes, device)
        cache = FoldCache(
            self.work_dir,
            {"format": OUTPUT_FORMAT, **self.cache_key, **params.training_key(), "device": device.type},
        )
        seeds = [params.seed + s for s in range(params.seeds)]
        self.folds_ = np.stack([stratified_folds(labels, num_classes, params.folds, s) for s in seeds])
        self.predicted_ = np.full(self.folds_.shape, -1, dtype=np.int32)
        name = params.classifier if self.fold_trainer is None else "fine-tune"
        jobs = tqdm(
            total=len(seeds) * params.folds, desc=f"cross-fit {name}", unit="fold", disable=not self.progress
        )
        with _deterministic_torch():
            for s_index, seed in enumerate(seeds):
                self._fit_seed(data, s_index, seed, cache, jobs)
        jobs.close()
        self.judged_ = self.folds_[0] >= 0
        self.correct_ = (self.predicted_ == labels[None, :]) & self.judged_[None, :]
        self.keep_ = self.correct_.all(axis=0) & self.judged_
        return self

    def _fit_seed(self, data: FoldData, s_index: int, seed: int, cache: FoldCache, jobs: tqdm) -> None:
        """Held-out predictions of every fold of seed number ``s_index`` into ``predicted_``."""
        params = self.params
        fold = self.folds_[s_index]
        held_out = [np.flatnonzero(fold == f) for f in range(params.folds)]
        cached = [cache.get(seed, f, len(held_out[f])) for f in range(params.folds)]
        todo = [f for f in range(params.folds) if cached[f] is None]
        prepared = None  # a fold_trainer reads what it needs itself
        if todo and self.fold_trainer is None and params.classifier == "softmax":
            prepared = fold_moments(data.store, fold, params.folds)
        elif todo and self.fold_trainer is None:
            prepared = ridge_stats(data.store, data.labels, fold, params.folds, data.num_classes, data.device)
        for f in range(params.folds):
            predictions = cached[f]
            if predictions is None:
                predictions = self._fit_one(data, fold, f, prepared, seed)
                cache.put(seed, f, predictions)
            self.predicted_[s_index, held_out[f]] = predictions
            jobs.update()

    def _fit_one(self, data: FoldData, fold: np.ndarray, f: int, prepared: Any, seed: int) -> np.ndarray:
        """Predictions (m,) int32 for fold ``f`` from a model trained on the other folds."""
        import torch  # deferred: only a fit loads torch (module docstring)

        fold_seed = int(np.random.SeedSequence([seed, f]).generate_state(1)[0])
        if self.fold_trainer is not None:
            train = np.flatnonzero((fold >= 0) & (fold != f))
            predictions = self.fold_trainer(train, np.flatnonzero(fold == f), fold_seed)
            return np.asarray(predictions, dtype=np.int32)
        if self.params.classifier == "softmax":
            return train_softmax_fold(data, fold, f, prepared, self.params, fold_seed, progress=self.progress)
        weight, offset = ridge_fold_model(prepared, f, self.params.ridge_alpha)
        rows = torch.from_numpy(np.flatnonzero(fold == f))
        return predict_linear(data.store, rows, weight, offset)


def _check_inputs(features: np.ndarray, labels: np.ndarray, num_classes: int, folds: int) -> None:
    if features.ndim != 2 or len(features) != len(labels):
        raise ValueError(f"features {features.shape} and labels {labels.shape} disagree")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError("labels must lie in [0, num_classes)")
    trainable = int((np.bincount(labels, minlength=num_classes) >= folds).sum())
    if trainable < 2:
        raise UserInputError(
            f"only {trainable} classes have at least --folds {folds} images; the "
            "filter needs two or more: lower --folds or add images"
        )


def _fold_data(features: np.ndarray, labels: np.ndarray, num_classes: int, device: torch.device) -> FoldData:
    """The features as one tensor: resident on the GPU when it takes under half the free memory,
    else on the CPU (batches are then copied over)."""
    import torch  # deferred: only a fit loads torch (module docstring)

    store = torch.from_numpy(np.ascontiguousarray(features))
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if store.element_size() * store.numel() < 0.5 * free:
            store = store.to(device)
    return FoldData(store, labels, torch.from_numpy(labels), num_classes, device)


def _warn_if_slow(params: FilterParams, device: torch.device, rows: int, dim: int, num_classes: int) -> None:
    """Softmax cross-fitting costs ~4 x rows x dim x classes FLOP per epoch per fold, which is
    hours on a CPU at ImageNet-21K scale; ridge needs one pass for every fold."""
    if device.type != "cpu" or params.classifier != "softmax":
        return
    seen = rows * (params.folds - 1) / params.folds
    per_fold = max(params.epochs * seen, params.min_steps * min(params.batch_size, seen))
    softmax = 4.0 * per_fold * dim * num_classes * params.folds * params.seeds
    ridge = 2.0 * rows * dim * (dim + num_classes) * params.seeds
    if softmax > 2e14:
        log.warning(
            "softmax cross-fitting on CPU needs ~%.0f TFLOP (hours at this scale); "
            "--classifier ridge needs ~%.0f TFLOP, or run on a GPU",
            softmax / 1e12,
            ridge / 1e12,
        )


@contextlib.contextmanager
def _deterministic_torch() -> Iterator[None]:
    """Deterministic torch kernels for the duration of the fit (restored afterwards)."""
    import torch  # deferred: only a fit loads torch (module docstring)

    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)
