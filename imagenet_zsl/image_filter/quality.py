"""Ambiguous-image filtering: keep an image only if a classifier that never saw it gets it right.

Hascoet et al. (CVPR 2019) call a ZSL test image *good* when a supervised classifier over the
candidate classes recognises it; ImageNet-21K's less curated classes hold many ambiguous or
mislabelled images, and a benchmark should measure zero-shot ability rather than label noise.

How it works (shapes: N images, D feature dims, C classes in the feature directory's label space,
k folds, S seeds):

1. ``load_features`` (:mod:`imagenet_zsl.features.in_memory`) streams the feature shards once
   into ONE float16 (N, D) array (5,000 classes x 300 images x 2048-d = 6.1 GB) after checking
   that all shards come from one backbone.
2. ``stratified_folds`` (:mod:`.folds`) gives every image a fold per seed (per class, shuffled,
   balanced).
3. ``CrossFitFilter`` (:mod:`.crossfit`) trains, for every (seed, fold), a classifier on the
   other folds and predicts the held-out fold, so every image is judged by a model that never saw
   it. The default is a softmax layer on frozen features (``SoftmaxProbe``, :mod:`.classifiers`:
   mini-batch AdamW, float32 batches cast from the float16 store on the fly); ``--classifier
   ridge`` is a closed-form least-squares alternative that needs one pass over the data for all
   folds (much cheaper on CPU at scale). ``--finetune-last-block --images STORE`` instead
   fine-tunes the backbone's last block plus a new head on the images themselves for every
   (seed, fold) (:mod:`imagenet_zsl.features.finetune`; GPU with bf16 autocast when present,
   correct but slow on CPU); same folds, outputs and resume.
4. An image is kept when it is judged and correct under every seed; a class is kept when its
   held-out accuracy reaches ``min_class_accuracy`` and at least ``min_images`` images survive.
   Classes with fewer images than folds cannot be cross-fitted with stratified folds: they are
   not trained on, not judged, and reported as dropped with that reason.

Outputs of ``filter_feature_dir`` (written by :mod:`.outputs`; one directory, written
atomically): ``kept.csv`` (image_id, wnid: kept images of kept classes), ``classes.csv`` (wnid,
images_before, images_after, heldout_accuracy, kept, reason), ``rejected.csv`` (images that
failed, with the prediction that failed them), ``report.md``, ``class_accuracy.png`` and
``manifest.json`` (:func:`imagenet_zsl.manifests.write_manifest`; its readers verify it). Interrupted
runs resume from per-(seed, fold) results kept in a sibling ``.<out>.work`` directory.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.finetune import FinetuneParams, LastBlockFinetuner
from imagenet_zsl.features.in_memory import LoadedFeatures, load_features
from imagenet_zsl.image_filter.crossfit import CrossFitFilter
from imagenet_zsl.image_filter.outputs import (
    class_outcomes,
    write_report,
    write_tables,
)
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT, TOOL, FilterParams
from imagenet_zsl.manifests import read_manifest, write_manifest
from imagenet_zsl.safe_output import atomic_directory, check_out_dir


def _check_output_dir(out: Path, features_dir: Path) -> None:
    """Refuse, before any work, an --out that is the input or holds something else."""
    if out.resolve() == features_dir.resolve():
        raise UserInputError(f"--out {out}: must differ from the --features directory")
    if out.exists():
        if not out.is_dir():
            raise UserInputError(f"--out {out}: exists and is not a directory")
        ours = (read_manifest(out) or {}).get("tool") == TOOL  # any version: it is replaced whole
        if any(out.iterdir()) and not ours:
            raise UserInputError(
                f"--out {out}: exists and is not an earlier filter output; choose a new directory"
            )
    # the rest of safe_output's rule: no overlap, nothing added or edited since (unless --overwrite),
    # a writable parent
    check_out_dir(out, TOOL, [features_dir], own_files=True)


def _summary(
    data: LoadedFeatures, crossfit: CrossFitFilter, outcomes: list[dict[str, Any]]
) -> dict[str, Any]:
    """Image and class counts before/after and the overall held-out accuracy (for the manifest)."""
    class_kept = np.array([o["kept"] for o in outcomes], dtype=bool)
    keep = crossfit.keep_ & class_kept[data.labels]
    rejected = crossfit.judged_ & ~crossfit.keep_
    judged_any = crossfit.judged_.any()
    return {
        "images_before": int(len(data.labels)),
        "images_after": int(keep.sum()),
        "images_rejected": int(rejected.sum()),
        "classes_before": int(len(data.classes)),
        "classes_after": int(class_kept.sum()),
        "classes_dropped": int((~class_kept).sum()),
        "dim": data.dim,
        "heldout_accuracy": float(crossfit.correct_[:, crossfit.judged_].mean()) if judged_any else 0.0,
    }


def filter_feature_dir(
    features_dir: str | Path,
    out_dir: str | Path,
    params: FilterParams | None = None,
    *,
    progress: bool = False,
    finetune: FinetuneParams | None = None,
) -> dict[str, Any]:
    """Run the filter on a feature directory and write its output directory; return the summary.

    ``finetune``: judge images by fine-tuning the backbone's last block on the image store
    instead of a classifier on the features (:mod:`imagenet_zsl.features.finetune`).
    Nothing is written on bad input; the output directory appears in one rename on success.
    """
    params = (params or FilterParams()).validate()
    features_dir, out = Path(features_dir), Path(out_dir)
    _check_output_dir(out, features_dir)
    # the fine-tuning trainer reads the images, not the features: ids and labels suffice
    data = load_features(features_dir, progress=progress, features=finetune is None)
    work_dir = out.parent / f".{out.name}.work"
    cache_key: dict[str, Any] = {
        "features_manifest_sha256": data.manifest_record["sha256"],
        "images": len(data.labels),
    }
    trainer = None
    if finetune is not None:
        trainer = LastBlockFinetuner(data, finetune, resolve_device(params.device), progress=progress)
        cache_key["finetune"] = trainer.describe()
    crossfit = CrossFitFilter(
        params,
        work_dir=work_dir,
        progress=progress,
        cache_key=cache_key,
        fold_trainer=trainer,
    ).fit(data.features, data.labels, len(data.classes))
    outcomes = class_outcomes(data.labels, data.classes, crossfit, params)
    summary = _summary(data, crossfit, outcomes)
    inputs = {"features": str(features_dir), "features_manifest_sha256": data.manifest_record["sha256"]}
    parameters = {**asdict(params), "device": crossfit.device_.type}
    if trainer is not None:
        inputs["images"] = str(finetune.images)
        parameters.update(classifier="finetune-last-block", finetune=trainer.describe())
    with atomic_directory(out, tool=TOOL, inputs=[features_dir]) as tmp:
        write_tables(tmp, data, crossfit, outcomes)
        write_report(
            tmp,
            summary,
            outcomes,
            params,
            str(features_dir),
            None if trainer is None else f"fine-tuned last block of {trainer.backbone}",
        )
        write_manifest(
            tmp,
            format=OUTPUT_FORMAT,
            tool=TOOL,
            inputs=inputs,
            parameters=parameters,
            fields={"summary": summary},
        )
    shutil.rmtree(work_dir, ignore_errors=True)
    return summary
