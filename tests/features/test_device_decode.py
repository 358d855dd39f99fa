"""The device-decode path (``--decode torchvision``: nvJPEG on CUDA, the same code on the CPU):
raw JPEGs travel from the workers as one packed tensor per batch, and the main process resizes
them in groups, pixel for pixel what the per-image ``Preprocessing.crop_tensor`` gives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

from imagenet_zsl.features.extract_loop import _device_decode
from imagenet_zsl.features.loading import Collate, split_raw
from imagenet_zsl.features.synthetic_store import encode, make_store, smooth_image
from imagenet_zsl.features.transforms import Preprocessing

#: (width, height) of decoded images: ImageNet's common sizes (landscape, portrait, 3:2), a square,
#: odd aspect ratios (a panorama, a tall strip), an image smaller than the crop and one already at
#: the resize (torchvision returns it unresized), repeated so that groups form
SIZES = [
    (500, 375),
    (375, 500),
    (500, 333),
    (500, 375),
    (333, 500),
    (257, 256),
    (500, 375),
    (640, 90),
    (37, 211),
    (40, 30),
    (375, 500),
    (256, 300),
    (500, 333),
    (77, 77),
    (40, 30),
]


def _images(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(smooth_image(rng, h, w)).permute(2, 0, 1).contiguous() for w, h in sizes]


@pytest.mark.parametrize(
    "pre",
    [
        Preprocessing(),
        Preprocessing(interpolation="bicubic"),
        Preprocessing(64, 56),
        Preprocessing(64, 72),  # a crop larger than the resize: torchvision pads
        Preprocessing(64, 56, ten_crop=True),
    ],
    ids=["256-224", "bicubic", "64-56", "pad", "ten-crop"],
)
def test_grouped_resize_equals_the_per_image_crop_tensor(pre):
    images = _images(SIZES)
    expected = [pre.crop_tensor(image) for image in images]
    for max_elements in (0, 1 << 26):  # one image per call (the CPU's), groups by size (CUDA's)
        crops = pre.crop_tensors(images, max_elements)
        assert crops.shape == (len(images), *pre.crop_shape) and crops.dtype == torch.uint8
        for k, crop in enumerate(crops):
            assert torch.equal(crop, expected[k]), (SIZES[k], max_elements)


def test_grouped_resize_bounds_its_batches_and_keeps_the_order():
    pre = Preprocessing(64, 56)
    images = _images([(90, 70)] * 7 + [(70, 90)] * 3, seed=1)
    crops = pre.crop_tensors(images, max_elements=3 * 90 * 70 * 2)  # groups of at most 2 images
    assert torch.equal(crops, torch.stack([pre.crop_tensor(i) for i in images]))
    assert pre.crop_tensors([]).shape == (0, *pre.crop_shape)


def test_device_decode_equals_per_image_decode_and_falls_back_to_pil():
    from torchvision.io import decode_jpeg

    pre = Preprocessing(64, 56)
    rng = np.random.default_rng(2)
    jpegs = [encode(smooth_image(rng, h, w)) for w, h in [(90, 70), (70, 90), (90, 70), (40, 30)]]
    corrupt = encode(smooth_image(rng, 70, 90), "corrupt")
    batch = Collate(56)([(p, None, data, None) for p, data in enumerate([*jpegs, corrupt], 10)])
    assert batch["raw"].dim() == 1 and batch["raw_sizes"].tolist() == [len(d) for d in [*jpegs, corrupt]]
    raw = split_raw(batch)
    assert [bytes(r.numpy()) for r in raw] == [*jpegs, corrupt]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoders
        crops, positions, failed = _device_decode(raw, batch["raw_pos"], pre, torch.device("cpu"), 1 << 26)
        expected = [
            pre.crop_tensor(decode_jpeg(torch.frombuffer(bytearray(d), dtype=torch.uint8))) for d in jpegs
        ]
    assert positions == [10, 11, 12, 13] and len(failed) == 1 and failed[0][0] == 14
    assert failed[0][1].startswith("decode error")
    for crop, want in zip(crops, expected, strict=True):
        assert torch.equal(crop, want)


def test_a_workers_raw_jpegs_travel_as_one_shared_tensor(monkeypatch):
    jpegs = [b"\xff\xd8abc\xff\xd9", b"\xff\xd8defgh\xff\xd9"]
    items = [(3, None, jpegs[0], None), (4, None, None, "bad"), (5, None, jpegs[1], None)]
    in_main = Collate(56)(items)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    in_worker = Collate(56)(items)
    assert in_worker["raw"].is_shared() and not in_main["raw"].is_shared()
    for batch in (in_main, in_worker):
        assert batch["raw_pos"] == [3, 5] and batch["skipped"] == [(4, "bad")]
        assert [bytes(r.numpy()) for r in split_raw(batch)] == jpegs
    empty = Collate(56)([(4, None, None, "bad")])
    assert empty["raw"].numel() == 0 and split_raw(empty) == []


def test_device_decode_extraction_runs_under_a_low_open_file_limit(tmp_path):
    """One shared-memory tensor per JPEG meant one file descriptor per image in flight between
    the workers and the main process (EMFILE under a low ``ulimit -n``); one packed tensor per
    batch needs a handful. 512 plain JPEGs in batches of 256, 2 workers, at most 96 open files."""
    store = make_store(
        tmp_path / "store", "tars", {"n01440764": 300, "n01443537": 212}, (40, 30), oddities=False
    )
    classes = tmp_path / "classes.txt"
    classes.write_text("n01440764\nn01443537\n")
    script = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))
        from imagenet_zsl.features.extract import ExtractConfig, run_extraction
        result = run_extraction(ExtractConfig(
            store={str(store.root)!r}, classes_file={str(classes)!r}, out={str(tmp_path / "out")!r},
            backbone="tiny-test", weights="random", device="cpu", decode="torchvision", workers=2,
            batch_size=256, shard_size=512, resize=32, crop=28, progress=False,
        ))
        assert result.images == 512 and result.skipped == 0, result
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    ("decode", "mode", "on_cuda", "expected"),
    [
        ("auto", "deterministic", False, "pil"),
        ("auto", "fast", False, "pil"),
        ("auto", "deterministic", True, "pil"),
        ("auto", "fast", True, "torchvision"),
        ("pil", "fast", True, "pil"),
        ("torchvision", "deterministic", False, "torchvision"),
        ("torchvision", "deterministic", True, "torchvision"),
    ],
)
def test_auto_decoder_is_pil_unless_fast_on_cuda_and_an_explicit_choice_wins(decode, mode, on_cuda, expected):
    from imagenet_zsl.features.extract_setup import resolve_decoder

    assert resolve_decoder(decode, mode, on_cuda) == expected


def test_the_resolved_decoder_is_recorded_and_the_device_probe_works_on_the_cpu(tmp_path, fx):
    from imagenet_zsl.features.extract_loop import device_decodes_jpeg
    from imagenet_zsl.features.feature_dir import FeatureDir

    assert device_decodes_jpeg(torch.device("cpu"))
    store = make_store(tmp_path / "store", "tars", {"n01440764": 3}, oddities=False)
    classes = fx.write_classes(tmp_path / "classes.txt", ["n01440764"])
    fx.extract(store, classes, tmp_path / "out", mode="fast")  # decode "auto" on the CPU
    assert FeatureDir(tmp_path / "out").manifest["parameters"]["decode"] == "pil"


def test_what_the_device_cannot_resize_goes_image_by_image_then_to_pil(monkeypatch):
    from imagenet_zsl.images.decode import decode_rgb

    pre = Preprocessing(64, 56)
    rng = np.random.default_rng(3)
    jpegs = [encode(smooth_image(rng, h, w)) for w, h in [(90, 70), (70, 90)]]
    raw = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in jpegs]
    cpu = torch.device("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        expected, _, _ = _device_decode(raw, [0, 1], pre, cpu)

        def fails(*args, **kwargs):
            raise RuntimeError("out of memory")

        monkeypatch.setattr(Preprocessing, "crop_tensors", fails)
        crops, positions, failed = _device_decode(raw, [0, 1], pre, cpu)
        assert positions == [0, 1] and not failed and torch.equal(crops, expected)
        monkeypatch.setattr(Preprocessing, "crop_tensor", fails)
        crops, positions, failed = _device_decode(raw, [0, 1], pre, cpu)
    assert positions == [0, 1] and not failed
    assert np.array_equal(
        crops.numpy(), np.stack([pre.crop_pil(decode_rgb(d, pre.decode_min_side)) for d in jpegs])
    )


def test_the_device_resize_benchmark_runs_and_checks_its_variants_agree(tmp_path):
    import json
    from pathlib import Path

    tool = Path(__file__).resolve().parents[2] / "tools" / "bench_extract.py"
    argv = ["--device-resize", "--images", "12", "--devices", "cpu", "--resize-sizes", "40x30,30x40,41x29"]
    argv += ["--resize-crop", "32,28", "--json", str(tmp_path / "rows.json")]
    done = subprocess.run([sys.executable, str(tool), *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads((tmp_path / "rows.json").read_text())
    assert row["images"] == 12 and row["distinct_sizes"] == 3 and len(row["runs_ms"]["per_image"]) == 3
    assert "all the same pixels" in done.stdout
