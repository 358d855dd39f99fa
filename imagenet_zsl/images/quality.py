"""Ambiguous-image filtering: keep an image only if a classifier that never saw it gets it right.

Hascoet et al. (CVPR 2019) call a ZSL test image *good* when a supervised classifier over the
candidate classes recognises it; ImageNet-21K's less curated classes hold many ambiguous or
mislabelled images, and a benchmark should measure zero-shot ability rather than label noise.

How it works (shapes: N images, D feature dims, C classes in the feature directory's label space,
k folds, S seeds):

1. ``load_features`` streams the feature shards once into ONE float16 (N, D) array (5,000 classes
   x 300 images x 2048-d = 6.1 GB) after checking that all shards come from one backbone.
2. ``stratified_folds`` gives every image a fold per seed (per class, shuffled, balanced).
3. ``CrossFitFilter`` trains, for every (seed, fold), a classifier on the other folds and predicts
   the held-out fold, so every image is judged by a model that never saw it. The default is a
   softmax layer on frozen features (``SoftmaxProbe``: mini-batch AdamW, float32 batches cast
   from the float16 store on the fly); ``--classifier ridge`` is a closed-form least-squares
   alternative that needs one pass over the data for all folds (much cheaper on CPU at scale).
   ``--finetune-last-block --images STORE`` instead fine-tunes the backbone's last block plus a
   new head on the images themselves for every (seed, fold) (:mod:`imagenet_zsl.images.finetune`;
   GPU with bf16 autocast when present, correct but slow on CPU); same folds, outputs and resume.
4. An image is kept when it is judged and correct under every seed; a class is kept when its
   held-out accuracy reaches ``min_class_accuracy`` and at least ``min_images`` images survive.
   Classes with fewer images than folds cannot be cross-fitted with stratified folds: they are
   not trained on, not judged, and reported as dropped with that reason.

Outputs of ``filter_feature_dir`` (one directory, written atomically): ``kept.csv`` (image_id,
wnid: kept images of kept classes), ``classes.csv`` (wnid, images_before, images_after,
heldout_accuracy, kept, reason), ``rejected.csv`` (images that failed, with the prediction that
failed them), ``manifest.json``, ``report.md`` and ``class_accuracy.png``. Interrupted runs resume
from per-(seed, fold) results kept in a sibling ``.<out>.work`` directory.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_save_npy,
    atomic_write_json,
    atomic_write_text,
    canonical_json,
    file_record,
    software_versions,
)

if TYPE_CHECKING:  # torch is imported lazily so that `imagenet-zsl --help` and pool filters stay fast
    import torch

    from imagenet_zsl.images.finetune import FinetuneParams

log = logging.getLogger(__name__)

OUTPUT_FORMAT = "imagenet-zsl/image-quality-v1"
CLASSIFIERS = ("softmax", "ridge")
CLASS_COLUMNS = ("wnid", "images_before", "images_after", "heldout_accuracy", "kept", "reason")
BLOCK_ROWS = 16384  # rows per streamed block: 16k x 2048 float32 = 128 MiB


# --------------------------------------------------------------------------------------------
# parameters


@dataclass(frozen=True)
class FilterParams:
    """Everything that shapes the filter's decisions (all of it goes into the manifest).

    ``min_steps`` gives small datasets enough optimizer steps to converge: training runs
    ``max(epochs * ceil(n_train / batch_size), min_steps)`` AdamW steps with cosine decay.
    """

    folds: int = 5
    seeds: int = 1
    seed: int = 0
    classifier: str = "softmax"
    epochs: int = 10
    batch_size: int = 1024
    lr: float = 1e-3
    weight_decay: float = 1e-4
    min_steps: int = 300
    ridge_alpha: float = 1e-2
    min_class_accuracy: float = 0.0
    min_images: int = 1
    device: str = "auto"

    def validate(self) -> FilterParams:
        checks = [
            (self.folds >= 2, f"--folds must be at least 2 (got {self.folds})"),
            (self.seeds >= 1, f"--seeds must be at least 1 (got {self.seeds})"),
            (self.classifier in CLASSIFIERS,
             f"--classifier must be one of {', '.join(CLASSIFIERS)} (got {self.classifier!r})"),
            (self.epochs >= 1, f"--epochs must be at least 1 (got {self.epochs})"),
            (self.batch_size >= 1, f"--batch-size must be at least 1 (got {self.batch_size})"),
            (self.lr > 0, f"--lr must be positive (got {self.lr})"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0 (got {self.weight_decay})"),
            (self.min_steps >= 0, f"min_steps must be >= 0 (got {self.min_steps})"),
            (self.ridge_alpha > 0, f"--ridge-alpha must be positive (got {self.ridge_alpha})"),
            (0.0 <= self.min_class_accuracy <= 1.0,
             f"--min-class-accuracy must be in [0, 1] (got {self.min_class_accuracy})"),
            (self.min_images >= 0, f"--min-images must be >= 0 (got {self.min_images})"),
            (self.device in ("auto", "cpu") or self.device.startswith("cuda"),
             f"--device must be auto, cpu or cuda[:N] (got {self.device!r})"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        return self

    def training_key(self) -> dict[str, Any]:
        """The parameters that change per-fold predictions (class thresholds do not)."""
        keep = ("folds", "classifier", "epochs", "batch_size", "lr", "weight_decay", "min_steps",
                "ridge_alpha")
        return {name: getattr(self, name) for name in keep}


def resolve_device(name: str) -> torch.device:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(f"--device {name}: no CUDA GPU is visible; use --device cpu")
    return torch.device(name)


# --------------------------------------------------------------------------------------------
# loading


@dataclass
class LoadedFeatures:
    """One in-memory copy of a feature directory: features (N, D) float16, labels (N,) int64
    into ``classes``, ids (N,) str."""

    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    classes: list[str]
    manifest_record: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)  # the feature directory's manifest
    path: Path | None = None

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])


def _npy_shape(path: Path) -> tuple[int, ...]:
    """Shape from the .npy header only (no data read)."""
    return tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)


def _check_one_backbone(directory: Path, manifest: dict[str, Any]) -> None:
    """Refuse directories whose shards come from different backbones (different dims or names)."""
    dim = int(manifest["dim"])
    shards = manifest["shards"]
    listed = {s["name"] for s in shards}
    names = {s.get("backbone") for s in shards if "backbone" in s}
    top = manifest.get("backbone")
    if isinstance(top, dict):
        if top.get("dim") is not None and int(top["dim"]) != dim:
            raise UserInputError(
                f"{directory / MANIFEST_NAME}: backbone {top.get('name')!r} is {top['dim']}-d but "
                f"the manifest's dim is {dim}; the directory mixes backbones: re-extract it"
            )
        top = top.get("name")
    if top is not None and names and names != {top}:
        names.add(top)
    if len(names) > 1:
        raise UserInputError(
            f"{directory}: shards come from different backbones ({preview(sorted(map(str, names)))});"
            " extract each backbone into its own directory and filter one at a time"
        )
    foreign = []
    for path in sorted(directory.glob("*.features.npy")):
        name = path.name[: -len(".features.npy")]
        shape = _npy_shape(path)
        if name in listed:
            if len(shape) != 2 or shape[1] != dim:
                raise UserInputError(
                    f"{path}: features have shape {shape} but the manifest says {dim}-d; shards "
                    "from different backbones are mixed in this directory: re-extract into an "
                    "empty directory"
                )
        elif len(shape) != 2 or shape[1] != dim:
            foreign.append(f"{path.name} ({shape[-1]}-d)")
        else:
            log.warning("%s: not listed in the manifest; ignored", path)
    if foreign:
        raise UserInputError(
            f"{directory}: shard files of another backbone are mixed in ({preview(foreign)}; "
            f"the manifest says {dim}-d): move them to their own directory"
        )


def load_features(path: str | Path, progress: bool = False) -> LoadedFeatures:
    """Read a feature directory once into float16 memory, validating labels and backbones."""
    from tqdm import tqdm

    from imagenet_zsl.features.shards import FeatureDir

    fdir = FeatureDir(path)
    directory = fdir.path
    _check_one_backbone(directory, fdir.manifest)
    if not fdir.classes:
        raise UserInputError(f"{directory / MANIFEST_NAME}: 'classes' is empty; nothing to filter")
    total = fdir.num_rows
    if total == 0:
        raise UserInputError(f"{directory}: the feature directory holds no images")
    features = np.empty((total, fdir.dim), dtype=np.float16)
    labels = np.empty(total, dtype=np.int64)
    ids: list[np.ndarray] = []
    start = 0
    num_classes = len(fdir.classes)
    for shard in tqdm(fdir.shards, desc="load features", unit="shard", disable=not progress):
        name, rows = shard["name"], int(shard["rows"])
        files = {kind: directory / f"{name}.{kind}.npy" for kind in ("features", "labels", "ids")}
        for kind, file in files.items():
            if not file.exists():
                raise UserInputError(
                    f"{file}: shard {kind} listed in the manifest is missing; re-run the "
                    "extraction (it resumes) or restore the file"
                )
        block = np.load(files["features"], mmap_mode="r", allow_pickle=False)
        block_labels = np.load(files["labels"], allow_pickle=False)
        block_ids = np.load(files["ids"], allow_pickle=False)
        if not (len(block) == len(block_labels) == len(block_ids) == rows):
            raise UserInputError(
                f"{files['features']}: shard has {len(block)} feature rows, {len(block_labels)} "
                f"labels and {len(block_ids)} ids but the manifest says {rows}; re-extract it"
            )
        if not np.issubdtype(block_labels.dtype, np.integer):
            raise UserInputError(f"{files['labels']}: labels must be integers, got {block_labels.dtype}")
        bad = (block_labels < 0) | (block_labels >= num_classes)
        if bad.any():
            raise UserInputError(
                f"{files['labels']}: {int(bad.sum())} images have no valid label (values "
                f"{preview(np.unique(block_labels[bad]).tolist(), 4)}; expected 0..{num_classes - 1}"
                "); the filter needs a class for every image: remove them or fix the labels"
            )
        target = features[start : start + rows]
        target[...] = block
        if not np.isfinite(target).all():
            raise UserInputError(
                f"{files['features']}: features contain NaN or inf (or overflow float16); "
                "re-extract this shard"
            )
        labels[start : start + rows] = block_labels
        ids.append(block_ids.astype(np.str_))
        start += rows
    all_ids = np.concatenate(ids)
    unique, counts = np.unique(all_ids, return_counts=True)
    if len(unique) != len(all_ids):
        raise UserInputError(
            f"{directory}: {int((counts > 1).sum())} image ids occur more than once (e.g. "
            f"{preview(unique[counts > 1][:4].tolist(), 4)}); each image must be extracted once"
        )
    record = file_record(directory / MANIFEST_NAME)
    return LoadedFeatures(features, labels, all_ids, list(fdir.classes), record,
                          dict(fdir.manifest), directory)


# --------------------------------------------------------------------------------------------
# folds


def stratified_folds(labels: np.ndarray, num_classes: int, folds: int, seed: int) -> np.ndarray:
    """Fold (N,) int8 of every row: each class shuffled and dealt round-robin over the folds.

    Each class's fold sizes differ by at most one; a random per-class starting fold keeps the
    folds balanced overall. Rows of classes with fewer than ``folds`` images get -1 (not judged).
    """
    labels = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    order = order[np.argsort(labels[order], kind="stable")]
    counts = np.bincount(labels, minlength=num_classes)
    starts = np.cumsum(counts) - counts
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels)) - starts[labels[order]]
    offset = rng.integers(0, folds, size=num_classes)
    assigned = ((rank + offset[labels]) % folds).astype(np.int8)
    assigned[counts[labels] < folds] = -1
    return assigned


def _blocks(rows: torch.Tensor, size: int = BLOCK_ROWS) -> Iterator[torch.Tensor]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def _fold_moments(
    store: torch.Tensor, fold: np.ndarray, folds: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-fold row counts (k,), feature sums (k, D) and sums of squares (k, D), float64."""
    import torch

    dim, device = store.shape[1], store.device
    sums = torch.zeros(folds, dim, dtype=torch.float64, device=device)
    squares = torch.zeros(folds, dim, dtype=torch.float64, device=device)
    fold_t = torch.from_numpy(fold.astype(np.int64)).to(device)
    judged = torch.from_numpy(np.flatnonzero(fold >= 0)).to(device)
    for rows in _blocks(judged):
        x = store[rows].to(torch.float32)
        where = fold_t[rows]
        sums += torch.zeros(folds, dim, device=device).index_add_(0, where, x).double()
        squares += torch.zeros(folds, dim, device=device).index_add_(0, where, x * x).double()
    counts = torch.from_numpy(np.bincount(fold[fold >= 0], minlength=folds)).double()
    return counts, sums.cpu(), squares.cpu()


# --------------------------------------------------------------------------------------------
# classifiers


class SoftmaxProbe:
    """Multinomial logistic regression on standardised frozen features (the "last layer").

    ``fit(store (N, D) float16/32 tensor, labels (N,) int64 tensor, rows (n,) int64 tensor)``
    trains on ``store[rows]`` only, casting each mini-batch to float32 on the fly so the store
    is never copied. Zero initialisation plus a seeded ``torch.Generator`` for the batch order
    make results reproducible.
    """

    def __init__(
        self,
        num_classes: int,
        mean: torch.Tensor,
        std: torch.Tensor,
        *,
        epochs: int = 10,
        batch_size: int = 1024,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        min_steps: int = 300,
        device: torch.device | str = "cpu",
        progress: bool = False,
    ):
        import torch

        self.num_classes = num_classes
        self.device = torch.device(device)
        self.mean = mean.to(self.device, torch.float32)
        self.inv_std = (1.0 / std).to(self.device, torch.float32)
        self.epochs, self.batch_size, self.lr = epochs, batch_size, lr
        self.weight_decay, self.min_steps = weight_decay, min_steps
        self.progress = progress

    def _inputs(self, store: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        import torch

        x = store[rows.to(store.device)].to(self.device, torch.float32, non_blocking=True)
        return (x - self.mean) * self.inv_std

    def fit(
        self, store: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor, seed: int
    ) -> SoftmaxProbe:
        import torch
        import torch.nn.functional as F
        from tqdm import tqdm

        generator = torch.Generator().manual_seed(seed)
        dim = store.shape[1]
        self.weight = torch.zeros(dim, self.num_classes, device=self.device, requires_grad=True)
        self.bias = torch.zeros(self.num_classes, device=self.device, requires_grad=True)
        optimizer = torch.optim.AdamW(
            [{"params": [self.weight], "weight_decay": self.weight_decay},
             {"params": [self.bias], "weight_decay": 0.0}],
            lr=self.lr,
        )
        batch = min(self.batch_size, len(rows))
        per_epoch = math.ceil(len(rows) / batch)
        total = max(self.epochs * per_epoch, self.min_steps)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
        targets = labels.to(self.device)
        bar = tqdm(total=total, desc="softmax steps", leave=False, disable=not self.progress)
        step = 0
        while step < total:
            order = rows[torch.randperm(len(rows), generator=generator)]
            for start in range(0, len(order) - batch + 1, batch):  # full batches only
                index = order[start : start + batch]
                logits = self._inputs(store, index) @ self.weight + self.bias
                loss = F.cross_entropy(logits, targets[index.to(self.device)])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                bar.update()
                step += 1
                if step == total:
                    break
        bar.close()
        self.weight = self.weight.detach()
        self.bias = self.bias.detach()
        return self

    def predict(self, store: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Predicted class (n,) int64 for ``store[rows]``."""
        import torch

        out = []
        with torch.no_grad():
            for block in _blocks(rows):
                logits = self._inputs(store, block) @ self.weight + self.bias
                out.append(logits.argmax(dim=1).cpu())
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


@dataclass
class _RidgeStats:
    """Per-fold sufficient statistics for least squares: one pass serves every fold."""

    counts: torch.Tensor  # (k,) rows
    sums: torch.Tensor  # (k, D)
    grams: torch.Tensor  # (k, D, D) uncentred X^T X
    class_counts: torch.Tensor  # (k, C)
    class_sums: torch.Tensor  # (k, C, D)


def _ridge_stats(
    store: torch.Tensor, labels: np.ndarray, fold: np.ndarray, folds: int, num_classes: int,
    device: torch.device,
) -> _RidgeStats:
    import torch

    dim = store.shape[1]
    f64 = dict(dtype=torch.float64, device=device)
    grams = torch.zeros(folds, dim, dim, **f64)
    sums = torch.zeros(folds, dim, **f64)
    class_sums = torch.zeros(folds * num_classes, dim, **f64)
    fold_t = torch.from_numpy(fold.astype(np.int64))
    labels_t = torch.from_numpy(labels)
    for rows in _blocks(torch.from_numpy(np.flatnonzero(fold >= 0))):
        x = store[rows.to(store.device)].to(device, torch.float32)
        where = fold_t[rows].to(device)
        slot = where * num_classes + labels_t[rows].to(device)
        class_sums.index_add_(0, slot, x.double())
        for f in range(folds):
            xf = x[where == f]
            if len(xf):
                grams[f] += (xf.T @ xf).double()
                sums[f] += xf.sum(dim=0).double()
    judged = fold >= 0
    counts = np.bincount(fold[judged], minlength=folds)
    class_counts = np.bincount(fold[judged].astype(np.int64) * num_classes + labels[judged],
                               minlength=folds * num_classes).reshape(folds, num_classes)
    return _RidgeStats(
        torch.from_numpy(counts).to(**f64), sums, grams,
        torch.from_numpy(class_counts).to(**f64), class_sums.reshape(folds, num_classes, dim),
    )


def _ridge_fold_model(stats: _RidgeStats, f: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights (D, C) and offset (C,) of ridge regression onto one-hot labels, trained on the
    folds other than ``f``: scores = x @ W + offset. The penalty is ``alpha`` times the mean
    eigenvalue of the centred Gram matrix, so it is scale-free."""
    import torch

    n = stats.counts.sum() - stats.counts[f]
    total = stats.sums.sum(0) - stats.sums[f]
    mean = total / n
    gram = stats.grams.sum(0) - stats.grams[f] - n * torch.outer(mean, mean)
    class_counts = stats.class_counts.sum(0) - stats.class_counts[f]
    cross = (stats.class_sums.sum(0) - stats.class_sums[f]).T - torch.outer(mean, class_counts)
    dim = gram.shape[0]
    penalty = alpha * torch.trace(gram) / dim + 1e-12
    chol = torch.linalg.cholesky(gram + penalty * torch.eye(dim, dtype=gram.dtype, device=gram.device))
    weight = torch.cholesky_solve(cross, chol)
    offset = class_counts / n - mean @ weight
    return weight.float(), offset.float()


def _predict_linear(
    store: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor, offset: torch.Tensor
) -> np.ndarray:
    import torch

    out = []
    with torch.no_grad():
        for block in _blocks(rows):
            x = store[block.to(store.device)].to(weight.device, torch.float32)
            out.append((x @ weight + offset).argmax(dim=1).cpu())
    return torch.cat(out).numpy().astype(np.int32) if out else np.zeros(0, np.int32)


def _train_softmax_fold(
    store: torch.Tensor, labels: torch.Tensor, fold: np.ndarray, f: int, num_classes: int,
    moments: tuple[torch.Tensor, torch.Tensor, torch.Tensor], params: FilterParams,
    device: torch.device, seed: int, progress: bool = False,
) -> np.ndarray:
    """Train a softmax probe on the folds other than ``f``; predictions (int32) for fold ``f``."""
    import torch

    counts, sums, squares = moments
    n = counts.sum() - counts[f]
    mean = (sums.sum(0) - sums[f]) / n
    var = (squares.sum(0) - squares[f]) / n - mean * mean
    std = var.clamp_min(0).sqrt().clamp_min(1e-6)
    train = torch.from_numpy(np.flatnonzero((fold >= 0) & (fold != f)))
    probe = SoftmaxProbe(
        num_classes, mean, std, epochs=params.epochs, batch_size=params.batch_size, lr=params.lr,
        weight_decay=params.weight_decay, min_steps=params.min_steps, device=device,
        progress=progress,
    ).fit(store, labels, train, seed=seed)
    return probe.predict(store, torch.from_numpy(np.flatnonzero(fold == f))).numpy().astype(np.int32)


# --------------------------------------------------------------------------------------------
# cross-fitting


class _FoldCache:
    """Per-(seed, fold) held-out predictions on disk so an interrupted run resumes."""

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

    ``fold_trainer`` replaces the feature classifier: ``fold_trainer(train_rows (n,), test_rows
    (m,), seed) -> predictions (m,) int32`` (e.g. :class:`~imagenet_zsl.images.finetune.
    LastBlockFinetuner`, which trains on the images); describe it in ``cache_key`` for resume.
    """

    def __init__(
        self, params: FilterParams | None = None, *, work_dir: Path | None = None,
        cache_key: dict[str, Any] | None = None, progress: bool = False,
        fold_trainer: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None = None,
    ):
        self.params = (params or FilterParams()).validate()
        self.work_dir = work_dir
        self.cache_key = cache_key or {}
        self.progress = progress
        self.fold_trainer = fold_trainer

    def fit(self, features: np.ndarray, labels: np.ndarray, num_classes: int) -> CrossFitFilter:
        import torch
        from tqdm import tqdm

        params = self.params
        labels = np.asarray(labels, dtype=np.int64)
        if features.ndim != 2 or len(features) != len(labels):
            raise ValueError(f"features {features.shape} and labels {labels.shape} disagree")
        if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError("labels must lie in [0, num_classes)")
        device = resolve_device(params.device)
        self.device_ = device
        counts = np.bincount(labels, minlength=num_classes)
        trainable = int((counts >= params.folds).sum())
        if trainable < 2:
            raise UserInputError(
                f"only {trainable} classes have at least --folds {params.folds} images; the "
                "filter needs two or more: lower --folds or add images"
            )
        if self.fold_trainer is None:
            _warn_if_slow(params, device, len(labels), features.shape[1], num_classes)
        store = torch.from_numpy(np.ascontiguousarray(features))
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if store.element_size() * store.numel() < 0.5 * free:
                store = store.to(device)  # resident on the GPU; else batches are copied over
        labels_t = torch.from_numpy(labels)
        cache = _FoldCache(
            self.work_dir,
            {"format": OUTPUT_FORMAT, **self.cache_key, **params.training_key(),
             "device": device.type},
        )
        seeds = [params.seed + s for s in range(params.seeds)]
        self.folds_ = np.stack([stratified_folds(labels, num_classes, params.folds, s) for s in seeds])
        self.predicted_ = np.full(self.folds_.shape, -1, dtype=np.int32)
        name = params.classifier if self.fold_trainer is None else "fine-tune"
        jobs = tqdm(total=len(seeds) * params.folds, desc=f"cross-fit {name}",
                    unit="fold", disable=not self.progress)
        with _deterministic_torch():
            for s_index, seed in enumerate(seeds):
                fold = self.folds_[s_index]
                held_out = [np.flatnonzero(fold == f) for f in range(params.folds)]
                cached = [cache.get(seed, f, len(held_out[f])) for f in range(params.folds)]
                todo = [f for f in range(params.folds) if cached[f] is None]
                prepared = None  # a fold_trainer reads what it needs itself
                if todo and self.fold_trainer is None and params.classifier == "softmax":
                    prepared = _fold_moments(store, fold, params.folds)
                elif todo and self.fold_trainer is None:
                    prepared = _ridge_stats(store, labels, fold, params.folds, num_classes, device)
                for f in range(params.folds):
                    predictions = cached[f]
                    if predictions is None:
                        predictions = self._fit_one(store, labels_t, fold, f, num_classes,
                                                    prepared, device, seed)
                        cache.put(seed, f, predictions)
                    self.predicted_[s_index, held_out[f]] = predictions
                    jobs.update()
        jobs.close()
        self.judged_ = self.folds_[0] >= 0
        self.correct_ = (self.predicted_ == labels[None, :]) & self.judged_[None, :]
        self.keep_ = self.correct_.all(axis=0) & self.judged_
        return self

    def _fit_one(self, store, labels_t, fold, f, num_classes, prepared, device, seed) -> np.ndarray:
        import torch

        fold_seed = int(np.random.SeedSequence([seed, f]).generate_state(1)[0])
        if self.fold_trainer is not None:
            train = np.flatnonzero((fold >= 0) & (fold != f))
            predictions = self.fold_trainer(train, np.flatnonzero(fold == f), fold_seed)
            return np.asarray(predictions, dtype=np.int32)
        if self.params.classifier == "softmax":
            return _train_softmax_fold(store, labels_t, fold, f, num_classes, prepared,
                                       self.params, device, fold_seed, progress=self.progress)
        weight, offset = _ridge_fold_model(prepared, f, self.params.ridge_alpha)
        rows = torch.from_numpy(np.flatnonzero(fold == f))
        return _predict_linear(store, rows, weight, offset)


def _warn_if_slow(params: FilterParams, device: torch.device, rows: int, dim: int,
                  num_classes: int) -> None:
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
            "--classifier ridge needs ~%.0f TFLOP, or run on a GPU", softmax / 1e12, ridge / 1e12,
        )


@contextlib.contextmanager
def _deterministic_torch() -> Iterator[None]:
    """Deterministic torch kernels for the duration of the fit (restored afterwards)."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


# --------------------------------------------------------------------------------------------
# class-level outcome


def class_outcomes(
    labels: np.ndarray, classes: list[str], crossfit: CrossFitFilter, params: FilterParams
) -> list[dict[str, Any]]:
    """One row per class of the label space: counts, held-out accuracy, kept, reason."""
    num_classes = len(classes)
    before = np.bincount(labels, minlength=num_classes)
    judged = np.bincount(labels[crossfit.judged_], minlength=num_classes)
    correct = np.bincount(labels, weights=crossfit.correct_.sum(axis=0), minlength=num_classes)
    after = np.bincount(labels[crossfit.keep_], minlength=num_classes)
    rows = []
    for c, wnid in enumerate(classes):
        accuracy = correct[c] / (judged[c] * params.seeds) if judged[c] else None
        if before[c] == 0:
            reason = "no images"
        elif judged[c] == 0:
            reason = (f"{before[c]} images, fewer than --folds {params.folds}: "
                      "cannot be cross-fitted")
        elif accuracy < params.min_class_accuracy:
            reason = (f"held-out accuracy {accuracy:.3f} < --min-class-accuracy "
                      f"{params.min_class_accuracy:g}")
        elif after[c] < params.min_images:
            reason = f"{after[c]} images kept < --min-images {params.min_images}"
        else:
            reason = ""
        rows.append({
            "wnid": wnid, "images_before": int(before[c]), "images_after": int(after[c]),
            "heldout_accuracy": accuracy, "kept": reason == "", "reason": reason,
        })
    return rows


# --------------------------------------------------------------------------------------------
# outputs


def _csv_text(header: tuple[str, ...] | list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _format_accuracy(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _write_class_table(path: Path, outcomes: list[dict[str, Any]]) -> None:
    rows = [[o["wnid"], o["images_before"], o["images_after"],
             _format_accuracy(o["heldout_accuracy"]), "true" if o["kept"] else "false",
             o["reason"]] for o in outcomes]
    path.write_text(_csv_text(CLASS_COLUMNS, rows))


def _write_image_table(path: Path, columns: dict[str, np.ndarray]) -> None:
    """Large image lists via pandas (C writer) with fixed formatting for byte-stable files."""
    import pandas as pd

    pd.DataFrame(columns).to_csv(path, index=False, lineterminator="\n")


def _accuracy_histogram(accuracies: np.ndarray, bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    return np.histogram(accuracies, bins=bins, range=(0.0, 1.0))


def _plot_histogram(path: Path, accuracies: np.ndarray, threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.hist(accuracies, bins=20, range=(0.0, 1.0), color="#4c72b0", edgecolor="white")
    if threshold > 0:
        ax.axvline(threshold, color="#c44e52", linestyle="--", label="--min-class-accuracy")
        ax.legend(loc="upper left")
    ax.set_xlabel("held-out accuracy of the class")
    ax.set_ylabel("classes")
    ax.set_title("Per-class held-out accuracy (cross-fitted)")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def _report_text(
    summary: dict[str, Any], outcomes: list[dict[str, Any]], params: FilterParams,
    features_dir: str, plot_name: str, classifier: str | None = None,
) -> str:
    from tabulate import tabulate

    accuracies = np.array([o["heldout_accuracy"] for o in outcomes
                           if o["heldout_accuracy"] is not None])
    counts, edges = _accuracy_histogram(accuracies)
    widest = max(int(counts.max()) if len(counts) else 0, 1)
    histogram = [[f"{edges[i]:.1f}–{edges[i + 1]:.1f}", int(counts[i]),
                  "█" * math.ceil(30 * counts[i] / widest) if counts[i] else ""]
                 for i in range(len(counts))]
    dropped = [o for o in outcomes if not o["kept"]]
    lines = [
        "# Image-quality filter report",
        "",
        f"Features: `{features_dir}` ({summary['images_before']} images, "
        f"{summary['classes_before']} classes, {summary['dim']}-d). Classifier: "
        f"{classifier or params.classifier}, cross-fitted over {params.folds} stratified folds x "
        f"{params.seeds} seed(s) from seed {params.seed}; an image is kept when every model "
        "that never saw it classifies it correctly.",
        "",
        tabulate(
            [["images", summary["images_before"], summary["images_after"]],
             ["classes", summary["classes_before"], summary["classes_after"]]],
            headers=["", "before", "after"], tablefmt="github",
        ),
        "",
        f"Overall held-out accuracy: {summary['heldout_accuracy']:.4f}. Images rejected by the "
        f"classifier: {summary['images_rejected']}; classes dropped: {summary['classes_dropped']} "
        f"(--min-class-accuracy {params.min_class_accuracy:g}, --min-images {params.min_images}).",
        "",
        "## Per-class held-out accuracy",
        "",
        f"![per-class held-out accuracy]({plot_name})",
        "",
        tabulate(histogram, headers=["accuracy", "classes", ""], tablefmt="github"),
        "",
    ]
    if dropped:
        shown = sorted(dropped, key=lambda o: o["wnid"])[:50]
        lines += [
            f"## Dropped classes ({len(dropped)}" + (", first 50 shown" if len(dropped) > 50 else "")
            + ")",
            "",
            tabulate([[o["wnid"], o["images_before"], o["images_after"],
                       _format_accuracy(o["heldout_accuracy"]), o["reason"]] for o in shown],
                     headers=["wnid", "images", "kept images", "accuracy", "reason"],
                     tablefmt="github", disable_numparse=True),
            "",
        ]
    lines += ["Full tables: `classes.csv`, `kept.csv`, `rejected.csv`.", ""]
    return "\n".join(lines)


def _check_output_dir(out: Path, features_dir: Path) -> None:
    if out.resolve() == features_dir.resolve():
        raise UserInputError(f"--out {out}: must differ from the --features directory")
    if out.exists():
        if not out.is_dir():
            raise UserInputError(f"--out {out}: exists and is not a directory")
        manifest = out / MANIFEST_NAME
        ours = False
        if manifest.exists():
            with contextlib.suppress(ValueError, OSError):
                import json

                ours = json.loads(manifest.read_text()).get("format") == OUTPUT_FORMAT
        if any(out.iterdir()) and not ours:
            raise UserInputError(
                f"--out {out}: exists and is not an earlier filter output; choose a new directory"
            )


def filter_feature_dir(
    features_dir: str | Path, out_dir: str | Path, params: FilterParams | None = None,
    *, progress: bool = False, finetune: FinetuneParams | None = None,
) -> dict[str, Any]:
    """Run the filter on a feature directory and write its output directory; return the summary.

    ``finetune``: judge images by fine-tuning the backbone's last block on the image store
    instead of a classifier on the features (:mod:`imagenet_zsl.images.finetune`).
    Nothing is written on bad input; the output directory appears in one rename on success.
    """
    params = (params or FilterParams()).validate()
    features_dir, out = Path(features_dir), Path(out_dir)
    _check_output_dir(out, features_dir)
    data = load_features(features_dir, progress=progress)
    work_dir = out.parent / f".{out.name}.work"
    cache_key: dict[str, Any] = {"features_manifest_sha256": data.manifest_record["sha256"],
                                 "images": len(data.labels)}
    trainer = None
    if finetune is not None:
        from imagenet_zsl.images.finetune import LastBlockFinetuner

        trainer = LastBlockFinetuner(data, finetune, resolve_device(params.device), progress=progress)
        cache_key["finetune"] = trainer.describe()
    crossfit = CrossFitFilter(
        params, work_dir=work_dir, progress=progress, cache_key=cache_key, fold_trainer=trainer,
    ).fit(data.features, data.labels, len(data.classes))
    outcomes = class_outcomes(data.labels, data.classes, crossfit, params)
    class_kept = np.array([o["kept"] for o in outcomes], dtype=bool)
    keep = crossfit.keep_ & class_kept[data.labels]
    wnids = np.asarray(data.classes, dtype=np.str_)
    rejected = crossfit.judged_ & ~crossfit.keep_
    first_wrong = np.argmax(~crossfit.correct_, axis=0)
    failing_prediction = crossfit.predicted_[first_wrong, np.arange(len(data.labels))]
    judged_any = crossfit.judged_.any()
    summary = {
        "images_before": int(len(data.labels)),
        "images_after": int(keep.sum()),
        "images_rejected": int(rejected.sum()),
        "classes_before": int(len(data.classes)),
        "classes_after": int(class_kept.sum()),
        "classes_dropped": int((~class_kept).sum()),
        "dim": data.dim,
        "heldout_accuracy": float(crossfit.correct_[:, crossfit.judged_].mean()) if judged_any
        else 0.0,
    }
    plot_name = "class_accuracy.png"
    with atomic_directory(out, tool="imagenet-zsl images filter") as tmp:
        _write_image_table(tmp / "kept.csv",
                           {"image_id": data.ids[keep], "wnid": wnids[data.labels[keep]]})
        _write_image_table(tmp / "rejected.csv", {
            "image_id": data.ids[rejected], "wnid": wnids[data.labels[rejected]],
            "predicted_wnid": wnids[failing_prediction[rejected]],
            "correct_seeds": crossfit.correct_.sum(axis=0)[rejected],
        })
        _write_class_table(tmp / "classes.csv", outcomes)
        accuracies = np.array([o["heldout_accuracy"] for o in outcomes
                               if o["heldout_accuracy"] is not None])
        _plot_histogram(tmp / plot_name, accuracies, params.min_class_accuracy)
        (tmp / "report.md").write_text(
            _report_text(summary, outcomes, params, str(features_dir), plot_name,
                         None if trainer is None else f"fine-tuned last block of {trainer.backbone}")
        )
        outputs = [file_record(tmp / name, root=tmp) for name in
                   ("kept.csv", "classes.csv", "rejected.csv", "report.md", plot_name)]
        inputs = {"features": str(features_dir),
                  "features_manifest_sha256": data.manifest_record["sha256"]}
        parameters = {**asdict(params), "device": crossfit.device_.type}
        if trainer is not None:
            inputs["images"] = str(finetune.images)
            parameters.update(classifier="finetune-last-block", finetune=trainer.describe())
        atomic_write_json(tmp / MANIFEST_NAME, {
            "format": OUTPUT_FORMAT,
            "tool": "imagenet-zsl images filter",
            "inputs": inputs,
            "parameters": parameters,
            "summary": summary,
            "outputs": outputs,
            "versions": software_versions(),
        })
    shutil.rmtree(work_dir, ignore_errors=True)
    return summary


# --------------------------------------------------------------------------------------------
# consumers: the split builder's `image_quality` pool filter and the evaluation


def _read_csv_rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.exists():
        raise UserInputError(f"{path}: not found; run 'imagenet-zsl images filter' first")
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise UserInputError(
                f"{path}: missing column(s) {', '.join(missing)}; expected a file written by "
                "'imagenet-zsl images filter'"
            )
        return list(reader)


def kept_classes_from(classes_csv_path: str | Path) -> set[str]:
    """The wnids a filter run kept (``kept`` column true in its ``classes.csv``)."""
    path = Path(classes_csv_path)
    if path.is_dir():
        path = path / "classes.csv"
    rows = _read_csv_rows(path, ("wnid", "kept"))
    bad = [r["wnid"] for r in rows if r["kept"] not in ("true", "false")]
    if bad:
        raise UserInputError(f"{path}: 'kept' must be true/false, bad rows: {preview(bad)}")
    return {r["wnid"] for r in rows if r["kept"] == "true"}


def kept_image_ids(out_dir: str | Path) -> set[str]:
    """Image ids a filter run kept (its ``kept.csv``), for evaluating only kept images."""
    import pandas as pd

    path = Path(out_dir)
    if path.is_dir():
        path = path / "kept.csv"
    _read_csv_rows_header_only(path, ("image_id",))
    return set(pd.read_csv(path, usecols=["image_id"], dtype=str)["image_id"].tolist())


def _read_csv_rows_header_only(path: Path, required: tuple[str, ...]) -> None:
    if not path.exists():
        raise UserInputError(f"{path}: not found; run 'imagenet-zsl images filter' first")
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split(",")
    missing = [c for c in required if c not in header]
    if missing:
        raise UserInputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected a file written by "
            "'imagenet-zsl images filter'"
        )

