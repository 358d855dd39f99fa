"""The recipe's test images given as an image store and a backbone instead of a feature directory
(issue 38 §1, the fused path)::

    features:
      train: feats/train                    # training features stay stored
      test: {store: /data/fall11, backbone: resnet50, weights: torchvision}
      seen: feats/ilsvrc_val

``run`` then extracts the test images of every split's classes and scores each shard for every
cell as it comes out of the backbone (:mod:`~imagenet_zsl.batch.fused`): only the top-k lists, the
tie counts and the per-image labels and ids are kept, never the features. The keys are those of
``imagenet-zsl extract`` (same defaults), so the identity, provenance and cell bytes are those of
``extract`` then ``run`` on the same images."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from imagenet_zsl.config import Config, read_yaml
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract_setup import ExtractConfig

#: under OUT (or OUT/backbones/NAME): the fused path's work
TEST_IMAGES_DIR = "test-images"


class TestImages(Config):
    """Test images scored while extracted: ``imagenet-zsl extract``'s settings (its defaults)."""

    store: str
    backbone: str
    weights: str | None = None
    layout: Literal["auto", "tars", "tree", "flat"] = "auto"
    val_labels: str | None = None
    per_class: Annotated[int, Field(ge=1)] | None = None
    seed: Annotated[int, Field(ge=0)] = 0
    batch_size: Annotated[int, Field(ge=1)] | None = None
    device: str = "auto"
    workers: Annotated[int, Field(ge=0)] | None = None
    shard_size: Annotated[int, Field(ge=1)] = 10_240
    logits: bool = False
    decode: str = "auto"
    precision: str = "auto"
    resize: Annotated[int, Field(ge=1)] | None = None
    crop: Annotated[int, Field(ge=1)] | None = None
    ten_crop: bool = False
    mode: Literal["deterministic", "fast"] = "deterministic"
    pretraining_classes: str | None = None
    #: read a store that lacks what it declares (``extract --allow-incomplete``; recorded)
    allow_incomplete: bool = False

    def extract_config(self, classes_file: Path, out: Path, progress: bool = False) -> ExtractConfig:
        """The extraction of the test images of ``classes_file`` into ``out`` (the scored directory)."""
        fields = self.model_dump()
        return ExtractConfig(classes_file=str(classes_file), out=str(out), progress=progress, **fields)

    def input_paths(self) -> list[Path]:
        """What the extraction reads (an ``--out`` must not overlap it)."""
        return [Path(p) for p in (self.store, self.val_labels, self.pretraining_classes) if p]


def check_test_images(spec: TestImages, key: str, calibration_in_test: bool) -> None:
    """The store exists; no validation image is to come from the test images (they are scored
    for the test splits only, never stored: give ``calibration.features``)."""
    if not Path(spec.store).exists():
        raise UserInputError(
            f"{spec.store}: no such image store ({key}.store): give a store directory or tar"
        )
    if calibration_in_test:
        raise UserInputError(
            f"calibration classes without calibration.features would take their images from the test "
            f"images, which are scored, not stored ({key}): give calibration.features (a feature directory)"
        )


def recipe_extracts(path: str | Path) -> bool:
    """Whether the recipe at ``path`` gives test images as a store (``features.test: {store:
    ...}``, or under a backbone's name): ``run`` then decodes images in worker processes while the
    backbone runs, and tunes the process for that before torch loads, as ``extract`` does. A
    recipe that cannot be read is False here (the run reports it in its one line)."""
    try:
        data = read_yaml(path)
    except (UserInputError, OSError):
        return False
    features = data.get("features") if isinstance(data, Mapping) else None
    if not isinstance(features, Mapping):
        return False
    sets = [features] if "test" in features else list(features.values())
    tests = [entry.get("test") for entry in sets if isinstance(entry, Mapping)]
    return any(isinstance(test, Mapping) and {"store", "backbone"} <= set(test) for test in tests)
