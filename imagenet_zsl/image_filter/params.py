"""The parameters of an ambiguous-image filter run and the format name of its output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagenet_zsl.errors import UserInputError

#: v2: the one manifest (``files`` instead of ``outputs``, ``software`` instead of ``versions``)
OUTPUT_FORMAT = "imagenet-zsl/image-quality-v2"
TOOL = "imagenet-zsl images filter"
CLASSIFIERS = ("softmax", "ridge")


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
        """``self`` if every value is usable; a UserInputError naming the flag otherwise."""
        checks = [
            (self.folds >= 2, f"--folds must be at least 2 (got {self.folds})"),
            (self.seeds >= 1, f"--seeds must be at least 1 (got {self.seeds})"),
            (
                self.classifier in CLASSIFIERS,
                f"--classifier must be one of {', '.join(CLASSIFIERS)} (got {self.classifier!r})",
            ),
            (self.epochs >= 1, f"--epochs must be at least 1 (got {self.epochs})"),
            (self.batch_size >= 1, f"--batch-size must be at least 1 (got {self.batch_size})"),
            (self.lr > 0, f"--lr must be positive (got {self.lr})"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0 (got {self.weight_decay})"),
            (self.min_steps >= 0, f"min_steps must be >= 0 (got {self.min_steps})"),
            (self.ridge_alpha > 0, f"--ridge-alpha must be positive (got {self.ridge_alpha})"),
            (
                0.0 <= self.min_class_accuracy <= 1.0,
                f"--min-class-accuracy must be in [0, 1] (got {self.min_class_accuracy})",
            ),
            (self.min_images >= 0, f"--min-images must be >= 0 (got {self.min_images})"),
            (
                self.device in ("auto", "cpu") or self.device.startswith("cuda"),
                f"--device must be auto, cpu or cuda[:N] (got {self.device!r})",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        return self

    def training_key(self) -> dict[str, Any]:
        """The parameters that change per-fold predictions (class thresholds do not)."""
        keep = (
            "folds",
            "classifier",
            "epochs",
            "batch_size",
            "lr",
            "weight_decay",
            "min_steps",
            "ridge_alpha",
        )
        return {name: getattr(self, name) for name in keep}
