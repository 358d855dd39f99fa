"""Feature-test fixtures: a private index cache and helpers (run a small extraction, reference
features). Helpers are fixtures because tests run with --import-mode=importlib."""

from __future__ import annotations

import io
import json
import tarfile
import types
from pathlib import Path

import pytest
import torch
from PIL import Image

from imagenet_zsl.features.backbones import create_backbone
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.features.transforms import Preprocessing

SMALL = {"resize": 64, "crop": 56}


def write_classes(path: Path, wnids: list[str]) -> Path:
    path.write_text("".join(f"{w}\n" for w in wnids))
    return path


#: the fast extraction of :func:`extract` and :func:`extract_argv`
FAST = {
    "backbone": "tiny-test",
    "weights": "random",
    "batch_size": 4,
    "shard_size": 6,
    "workers": 0,
    "device": "cpu",
    **SMALL,
}


def extract(store, classes_file: Path, out: Path, **overrides):
    """A fast extraction: tiny random-weight backbone, small images, no worker processes."""
    settings = {**FAST, "progress": False, **overrides}
    config = ExtractConfig(
        store=str(store.root),
        classes_file=str(classes_file),
        out=str(out),
        val_labels=str(store.labels) if store.labels else None,
        **settings,
    )
    return run_extraction(config)


def extract_argv(store, classes_file: Path, out: Path) -> list[str]:
    """``imagenet-zsl extract`` arguments with the settings of :func:`extract`."""
    argv = ["extract", "--store", str(store.root), "--classes", str(classes_file), "--out", str(out)]
    for key, value in FAST.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return [*argv, "--no-progress"]


def image_bytes(store, image_id: str) -> bytes:
    wnid, name = image_id.split("/")
    if store.layout == "tars":
        with tarfile.open(store.root / f"{wnid}.tar") as tar:
            return tar.extractfile(name).read()
    if store.layout == "tree":
        return (store.root / wnid / name).read_bytes()
    return (store.root / name).read_bytes()


def reference_outputs(store, ids, backbone="tiny-test", resize=64, crop=56, seed=0):
    """The plain way: ImageFolder's loader (PIL convert RGB), torchvision transforms, fp32 forward."""
    net, _ = create_backbone(backbone, "random", seed=seed)
    transform = Preprocessing(resize, crop).reference_transform()
    batch = torch.stack(
        [transform(Image.open(io.BytesIO(image_bytes(store, image_id))).convert("RGB")) for image_id in ids]
    )
    with torch.no_grad():
        features, logits = net(batch)
    return features.numpy(), logits.numpy()


def all_files(root: Path) -> dict[str, bytes]:
    """Every output file's bytes except the (timestamped) logs; the manifest without its records
    of the logs."""
    found = {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "logs" not in p.parts
    }
    if "manifest.json" in found:
        manifest = json.loads(found["manifest.json"])
        manifest["files"] = [r for r in manifest["files"] if not r["path"].startswith("logs/")]
        found["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return found


@pytest.fixture(autouse=True)
def _private_index_cache(tmp_path, monkeypatch):
    """Each test gets its own store-index cache (never the user's ~/.cache)."""
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "index-cache"))


@pytest.fixture(scope="session")
def fx():
    """The helpers above: fx.extract, fx.extract_argv, fx.write_classes, fx.reference_outputs,
    fx.all_files."""
    return types.SimpleNamespace(
        extract=extract,
        extract_argv=extract_argv,
        write_classes=write_classes,
        reference_outputs=reference_outputs,
        all_files=all_files,
        image_bytes=image_bytes,
    )
