"""Feature identity: which network, weights, preprocessing and layer produced a feature directory.

Why: features of two backbones live in different spaces, so a model fitted on one backbone's
features and evaluated on another's gives numbers that mean nothing, silently. Every feature
directory's manifest therefore determines an *identity*; model directories record the identity of
the features they were fitted on, and every command that combines directories compares them with
:func:`check_same_features` (one ``error:`` line naming both, unless the user overrides it).

The identity leaves out what may legitimately differ between the training and the test features
of one protocol: the image store, the classes, the device, the batch size and the shard size.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from imagenet_zsl.errors import UserInputError

#: what an identity compares; ``describe_identity`` shows the first two
IDENTITY_KEYS = ("backbone", "weights_sha256", "preprocessing", "feature_layer", "dim", "simulation")
#: the manifest key under which a model directory (``train``) records its features' identity
MODEL_FEATURES_KEY = "feature_identity"
#: the manifest key under which a model directory records its class vectors' identity
MODEL_SEMANTICS_KEY = "semantics_identity"
#: the layer every builtin backbone returns (the pooled features the head reads)
DEFAULT_LAYER = "pooled pre-logits"


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def feature_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """The identity of the feature directory whose ``manifest.json`` is ``manifest``.

    Extracted features: backbone name (its pretrained tag included), the sha256 of the weights
    file, the preprocessing (resize, crop, interpolation, mean/std, ten-crop), the feature layer
    and the dimension. SIMULATED features: the simulation's parameters (seed, dimension, noise,
    semantics ...) less the per-part sizes, so the train/seen/test parts of one simulation agree.
    """
    dim = manifest.get("dim")
    if manifest.get("simulated"):
        config = dict(manifest.get("simulation") or {})
        for part in ("train", "seen_test", "test", "shard_rows"):
            config.pop(part, None)
        return {
            "backbone": "SIMULATED",
            "weights_sha256": None,
            "preprocessing": None,
            "feature_layer": None,
            "dim": dim,
            "simulation": _digest(config),
        }
    backbone = manifest.get("backbone") or {}
    if not isinstance(backbone, dict):
        backbone = {"name": str(backbone)}
    weights = backbone.get("weights") or {}
    preprocessing = manifest.get("preprocessing")
    return {
        "backbone": backbone.get("name"),
        "weights_sha256": weights.get("sha256") if isinstance(weights, dict) else None,
        "preprocessing": None if preprocessing is None else _digest(preprocessing),
        "feature_layer": manifest.get("feature_layer", DEFAULT_LAYER),
        "dim": dim,
        "simulation": None,
    }


def describe_identity(identity: dict[str, Any] | None) -> str:
    """A short label for tables: ``tf_efficientnet_lite0 @3f2a9c1b`` (weights sha256 prefix),
    ``SIMULATED @<config digest>``, or ``unknown`` for directories written before identities."""
    if not identity:
        return "unknown"
    name = str(identity.get("backbone") or "unknown")
    tag = identity.get("weights_sha256") or identity.get("simulation")
    return f"{name} @{str(tag)[:8]}" if tag else name


def identity_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The identity keys on which ``a`` and ``b`` differ (empty: the same features)."""
    return [k for k in IDENTITY_KEYS if a.get(k) != b.get(k)]


def check_same_features(
    a: dict[str, Any] | None,
    b: dict[str, Any] | None,
    what_a: str,
    what_b: str,
    allow_mismatch: bool = False,
) -> dict[str, Any] | None:
    """Refuse to combine two feature identities that differ.

    Returns None when they agree (or one is unknown: directories written before identities were
    recorded), raises :class:`UserInputError` naming both when they differ, or, with
    ``allow_mismatch`` (``--allow-feature-mismatch``), returns the override record that the caller
    stores in its manifest and shows in its tables.
    """
    if not a or not b:
        return None
    differ = identity_differences(a, b)
    if not differ:
        return None
    if allow_mismatch:
        return {
            "allowed": True,
            "differ": differ,
            what_a: describe_identity(a),
            what_b: describe_identity(b),
        }
    raise UserInputError(
        f"feature mismatch: {what_a} has {describe_identity(a)} features but {what_b} has "
        f"{describe_identity(b)} ({', '.join(differ)} differ); use features of the same backbone, "
        "or pass --allow-feature-mismatch to combine them anyway (recorded in every table)"
    )
