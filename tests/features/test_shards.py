"""FeatureDir's shared blocks: several readers of one split (the models of a batch run) read and
convert each shard once, get identical read-only blocks, and memory stays within the budget."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.features.shared_blocks import shared_blocks


@pytest.fixture
def feature_dir(tmp_path):
    rng = np.random.default_rng(0)
    records = []
    for index in range(3):
        labels = np.arange(10) % 2
        ids = [f"n0000000{label}/{index}_{row}.JPEG" for row, label in enumerate(labels)]
        block = rng.standard_normal((10, 4)).astype(np.float16)
        records.append(write_shard(tmp_path, shard_name(0, index), block, labels, ids))
    write_manifest(tmp_path, {"classes": ["n00000000", "n00000001"], "dim": 4, "shards": records})
    return FeatureDir(tmp_path)


def _read_all(fd: FeatureDir) -> list[np.ndarray]:
    return [b.features for name in fd.shard_names() for b in fd.shard_blocks(name, None, 4)]


def test_second_reader_gets_the_same_blocks_without_reading_again(feature_dir, monkeypatch):
    opened: list[str] = []
    original = FeatureDir.array

    def counting(self, shard, kind, mmap=True):
        opened.append(f"{shard}.{kind}")
        return original(self, shard, kind, mmap)

    monkeypatch.setattr(FeatureDir, "array", counting)
    plain = _read_all(feature_dir)
    with shared_blocks(1 << 20) as shared:
        first = _read_all(feature_dir)
        before = len(opened)
        second = _read_all(FeatureDir(feature_dir.path))  # another reader, e.g. the next model
        assert len(opened) == before and shared.reads == 3
    assert all(
        np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(plain, first, second, strict=True)
    )
    assert not any(block.flags.writeable for block in second)  # nobody may change shared blocks
    _read_all(feature_dir)  # outside the block: read from disk again
    assert len(opened) > before


def test_blocks_beyond_the_budget_are_streamed_again(feature_dir):
    with shared_blocks(0) as shared:
        _read_all(feature_dir)
        _read_all(feature_dir)
    assert shared.reads == 6 and shared.used == 0


def test_other_rows_are_not_confused_with_cached_ones(feature_dir):
    name = feature_dir.shard_names()[0]
    with shared_blocks(1 << 20):
        every = [b.features for b in feature_dir.shard_blocks(name, None, 4)]
        some = [b.features for b in feature_dir.shard_blocks(name, np.array([1, 3]), 4)]
    assert np.array_equal(np.concatenate(some), np.concatenate(every)[[1, 3]])


def test_the_manifest_lists_every_file_and_reuses_the_shard_hashes(feature_dir):
    manifest = feature_dir.manifest
    assert manifest["format"] == "imagenet-zsl/features-v2" and manifest["tool"] == "imagenet-zsl extract"
    listed = {r["path"]: r for r in manifest["files"]}
    names = [shard_name(0, i) for i in range(3)]
    expected = {f"{n}.{k}" for n in names for k in ("features.npy", "labels.npy", "ids.npy", "done.json")}
    assert set(listed) == expected
    for shard in manifest["shards"]:
        for kind, digest in shard["sha256"].items():
            record = listed[f"{shard['name']}.{kind}.npy"]
            path = feature_dir.path / record["path"]
            assert record["sha256"] == digest == hashlib.sha256(path.read_bytes()).hexdigest()
            assert record["bytes"] == path.stat().st_size


def test_a_listed_file_of_another_size_or_an_old_format_is_refused_on_open(feature_dir):
    path = feature_dir.path / f"{shard_name(0, 2)}.ids.npy"
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(UserInputError, match=r"s000002.ids.npy: changed since it was written \(size"):
        FeatureDir(feature_dir.path)
    manifest_path = feature_dir.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format"] = "imagenet-zsl/features-v1"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(UserInputError, match=r"features-v1.*expected imagenet-zsl/features-v2.*--merge DIR"):
        FeatureDir(feature_dir.path)
