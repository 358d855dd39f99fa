"""Test-only features: ``features: {test: DIR}`` with no ``train`` (issue 47 §1).

ConSE, the trivial model and GCNZ/SGCN/DGP build on a seen-class classifier, and the backbone's own
ImageNet-1K head (``head.npz``, stored by ``extract``) is that classifier as the papers take it: they
need no seen-class image at all, and ``vlm_zero_shot`` learns nothing. So a run may be given test
features alone: its models are fitted on ``OUT/head-only``, a feature directory holding no image,
only the test features' identity and head (:func:`write_head_only`). Every other consumer sees an
ordinary training-feature directory whose training classes are the head's.

A recipe that cannot run so is refused before any work, one line naming the model and the key
(:func:`check_head_only`): a model that learns from seen-class images, a ``select`` block (its
validation classes are seen classes with images), test features without a stored head, or the
default GZSL calibration (it carves validation classes out of the training images).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.recipe import (
    RUN_TOOL,
    FeatureDirs,
    InlineModel,
    ModelSpec,
    Recipe,
    feature_sets,
    features_key,
)
from imagenet_zsl.batch.scored_test_images import TestImages
from imagenet_zsl.errors import UserInputError, overwriting
from imagenet_zsl.features.head import HEAD_FILE
from imagenet_zsl.features.shard_files import write_manifest
from imagenet_zsl.manifests import MANIFEST_NAME, file_record, read_manifest
from imagenet_zsl.models.base import MODELS
from imagenet_zsl.safe_output import atomic_directory

#: under OUT (or OUT/backbones/NAME): the training-feature directory of a run given test features only
HEAD_ONLY_DIR = "head-only"
#: the manifest fields of a feature directory that a head-only copy does not take over
_NOT_COPIED = ("format", "tool", "command", "inputs", "software", "files", "shards", "classes", "counts")
_NOT_COPIED += ("logits", "classes_without_images", "skipped", "store_problems")


def head_only(features: Any) -> bool:
    """Whether a feature set gives test features only (``FeatureDirs`` without ``train``)."""
    return isinstance(features, FeatureDirs) and features.train is None


def fits_on_head(spec: ModelSpec) -> bool:
    """Whether the model ``spec`` trains fits without a seen-class image: it learns nothing, or it
    builds on the seen classifier and may take the backbone head (``classifier`` auto or head)."""
    assert spec.train is not None
    cls = MODELS.get(spec.train.model)
    if not cls.learns_from_images:
        return True
    return cls.uses_training_logits and spec.train.params.get("classifier", "auto") in ("auto", "head")


def uses_head(spec: ModelSpec) -> bool:
    """Whether the model ``spec`` trains reads the backbone head (not ``vlm_zero_shot``)."""
    assert spec.train is not None
    return MODELS.get(spec.train.model).learns_from_images


def _select_key(recipe: Recipe, spec: ModelSpec, where: str) -> str:
    """Where a model's ``select`` block is written: the recipe's inline entry or its config file."""
    entry = recipe.models[spec.name]
    if isinstance(entry, InlineModel) and entry.select is not None:
        return f"{where}: models.{spec.name}.select"
    if spec.config_path is not None:
        return f"{spec.config_path}: select (models.{spec.name})"
    return f"{where}: models.{spec.name}.select"


def head_models() -> str:
    """The registered models that can fit on the backbone head alone (for the error lines)."""
    names = [n for n, cls in MODELS.items() if cls.uses_training_logits or not cls.learns_from_images]
    return ", ".join(names)


def check_head_only(recipe: Recipe, models: list[ModelSpec], where: str) -> None:
    """A feature set without ``train``: every model the run trains must fit on the backbone head
    (no ``select`` block), the stored test features must store a head, and GZSL must not carve its
    validation classes out of training images. One line naming the model and key, before any work."""
    for name, features in feature_sets(recipe).items():
        if not head_only(features):
            continue
        key = f"{where}: {features_key(name)}"
        trained = [spec for spec in models if spec.train is not None]
        for spec in trained:
            assert spec.train is not None
            if not fits_on_head(spec):
                classifier = spec.train.params.get("classifier")
                how = f", classifier: {classifier}" if classifier not in (None, "auto", "head") else ""
                raise UserInputError(
                    f"model {spec.name!r} ({spec.train.model}{how}) learns from seen-class images "
                    f"({where}: models.{spec.name}), and the run has test features only ({key}: no "
                    f"'train'): give {features_key(name)}.train, or use models that fit on the backbone "
                    f"head: {head_models()}"
                )
            if spec.train.select is not None and uses_head(spec):
                raise UserInputError(
                    f"model {spec.name!r}: its select block chooses hyper-parameters on validation "
                    f"images of seen classes ({_select_key(recipe, spec, where)}), and the run has test "
                    f"features only ({key}: no 'train'): drop the select block "
                    "(configs/models/conse.yaml fixes top: 10) or give training features"
                )
        if recipe.gzsl and recipe.calibration is None:
            raise UserInputError(
                f"gzsl's default calibration carves validation classes out of the training images, "
                f"and the run has test features only ({key}: no 'train'; {where}: calibration): set "
                "'calibration: false' "
                "or list validation classes ({classes: FILE})"
            )
        if any(uses_head(spec) for spec in trained) and not isinstance(features.test, TestImages):
            _check_heads(features, key)


def _check_heads(features: FeatureDirs, key: str) -> None:
    """Every stored test-feature directory stores the backbone head (read from its manifest)."""
    assert not isinstance(features.test, TestImages)
    tests = features.test.values() if isinstance(features.test, dict) else [features.test]
    for test in tests:
        manifest = read_manifest(Path(test))
        if not isinstance(manifest, dict) or manifest.get("head") is None:
            raise UserInputError(
                f"{test} stores no backbone head ({HEAD_FILE}) ({key}.test), and without 'train' the "
                "models fit on it: extract with a backbone that has an ImageNet-1K classifier, or give "
                "training features"
            )


def write_head_only(source: Path, target: Path) -> Path:
    """``target``: a feature directory with the identity and the head of the feature directory
    ``source`` and no image (classes [], shards []): what a run's models fit on when it is given
    test features only. Kept when it was written from the same ``source`` manifest (so a resumed
    run finds its models' key unchanged); else written anew, atomically."""
    record = file_record(source / MANIFEST_NAME)
    existing = read_manifest(target)
    if isinstance(existing, dict) and (existing.get("inputs") or {}).get("head_of") == record:
        return target
    manifest = read_manifest(source)
    assert isinstance(manifest, dict)
    if manifest.get("head") is None:
        raise UserInputError(
            f"{source} stores no backbone head ({HEAD_FILE}), and without 'train' the models fit on it: "
            "use a backbone with an ImageNet-1K classifier, or give training features"
        )
    fields = {k: v for k, v in manifest.items() if k not in _NOT_COPIED}
    fields |= {"classes": [], "shards": [], "head_only": f"the head of {source}: no image"}
    with overwriting(), atomic_directory(target, tool=RUN_TOOL) as tmp:  # the run's own: written anew
        shutil.copyfile(source / HEAD_FILE, tmp / HEAD_FILE)
        write_manifest(tmp, {**fields, "tool": RUN_TOOL, "inputs": {"head_of": record}})
    return target
