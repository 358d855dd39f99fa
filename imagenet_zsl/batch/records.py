"""A cell's record and resume: the key a cell's bytes depend on, the record written beside its
run directory (``cells/NAME__SPLIT.json``: status, error, classes, provenance, key, the sha256 of
its manifest), and whether a finished cell can be reused: same key, same manifest, and every file
still matching it (:func:`~imagenet_zsl.evaluation.run.verify.verify_run_directory`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.classes import CellClasses
from imagenet_zsl.batch.plan import Features, Plan, cell_name, digest
from imagenet_zsl.batch.recipe import RUN_TOOL
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.run.verify import verify_run_directory
from imagenet_zsl.manifests import MANIFEST_NAME
from imagenet_zsl.models.persistence import read_manifest as read_model_manifest
from imagenet_zsl.splits.label_space import NAMED_LABEL_SPACES

CELL_FORMAT = "imagenet-zsl/run-cell-v1"
#: bump when a cell's outputs change for the same inputs, so old cells are recomputed
#: (3: evaluation manifests list "files", format imagenet-zsl/evaluation-v2; 4: the carved GZSL
#: γ is chosen by a calibration copy and applied to the model retrained on every seen class; 5: GZSL
#: lists store their tails (topk/*.tail.npy) and the tie-fair credit counts a tie group running past
#: a list, the structural-ratio column takes the training classes whatever --gzsl, hP@K counts the
#: classes outside the graph)
CELL_VERSION = 5


def _file_key(path: Path | None) -> str | None:
    return None if path is None else sha256_file(path)


def cell_key(plan: Plan, features: Features, model_digest: str, split: str, classes: CellClasses) -> str:
    """Everything a cell's bytes depend on; a finished cell with this key is skipped."""
    recipe = plan.recipe
    space = recipe.label_space
    return digest(
        {
            "version": CELL_VERSION,
            "model": model_digest,
            "split": sha256_file(classes.split_file),
            "seen": _file_key(classes.seen_file),
            "validation": _file_key(classes.val_file),
            "training_classes": _file_key(classes.training_file),
            "validation_features": _file_key(classes.val_features and classes.val_features / MANIFEST_NAME),
            "count_as_miss": classes.missed,
            "label_space": space,
            "label_space_file": None
            if classes.label_space in NAMED_LABEL_SPACES
            else _file_key(Path(classes.label_space)),
            "allow_feature_mismatch": plan.allow_feature_mismatch,
            "calibration": classes.gamma,
            "test_features": features.scored.key
            if features.scored is not None
            else sha256_file(features.test[split] / MANIFEST_NAME),
            "seen_features": None
            if features.seen is None or not recipe.gzsl
            else sha256_file(features.seen / MANIFEST_NAME),
            "settings": recipe.model_dump(
                mode="json", include={"ks", "gzsl", "graph", "label_frequency", "plots", "missing_semantics"}
            ),
        }
    )


def cell_problem(cell_dir: Path, manifest_sha256: str | None) -> str | None:
    """Why a finished cell's files cannot be trusted (None: its manifest has the sha256 its record
    gives, and every file the manifest lists matches it, top-k lists included)."""
    manifest_path = cell_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        return f"{manifest_path} is missing"
    if manifest_sha256 is None or sha256_file(manifest_path) != manifest_sha256:
        return f"{manifest_path} changed"
    try:
        verify_run_directory(cell_dir, hash_topk=True)
    except UserInputError as err:  # "<file>: <what>; re-run ..." -> "<file>: <what>" (run re-runs it)
        return str(err).split("; re-run")[0]
    return None


def finished_record(record_path: Path, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the record of a finished cell computed with ``key``, None) when it can be reused; else
    (None, why it is recomputed; None for a cell that simply has not run with this key)."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(record, dict) or record.get("status") != "ok" or record.get("key") != key:
        return None, None
    problem = cell_problem(record_path.with_suffix(""), record.get("manifest_sha256"))
    return (None, problem) if problem else (record, None)


def cell_record(plan: Plan, model: str, split: str, **fields: Any) -> dict[str, Any]:
    """A cell's record (``cells/NAME__SPLIT.json``): a failed one unless ``fields`` say otherwise."""
    total = len(plan.split_wnids[split])
    record = {
        "format": CELL_FORMAT,
        "tool": RUN_TOOL,
        "model": model,
        "split": split,
        "run": f"cells/{cell_name(model, split)}",
        "classes": {
            "in_split": total,
            "evaluated": None,
            "excluded": [],
            "missed": [],
            "in_label_space": None,
            "with_test_images": None,
        },
        "provenance": {"backbone": "–", "class_vectors": "–", "feature_override": None},
        #: carved GZSL calibration: the γ chosen by the model's calibration copy, and how (its fit's
        #: seconds are in OUT/timings.json: a timing would make the same inputs give other bytes)
        "calibration": None,
        "status": "failed",
        "error": None,
        "key": None,
        "manifest_sha256": None,
    }
    record.update(fields)
    return record


def class_vectors(model_dir: Path) -> str:
    """The class-vector source a model directory records (``–``: a model without semantics)."""
    try:
        manifest = read_model_manifest(model_dir)
    except UserInputError:  # shown as unknown; the cell itself says what is wrong
        return "–"
    source = manifest.get("semantics_identity")
    if isinstance(source, dict):
        source = source.get("source") or source.get("name") or source.get("path")
    if not source:
        inputs = manifest.get("inputs")
        source = inputs.get("semantics") if isinstance(inputs, dict) else None
    return str(source) if source else "–"
