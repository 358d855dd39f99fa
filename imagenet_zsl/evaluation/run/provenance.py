"""Where a run's inputs come from: feature identities (checked against each other and the
model's), the backbone's pretraining labels, and metrics.json's ``inputs``/``provenance``/
``parameters`` blocks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl import scoring as M
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.queries import QuerySource, class_vectors_text
from imagenet_zsl.evaluation.run.classes import class_vectors_label, log
from imagenet_zsl.evaluation.run.config import EvaluationConfig
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.identity import (
    check_same_features,
    describe_identity,
    numerics,
    numerics_differences,
)
from imagenet_zsl.manifests import MANIFEST_NAME
from imagenet_zsl.splits.pretraining import Pretraining
from imagenet_zsl.versions import software_versions

if TYPE_CHECKING:
    from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs, GZSLSets


def check_feature_identities(
    cfg: EvaluationConfig, source: QuerySource, fd: FeatureDir, sets: GZSLSets
) -> list[dict[str, Any]]:
    """Compare the model's training-feature identity with every feature directory of the run, and
    the other feature directories with the test features (:func:`check_same_features`).

    Returns the override records (``--allow-feature-mismatch``), empty when all agree; raises one
    line naming both sides otherwise. Unknown identities (older directories) are skipped."""
    allow = cfg.allow_feature_mismatch
    test_what = f"--features {fd.path}"
    named = [
        ("--seen-features", sets.seen_fd),
        ("--val-features", sets.val_fd if cfg.val_features is not None else None),
        ("--val-seen-features", sets.val_seen_fd),
    ]
    records = []
    model_what = f"model {cfg.model}"
    for what, other in [("--features", fd), *named]:
        if other is None:
            continue
        where = f"{what} {other.path}"
        records.append(check_same_features(source.feature_identity, other.identity, model_what, where, allow))
        if other is not fd:
            records.append(check_same_features(fd.identity, other.identity, test_what, where, allow))
    records.append(check_tower_pair(source, fd, model_what, allow))
    return [r for r in records if r is not None]


def check_tower_pair(source: QuerySource, fd: FeatureDir, model_what: str, allow: bool) -> dict | None:
    """A vision-language model (``vlm_zero_shot``) scores image features against its class text
    embeddings: both must come from one model, by identity, not by equal dimensions
    (:meth:`~imagenet_zsl.evaluation.queries.QuerySource.tower_pair_problem`). An error naming both, the
    override record with ``--allow-feature-mismatch``, a warning when a side records too little."""
    problem, certain = source.tower_pair_problem(fd.identity)
    if problem is None:
        return None
    if not certain:
        log.warning("%s: cannot check that image and text towers belong together: %s", model_what, problem)
        return None
    if not allow:
        raise UserInputError(
            f"tower mismatch: {model_what} (vlm_zero_shot) scores --features {fd.path} against its "
            f"class vectors, but {problem}; use the image and text towers of one model, or pass "
            "--allow-feature-mismatch to combine them anyway (recorded in every table)"
        )
    return {
        "allowed": True,
        "differ": ["text tower"],
        f"--features {fd.path}": describe_identity(fd.identity),
        model_what: class_vectors_text(source.class_vectors),
    }


def pretraining_overlap(fd: FeatureDir, test_wnids: Sequence[str]) -> tuple[dict | None, frozenset | None]:
    """What the features' backbone saw in pretraining (``manifest["pretraining"]``, written by
    extraction) → (the metrics block, the wnid set or None when unknown)."""
    record = fd.manifest.get("pretraining")
    if not isinstance(record, dict):
        return None, None
    info = Pretraining(
        str(record.get("model", "")), tuple(record.get("label_sets") or ()), bool(record.get("web_data"))
    )
    try:
        wnids = info.wnids
    except UserInputError as err:  # a --pretraining-classes file that is gone
        log.warning("pretraining label set of %s cannot be read: %s", fd.path, err)
        wnids = None
    block: dict[str, Any] = {
        "note": record.get("note") or info.describe(),
        "label_sets": list(info.label_sets),
    }
    if wnids is None:
        block["test_classes_seen"] = "unknown (web data)" if info.web_data else "unknown"
        return block, None
    seen = sorted(set(test_wnids) & wnids)
    block["test_classes_seen"] = len(seen)
    if info.web_data:
        block["test_classes_seen_note"] = "a lower bound: web data came too"
    block["seen_wnids"] = seen
    return block, wnids


def warn_pretraining(inp: EvaluationInputs) -> None:
    """Warn when test classes were labels of the backbone's pretraining (or that is unknown)."""
    block = inp.pretraining
    if block is None:
        return
    count = block["test_classes_seen"]
    if isinstance(count, int) and count > 0:
        log.warning(
            "%d of %d test classes were labels of the backbone's pretraining (%s): results on them "
            "are not zero-shot",
            count,
            len(inp.split_wnids),
            block["note"],
        )
    elif not isinstance(count, int):
        log.warning("test classes seen in pretraining: %s (%s)", count, block["note"])


def _feature_info(fd: FeatureDir) -> dict:
    return {
        "path": str(fd.path),
        "manifest_sha256": sha256_file(fd.path / MANIFEST_NAME),
        "rows": fd.num_rows,
        "dim": fd.dim,
        "simulated": fd.simulated,
    }


def _gzsl_inputs(inp: EvaluationInputs) -> dict[str, Any]:
    cfg, sets = inp.cfg, inp.sets
    inputs: dict[str, Any] = {}
    if cfg.gzsl:
        inputs["seen_features"] = _feature_info(sets.seen_fd)
        inputs["seen_classes"] = (
            {"path": str(cfg.seen_classes), "sha256": sha256_file(cfg.seen_classes)}
            if cfg.seen_classes
            else "classes present in --seen-features"
        )
    if sets.val_wnids is not None:
        inputs["val_split"] = {
            "path": str(cfg.val_split),
            "sha256": sha256_file(cfg.val_split),
            "classes": len(sets.val_wnids),
        }
        inputs["val_features"] = _feature_info(sets.val_fd)
        inputs["val_seen"] = (
            _feature_info(sets.val_seen_fd)
            if sets.val_seen_fd is not None
            else {"held_out_from": "seen_features", "fraction": cfg.val_seen_fraction, "seed": cfg.seed}
        )
    return inputs


def input_records(inp: EvaluationInputs) -> dict[str, Any]:
    """metrics.json's ``inputs``: paths, sha256 and sizes of the split and feature directories."""
    cfg = inp.cfg
    return {
        "split": {
            "path": str(cfg.split),
            "name": Path(cfg.split).stem,
            "sha256": sha256_file(cfg.split),
            "classes": len(inp.split_wnids),
        },
        "features": _feature_info(inp.fd),
        **_gzsl_inputs(inp),
    }


def parameters_block(inp: EvaluationInputs) -> dict[str, Any]:
    """metrics.json's ``parameters``."""
    cfg = inp.cfg
    return {
        "ks": inp.ks,
        "kept_per_image": inp.m,
        "l2_normalize": cfg.l2_normalize,
        "gzsl": cfg.gzsl,
        "tie_rule": {"headline": "expected", **M.TIE_RULE_TEXT},
        "graph": None if inp.graph is None else inp.graph.source,
        "kept_images": None
        if cfg.kept_images is None
        else {"filter_dir": str(cfg.kept_images), "n_kept_ids": int(len(inp.kept_ids))},
        "label_space": str(cfg.label_space),
        "allow_feature_mismatch": bool(cfg.allow_feature_mismatch),
    }


def provenance(inp: EvaluationInputs) -> dict[str, Any]:
    """The metrics.json blocks about the run itself: inputs, model, provenance, pretraining (when
    known), parameters and software."""
    blocks: dict[str, Any] = {
        "inputs": input_records(inp),
        "model": inp.source.describe(),
        "provenance": provenance_block(inp),
    }
    if inp.pretraining is not None:
        blocks["pretraining"] = inp.pretraining
    blocks["parameters"] = parameters_block(inp)
    blocks["software"] = software_versions()
    return blocks


def provenance_block(inp: EvaluationInputs) -> dict[str, Any]:
    """metrics.json's ``provenance``: the test features' identity, the model's training-feature
    identity, the class-vector source, the ``--allow-feature-mismatch`` overrides, and (when the
    feature directories record them) the extraction numerics of both sides (``numerics``:
    precision, decode, mode, and the keys on which they differ)."""
    identity = inp.fd.identity
    model_identity = inp.source.feature_identity
    block = _identity_block(inp, identity, model_identity)
    if numerics(identity) or numerics(model_identity):
        block["numerics"] = {
            "features": numerics(identity),
            "model_features": numerics(model_identity),
            "differ": numerics_differences(model_identity, identity),
        }
    return block


def _identity_block(inp: EvaluationInputs, identity: dict, model_identity: dict | None) -> dict[str, Any]:
    return {
        "features": {"backbone": describe_identity(identity), "identity": identity},
        "model_features": None
        if model_identity is None
        else {"backbone": describe_identity(model_identity), "identity": model_identity},
        "class_vectors": class_vectors_label(inp.source.class_vectors),
        "class_vectors_record": inp.source.class_vectors,
        "feature_mismatch": list(inp.feature_checks),
    }
