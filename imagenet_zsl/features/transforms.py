"""The standard ImageNet evaluation preprocessing, stated once.

Resize the shorter side to 256 (bilinear, antialiased: PIL's filter), centre-crop 224, scale to
[0, 1], normalise with the ImageNet mean/std. JPEGs are decoded at full size unless ``jpeg_draft``
(an opt-in recorded in the manifest, so drafted and exact features never compare equal). Decode
workers only do the geometric part and ship uint8 crops (4x less to copy than float);
:meth:`Preprocessing.normalizer` runs on the model's device and is operation-for-operation
``ToTensor`` + ``Normalize``, so features equal those of the plain torchvision pipeline
(:meth:`Preprocessing.reference_transform`) bit for bit on the PIL path.
Workers resample only the crop's span of an axis wherever PIL then computes the very same pixels
(:func:`resized_center_crop`), which saves about a tenth of the resize.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocessing:
    """Resize shorter side to ``resize``, centre-crop ``crop`` x ``crop``, normalise."""

    resize: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = field(default=IMAGENET_MEAN)
    std: tuple[float, float, float] = field(default=IMAGENET_STD)
    #: opt-in (``extract --jpeg-draft``): decode large JPEGs at reduced DCT scale before the resize
    #: (``decode_rgb(min_side=)``): 2-4x less decode work for large photos, but not torchvision's
    #: pixels (large photos' features: cosine 0.990-0.999 to the exact pipeline's). Off: exact.
    jpeg_draft: bool = False
    #: resize filter (antialiased): "bilinear" (torchvision models) or "bicubic" (most timm/CLIP)
    interpolation: str = "bilinear"
    #: ten crops instead of the centre one (torchvision ``TenCrop``: the 4 corners and the centre
    #: of the resized image, and the same 5 of its horizontal flip); the feature is their mean
    ten_crop: bool = False

    def _mode(self) -> Any:
        """torchvision's ``InterpolationMode`` of ``interpolation``."""
        # deferred: `extract --help` imports this module (via backbones) without torch(vision)
        from torchvision.transforms import InterpolationMode

        return InterpolationMode(self.interpolation)

    @property
    def decode_min_side(self) -> int | None:
        """The ``min_side`` to decode JPEGs with: ``resize`` when drafting, else None (full size)."""
        return self.resize if self.jpeg_draft else None

    @property
    def views(self) -> int:
        """Crops per image: 10 with ``ten_crop``, else 1."""
        return 10 if self.ten_crop else 1

    @property
    def crop_shape(self) -> tuple[int, ...]:
        """Shape of one image's uint8 crops: (3, c, c), or (10, 3, c, c) with ``ten_crop``."""
        single = (3, self.crop, self.crop)
        return (10, *single) if self.ten_crop else single

    def describe(self) -> dict[str, Any]:
        """For the manifest (and so the feature identity). ``ten_crop`` appears only when on, so
        centre-crop records stay those written before it existed."""
        record = {
            **asdict(self),
            "interpolation": f"{self.interpolation} (antialiased)",
            "steps": "resize shorter side, center crop, /255, (x - mean) / std",
        }
        del record["ten_crop"]
        if self.ten_crop:
            record["ten_crop"] = True
            record["steps"] = (
                "resize shorter side, ten crops (4 corners + centre, and the same of the horizontal "
                "flip: torchvision TenCrop), /255, (x - mean) / std; feature = mean over the 10 crops"
            )
        return record

    @classmethod
    def from_record(cls, record: Any) -> Preprocessing:
        """The preprocessing a manifest's ``preprocessing`` record (:meth:`describe`) states; the
        standard one when there is none. The one reading of a record (``finetune`` and ``predict``
        use it). A record without ``jpeg_draft`` decoded JPEGs at full size: the key came with the
        draft decoder, and every record since has it (``true`` while drafting was the default, so
        its absence never meant a draft); only records written before the draft existed lack it."""
        if not isinstance(record, dict):
            return cls()
        default = cls()
        interpolation = str(record.get("interpolation", default.interpolation))
        return cls(
            int(record.get("resize", default.resize)),
            int(record.get("crop", default.crop)),
            tuple(record.get("mean", default.mean)),
            tuple(record.get("std", default.std)),
            jpeg_draft=bool(record.get("jpeg_draft", False)),
            interpolation=interpolation.removesuffix(" (antialiased)"),
            ten_crop=bool(record.get("ten_crop", False)),
        )

    def decode_records(self) -> list[dict[str, Any]]:
        """The records (:meth:`describe`) features of this preprocessing's geometry carry, one per
        JPEG decode: exact, drafted, and exact as written before ``jpeg_draft`` was recorded (the
        key left out; :meth:`from_record` reads it as exact). ``predict`` finds the one a model's
        features recorded among them."""
        exact = replace(self, jpeg_draft=False).describe()
        drafted = replace(self, jpeg_draft=True).describe()
        before_key = {k: v for k, v in exact.items() if k != "jpeg_draft"}
        return [exact, drafted, before_key]

    def crop_pil(self, image: Any) -> np.ndarray:
        """PIL RGB image → uint8 array (3, crop, crop): torchvision's Resize + CenterCrop on PIL,
        pixel for pixel, resampling only the crop's span of an axis where that is provably exact
        (:func:`resized_center_crop`). With ``ten_crop``: (10, 3, crop, crop), torchvision's
        Resize + TenCrop in its order."""
        if self.ten_crop:
            import torchvision.transforms.functional as F  # deferred: see _mode

            crops = F.ten_crop(F.resize(image, [self.resize], self._mode()), [self.crop, self.crop])
            return np.ascontiguousarray(
                np.stack([np.asarray(c, dtype=np.uint8) for c in crops]).transpose(0, 3, 1, 2)
            )
        cropped = resized_center_crop(image, self.resize, self.crop, self.interpolation)
        if cropped is None:  # a case the crop-only resize does not cover: the plain way
            import torchvision.transforms.functional as F  # deferred: see _mode

            size = [self.crop, self.crop]
            cropped = F.center_crop(F.resize(image, [self.resize], self._mode()), size)
        return np.ascontiguousarray(np.asarray(cropped, dtype=np.uint8).transpose(2, 0, 1))

    def crop_tensor(self, image: Any) -> Any:
        """uint8 tensor (3, H, W) on any device → uint8 (3, crop, crop) (tensor resize, antialiased);
        with ``ten_crop``, (10, 3, crop, crop). A batch (n, 3, H, W) of one size gives (n, ...)."""
        # deferred: `extract --help` imports this module (via backbones) without torch
        import torch
        import torchvision.transforms.functional as F  # deferred: as torch above

        image = F.resize(image, [self.resize], self._mode(), antialias=True)
        if self.ten_crop:  # (3, c, c) crops → (10, 3, c, c); a batch's (n, 3, c, c) → (n, 10, 3, c, c)
            return torch.stack(F.ten_crop(image, [self.crop, self.crop]), dim=-4)
        return F.center_crop(image, [self.crop, self.crop])

    def crop_tensors(self, images: Sequence[Any], max_elements: int = 0) -> Any:
        """:meth:`crop_tensor` of each uint8 (3, H, W) image, all on one device → uint8
        (k, *crop_shape) in their order, pixel for pixel the per-image result. Images of one size
        are stacked and resized in one call, up to ``max_elements`` input values per call (at
        least one image: 0 resizes one image per call): the resize computes each output value from
        its own image's pixels alone, so a batch gives the values of one image at a time. Worth
        it where each call costs more than its arithmetic (kernel launches on a GPU); on a CPU the
        float resize is bound by memory and cache, and larger calls are slower (measured with
        ``tools/bench_extract.py --device-resize``). A RuntimeError of a call propagates."""
        import torch  # deferred: `extract --help` imports this module (via backbones) without torch

        if not images:
            return torch.zeros((0, *self.crop_shape), dtype=torch.uint8)
        groups: dict[tuple[int, ...], list[int]] = {}
        for k, image in enumerate(images):
            groups.setdefault(tuple(image.shape), []).append(k)
        chunks = []
        for shape, members in groups.items():
            step = max(1, max_elements // max(1, math.prod(shape)))
            chunks += [members[start : start + step] for start in range(0, len(members), step)]
        chunks.sort()  # one image per call: the input order, no reordering afterwards
        crops = []
        for chunk in chunks:
            batch = images[chunk[0]][None] if len(chunk) == 1 else torch.stack([images[k] for k in chunk])
            crops.append(self.crop_tensor(batch))
        out = torch.cat(crops) if len(crops) > 1 else crops[0]
        order = [k for chunk in chunks for k in chunk]
        if order == list(range(len(order))):
            return out
        where = torch.empty(len(order), dtype=torch.int64)
        where[torch.tensor(order)] = torch.arange(len(order))
        return out[where.to(out.device)]

    def normalizer(self, device: Any) -> Any:
        """``f(uint8 (B, 3, H, W)) -> float32`` on ``device``: the same ops as ToTensor + Normalize.

        Mean and std are copied to the device once (a per-batch copy would stall the GPU stream).
        """
        import torch  # deferred: `extract --help` imports this module (via backbones) without torch

        mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1).to(device)
        std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1).to(device)

        def normalize(batch: torch.Tensor) -> torch.Tensor:
            # in place on the float copy (never on the caller's tensor): one allocation, not two
            return batch.to(dtype=torch.float32, copy=True).div_(255).sub_(mean).div_(std)

        return normalize

    def reference_transform(self) -> Any:
        """The plain torchvision pipeline (PIL → normalised float tensor (3, c, c); with
        ``ten_crop`` (10, 3, c, c)) for tests and benchmarks."""
        # deferred: `extract --help` imports this module (via backbones) without torch
        import torch
        from torchvision import transforms  # deferred: as torch above

        if self.ten_crop:
            per_crop = transforms.Compose([transforms.ToTensor(), transforms.Normalize(self.mean, self.std)])
            return transforms.Compose(
                [
                    transforms.Resize(self.resize, self._mode()),
                    transforms.TenCrop(self.crop),
                    transforms.Lambda(lambda crops: torch.stack([per_crop(c) for c in crops])),
                ]
            )
        return transforms.Compose(
            [
                transforms.Resize(self.resize, self._mode()),
                transforms.CenterCrop(self.crop),
                transforms.ToTensor(),
                transforms.Normalize(self.mean, self.std),
            ]
        )


# ----------------------------------------------------------------------------- crop-only resize

#: PIL filter and support (in source pixels at scale 1) of the interpolations PIL antialiases
_PIL_FILTERS = {"bilinear": (2, 1.0), "bicubic": (3, 2.0)}  # Image.Resampling.BILINEAR, .BICUBIC


def resized_size(width: int, height: int, size: int) -> tuple[int, int]:
    """(width, height) that torchvision's ``F.resize(image, [size])`` gives a ``width`` x ``height``
    image: shorter side ``size``, longer ``int(size * long / short)`` (torchvision 0.29's
    ``_compute_resized_output_size`` without ``max_size``)."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def resized_center_crop(image: Any, resize: int, crop: int, interpolation: str) -> Any:
    """``F.center_crop(F.resize(image, [resize]), [crop, crop])`` of a PIL RGB image, pixel for
    pixel, resampling only what the crop needs; None where it does not apply (the caller then
    does it the plain way): non-RGB images, filters other than bilinear/bicubic, crops larger
    than the resized image (torchvision pads those), or a Pillow whose pass order
    :func:`_pillow_pass_order` does not recognise.

    PIL resamples in two passes, one per axis, rounding to uint8 in between; each output line of
    a pass is computed independently of the others. The full resize's two passes therefore run
    here as two single-axis resizes in the same order (:func:`_horizontal_first`), each cut to
    what the crop needs:

    * The first pass runs on the strip of source lines the second pass reads (:func:`_reach`),
      as PIL itself does, and the crop's columns (rows) of its output are cut out before the
      second pass, which thus resamples ``crop`` lines instead of the whole resized width
      (height).
    * Within a pass, an axis is resampled over the crop's span only where that provably gives
      the same pixels. PIL's ``resize(size, box=...)`` evaluates output pixel i of the box
      (x0, x1) at x0 + (i + 0.5) * (x1 - x0) / n, its taps clamped to the whole image, not the
      box. With x0 = left * W / W' and n = crop, that is the full resize's centre
      (left + i + 0.5) * W / W' with the same taps and weights, *if* the arithmetic is exact:
      PIL holds the box in float32 and computes in double. It is exact when W / W' is a dyadic
      fraction (e.g. the shorter side at resize 256: short / 256) and x0, x1 fit float32
      (:func:`_axis_box`); an axis with any other scale is resampled whole and cut afterwards
      (inexact centres would flip ±1 grey levels wherever a weighted sum sits on a .5: 0.1-0.3%
      of values, up to 6% in some images with bilinear, as measured).

    The resized image is (W', H') = :func:`resized_size`, the crop its pixels [left, left + crop)
    x [top, top + crop) (torchvision's ``center_crop`` offsets).
    """
    if image.mode != "RGB" or interpolation not in _PIL_FILTERS:
        return None
    order = _pillow_pass_order()
    if order is None:
        return None
    resample, support = _PIL_FILTERS[interpolation]
    width, height = image.size
    new_w, new_h = resized_size(width, height, resize)
    if crop > new_w or crop > new_h:
        return None
    left = int(round((new_w - crop) / 2.0))
    top = int(round((new_h - crop) / 2.0))
    if (new_w, new_h) == (width, height):  # torchvision returns the image itself: a plain crop
        return image.crop((left, top, left + crop, top + crop))
    # (neither axis keeps its size here: resized_size changes both sides or neither)
    x0, x1, out_w, skip_x = _axis_box(width, new_w, left, crop)
    y0, y1, out_h, skip_y = _axis_box(height, new_h, top, crop)
    if _horizontal_first(order, width, height, new_w, new_h):
        # horizontally, the rows the vertical taps reach; then vertically, the crop's columns only
        lo, hi = _reach(y0, y1, height / new_h, support, height)
        strip = _lines(image, (0, lo, width, hi)).resize((out_w, hi - lo), resample, box=(x0, 0, x1, hi - lo))
        strip = _lines(strip, (skip_x, 0, skip_x + crop, hi - lo))
        out, skip_x = strip.resize((crop, out_h), resample, box=(0, y0 - lo, crop, y1 - lo)), 0
    else:
        # vertically, the columns the horizontal taps reach; then horizontally, the crop's rows only
        lo, hi = _reach(x0, x1, width / new_w, support, width)
        strip = _lines(image, (lo, 0, hi, height)).resize(
            (hi - lo, out_h), resample, box=(0, y0, hi - lo, y1)
        )
        strip = _lines(strip, (0, skip_y, hi - lo, skip_y + crop))
        out, skip_y = strip.resize((out_w, crop), resample, box=(x0 - lo, 0, x1 - lo, crop)), 0
    if out.size != (crop, crop):
        out = out.crop((skip_x, skip_y, skip_x + crop, skip_y + crop))
    return out


def _lines(image: Any, box: tuple[int, int, int, int]) -> Any:
    """``image.crop(box)``, or the image itself where the box is all of it (a crop copies)."""
    return image if box == (0, 0, *image.size) else image.crop(box)


def _axis_box(size: int, new: int, offset: int, crop: int) -> tuple[float, float, int, int]:
    """One axis of :func:`resized_center_crop`: (box start, box stop, pixels to resample to,
    offset of the crop in them). The crop's own span [offset, offset + crop) when PIL computes
    its centres exactly (scale ``size / new`` dyadic, box ends and length exact in float32),
    else the whole axis [0, size) → ``new`` pixels."""
    scale = Fraction(size, new)
    start, stop = offset * scale, (offset + crop) * scale
    dyadic = scale.denominator & (scale.denominator - 1) == 0
    if dyadic and all(Fraction(float(np.float32(v))) == v for v in (start, stop, stop - start)):
        return float(start), float(stop), crop, 0
    return 0.0, float(size), new, offset


def _reach(start: float, stop: float, scale: float, support: float, size: int) -> tuple[int, int]:
    """[lo, hi): a superset of the source indices read by a resize of the box [start, stop) at
    ``scale`` source pixels per output pixel (PIL's taps: centre ± support x max(1, scale))."""
    reach = support * max(1.0, scale) + 1.0
    return max(0, math.floor(start - reach)), min(size, math.ceil(stop + reach))


def _horizontal_first(order: str, in_w: int, in_h: int, out_w: int, out_h: int) -> bool:
    """Whether PIL's ``resize`` of an ``in_w`` x ``in_h`` image to ``out_w`` x ``out_h`` (any box)
    runs its horizontal pass first (``order`` from :func:`_pillow_pass_order`)."""
    if order == "horizontal":
        return True
    shrink_h = in_h - out_h
    return not (shrink_h > 0 and shrink_h > (in_w - out_w) * 2)


@functools.cache
def _pillow_pass_order() -> str | None:
    """Which pass the installed Pillow runs first, checked once per process on a noise image where
    the two orders differ: "horizontal" (always, Pillow < 13), "size" (vertical first when the
    height shrinks by more than twice the width, Pillow 13), or None (neither: not used)."""
    noise = np.random.default_rng(0).integers(0, 256, (96, 24, 3), dtype=np.uint8)
    image = Image.fromarray(noise)
    bilinear = Image.Resampling.BILINEAR

    def check(out: tuple[int, int]) -> str | None:
        whole = np.asarray(image.resize(out, bilinear))
        h_first = np.asarray(image.resize((out[0], 96), bilinear).resize(out, bilinear))
        v_first = np.asarray(image.resize((24, out[1]), bilinear).resize(out, bilinear))
        if np.array_equal(whole, h_first) and not np.array_equal(whole, v_first):
            return "horizontal"
        if np.array_equal(whole, v_first) and not np.array_equal(whole, h_first):
            return "vertical"
        return None

    tall, wide = check((20, 40)), check((13, 90))  # height shrinks 56 > 2 x 4; 6 < 2 x 11
    if tall == "horizontal" and wide == "horizontal":
        return "horizontal"
    if tall == "vertical" and wide == "horizontal":
        return "size"
    return None
