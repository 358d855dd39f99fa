"""The ImageNet normalisation, worked out by hand on one known pixel, through the extraction's own
path (the backbone's preprocessing → ``crop_pil`` → ``normalizer``).

Why: every other transform test compares the toolkit with torchvision's pipeline built from the
same ``Preprocessing``, so a mean or std written in the wrong channel order (BGR) agrees with
itself and passes; only values computed by hand catch it. torchvision's weights carry the
constants too, so the toolkit's are also checked against theirs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from imagenet_zsl.features.backbones import backbone_preprocessing, create_backbone, torchvision_preprocessing
from imagenet_zsl.features.transforms import Preprocessing

PIXEL = (255, 0, 128)  # R, G, B
# (x / 255 − mean) / std per channel, RGB order: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)
HAND = (
    (1.0 - 0.485) / 0.229,  # R: 0.515 / 0.229 = 2.24890...
    (0.0 - 0.456) / 0.224,  # G: −0.456 / 0.224 = −2.03571...
    (128 / 255 - 0.406) / 0.225,  # B: (0.50196... − 0.406) / 0.225 = 0.42649...
)


def _uniform(width: int = 256, height: int = 300) -> Image.Image:
    """One colour, shorter side 256: the resize keeps the image, the crop is that colour exactly."""
    return Image.new("RGB", (width, height), PIXEL)


def test_hand_values_are_what_the_constants_say():
    assert HAND == pytest.approx((2.2489083, -2.0357143, 0.4264924), abs=1e-6)


def test_extraction_path_normalises_each_channel_by_hand():
    net, _ = create_backbone("tiny-test", weights="random")
    pre = backbone_preprocessing(net)
    crop = pre.crop_pil(_uniform())
    assert crop.shape == (3, 224, 224)
    assert [int(v) for v in crop[:, 0, 0]] == list(PIXEL) and (crop == crop[:, :1, :1]).all()
    out = pre.normalizer("cpu")(torch.from_numpy(crop)[None])
    assert out.shape == (1, 3, 224, 224)
    for channel, expected in enumerate(HAND):
        np.testing.assert_allclose(out[0, channel].numpy(), expected, rtol=0, atol=1e-5)


def test_reference_pipeline_gives_the_same_hand_values():
    """torchvision's own ToTensor + Normalize with the toolkit's constants (a resize on the way:
    one colour stays that colour)."""
    out = Preprocessing().reference_transform()(_uniform(400, 320))
    np.testing.assert_allclose(out[:, 0, 0].numpy(), HAND, rtol=0, atol=1e-5)


def test_constants_are_torchvision_s():
    """ResNet-50's weights record their evaluation transform (no download): the same mean and std
    in the same (RGB) order as the toolkit's default."""
    own = Preprocessing()
    tv = torchvision_preprocessing("resnet50", "IMAGENET1K_V1")
    assert tv.mean == pytest.approx(own.mean) and tv.std == pytest.approx(own.std)
    assert own.mean == (0.485, 0.456, 0.406) and own.std == (0.229, 0.224, 0.225)
