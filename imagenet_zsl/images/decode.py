"""Image bytes → RGB, surviving ImageNet's reality.

The fall11 archive holds CMYK and grayscale JPEGs, PNGs (and a few GIFs) named ``.JPEG``,
zero-byte and truncated files. Everything that can be converted is converted to 8-bit RGB the way
the standard ``ImageFolder`` loader does (``Image.convert("RGB")``; EXIF orientation is ignored, as
in every published ImageNet pipeline). What cannot be decoded raises :class:`DecodeFailure` with a
short reason, which the caller records and skips; a run never crashes on one bad file.

Truncated JPEGs are *skipped*, not padded with grey (PIL's ``LOAD_TRUNCATED_IMAGES``): features of a
half-grey picture would silently pollute a class.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError

# Guard against decompression bombs well above ImageNet's largest images (~ 100 MP)
MAX_PIXELS = 250_000_000
#: the most memory one decoded image may take (PIL's storage: 4 bytes a pixel for RGB, CMYK,
#: 32-bit grey; 2 for 16-bit grey; 1 for 8-bit grey and palettes): a 169 M pixel 16-bit PNG
#: (338 MB) decodes, a bigger one is skipped with a reason rather than exhausting a worker
MAX_DECODED_BYTES = 1 << 30
#: wide-range grey images (16-bit, 32-bit, float) are converted this many pixels at a time
STRIP_PIXELS = 1 << 22
_BYTES_PER_PIXEL = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}


class DecodeFailure(Exception):
    """An image that cannot be decoded; ``str(err)`` is the reason recorded in the manifest."""


def decode_rgb(data: bytes, min_side: int | None = None) -> Image.Image:
    """Decode ``data`` (any format PIL reads) to a loaded 8-bit RGB image, or raise DecodeFailure.

    ``min_side``: the caller will shrink the image so its shorter side is ``min_side`` anyway, so
    a JPEG may be decoded at 1/2, 1/4 or 1/8 scale in the DCT domain (libjpeg's scaled decode, PIL
    ``draft``) as long as its shorter side stays at least ``min_side``: 2-10x less decode work for
    large photos; the resized result differs by about one grey level on average (the scaled IDCT
    is a different low-pass filter, see tests/images/test_decode.py), so it is an opt-in
    (``extract --jpeg-draft``); None, the default, decodes exactly. Other formats and images
    under twice ``min_side`` decode at full size, unchanged.
    """
    if not data:
        raise DecodeFailure("empty file (0 bytes)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # palette-transparency and EXIF warnings are harmless here
        try:
            image = Image.open(io.BytesIO(data))
            _check_size(image)
            if min_side is not None and image.format == "JPEG":
                _draft(image, min_side)
            image.load()
            return to_rgb(image)
        except DecodeFailure:
            raise
        except Image.DecompressionBombError as err:
            raise DecodeFailure(f"too large ({str(err)[:120]})") from None
        except MemoryError:
            raise DecodeFailure("too large to decode (out of memory)") from None
        except UnidentifiedImageError:
            raise DecodeFailure(f"not an image ({_describe_start(data)})") from None
        except (OSError, SyntaxError, ValueError) as err:
            text = str(err)
            if "truncated" in text.lower():
                raise DecodeFailure(f"truncated image ({len(data)} bytes)") from None
            raise DecodeFailure(f"decode error: {type(err).__name__}: {text[:120]}") from None
        except Exception as err:  # noqa: BLE001 - any decoder bug is a skip, never a crash
            raise DecodeFailure(f"decode error: {type(err).__name__}: {str(err)[:120]}") from None


def _check_size(image: Image.Image) -> None:
    """DecodeFailure for an image over :data:`MAX_PIXELS` or :data:`MAX_DECODED_BYTES`."""
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise DecodeFailure(f"too large ({width}x{height} pixels)")
    decoded = width * height * _BYTES_PER_PIXEL.get(image.mode, 4)
    if decoded > MAX_DECODED_BYTES:
        raise DecodeFailure(
            f"too large to decode ({width}x{height} {image.mode}: {decoded >> 20} MB decoded, "
            f"limit {MAX_DECODED_BYTES >> 20} MB)"
        )


def _draft(image: Image.Image, min_side: int) -> None:
    """Ask libjpeg for the smallest DCT scale (1/2, 1/4, 1/8) keeping the shorter side ≥ min_side."""
    width, height = image.size
    short = min(width, height)
    if short < 2 * min_side:
        return
    image.draft(None, (-(-width * min_side // short), -(-height * min_side // short)))


def to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB from any PIL mode (CMYK, L, LA, P, RGBA, 16-bit grey, float)."""
    if image.mode == "RGB":
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        return _wide_grey_to_rgb(image)
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    return image.convert("RGB")


def _wide_grey_to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB of a 16-bit, 32-bit or float grey image, scaled from 0..65535 (16-bit, or any
    value above 255) else 0..255; converted a strip of rows at a time, so a 169 M pixel 16-bit PNG
    needs one 8-bit copy beside it, not several float64 ones (several GB per worker)."""
    high = image.getextrema()[1]
    top = 65535.0 if image.mode.startswith("I;16") or high > 255 else 255.0
    width, height = image.size
    grey = np.empty((height, width), np.uint8)
    rows = max(1, STRIP_PIXELS // max(1, width))
    for start in range(0, height, rows):
        stop = min(height, start + rows)
        strip = np.asarray(image.crop((0, start, width, stop)), dtype=np.float64)
        grey[start:stop] = np.clip(strip * (255.0 / top), 0, 255).round()
    return Image.fromarray(grey, mode="L").convert("RGB")


def _describe_start(data: bytes) -> str:
    head = data[:16]
    if head.lstrip().startswith((b"<", b"{")):
        return "text/HTML content"
    return f"starts with {head[:8].hex()}"


# SOF markers of baseline (C0), extended (C1) and progressive (C2) Huffman JPEGs: what GPU
# decoders (nvJPEG) handle. Arithmetic-coded, lossless and 12-bit JPEGs go to PIL instead.
_GPU_SOF = (0xC0, 0xC1, 0xC2)
_ALL_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def is_plain_ycbcr_jpeg(data: bytes) -> bool:
    """True for a complete 8-bit, 3-component Huffman JPEG: safe to hand to a batched GPU decoder.

    Everything else (CMYK, grayscale, PNG-named-JPEG, truncated: no EOI marker near the end) is
    decoded by PIL on the CPU, which converts or rejects it with a reason.
    """
    if len(data) < 4 or data[:2] != b"\xff\xd8":
        return False
    if data.rfind(b"\xff\xd9", max(0, len(data) - 4096)) < 0:
        return False
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return False
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker in _ALL_SOF:
            if pos + 10 > len(data):
                return False
            precision, components = data[pos + 4], data[pos + 9]
            return marker in _GPU_SOF and precision == 8 and components == 3
        if marker == 0xDA:  # start of scan before any frame header
            return False
        pos += 2 + length
    return False
