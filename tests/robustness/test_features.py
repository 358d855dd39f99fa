"""Bad feature directories and bad `extract` flags: one `error:` line, exit 2, nothing written.

Feature directories are read through ``imagenet-zsl images filter`` (the cheapest command that
reads every shard); ``evaluate`` and ``train`` read them through the same ``FeatureDir``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard

WNIDS = ["n01440764", "n01443537", "n01484850"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))


def feature_dir(root: Path) -> Path:
    """3 classes x 10 images, 8-d, two shards of 15 rows."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(30, 8)).astype(np.float16)
    labels = np.repeat(np.arange(3), 10)
    ids = [f"{WNIDS[c]}/{WNIDS[c]}_{i}.JPEG" for i, c in enumerate(labels)]
    root.mkdir(parents=True)
    records = [
        write_shard(root, shard_name(0, k), features[s : s + 15], labels[s : s + 15], ids[s : s + 15])
        for k, s in enumerate((0, 15))
    ]
    write_manifest(root, {"classes": WNIDS, "dim": 8, "shards": records})
    return root


def _flip_byte(d: Path) -> str:
    path = d / f"{shard_name(0, 1)}.features.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    return path.name


def _truncate(d: Path) -> str:
    path = d / f"{shard_name(0, 0)}.features.npy"
    os.truncate(path, path.stat().st_size // 2)
    return path.name


def _truncate_unhashed(d: Path) -> str:
    """A truncated shard in a directory whose manifest has no sha256 records: the .npy check."""
    manifest = json.loads((d / "manifest.json").read_text())
    for shard in manifest["shards"]:
        shard.pop("sha256")
    (d / "manifest.json").write_text(json.dumps(manifest))
    return _truncate(d)


def _garble_header(d: Path) -> str:
    path = d / f"{shard_name(0, 0)}.labels.npy"
    path.write_bytes(b"this is not an npy file")
    return path.name


def _remove(d: Path) -> str:
    path = d / f"{shard_name(0, 1)}.ids.npy"
    path.unlink()
    return path.name


def _edit_manifest(change: Callable[[dict], str]) -> Callable[[Path], str]:
    def damage(d: Path) -> str:
        manifest = json.loads((d / "manifest.json").read_text())
        culprit = change(manifest)
        (d / "manifest.json").write_text(json.dumps(manifest))
        return culprit

    return damage


def _no_classes(manifest: dict) -> str:
    del manifest["classes"]
    return "classes"


def _no_dim(manifest: dict) -> str:
    manifest["dim"] = "wide"
    return "dim"


def _row_count_lies(manifest: dict) -> str:
    manifest["shards"][0]["rows"] = 14
    manifest["shards"][0].pop("sha256")
    return shard_name(0, 0)


def _sha256_not_a_mapping(manifest: dict) -> str:
    """Issue 26: a manifest whose sha256 record is a string gave an internal AttributeError."""
    manifest["shards"][1]["sha256"] = "0" * 64
    return "sha256"


def _sha256_value_not_a_digest(manifest: dict) -> str:
    manifest["shards"][0]["sha256"]["features"] = 5
    return "sha256"


def _not_json(d: Path) -> str:
    (d / "manifest.json").write_text("{not json")
    return "manifest.json"


DAMAGE = {
    "flipped-bytes": _flip_byte,
    "truncated-shard": _truncate,
    "truncated-shard-without-hashes": _truncate_unhashed,
    "garbled-npy": _garble_header,
    "missing-shard-file": _remove,
    "manifest-without-classes": _edit_manifest(_no_classes),
    "manifest-with-bad-dim": _edit_manifest(_no_dim),
    "manifest-row-count-wrong": _edit_manifest(_row_count_lies),
    "manifest-not-json": _not_json,
    "manifest-sha256-a-string": _edit_manifest(_sha256_not_a_mapping),
    "manifest-sha256-not-a-digest": _edit_manifest(_sha256_value_not_a_digest),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_damaged_feature_directory(cli_error, tmp_path: Path, damage: str) -> None:
    features = feature_dir(tmp_path / "features")
    culprit = DAMAGE[damage](features)
    out = tmp_path / "out"
    cli_error(
        ["images", "filter", "--features", features, "--out", out, "--classifier", "ridge", "--no-progress"],
        culprit=culprit,
        inputs=[features],
        not_created=[out],
    )


def test_shards_without_sha256_are_read_with_a_warning_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: a feature directory whose manifest has no sha256 was used silently."""
    from imagenet_zsl.features.feature_dir import FeatureDir

    features = feature_dir(tmp_path / "features")
    manifest = json.loads((features / "manifest.json").read_text())
    manifest["shards"][1].pop("sha256")
    (features / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING"):
        assert FeatureDir(features).load().features.shape == (30, 8)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert f"no sha256 for 1 of 2 shards ({shard_name(0, 1)})" in warnings[0] and "UNVERIFIED" in warnings[0]


def test_corruption_is_found_after_a_clean_read(cli_error, tmp_path: Path) -> None:
    """The sha256 cache is keyed by the file's size, mtime and ctime: a later change is seen."""
    from imagenet_zsl.features.feature_dir import FeatureDir

    features = feature_dir(tmp_path / "features")
    assert FeatureDir(features).verify() == []
    name = _flip_byte(features)
    out = tmp_path / "out"
    cli_error(
        ["images", "filter", "--features", features, "--out", out, "--classifier", "ridge"],
        culprit=name,
        inputs=[features],
        not_created=[out],
    )


BAD_FLAGS = {
    "batch-size-0": (["--batch-size", "0"], "--batch-size"),
    "batch-size-text": (["--batch-size", "many"], "--batch-size"),
    "workers-negative": (["--workers", "-1"], "--workers"),
    "shard-size-0": (["--shard-size", "0"], "--shard-size"),
    "per-class-0": (["--per-class", "0"], "--per-class"),
    "seed-negative": (["--seed", "-3"], "--seed"),
    "unknown-decoder": (["--decode", "magic"], "--decode"),
    "unknown-backbone": (["--backbone", "resnet5000", "--weights", "random"], "resnet5000"),
    "missing-store": (["--store", "{tmp}/nowhere"], "nowhere"),
    # issue 26: a crop larger than the resize used to be zero-padded silently
    "crop-over-resize": (
        ["--resize", "32", "--crop", "512", "--backbone", "tiny-test", "--weights", "random"],
        "--crop 512",
    ),
}


@pytest.mark.parametrize("case", BAD_FLAGS, ids=list(BAD_FLAGS))
def test_bad_extract_flag(cli_error, tmp_path: Path, case: str) -> None:
    flags, culprit = BAD_FLAGS[case]
    from imagenet_zsl.features.synthetic_store import make_store

    store = make_store(tmp_path / "store", "tars", {"n01440764": 2}, oddities=False)
    classes = tmp_path / "classes.txt"
    classes.write_text("n01440764\n")
    out = tmp_path / "out"
    argv = ["extract", "--store", store.root, "--classes", classes, "--out", out, "--device", "cpu"]
    argv += [f.replace("{tmp}", str(tmp_path)) for f in flags]
    cli_error(argv, culprit=culprit, inputs=[store.root, classes], not_created=[out])


def test_filter_flag_workers_negative(cli_error, tmp_path: Path) -> None:
    features = feature_dir(tmp_path / "features")
    out = tmp_path / "out"
    cli_error(
        ["images", "filter", "--features", features, "--out", out, "--workers", "-1"],
        culprit="--workers",
        inputs=[features],
        not_created=[out],
    )


def _pickled_code(path: Path, marker: Path) -> None:
    """A torch checkpoint whose unpickling would run ``touch marker``."""
    import os

    import torch

    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    torch.save({"weight": Evil()}, path)


@pytest.mark.parametrize("kind", ["malicious", "module"])
def test_extract_weights_that_pickle_code_are_one_line_and_never_run(
    cli_error, tmp_path: Path, kind: str
) -> None:
    """Issue 26: a malicious or torch.save'd-module --weights file printed 3-4 lines of torch text."""
    import torch

    from imagenet_zsl.features.synthetic_store import make_store

    store = make_store(tmp_path / "store", "tars", {"n01440764": 2}, oddities=False)
    classes = tmp_path / "classes.txt"
    classes.write_text("n01440764\n")
    weights, marker, out = tmp_path / "w.pth", tmp_path / "PWNED", tmp_path / "out"
    if kind == "malicious":
        _pickled_code(weights, marker)
    else:
        torch.save(torch.nn.Linear(2, 2), weights)  # a whole pickled module, not a state_dict
    argv = ["extract", "--store", store.root, "--classes", classes, "--out", out, "--device", "cpu"]
    argv += ["--backbone", "tiny-test", "--weights", weights]
    cli_error(argv, culprit=str(weights), inputs=[store.root, classes, weights], not_created=[out])
    assert not marker.exists()


def test_simulate_negative_seed(cli_error, tmp_path: Path) -> None:
    """Issue 26: ``simulate --seed -1`` was an internal error."""
    config = tmp_path / "sim.yaml"
    config.write_text("train: {classes: [n01440764], images_per_class: 2}\n")
    out = tmp_path / "sim"
    cli_error(
        ["simulate", config, "--out", out, "--seed", "-1"],
        culprit="--seed",
        inputs=[config],
        not_created=[out],
    )
