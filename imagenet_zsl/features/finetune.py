"""Fine-tune a backbone's last block on a fold of images: the fold trainer behind
``imagenet-zsl images filter --finetune-last-block``.

A softmax layer on frozen features can only re-weight what the backbone already separates; for
classes the backbone never saw (most of ImageNet-21K), training its last block on the candidate
classes judges images more like a supervised classifier would (Hascoet et al. fine-tune).

:class:`LastBlockFinetuner` is called once per (seed, fold) by the image filter's cross-fitting
(``image_filter.crossfit.CrossFitFilter``, a stage above this one, which hands it the training and
held-out rows). Each call copies the backbone (the one the feature directory's manifest records,
or ``--backbone`` / ``--weights``), freezes everything but
:func:`~imagenet_zsl.features.backbones.last_block`, adds a new linear head over the C candidate
classes, trains on the training rows' images and predicts the held-out rows. Images are the
feature directory's ids (``"<wnid>/<member>"``) read from the image store and preprocessed exactly
as at extraction (resize, centre crop, normalise; no augmentation), so folds, outputs and resume
are those of the feature-based filter.

Training: AdamW, ``max(epochs * floor(n_train / batch_size), min_steps)`` steps over full
shuffled batches, cosine decay; the head learns at ``lr``, the block at ``lr / 10``. BatchNorm
layers keep their running statistics (the whole net stays in eval mode): small fine-tuning batches
would corrupt them. bf16 autocast and channels_last on CUDA; on CPU it is deterministic (and slow
at scale).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.backbones import create_backbone, last_block
from imagenet_zsl.features.in_memory import LoadedFeatures
from imagenet_zsl.features.loading import ImageDataset, WorkList, image_loader
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.images.store import open_store

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BLOCK_LR_SCALE = 0.1  # the pretrained block moves 10x slower than the freshly initialised head


@dataclass(frozen=True)
class FinetuneParams:
    """How to fine-tune (all of it goes into the output manifest).

    ``images``: the image store the features were extracted from. ``backbone`` / ``weights``:
    None = as recorded in the feature directory's manifest. ``workers``: DataLoader decode
    processes (None: 0 on CPU, up to 8 on CUDA). ``allow_incomplete``: read a store that lacks
    what it declares (``--allow-incomplete``, as extract), its findings recorded (:meth:`describe`).
    """

    images: str
    backbone: str | None = None
    weights: str | None = None
    epochs: int = 3
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    min_steps: int = 0
    workers: int | None = None
    allow_incomplete: bool = False

    def validate(self) -> FinetuneParams:
        """``self`` if every value is usable; a UserInputError naming the flag otherwise."""
        checks = [
            (self.epochs >= 1, f"--finetune-epochs must be at least 1 (got {self.epochs})"),
            (self.batch_size >= 1, f"--finetune-batch-size must be at least 1 (got {self.batch_size})"),
            (self.lr > 0, f"--finetune-lr must be positive (got {self.lr})"),
            (self.weight_decay >= 0, f"weight_decay must be >= 0 (got {self.weight_decay})"),
            (self.min_steps >= 0, f"min_steps must be >= 0 (got {self.min_steps})"),
            (self.workers is None or self.workers >= 0, f"--workers must be >= 0 (got {self.workers})"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        return self


def _recorded_backbone(manifest: dict[str, Any]) -> tuple[str | None, str | None, int]:
    """(name, weights argument, seed) of the backbone the feature manifest records."""
    record = manifest.get("backbone")
    if not isinstance(record, dict):
        return (record if isinstance(record, str) else None), None, 0
    weights = record.get("weights") or {}
    source = weights.get("source")
    if source == "random":
        return record.get("name"), "random", int(weights.get("seed") or 0)
    if source == "file":
        return record.get("name"), weights.get("path"), 0
    return record.get("name"), None, 0  # torch hub / Hugging Face cache


def _recorded_preprocessing(manifest: dict[str, Any]) -> Preprocessing:
    """The preprocessing the feature manifest records (:meth:`Preprocessing.from_record`: the
    standard one when it records none), one centre crop per image: the fine-tuned block trains on
    single crops, also of features averaged over ten."""
    return replace(Preprocessing.from_record(manifest.get("preprocessing")), ten_crop=False)


class LastBlockFinetuner:
    """``trainer(train_rows (n,), test_rows (m,), seed) -> predictions (m,) int32`` (-1 where the
    image could not be decoded): rows index the feature directory's images (N of them)."""

    def __init__(
        self, data: LoadedFeatures, params: FinetuneParams, device: torch.device, progress: bool = False
    ):
        self.params = params.validate()
        manifest = data.manifest
        name, weights, weights_seed = _recorded_backbone(manifest)
        if params.backbone is not None:
            name, weights, weights_seed = params.backbone, params.weights, 0
        elif params.weights is not None:
            weights, weights_seed = params.weights, 0
        if name is None:
            raise UserInputError(
                f"{data.path}: the feature manifest records no backbone; give --backbone NAME "
                "(and --weights PATH) for --finetune-last-block"
            )
        self.net, self.weights_info = create_backbone(name, weights, seed=weights_seed)
        self.net.want_logits = False
        last_block(self.net)  # refuses backbones without a recognisable last block, up front
        self.backbone = name
        self.pre = _recorded_preprocessing(manifest)

        if not Path(params.images).expanduser().exists():
            raise UserInputError(f"--images {params.images}: image store not found")
        store_record = (manifest.get("inputs") or {}).get("store") or {}
        val_labels = ((manifest.get("inputs") or {}).get("val_labels") or {}).get("path")
        layout = store_record.get("layout", "auto")
        if layout == "flat" and (val_labels is None or not Path(val_labels).is_file()):
            raise UserInputError(
                f"--images {params.images}: the features come from a flat (val) store and its "
                f"labels file {val_labels} is gone; restore it"
            )
        store = open_store(
            params.images,
            layout,
            val_labels if layout == "flat" else None,
            progress=progress,
            allow_incomplete=params.allow_incomplete,
        )
        self.store_ledger = store.ledger_record()  # recorded as extract records it
        rows = _store_rows(store.image_ids(), data.ids, params.images)
        self.work = WorkList.from_store_rows(store, rows, data.classes, data.labels)
        self.reader = store.reader()
        self.labels = data.labels.astype(np.int64)
        self.num_classes = len(data.classes)
        self.device = device
        self.progress = progress
        if device.type == "cpu":
            log.warning(
                "--finetune-last-block on CPU: fine for small stores, days at ImageNet scale; "
                "run it on a CUDA GPU"
            )

    def describe(self) -> dict[str, Any]:
        """For the manifest and the resume key."""
        return {
            **asdict(self.params),
            "backbone": self.backbone,
            "weights": self.weights_info.describe(),
            "preprocessing": self.pre.describe(),
            "block_lr_scale": BLOCK_LR_SCALE,
            "store_ledger": self.store_ledger,
        }

    # -- data ---------------------------------------------------------------------------------

    def image_batches(self, batches: list[list[int]]) -> Iterable[dict[str, Any]]:
        """Decoded, preprocessed images of each batch of feature-directory rows, in order: dicts
        with ``images`` (n, 3, crop, crop) uint8 and ``pos`` (n,) the rows decoded (undecodable
        images are left out)."""
        dataset = ImageDataset(self.work, 0, len(self.work), self.reader, self.pre)
        on_cuda = self.device.type == "cuda"
        workers = self.params.workers
        if workers is None:
            workers = 0 if not on_cuda else 8
        return image_loader(dataset, batches, workers=workers, pin_memory=on_cuda)

    # -- one fold -----------------------------------------------------------------------------

    def __call__(self, train_rows: np.ndarray, test_rows: np.ndarray, seed: int) -> np.ndarray:
        import torch  # deferred: training and the image filter import this module without torch (CPU fits)
        import torch.nn.functional as F  # deferred: as torch above

        params, device = self.params, self.device
        on_cuda = device.type == "cuda"
        net = copy.deepcopy(self.net)
        net.requires_grad_(False)
        block = last_block(net)
        block.requires_grad_(True)
        net.eval()  # frozen BatchNorm statistics (see the module docstring)
        net = net.to(device, memory_format=torch.channels_last)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            dim = self._dim(net)
            head = torch.nn.Linear(dim, self.num_classes).to(device)
        optimizer = torch.optim.AdamW(
            [
                {"params": list(block.parameters()), "lr": params.lr * BLOCK_LR_SCALE},
                {"params": list(head.parameters()), "lr": params.lr},
            ],
            weight_decay=params.weight_decay,
        )
        batch = min(params.batch_size, len(train_rows))
        total = max(params.epochs * (len(train_rows) // batch), params.min_steps, 1)
        generator = torch.Generator().manual_seed(seed)
        batches: list[list[int]] = []
        while len(batches) < total:
            order = train_rows[torch.randperm(len(train_rows), generator=generator).numpy()]
            batches += [order[s : s + batch].tolist() for s in range(0, len(order) - batch + 1, batch)][
                : total - len(batches)
            ]
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
        normalize = self.pre.normalizer(device)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_cuda else contextlib.nullcontext()
        labels = torch.from_numpy(self.labels)

        def logits_of(images: torch.Tensor) -> torch.Tensor:
            x = normalize(images.to(device, non_blocking=True))
            with autocast:
                features, _ = net(x.contiguous(memory_format=torch.channels_last))
            return head(features.float())

        for item in tqdm(
            self.image_batches(batches),
            total=total,
            desc="fine-tune steps",
            leave=False,
            disable=not self.progress,
        ):
            if len(item["pos"]):
                loss = F.cross_entropy(logits_of(item["images"]), labels[item["pos"]].to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            schedule.step()

        predictions = np.full(len(test_rows), -1, dtype=np.int32)
        chunks = [
            test_rows[s : s + params.batch_size].tolist() for s in range(0, len(test_rows), params.batch_size)
        ]
        with torch.inference_mode():
            for item in self.image_batches(chunks):
                if len(item["pos"]):
                    where = np.searchsorted(test_rows, item["pos"].numpy())
                    predictions[where] = logits_of(item["images"]).argmax(dim=1).cpu().numpy()
        return predictions

    def _dim(self, net: Any) -> int:
        import torch  # deferred: training and the image filter import this module without torch (CPU fits)

        with torch.no_grad():
            probe = torch.zeros(1, 3, self.pre.crop, self.pre.crop, device=next(net.parameters()).device)
            return int(net(probe)[0].shape[1])


def _store_rows(store_ids: np.ndarray, wanted: np.ndarray, images: str) -> np.ndarray:
    """Store row of every feature id; a UserInputError naming the ids the store lacks."""
    import pandas as pd  # deferred: only --finetune-last-block needs its fast index lookup

    rows = pd.Index(store_ids).get_indexer(pd.Index(wanted))
    missing = wanted[rows < 0]
    if len(missing):
        raise UserInputError(
            f"--images {images}: {len(missing)} of the {len(wanted)} images of the features are "
            f"not in this store (e.g. {preview(missing[:4].tolist(), 4)}); give the image store "
            "the features were extracted from"
        )
    return rows.astype(np.int64)
