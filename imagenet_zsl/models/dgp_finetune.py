"""DGP's optional second stage (Kampffmeyer et al., CVPR 2019; reference ``train_resnet_fit.py``).

The GCN predicts a classifier for every class from the graph, but the backbone's features were
never trained to suit those predicted classifiers. The second stage fixes the predicted
classifiers of the seen classes as the network's last layer and trains the backbone's last block
with cross-entropy on the seen classes' images, so the features move towards what the predicted
classifiers (seen and, by sharing the graph, unseen ones) separate. Features are then re-extracted
with the fine-tuned backbone (``imagenet-zsl extract --weights OUT/backbone.pt``) and the unseen
classes are scored with the same predicted classifiers.

As the reference: logits = [x, 1] · ŵ_cᵀ with ŵ_c the L2-normalised GCN output of class c (D + 1:
weights and bias), frozen; SGD with momentum 0.9 on the last block only (reference: ``layer4``,
lr 1e-4). Different from the reference, shared with ``images filter --finetune-last-block``
(whose data loading, backbone resolution and parameters this reuses): no augmentation (the
extraction's resize / centre crop), BatchNorm statistics frozen (eval mode), a fixed number of
steps ``max(epochs · floor(n / batch), min_steps)``, bf16 autocast on CUDA; deterministic on CPU.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.backbones import last_block
from imagenet_zsl.image_filter.feature_data import load_features
from imagenet_zsl.image_filter.finetune import FinetuneParams, LastBlockFinetuner
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_write_json,
    command_line,
    file_record,
    software_versions,
)
from imagenet_zsl.models.registry import load_model

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
TOOL = "imagenet-zsl finetune-dgp"
CHECKPOINT_NAME = "backbone.pt"
MOMENTUM = 0.9  # train_resnet_fit.py: SGD(layer4, lr=1e-4, momentum=0.9)


def fixed_classifiers(model: Any, classes: list[str]) -> np.ndarray:
    """(C, D + 1) float32: the model's predicted classifier of each class, L2-normalised (as the
    reference's ``F.normalize(fc_vectors)``). Every class must be a node of the model's graph."""
    if getattr(model, "node_wnids_", None) is None:  # dgp, sgcn, gcnz: a classifier per graph node
        raise UserInputError(
            f"model {getattr(model, 'name', type(model).__name__)!r} predicts no classifiers: "
            "the second stage needs a graph model (dgp, sgcn or gcnz)"
        )
    nodes = set(map(str, model.node_wnids_))
    absent = [w for w in classes if w not in nodes]
    if absent:
        raise UserInputError(
            f"{len(absent)} classes of the features are not nodes of the model's graph: {preview(absent)}"
        )
    weights = np.asarray(model.class_prototypes(classes), dtype=np.float64)
    norms = np.maximum(np.linalg.norm(weights, axis=1, keepdims=True), 1e-12)
    return (weights / norms).astype(np.float32)


def _batches(rows: np.ndarray, total: int, batch: int, seed: int) -> list[list[int]]:
    """``total`` full batches of seeded shuffles of ``rows`` (epoch after epoch)."""
    rng = np.random.default_rng(seed)
    out: list[list[int]] = []
    while len(out) < total:
        order = rows[rng.permutation(len(rows))]
        out += [order[s : s + batch].tolist() for s in range(0, len(order) - batch + 1, batch)]
    return out[:total]


class DGPFinetuner:
    """Fine-tune the last block of the feature directory's backbone under fixed classifiers.

    ``fit()`` trains (deterministic for a seed on CPU); afterwards ``net_`` is the fine-tuned
    FeatureNet, ``losses_`` the per-step training losses, ``loss_before_`` / ``loss_after_`` the
    mean cross-entropy over all training images before and after training.
    """

    def __init__(
        self,
        model: Any,
        features: str | Path,
        params: FinetuneParams,
        seed: int = 0,
        device: str = "cpu",
    ):
        self.params = params.validate()
        self.seed = int(seed)
        self.device = resolve_device(device)
        data = load_features(features, features=False)  # ids, labels, classes: no feature array
        self.classifiers = fixed_classifiers(model, data.classes)  # (C, D + 1)
        if self.classifiers.shape[1] != data.dim + 1:
            raise UserInputError(
                f"{features}: {data.dim}-d features, but the model's classifiers are "
                f"{self.classifiers.shape[1] - 1}-d: give the features the model was trained on"
            )
        self.loader = LastBlockFinetuner(data, params, self.device)  # store, backbone, preprocessing
        self.rows = np.arange(len(data.labels), dtype=np.int64)
        self.normalize = self.loader.pre.normalizer(self.device)

    def describe(self) -> dict[str, Any]:
        """For the manifest."""
        return {
            **self.loader.describe(),
            "seed": self.seed,
            "optimizer": f"SGD(momentum={MOMENTUM})",
            "classes": int(len(self.classifiers)),
            "images": int(len(self.rows)),
        }

    def _logits(self, net: Any, head: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        import torch

        on_cuda = self.device.type == "cuda"
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_cuda else contextlib.nullcontext()
        with autocast:
            features, _ = net(
                self.normalize(images.to(self.device)).contiguous(memory_format=torch.channels_last)
            )
        features = features.float()
        return features @ head[:, :-1].T + head[:, -1]

    def _mean_loss(self, net: Any, head: torch.Tensor) -> float:
        import torch
        import torch.nn.functional as F

        labels = torch.from_numpy(self.loader.labels)
        batch = self.params.batch_size
        chunks = [self.rows[s : s + batch].tolist() for s in range(0, len(self.rows), batch)]
        total, count = 0.0, 0
        with torch.inference_mode():
            for item in self.loader.image_batches(chunks):
                if len(item["pos"]):
                    logits = self._logits(net, head, item["images"])
                    target = labels[item["pos"]].to(self.device)
                    total += float(F.cross_entropy(logits, target, reduction="sum"))
                    count += len(item["pos"])
        return total / max(count, 1)

    def fit(self) -> DGPFinetuner:
        import torch
        import torch.nn.functional as F

        params = self.params
        net = copy.deepcopy(self.loader.net)
        net.requires_grad_(False)
        block = last_block(net)
        block.requires_grad_(True)
        net.eval()  # frozen BatchNorm statistics, as the image filter's fine-tuning
        net = net.to(self.device, memory_format=torch.channels_last)
        head = torch.from_numpy(self.classifiers).to(self.device)  # fixed: never a parameter
        optimizer = torch.optim.SGD(
            block.parameters(), lr=params.lr, momentum=MOMENTUM, weight_decay=params.weight_decay
        )
        batch = min(params.batch_size, len(self.rows))
        total = max(params.epochs * (len(self.rows) // batch), params.min_steps, 1)
        labels = torch.from_numpy(self.loader.labels)
        self.loss_before_ = self._mean_loss(net, head)
        self.losses_: list[float] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            for item in self.loader.image_batches(_batches(self.rows, total, batch, self.seed)):
                if not len(item["pos"]):
                    continue
                loss = F.cross_entropy(
                    self._logits(net, head, item["images"]), labels[item["pos"]].to(self.device)
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                self.losses_.append(float(loss.detach()))
        self.loss_after_ = self._mean_loss(net, head)
        self.net_ = net.to("cpu", memory_format=torch.contiguous_format)
        return self


def finetune_dgp(
    model_dir: str | Path,
    features: str | Path,
    out: str | Path,
    params: FinetuneParams,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Fine-tune and write ``out/backbone.pt`` (a FeatureNet state dict, loadable with
    ``extract --backbone NAME --weights out/backbone.pt``) and its manifest → the manifest."""
    import torch

    model = load_model(model_dir)
    tuner = DGPFinetuner(model, features, params, seed=seed, device=device)
    inputs = [model_dir, features, params.images]
    with atomic_directory(out, tool=TOOL, inputs=inputs) as tmp:
        tuner.fit()
        state = {k: v.detach().clone().contiguous() for k, v in tuner.net_.state_dict().items()}
        torch.save(state, tmp / CHECKPOINT_NAME)
        manifest = {
            "format": "imagenet-zsl/finetuned-backbone",
            "tool": TOOL,
            "command": command_line(),
            "backbone": tuner.loader.backbone,
            "model": str(model_dir),
            "features": str(features),
            "parameters": tuner.describe(),
            "training": {
                "steps": len(tuner.losses_),
                "loss_before": tuner.loss_before_,
                "loss_after": tuner.loss_after_,
                "loss_first_step": tuner.losses_[0] if tuner.losses_ else None,
                "loss_last_step": tuner.losses_[-1] if tuner.losses_ else None,
            },
            "outputs": [file_record(tmp / CHECKPOINT_NAME, root=tmp)],
            "versions": software_versions(),
        }
        atomic_write_json(tmp / MANIFEST_NAME, manifest)
    return manifest
