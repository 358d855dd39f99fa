"""DGP's optional second stage (Kampffmeyer et al., CVPR 2019; reference ``train_resnet_fit.py``).

The GCN predicts a classifier for every class from the graph, but the backbone's features were
never trained to suit those predicted classifiers. The second stage fixes the predicted
classifiers of the seen classes as the network's last layer and trains the backbone under them
with cross-entropy on the seen classes' images, so the features move towards what the predicted
classifiers (seen and, by sharing the graph, unseen ones) separate. Features are then re-extracted
with the fine-tuned backbone (``imagenet-zsl extract --weights OUT/backbone.pt``) and the unseen
classes are scored with the same predicted classifiers.

Both variants, as the reference: logits = [x, 1] · ŵ_cᵀ with ŵ_c the L2-normalised GCN output of
class c (D + 1: weights and bias), frozen; SGD with momentum 0.9 (reference lr 1e-4, no weight
decay, batch 64).

* ``scope="backbone"`` — the reference's recipe: the whole backbone trains (the reference's
  optimiser holds all of ``resnet_base``), in train mode (BatchNorm uses batch statistics and
  updates its running ones), with RandomResizedCrop (scale 0.08–1, aspect 3/4–4/3) and a random
  horizontal flip. Remaining difference: the random crop is taken from the extraction's resized
  centre crop (the image loader hands those out), not from the full image, and is resized back
  to the crop size (bilinear, antialiased); the draws are seeded.
* ``scope="last_block"`` (the default) — only :func:`~imagenet_zsl.features.backbones.last_block`
  trains (ResNet ``layer4``), BatchNorm statistics frozen (eval mode), no augmentation (the
  extraction's resize / centre crop), as ``images filter --finetune-last-block`` (whose data
  loading, backbone resolution and parameters this reuses). Why it is the default: cost on CPU,
  the toolkit's baseline machine. For a ResNet-50 the backward pass then covers layer4 only
  (~0.8 of ~4.1 GMACs forward), so a step costs about half a whole-backbone step (estimated from
  the FLOP counts, not measured) and keeps no activations of the frozen stages for backward; and
  with the small batches a CPU affords, frozen BatchNorm statistics are safer than batch ones.
  On a GPU at ImageNet scale the ``backbone`` variant is the faithful one.

Both: a fixed number of steps ``max(epochs · floor(n / batch), min_steps)`` (the reference runs
until stopped and keeps a checkpoint per epoch), bf16 autocast on CUDA; deterministic on CPU.
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
from imagenet_zsl.features.finetune import FinetuneParams, LastBlockFinetuner
from imagenet_zsl.features.in_memory import load_features
from imagenet_zsl.manifests import MANIFEST_NAME, file_record, write_manifest
from imagenet_zsl.models.persistence import load_model
from imagenet_zsl.safe_output import atomic_directory

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
TOOL = "imagenet-zsl finetune-dgp"
#: the output directory: backbone.pt and the one manifest (v1: written by ``manifests.write_manifest``)
OUTPUT_FORMAT = "imagenet-zsl/finetuned-backbone-v1"
CHECKPOINT_NAME = "backbone.pt"
MOMENTUM = 0.9  # train_resnet_fit.py: SGD(resnet_base.parameters(), lr=1e-4, momentum=0.9)
#: what trains: the last block (eval mode, no augmentation) or the whole backbone (train mode,
#: RandomResizedCrop + flips: the reference)
SCOPES = ("last_block", "backbone")
CROP_SCALE = (0.08, 1.0)  # torchvision's RandomResizedCrop defaults, as the reference uses them
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)


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


def crop_box(height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a random resized crop: torchvision's ``RandomResizedCrop.get_params``
    algorithm (area share in ``CROP_SCALE``, log-uniform aspect in ``CROP_RATIO``, ten tries, then
    the centre crop of the clamped aspect), drawn from ``rng`` so that runs repeat."""
    area = height * width
    log_ratio = np.log(CROP_RATIO)
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = float(np.exp(rng.uniform(*log_ratio)))
        w = int(round(np.sqrt(target * ratio)))
        h = int(round(np.sqrt(target / ratio)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    aspect = width / height
    if aspect < CROP_RATIO[0]:
        w, h = width, int(round(width / CROP_RATIO[0]))
    elif aspect > CROP_RATIO[1]:
        h, w = height, int(round(height * CROP_RATIO[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def augment(images: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """uint8 (B, 3, H, W) → uint8 (B, 3, H, W): a random resized crop of each image, resized back
    to H x W (bilinear, antialiased), then flipped left-right with probability ½ (the reference's
    ``RandomResizedCrop`` + ``RandomHorizontalFlip``)."""
    import torch  # deferred: `train` imports this; finetune-dgp tunes the process first
    import torchvision.transforms.functional as F  # deferred: as above

    height, width = int(images.shape[-2]), int(images.shape[-1])
    out = []
    for image in images:
        top, left, h, w = crop_box(height, width, rng)
        image = F.resized_crop(image, top, left, h, w, [height, width], antialias=True)
        out.append(image.flip(-1) if rng.random() < 0.5 else image)
    return torch.stack(out)


class DGPFinetuner:
    """Fine-tune the feature directory's backbone under fixed classifiers: its last block
    (``scope="last_block"``) or all of it the reference's way (``scope="backbone"``, see module).

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
        scope: str = "last_block",
    ):
        self.params = params.validate()
        if scope not in SCOPES:
            raise UserInputError(f"scope {scope!r}: use one of {', '.join(SCOPES)}")
        self.scope = scope
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
            "scope": self.scope,
            "trains": "the whole backbone" if self.whole else "the last block",
            "batchnorm": "train mode (batch statistics)" if self.whole else "frozen (eval mode)",
            "augmentation": (
                f"RandomResizedCrop(scale={CROP_SCALE}, ratio=(3/4, 4/3)) of the extraction crop, "
                "horizontal flip p=0.5"
                if self.whole
                else "none (the extraction's resize and centre crop)"
            ),
            "classes": int(len(self.classifiers)),
            "images": int(len(self.rows)),
        }

    def _logits(self, net: Any, head: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        import torch  # deferred: `train` imports this; finetune-dgp tunes the process first

        on_cuda = self.device.type == "cuda"
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_cuda else contextlib.nullcontext()
        with autocast:
            features, _ = net(
                self.normalize(images.to(self.device)).contiguous(memory_format=torch.channels_last)
            )
        features = features.float()
        return features @ head[:, :-1].T + head[:, -1]

    @property
    def whole(self) -> bool:
        """The reference's recipe: whole backbone, train mode, augmentation."""
        return self.scope == "backbone"

    def _mean_loss(self, net: Any, head: torch.Tensor) -> float:
        """Mean cross-entropy over all training images, eval mode, no augmentation."""
        import torch  # deferred: `train` imports this; finetune-dgp tunes the process first
        import torch.nn.functional as F  # deferred: as above

        training = net.training
        net.eval()
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
        net.train(training)
        return total / max(count, 1)

    def fit(self) -> DGPFinetuner:
        import torch  # deferred: `train` imports this; finetune-dgp tunes the process first
        import torch.nn.functional as F  # deferred: as above

        params = self.params
        net = copy.deepcopy(self.loader.net)
        net.requires_grad_(self.whole)
        trained = net if self.whole else last_block(net)
        trained.requires_grad_(True)
        net.train(self.whole)  # last block: frozen BatchNorm statistics, as the image filter's
        net = net.to(self.device, memory_format=torch.channels_last)
        head = torch.from_numpy(self.classifiers).to(self.device)  # fixed: never a parameter
        optimizer = torch.optim.SGD(
            [p for p in trained.parameters() if p.requires_grad],
            lr=params.lr,
            momentum=MOMENTUM,
            weight_decay=params.weight_decay,
        )
        batch = min(params.batch_size, len(self.rows))
        total = max(params.epochs * (len(self.rows) // batch), params.min_steps, 1)
        labels = torch.from_numpy(self.loader.labels)
        crops = np.random.default_rng([self.seed, 2])  # augmentation draws: apart from the batches
        self.loss_before_ = self._mean_loss(net, head)
        self.losses_: list[float] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            for item in self.loader.image_batches(_batches(self.rows, total, batch, self.seed)):
                if not len(item["pos"]):
                    continue
                images = augment(item["images"], crops) if self.whole else item["images"]
                loss = F.cross_entropy(self._logits(net, head, images), labels[item["pos"]].to(self.device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                self.losses_.append(float(loss.detach()))
        net.eval()
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
    scope: str = "last_block",
) -> dict[str, Any]:
    """Fine-tune and write ``out/backbone.pt`` (a FeatureNet state dict, loadable with
    ``extract --backbone NAME --weights out/backbone.pt``) and its manifest (``OUTPUT_FORMAT``:
    inputs, parameters, backbone, training losses) → the manifest.
    ``scope``: "last_block" (default) or "backbone" (the reference's recipe; see module)."""
    import torch  # deferred: `train` imports this; finetune-dgp tunes the process first

    model = load_model(model_dir)
    tuner = DGPFinetuner(model, features, params, seed=seed, device=device, scope=scope)
    inputs = [model_dir, features, params.images]
    with atomic_directory(out, tool=TOOL, inputs=inputs) as tmp:
        tuner.fit()
        state = {k: v.detach().clone().contiguous() for k, v in tuner.net_.state_dict().items()}
        torch.save(state, tmp / CHECKPOINT_NAME)
        manifest = write_manifest(
            tmp,
            format=OUTPUT_FORMAT,
            tool=TOOL,
            inputs={
                "model": file_record(Path(model_dir) / MANIFEST_NAME),
                "features": file_record(Path(features) / MANIFEST_NAME),
                "images": str(params.images),
            },
            parameters=tuner.describe(),
            fields={
                "backbone": tuner.loader.backbone,
                "model": str(model_dir),
                "features": str(features),
                "training": {
                    "steps": len(tuner.losses_),
                    "loss_before": tuner.loss_before_,
                    "loss_after": tuner.loss_after_,
                    "loss_first_step": tuner.losses_[0] if tuner.losses_ else None,
                    "loss_last_step": tuner.losses_[-1] if tuner.losses_ else None,
                },
            },
        )
    return manifest
