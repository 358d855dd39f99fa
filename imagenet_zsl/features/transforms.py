"""The standard ImageNet evaluation preprocessing, stated once.

Resize the shorter side to 256 (bilinear, antialiased: PIL's filter), centre-crop 224, scale to
[0, 1], normalise with the ImageNet mean/std. Decode workers only do the geometric part and ship
uint8 crops (4x less to copy than float); :meth:`Preprocessing.normalizer` runs on the model's device
and is operation-for-operation ``ToTensor`` + ``Normalize``, so features equal those of the plain
torchvision pipeline (:meth:`Preprocessing.reference_transform`) bit for bit on the PIL path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocessing:
    """Resize shorter side to ``resize``, centre-crop ``crop`` x ``crop``, normalise."""

    resize: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = field(default=IMAGENET_MEAN)
    std: tuple[float, float, float] = field(default=IMAGENET_STD)
    #: decode large JPEGs at reduced DCT scale before the resize (see ``decode_rgb(min_side=)``)
    jpeg_draft: bool = True
    #: resize filter (antialiased): "bilinear" (torchvision models) or "bicubic" (most timm/CLIP)
    interpolation: str = "bilinear"

    def _mode(self):
        from torchvision.transforms import InterpolationMode

        return InterpolationMode(self.interpolation)

    @property
    def decode_min_side(self) -> int | None:
        """The ``min_side`` to decode JPEGs with: ``resize`` when drafting, else None (full size)."""
        return self.resize if self.jpeg_draft else None

    def describe(self) -> dict[str, Any]:
        """For the manifest."""
        return {
            **asdict(self),
            "interpolation": f"{self.interpolation} (antialiased)",
            "steps": "resize shorter side, center crop, /255, (x - mean) / std",
        }

    def crop_pil(self, image: Any) -> np.ndarray:
        """PIL RGB image → uint8 array (3, crop, crop): torchvision's Resize + CenterCrop on PIL."""
        import torchvision.transforms.functional as F

        image = F.center_crop(F.resize(image, [self.resize], self._mode()), [self.crop, self.crop])
        return np.ascontiguousarray(np.asarray(image, dtype=np.uint8).transpose(2, 0, 1))

    def crop_tensor(self, image: Any) -> Any:
        """uint8 tensor (3, H, W) on any device → uint8 (3, crop, crop) (tensor resize, antialiased)."""
        import torchvision.transforms.functional as F

        image = F.resize(image, [self.resize], self._mode(), antialias=True)
        return F.center_crop(image, [self.crop, self.crop])

    def normalizer(self, device: Any) -> Any:
        """``f(uint8 (B, 3, H, W)) -> float32`` on ``device``: the same ops as ToTensor + Normalize.

        Mean and std are copied to the device once (a per-batch copy would stall the GPU stream).
        """
        import torch

        mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1).to(device)
        std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1).to(device)

        def normalize(batch: torch.Tensor) -> torch.Tensor:
            return batch.to(dtype=torch.float32).div(255).sub_(mean).div_(std)

        return normalize

    def reference_transform(self) -> Any:
        """The plain torchvision pipeline (PIL → normalised float tensor) for tests and benchmarks."""
        from torchvision import transforms

        return transforms.Compose(
            [
                transforms.Resize(self.resize, self._mode()),
                transforms.CenterCrop(self.crop),
                transforms.ToTensor(),
                transforms.Normalize(self.mean, self.std),
            ]
        )
