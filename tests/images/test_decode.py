import io

import numpy as np
import pytest
from PIL import Image

from imagenet_zsl.features.synthetic_store import encode, smooth_image
from imagenet_zsl.images.decode import DecodeFailure, decode_rgb, is_plain_ycbcr_jpeg


@pytest.fixture(scope="module")
def picture():
    return smooth_image(np.random.default_rng(3), 60, 80)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_plain_jpeg_decodes_to_rgb_close_to_the_source(picture):
    image = decode_rgb(encode(picture, "jpeg", quality=95))
    assert image.mode == "RGB" and image.size == (80, 60)
    assert np.abs(np.asarray(image, dtype=int) - picture).mean() < 8  # JPEG loss on noise


def test_cmyk_jpeg_is_converted_to_the_right_colours(picture):
    image = decode_rgb(encode(picture, "cmyk", quality=95))
    assert image.mode == "RGB"
    array = np.asarray(image, dtype=int)
    assert np.abs(array - picture).mean() < 8
    assert np.abs(array - (255 - picture)).mean() > 60  # not inverted


def test_grayscale_jpeg_becomes_three_equal_channels(picture):
    array = np.asarray(decode_rgb(encode(picture, "gray")), dtype=int)
    assert array.shape == (60, 80, 3)
    assert np.array_equal(array[..., 0], array[..., 1]) and np.array_equal(array[..., 1], array[..., 2])
    grey = np.asarray(Image.fromarray(picture).convert("L"), dtype=int)
    assert np.abs(array[..., 0] - grey).mean() < 8


def test_png_named_jpeg_is_decoded_losslessly(picture):
    assert np.array_equal(np.asarray(decode_rgb(encode(picture, "png"))), picture)


def test_rgba_palette_and_16_bit_images_convert(picture):
    rgba = Image.fromarray(picture).convert("RGBA")
    assert np.array_equal(np.asarray(decode_rgb(_png(rgba))), picture)
    palette = Image.fromarray(picture).convert("P")
    palette.info["transparency"] = 0
    assert decode_rgb(_png(palette)).mode == "RGB"
    deep = np.array([[0, 257 * 128], [65535, 257]], dtype=np.uint16)
    array = np.asarray(decode_rgb(_png(Image.fromarray(deep))))
    # 16-bit grey is scaled to 8 bits (not clipped to white)
    assert array[..., 0].tolist() == [[0, 128], [255, 1]]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file (0 bytes)"),
        (b"<html>gone</html>", "not an image (text/HTML content)"),
        (b"\x00\x01\x02garbage" * 5, "not an image (starts with"),
    ],
)
def test_undecodable_bytes_raise_decode_failure_with_reason(data, reason):
    with pytest.raises(DecodeFailure) as caught:
        decode_rgb(data)
    assert str(caught.value).startswith(reason)


def test_truncated_jpeg_is_skipped_not_padded(picture):
    data = encode(picture, "truncated")
    with pytest.raises(DecodeFailure, match=r"^truncated image"):
        decode_rgb(data)
    whole = encode(picture, "jpeg")
    with pytest.raises(DecodeFailure):
        decode_rgb(whole[:-100])


def test_gpu_decoder_gets_only_complete_three_component_jpegs(picture):
    assert is_plain_ycbcr_jpeg(encode(picture, "jpeg"))
    progressive = io.BytesIO()
    Image.fromarray(picture).save(progressive, "JPEG", progressive=True)
    assert is_plain_ycbcr_jpeg(progressive.getvalue())
    for kind in ("cmyk", "gray", "png", "truncated", "empty", "html"):
        assert not is_plain_ycbcr_jpeg(encode(picture, kind)), kind


def test_jpeg_with_garbage_inside_is_rejected_by_pil(picture):
    data = encode(picture, "corrupt")
    assert is_plain_ycbcr_jpeg(data)  # looks complete: the GPU decoder tries, fails, PIL decides
    with pytest.raises(DecodeFailure, match=r"^decode error: OSError: broken data stream"):
        decode_rgb(data)


@pytest.mark.parametrize("size", [(1200, 900), (640, 480), (2000, 600)])
def test_draft_decode_gives_the_same_crop_within_tolerance(size):
    """DCT-scaled decoding (PIL draft) before the resize: the crop differs by < 1.5 grey levels on
    average and < 1% of pixels differ by more than 24 levels (stated tolerance)."""
    from imagenet_zsl.features.transforms import Preprocessing

    width, height = size
    picture = smooth_image(np.random.default_rng(7), height, width)
    data = encode(picture, "jpeg", quality=90)
    pre = Preprocessing()
    full = pre.crop_pil(decode_rgb(data)).astype(int)
    drafted_image = decode_rgb(data, min_side=pre.resize)
    assert min(drafted_image.size) >= pre.resize
    if min(size) >= 2 * pre.resize:
        assert drafted_image.size[0] < width  # really decoded at reduced scale
    drafted = pre.crop_pil(drafted_image).astype(int)
    assert full.shape == drafted.shape == (3, 224, 224)
    diff = np.abs(full - drafted)
    assert diff.mean() < 1.5 and (diff > 24).mean() < 0.01


def test_draft_leaves_small_and_non_jpeg_images_untouched(picture):
    data = encode(picture, "jpeg", quality=95)
    assert np.array_equal(np.asarray(decode_rgb(data, min_side=40)), np.asarray(decode_rgb(data)))
    png = _png(Image.fromarray(picture))
    assert np.array_equal(np.asarray(decode_rgb(png, min_side=8)), np.asarray(decode_rgb(png)))
