"""Feature identity: which network, weights, preprocessing and layer produced a feature directory.

Why: features of two backbones live in different spaces, so a model fitted on one backbone's
features and evaluated on another's gives numbers that mean nothing, silently. Every feature
directory's manifest therefore determines an *identity*; model directories record the identity of
the features they were fitted on, and every command that combines directories compares them with
:func:`check_same_features` (one ``error:`` line naming both, unless the user overrides it).

The identity leaves out what may legitimately differ between the training and the test features
of one protocol: the image store, the classes, the device, the batch size and the shard size.

Weights are identified by their tensors, not their file: ``weights_tensors`` is the sha256 of the
loaded network's tensors (name, dtype, shape and bytes of each, in sorted name order:
:func:`~imagenet_zsl.features.hub_weights.tensor_digest`), so the same weights saved as ``.pth`` and
as ``.safetensors`` are the same features. Manifests written before it record only the weights
file's sha256 (``weights_sha256``, still recorded): when either side lacks the tensors' digest the
file's sha256 is compared, as before, and a refusal says so.

Exact, not by name: when both sides record their weights' digest, the backbone is compared by its
architecture (the name less its pretrained tag), so ``timm:tf_efficientnet_lite0`` and
``timm:tf_efficientnet_lite0.in1k`` with the same weights are the same features. Random weights
(``--weights random``) are flagged in the identity (``random_weights``) and in every table's label
(:func:`describe_identity`), as SIMULATED features are. The numerics of
an extraction (precision, decoder, mode: ``NUMERICS_KEYS``) are recorded beside the identity but
not compared by it: bf16 or nvJPEG features are the same network's, a few ulps apart; a train/test
difference in them is a warning, and tables show non-default numerics.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.hub_weights import RANDOM

#: what an identity compares (of the two weights keys, ``weights_tensors`` when both sides record
#: it, else ``weights_sha256``: :func:`_weights_key`); ``describe_identity`` shows the backbone and
#: the weights
IDENTITY_KEYS = (
    "backbone", "weights_sha256", "weights_tensors", "preprocessing", "feature_layer", "dim", "simulation",
)  # fmt: skip
#: the two ways an identity records its weights: the tensors' digest, the file's sha256 (older)
_WEIGHTS_KEYS = ("weights_tensors", "weights_sha256")
#: the label's mark of a backbone with random weights (as ``SIMULATED`` marks simulated features)
RANDOM_MARK = "(RANDOM weights)"
#: the manifest key under which a model directory (``train``) records its features' identity
MODEL_FEATURES_KEY = "feature_identity"
#: the manifest key under which a model directory records its class vectors' identity
MODEL_SEMANTICS_KEY = "semantics_identity"
#: the layer every builtin backbone returns (the pooled features the head reads)
DEFAULT_LAYER = "pooled pre-logits"
#: extraction numerics (``manifest["parameters"]``): recorded in the identity, not compared by it
NUMERICS_KEYS = ("precision", "decode", "mode")
#: the numerics of ``extract --deterministic`` (the default): tables show only other values
DEFAULT_NUMERICS = {"precision": "fp32", "decode": "pil", "mode": "deterministic"}

log = logging.getLogger(__name__)


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def feature_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """The identity of the feature directory whose ``manifest.json`` is ``manifest``.

    Extracted features: backbone name (its pretrained tag included), the digest of the weights'
    tensors (``weights_tensors``; absent from manifests written before it) and the sha256 of the
    weights file, ``random_weights`` when they are random, the preprocessing (resize, crop,
    interpolation, mean/std, ten-crop, JPEG draft), the feature layer and the dimension.
    SIMULATED features: the simulation's parameters (seed, dimension, noise, semantics ...) less
    the per-part sizes, so the train/seen/test parts of one simulation agree.
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
    identity = {
        "backbone": backbone.get("name"),
        "weights_sha256": weights.get("sha256") if isinstance(weights, dict) else None,
        "preprocessing": None if preprocessing is None else _digest(preprocessing),
        "feature_layer": manifest.get("feature_layer", DEFAULT_LAYER),
        "dim": dim,
        "simulation": None,
    }
    if isinstance(weights, dict) and weights.get("tensors_sha256"):
        identity["weights_tensors"] = weights["tensors_sha256"]
    if isinstance(weights, dict) and weights.get("source") == RANDOM:
        identity["random_weights"] = True
    if identity["backbone"]:
        identity["architecture"] = architecture_of(str(identity["backbone"]))
    parameters = manifest.get("parameters")
    if isinstance(parameters, dict):  # recorded since extraction records its numerics
        identity.update({k: parameters[k] for k in NUMERICS_KEYS if parameters.get(k) is not None})
    return identity


def architecture_of(name: str) -> str:
    """The network a backbone name builds, its pretrained tag left out: ``timm:X.TAG``, ``timm:X``
    and a plain ``X.TAG`` → ``X``; ``open_clip:ARCH/TAG`` → ``open_clip:ARCH``; a hub repository
    or a registered name stays as it is. Compared only together with the weights' sha256."""
    if "hf-hub:" in name:
        return name
    if name.startswith("open_clip:"):
        return name.partition("/")[0]
    return name.removeprefix("timm:").partition(".")[0]


def numerics(identity: dict[str, Any] | None) -> dict[str, Any]:
    """The recorded extraction numerics of an identity (precision, decode, mode); {} if unknown."""
    return {k: identity[k] for k in NUMERICS_KEYS if identity and identity.get(k) is not None}


def numerics_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """The numerics both identities record and on which they differ."""
    na, nb = numerics(a), numerics(b)
    return [k for k in NUMERICS_KEYS if k in na and k in nb and na[k] != nb[k]]


def _numerics_label(identity: dict[str, Any]) -> str:
    """`` [bf16, decode torchvision, fast]``: the recorded numerics that are not the defaults."""
    shown = [
        f"{k} {v}" if k == "decode" else str(v)
        for k, v in numerics(identity).items()
        if v != DEFAULT_NUMERICS[k]
    ]
    return f" [{', '.join(shown)}]" if shown else ""


def describe_identity(identity: dict[str, Any] | None, weights_key: str | None = None) -> str:
    """A short label for tables: ``tf_efficientnet_lite0 @3f2a9c1b`` (prefix of the weights'
    tensors digest, else of the weights file's sha256; ``weights_key`` picks one),
    ``resnet50 (RANDOM weights) @…``, ``SIMULATED @<config digest>``, or ``unknown`` for
    directories written before identities. This is the one place a table's backbone label is made."""
    if not identity:
        return "unknown"
    name = str(identity.get("backbone") or "unknown")
    if identity.get("random_weights"):
        name = f"{name} {RANDOM_MARK}"
    keys = (weights_key,) if weights_key else _WEIGHTS_KEYS
    tag = next((identity[k] for k in keys if identity.get(k)), None) or identity.get("simulation")
    return (f"{name} @{str(tag)[:8]}" if tag else name) + _numerics_label(identity)


def _weights_key(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The weights record two identities are compared by: the tensors' digest when both have it,
    else the weights file's sha256 (a manifest written before tensor digests)."""
    return "weights_tensors" if a.get("weights_tensors") and b.get("weights_tensors") else "weights_sha256"


def _same_backbone(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Names equal, or, when both weights' digests are known, architectures equal (the pretrained
    tag of a name says which weights, and the digest already says that exactly)."""
    name_a, name_b = a.get("backbone"), b.get("backbone")
    if name_a == name_b:
        return True
    key = _weights_key(a, b)
    if not (a.get(key) and b.get(key) and name_a and name_b):
        return False
    return architecture_of(str(name_a)) == architecture_of(str(name_b))


def identity_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The identity keys on which ``a`` and ``b`` differ (empty: the same features); ``backbone``
    differs only if the networks differ (:func:`_same_backbone`), not on a name's spelling; the
    weights by one of their two records (:func:`_weights_key`)."""
    compared = _weights_key(a, b)
    differ = []
    for key in IDENTITY_KEYS:
        if key == "backbone":
            same = _same_backbone(a, b)
        elif key in _WEIGHTS_KEYS:
            same = key != compared or a.get(key) == b.get(key)
        else:
            same = a.get(key) == b.get(key)
        if not same:
            differ.append(key)
    return differ


def _by_file_note(a: dict[str, Any], b: dict[str, Any], what_a: str, what_b: str) -> str:
    """Why weights were compared by file: the side(s) written before tensor digests."""
    old = [what for what, side in ((what_a, a), (what_b, b)) if not side.get("weights_tensors")]
    if _weights_key(a, b) != "weights_sha256" or len(old) != 1:
        return ""
    return (
        f"; {old[0]} records only its weights file's sha256 (written before tensor digests), so the "
        "files were compared, as before: the same tensors in another file format differ; re-extract "
        "or re-train it to compare by tensors"
    )


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
    _warn_numerics(a, b, what_a, what_b)
    differ = identity_differences(a, b)
    if not differ:
        return None
    key = _weights_key(a, b)
    label_a, label_b = describe_identity(a, key), describe_identity(b, key)
    if allow_mismatch:
        return {"allowed": True, "differ": differ, what_a: label_a, what_b: label_b}
    note = _by_file_note(a, b, what_a, what_b) if "weights_sha256" in differ else ""
    raise UserInputError(
        f"feature mismatch: {what_a} has {label_a} features but {what_b} has {label_b} "
        f"({', '.join(differ)} differ{note}); use features of the same backbone, "
        "or pass --allow-feature-mismatch to combine them anyway (recorded in every table)"
    )


def _warn_numerics(a: dict[str, Any], b: dict[str, Any], what_a: str, what_b: str) -> None:
    """Warn when two feature directories were extracted with other numerics (bf16 vs fp32, nvJPEG
    vs PIL): the same network's features, but not the same bits."""
    differ = numerics_differences(a, b)
    if differ:
        na, nb = numerics(a), numerics(b)
        pairs = ", ".join(f"{k} {na[k]} vs {nb[k]}" for k in differ)
        log.warning(
            "%s and %s were extracted with other numerics (%s): same network, not the same bits; "
            "extract both the same way (--deterministic or --fast) to compare exactly",
            what_a,
            what_b,
            pairs,
        )
