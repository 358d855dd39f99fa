"""GZSL's held-out seen check against what ``train`` kept (review of issues #44-#47, item 1).

The held-out seen images of ``evaluate --gzsl --seen-features DIR`` must share no image id with
the images the model was fitted on. The check used to read the training directory named in the
model manifest, and skipped itself when that directory had changed (re-extracted with one more
class: the model's own training images then passed as held-out) or was not found (a relative path
evaluated from another working directory). ``train`` now keeps the training ids in the model
directory, and the check reads those, whatever the training directory holds later.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import model_source
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.features.image_ids import TRAINING_IDS_FILE, read_id_set, shared_ids
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.manifests import MANIFEST_NAME, file_record
from imagenet_zsl.models.persistence import load_model
from imagenet_zsl.models.training import TrainConfig, train
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import (
    CLASSES,
    DIM,
    SEEN,
    TEST,
    one_hot,
    write_feature_dir,
    write_model_dir,
)

SEEN_LABELS = np.repeat([CLASSES.index(w) for w in SEEN], 3)  # 6 images: ids <wnid>/0.JPEG .. /5.JPEG


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """Test features of the 6 test classes, one-hot prototypes, and a model (ESZSL, closed form)
    trained by ``train`` on 6 images of the 2 seen classes."""
    labels = np.repeat(np.arange(len(TEST)), 2)
    features = write_feature_dir(tmp_path / "features", labels, one_hot(labels))
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(tmp_path / "protos.npz")
    (tmp_path / "split.txt").write_text("\n".join(TEST) + "\n")
    training = write_feature_dir(tmp_path / "train", SEEN_LABELS, one_hot(SEEN_LABELS))
    config = TrainConfig(model="eszsl", semantics=str(tmp_path / "protos.npz"), graph="none")
    model = train(config, training, tmp_path / "model")
    return {"root": tmp_path, "features": features, "train": training, "model": model}


def gzsl(world: dict[str, Path], seen: Path, out: str) -> EvaluationConfig:
    return EvaluationConfig(
        model=world["model"],
        features=world["features"],
        split=world["root"] / "split.txt",
        out=world["root"] / out,
        ks=[1],
        gzsl=True,
        seen_features=seen,
        label_frequency=False,
        plots=False,
    )


def test_train_keeps_the_training_image_ids_and_the_absolute_features_path(world, tmp_path, monkeypatch):
    record = json.loads((world["model"] / MANIFEST_NAME).read_text())["inputs"]["features"]
    assert record["image_ids"] == {"file": TRAINING_IDS_FILE, "count": 6}
    assert Path(record["path"]).is_absolute()
    kept = read_id_set(world["model"] / TRAINING_IDS_FILE)
    assert kept.tolist() == sorted(f"{SEEN[i // 3]}/{i}.JPEG" for i in range(6))
    # a relative --features path is recorded absolute too
    monkeypatch.chdir(tmp_path)
    config = TrainConfig(model="eszsl", semantics="protos.npz", graph="none")
    model = train(config, Path("train"), Path("model2"))
    record = json.loads((model / MANIFEST_NAME).read_text())["inputs"]["features"]
    assert record["path"] == str(tmp_path / "train" / MANIFEST_NAME)


def test_re_extracted_training_directory_as_seen_features_is_refused(world):
    """The reviewer's case: the training directory re-extracted with one more class (its manifest
    changed); 6 of its 9 images are the model's training images."""
    shutil.rmtree(world["train"])
    labels = np.r_[SEEN_LABELS, np.repeat(CLASSES.index("n00000007"), 3)]
    write_feature_dir(world["train"], labels, one_hot(labels))
    with pytest.raises(
        UserInputError, match=r"6 held-out seen images are training images .*n00000008/0\.JPEG"
    ):
        evaluate(gzsl(world, world["train"], "run"), graph="none", progress=False)


def test_training_directory_gone_or_relative_from_elsewhere_still_checked(world, tmp_path, monkeypatch):
    """The training directory deleted (or named relatively and evaluated from elsewhere): held-out
    features that reuse 2 training images (other features, same ids) are refused by the kept ids;
    held-out features with other ids pass."""
    shutil.rmtree(world["train"])
    monkeypatch.chdir(tmp_path / "features")
    reused = write_feature_dir(tmp_path / "reused", SEEN_LABELS[:2], 2 * one_hot(SEEN_LABELS[:2]))
    with pytest.raises(
        UserInputError, match=r"2 held-out seen images are training images .*n00000008/0\.JPEG"
    ):
        evaluate(gzsl(world, reused, "run"), graph="none", progress=False)
    fresh = held_out(tmp_path / "fresh")
    m = evaluate(gzsl(world, fresh, "run2"), graph="none", progress=False)
    assert m["gzsl"]["images"]["seen"] == 6


def test_old_model_without_kept_ids_says_the_id_check_could_not_run(world, tmp_path, monkeypatch, caplog):
    """A model manifest from before (no ``image_ids``; a relative path that does not resolve here):
    today's checks run, and one log line says that the id check could not."""
    fitted = load_model(world["model"])
    monkeypatch.setattr(model_source, "load_model", lambda path: fitted)
    record = file_record(world["train"] / MANIFEST_NAME)
    record["path"] = "nowhere/train/manifest.json"
    old = write_model_dir(tmp_path / "old", inputs={"features": record})
    with caplog.at_level(logging.WARNING):
        evaluate(
            gzsl({**world, "model": old}, held_out(tmp_path / "held"), "r"), graph="none", progress=False
        )
    lines = [r.getMessage() for r in caplog.records if "could not be checked" in r.getMessage()]
    assert len(lines) == 1 and "nowhere/train is not found" in lines[0]
    # today's content check still runs without the ids
    with pytest.raises(UserInputError, match="held-out seen images are the training features"):
        evaluate(gzsl({**world, "model": old}, world["train"], "r2"), graph="none", progress=False)


def held_out(path: Path) -> Path:
    """6 images of the seen classes that are not the training images (other ids)."""
    path.mkdir()
    ids = [f"held-out/{i}.JPEG" for i in range(len(SEEN_LABELS))]
    record = write_shard(path, shard_name(0, 0), one_hot(SEEN_LABELS), SEEN_LABELS, ids)
    write_manifest(path, {"classes": CLASSES, "dim": DIM, "shards": [record]})
    return path


def test_shared_ids_is_an_exact_intersection():
    recorded = np.array(sorted(["a/1", "a/2", "b/1", "c/9"]))
    assert shared_ids(recorded, np.array(["c/9", "z", "a/1", "a/1", "a/10"])).tolist() == ["a/1", "c/9"]
    assert shared_ids(recorded[:0], np.array(["a/1"])).tolist() == []
    assert shared_ids(recorded, np.array([], dtype=np.str_)).tolist() == []
