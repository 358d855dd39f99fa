"""The fused path's extraction side (issue 38 §1): with a sink, every shard's float16 rows go to
the scorer bit for bit as an extraction stores them, and no feature file reaches the disk."""

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.scored_shards import UNSTORED_KEY, npy_sha256
from imagenet_zsl.features.synthetic_store import make_store

CLASSES = {"n01440764": 5, "n01443537": 3, "n01484850": 4}
FAST = {"backbone": "tiny-test", "weights": "random", "batch_size": 4, "shard_size": 5, "workers": 0}


def extract(store, classes, out, sink=None, **overrides):
    """A fast extraction of the tiny random-weight backbone, with or without a sink."""
    settings = {**FAST, "device": "cpu", "resize": 64, "crop": 56, "progress": False, **overrides}
    cfg = ExtractConfig(store=str(store.root), classes_file=str(classes), out=str(out), **settings)
    return run_extraction(cfg, sink)


def test_scored_shards_equal_stored_ones_and_no_feature_file_is_written(tmp_path, fx):
    store = make_store(tmp_path / "store", "tree", CLASSES, oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    extract(store, classes, tmp_path / "stored", logits=True)
    seen = []
    extract(store, classes, tmp_path / "scored", seen.append, logits=True)

    stored, scored = FeatureDir(tmp_path / "stored"), FeatureDir(tmp_path / "scored")
    assert [s.name for s in seen] == stored.shard_names() == scored.shard_names()
    assert len(seen) == 3  # 12 images in shards of 5
    written = [p.name for p in (tmp_path / "scored").rglob("*")]
    assert not [n for n in written if "features" in n or "logits" in n], written
    for outputs, record in zip(seen, stored.shards, strict=True):
        name = outputs.name
        # the scorer gets exactly the stored bytes: same dtype, same bits
        assert outputs.features.dtype == np.float16 and outputs.logits.dtype == np.float16
        assert outputs.features.tobytes() == np.asarray(stored.array(name, "features")).tobytes()
        assert outputs.logits.tobytes() == np.asarray(stored.array(name, "logits")).tobytes()
        np.testing.assert_array_equal(outputs.ids, stored.shard_ids(name))
        np.testing.assert_array_equal(outputs.labels, stored.shard_labels(name))
        # the would-be digests are those of the stored files
        assert npy_sha256(outputs.features) == record["sha256"]["features"]
        unstored = scored._record(name)[UNSTORED_KEY]
        assert unstored == {k: record["sha256"][k] for k in ("features", "logits")}
        assert scored._record(name)["sha256"] == {k: record["sha256"][k] for k in ("labels", "ids")}
    # same images, labels and identity (provenance compares identities, not paths)
    np.testing.assert_array_equal(scored.ids(), stored.ids())
    np.testing.assert_array_equal(scored.labels(), stored.labels())
    assert scored.identity == stored.identity and scored.classes == stored.classes
    with pytest.raises(UserInputError, match="missing"):
        scored.read_rows(scored.shard_names()[0])


def test_a_scored_run_resumes_scoring_only_the_unfinished_shards(tmp_path, fx):
    store = make_store(tmp_path / "store", "tree", CLASSES, oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    calls = []

    def dying(outputs):
        calls.append(outputs.name)
        if len(calls) == 2:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        extract(store, classes, tmp_path / "scored", dying)
    seen = []
    extract(store, classes, tmp_path / "scored", seen.append)
    # the shard whose scoring died has no record: it is extracted and scored again
    assert calls[0] not in [s.name for s in seen] and [calls[1]] == [s.name for s in seen][:1]
    extract(store, classes, tmp_path / "again", lambda o: None)
    resumed, whole = FeatureDir(tmp_path / "scored"), FeatureDir(tmp_path / "again")
    assert resumed.shards == whole.shards and resumed.identity == whole.identity
