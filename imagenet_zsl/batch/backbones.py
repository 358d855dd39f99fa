"""Several backbones in one ``run`` (#34 §2): a recipe with ``features: {NAME: {...}, ...}`` runs
each feature set as its own run in ``OUT/backbones/NAME`` (every model trained once per backbone,
on that backbone's features only: provenance stays strict within a row), then one table over
every (backbone, model, split) in ``OUT``. Rows of a split compare across backbones: every
backbone must hold the same test images of the split (checked before any training), and a split
whose classes differ between backbones (a policy dropping classes for one backbone's models) is
said in the legend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from imagenet_zsl.batch.plan import BACKBONES_DIR, Features, Plan, RunResult
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir


def _split_images(path: Any, wnids: Sequence[str]) -> set[str]:
    """The image ids of the split's classes in a test feature directory."""
    fd = FeatureDir(path)
    classes = np.asarray(fd.classes)
    return set(fd.ids()[np.isin(classes[fd.labels()], list(wnids))].tolist())


def check_same_images(plans: Sequence[Plan], features: Sequence[Features]) -> None:
    """Every backbone's test features hold the same images of every split (one line naming the
    backbone, the split and an image otherwise)."""
    first = plans[0]
    for split, wnids in first.split_wnids.items():
        reference = _split_images(features[0].test[split], wnids)
        for plan, feats in zip(plans[1:], features[1:], strict=True):
            images = _split_images(feats.test[split], wnids)
            if images != reference:
                odd = sorted(images ^ reference)[0]
                raise UserInputError(
                    f"the test images of split {split!r} differ between backbones {first.backbone!r} and "
                    f"{plan.backbone!r} (e.g. {odd}; {first.recipe_path}: features.{plan.backbone}.test): "
                    "every backbone must score the same images; extract the same images for each"
                )


def merged_records(plans: Sequence[Plan], results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Every backbone's cell records, each with its ``backbone`` (the recipe's name) and its run
    directory relative to ``OUT``."""
    records = []
    for plan, result in zip(plans, results, strict=True):
        for record in result.records:
            run_dir = f"{BACKBONES_DIR}/{plan.backbone}/{record['run']}"
            records.append({**record, "backbone": plan.backbone, "run": run_dir})
    return records


def merged_notes(
    plans: Sequence[Plan], results: Sequence[RunResult], records: list[dict[str, Any]]
) -> list[str]:
    """The backbones' legend notes (each once), and a note for a split whose evaluated classes
    differ between backbones."""
    notes: list[str] = []
    for result in results:
        notes += [n for n in result.notes if n not in notes]
    names = ", ".join(str(p.backbone) for p in plans)
    notes.insert(
        0, f"backbones ({plans[0].recipe_path}: features): {names}; each model trained once per backbone"
    )
    classes: dict[str, set[tuple[str, ...]]] = {}
    for record in records:
        if record["status"] == "ok":
            classes.setdefault(record["split"], set()).add(tuple(record["classes"]["excluded"]))
    uneven = sorted(split for split, kinds in classes.items() if len(kinds) > 1)
    if uneven:
        notes.append(
            f"WARNING: the classes of split(s) {', '.join(uneven)} differ between backbones "
            "(each backbone's classes_dropped.csv)"
        )
    return notes


def merged_result(top: Plan, plans: Sequence[Plan], results: Sequence[RunResult], primary: bool) -> RunResult:
    """The run's result over every backbone (model and cell names prefixed ``BACKBONE/``)."""
    merged = RunResult(top.out, primary=primary)
    for plan, result in zip(plans, results, strict=True):
        prefix = f"{plan.backbone}/"
        merged.trained += [prefix + n for n in result.trained]
        merged.evaluated += [prefix + n for n in result.evaluated]
        merged.skipped += [prefix + n for n in result.skipped]
        merged.failed += [prefix + n for n in result.failed]
        merged.errors.update({prefix + n: e for n, e in result.errors.items()})
    return merged
