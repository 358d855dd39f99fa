"""The workers' crop-only resize against the plain torchvision Resize + CenterCrop on PIL."""

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode

from imagenet_zsl.features.loading import Collate
from imagenet_zsl.features.synthetic_store import smooth_image
from imagenet_zsl.features.transforms import (
    Preprocessing,
    _axis_box,
    _horizontal_first,
    _pillow_pass_order,
    resized_center_crop,
    resized_size,
)

#: (resize, crop) pairs: torchvision's 256/224, timm-style 248/224 and 288/256 (no dyadic axis:
#: whole-axis resizes), crop == resize, a crop larger than the resize (torchvision pads: the plain
#: path), and the tests' small 64/56
N_RANDOM = 300
SETTINGS = [(256, 224), (248, 224), (288, 256), (224, 224), (200, 224), (64, 56)]


def plain(image: Image.Image, resize: int, crop: int, interpolation: str) -> np.ndarray:
    mode = InterpolationMode(interpolation)
    return np.asarray(F.center_crop(F.resize(image, [resize], mode), [crop, crop]))


def path(width: int, height: int, resize: int, crop: int) -> str:
    """Which way resized_center_crop goes for this size (for the coverage checks)."""
    new_w, new_h = resized_size(width, height, resize)
    if crop > new_w or crop > new_h:
        return "plain"
    if (new_w, new_h) == (width, height):
        return "crop only"
    left, top = int(round((new_w - crop) / 2.0)), int(round((new_h - crop) / 2.0))
    out_w, out_h = _axis_box(width, new_w, left, crop)[2], _axis_box(height, new_h, top, crop)[2]
    cut = ("x" if out_w == crop else "") + ("y" if out_h == crop else "") or "none"
    first = (
        "horizontal" if _horizontal_first(_pillow_pass_order(), width, height, new_w, new_h) else "vertical"
    )
    return f"cut {cut}, {first} first"


def random_sizes(rng: np.random.Generator, n: int) -> list[tuple[int, int]]:
    sizes = []
    for i in range(n):
        kind = i % 5
        if kind == 0:  # photos, drafted or not
            w, h = rng.integers(200, 1400, 2)
        elif kind == 1:  # tiny and small: upscaled
            w, h = rng.integers(1, 300, 2)
        elif kind == 2:  # extreme aspect ratios
            w, h = rng.integers(1, 40), rng.integers(300, 1500)
            w, h = (h, w) if rng.random() < 0.5 else (w, h)
        elif kind == 3:  # odd sizes around typical ImageNet ones
            w, h = rng.integers(256, 700, 2) | 1
        else:  # portraits and landscapes up to aspect 3 (Pillow 13's vertical-first pass order)
            w, h = rng.integers(250, 520), rng.integers(250, 1500)
            w, h = (h, w) if rng.random() < 0.5 else (w, h)
        sizes.append((int(w), int(h)))
    return sizes


def test_resized_size_is_torchvisions():
    from torchvision.transforms.functional import _compute_resized_output_size

    rng = np.random.default_rng(1)
    for w, h in random_sizes(rng, 2000) + [(1, 1), (256, 256), (255, 257), (3, 100_000)]:
        for resize in (256, 248, 64, 7):
            assert list(resized_size(w, h, resize))[::-1] == _compute_resized_output_size((h, w), [resize])


@pytest.mark.parametrize(
    "size",
    [
        (500, 375),  # landscape: the shorter (dyadic) axis cut to the crop; x whole, then cut
        (375, 500),  # portrait: the same on x
        (512, 512),  # both axes dyadic
        (334, 715),  # portrait, aspect > 2: Pillow 13 resizes it vertically first
        (683, 225),  # upscaled shorter side
        (32, 1058),  # both axes cut
        (256, 300),  # already 256 on the shorter side: torchvision only crops
        (100, 80),  # upscaled
        (3000, 20),
        (1, 1),
        (2, 2000),
    ],
)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_crop_equals_torchvision_on_chosen_sizes(size, interpolation):
    rng = np.random.default_rng(sum(size))
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    pre = Preprocessing(interpolation=interpolation)
    crop = pre.crop_pil(image)
    assert crop.shape == (3, 224, 224) and crop.dtype == np.uint8
    assert np.array_equal(crop.transpose(1, 2, 0), plain(image, 256, 224, interpolation))


def test_crop_equals_torchvision_bit_for_bit_on_random_sizes():
    """Bit for bit. Measured with this generator (seed 11) on 5,000 random sizes x the 6 settings
    x bilinear/bicubic, noise and smooth pictures: 0 of 673 million values differ (max abs diff
    0); this test re-checks 300 sizes. For comparison, resizing a float box on *both* axes (also
    where the scale is no dyadic fraction) differed in 0.1-0.3% of the values, by up to 2 grey
    levels, and in 6% of one image's: ties broken the other way by float32 box coordinates."""
    rng = np.random.default_rng(0)
    seen, compared = set(), 0
    for i, (w, h) in enumerate(random_sizes(rng, N_RANDOM)):
        resize, crop = SETTINGS[i % len(SETTINGS)]
        interpolation = ("bilinear", "bicubic")[(i // len(SETTINGS)) % 2]
        if i % 2:
            array = smooth_image(rng, h, w)
        else:
            array = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        image = Image.fromarray(array)
        expected = plain(image, resize, crop, interpolation)
        got = Preprocessing(resize, crop, interpolation=interpolation).crop_pil(image)
        assert np.array_equal(got.transpose(1, 2, 0), expected), (w, h, resize, crop, interpolation)
        compared += expected.size
        seen.add(path(w, h, resize, crop))
    assert compared > 40_000_000
    expected_paths = {"plain", "cut none, horizontal first", "cut x, horizontal first"}
    expected_paths |= {"cut y, horizontal first", "cut xy, horizontal first"}
    if _pillow_pass_order() == "size":
        expected_paths |= {"cut none, vertical first", "cut x, vertical first"}
    assert seen >= expected_paths


def test_pillow_pass_order_is_recognised():
    """The installed Pillow's pass order is one the crop-only resize knows (else it is off)."""
    from PIL import __version__

    assert _pillow_pass_order() == ("size" if int(__version__.split(".")[0]) >= 13 else "horizontal")


def test_unsupported_cases_fall_back_to_torchvision():
    rng = np.random.default_rng(3)
    image = Image.fromarray(rng.integers(0, 256, (90, 120, 3), dtype=np.uint8))
    assert resized_center_crop(image, 64, 72, "bilinear") is None  # torchvision pads
    assert resized_center_crop(image.convert("L"), 64, 56, "bilinear") is None
    assert resized_center_crop(image, 64, 56, "lanczos") is None
    padded = Preprocessing(64, 72).crop_pil(image)
    assert np.array_equal(padded.transpose(1, 2, 0), plain(image, 64, 72, "bilinear"))


def test_collated_batch_is_the_stacked_crops():
    rng = np.random.default_rng(4)
    pre = Preprocessing(64, 56)
    crops = [pre.crop_pil(Image.fromarray(smooth_image(rng, 70 + i, 90))) for i in range(3)]
    batch = Collate(56)([(5, crops[0], None, None), (6, None, None, "bad"), (7, crops[1], None, None)])
    assert batch["images"].shape == (2, 3, 56, 56) and batch["images"].is_contiguous()
    assert np.array_equal(batch["images"].numpy(), np.stack([crops[0], crops[1]]))
    assert batch["pos"].tolist() == [5, 7] and batch["skipped"] == [(6, "bad")]


def test_a_workers_batch_is_stacked_straight_into_shared_memory(monkeypatch):
    """In a DataLoader worker the batch is built in shared memory (no copy on its way to the main
    process), with the same values as the main-process batch."""
    rng = np.random.default_rng(4)
    pre = Preprocessing(64, 56)
    crops = [pre.crop_pil(Image.fromarray(smooth_image(rng, 70 + i, 90))) for i in range(3)]
    items = [(5, crops[0], None, None), (6, None, None, "bad"), (7, crops[1], None, None)]
    in_main = Collate(56)(items)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    in_worker = Collate(56)(items)
    assert in_worker["images"].is_shared() and not in_main["images"].is_shared()
    assert torch.equal(in_worker["images"], in_main["images"])
    assert in_worker["pos"].tolist() == [5, 7] and in_worker["skipped"] == [(6, "bad")]
    none = Collate(56)([(6, None, None, "bad")])
    assert none["images"].shape == (0, 3, 56, 56)


def test_normalizer_is_totensor_normalize_and_leaves_its_input_alone():
    pre = Preprocessing(64, 56)
    rng = np.random.default_rng(5)
    image = Image.fromarray(smooth_image(rng, 80, 100))
    crop = torch.from_numpy(pre.crop_pil(image))
    expected = pre.reference_transform()(image)
    assert torch.equal(pre.normalizer("cpu")(crop[None])[0], expected)
    floats = crop[None].float()
    before = floats.clone()
    pre.normalizer("cpu")(floats)
    assert torch.equal(floats, before)


def test_jpegs_are_decoded_at_full_size_unless_the_draft_is_asked_for():
    """Issue 45 §1: the exact pipeline is the default; the draft is an opt-in the manifest records."""
    exact, draft = Preprocessing(), Preprocessing(jpeg_draft=True)
    assert exact.decode_min_side is None and draft.decode_min_side == 256
    assert exact.describe()["jpeg_draft"] is False and draft.describe()["jpeg_draft"] is True
