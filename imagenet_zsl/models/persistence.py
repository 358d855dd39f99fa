"""Saving and loading a fitted model as one self-describing directory (the registry of models by
name is :data:`imagenet_zsl.models.base.MODELS`).

A model directory::

    DIR/config.json     {"model": name, "params": {...}}
    DIR/state.json      the fitted state that is not an array (numbers, strings, nesting)
    DIR/weights.npz     every fitted array, keyed by its attribute path
    DIR/training_image_ids.json.gz   (``train``) the image ids of the features it was fitted on
                        (:mod:`imagenet_zsl.features.image_ids`), for GZSL's held-out seen check
    DIR/manifest.json   the one manifest (:func:`imagenet_zsl.manifests.write_manifest`, format
                        ``imagenet-zsl/model-v2``): format, tool, command, inputs, parameters (the
                        hyper-parameters), software, files (sha256 of each), and the model's own
                        fields: model, class, params, fit, and what ``train`` adds
                        (feature_identity, semantics_identity, train_config, selection)

The state is captured generically from the model's fitted attributes (those ending in ``_``:
arrays, numbers, strings, ClassVectors, ClassGraph and the small helper objects, whose own fitted
attributes end in ``_`` too), so any :class:`ZSLModel` — including ones written elsewhere —
round-trips without its own serialiser. The npz is written with fixed zip timestamps: the same fit
gives the same bytes. Directories of format v1 (before the one manifest writer, and before the
helper objects' fitted attributes ended in ``_``) still load.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import canonical_json
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest_verified, write_manifest
from imagenet_zsl.models.base import MODELS, ZSLModel, check_is_fitted
from imagenet_zsl.models.common import FeaturePrep
from imagenet_zsl.models.seen_classifier import SeenClassifier
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)

MODEL_FORMAT = "imagenet-zsl/model-v2"
#: every model-directory format :func:`load_model` reads (v1: the manifest before the one writer)
MODEL_FORMATS = (MODEL_FORMAT, "imagenet-zsl/model-v1")
TOOL = "imagenet-zsl train"
RERUN = "retrain the model with 'imagenet-zsl train'"
#: the files of a model directory beside its manifest
MODEL_FILES = ("config.json", "state.json", "weights.npz")
#: helper objects a model may hold in its fitted state, saved through their attributes
STATE_TYPES: dict[str, type] = {"SeenClassifier": SeenClassifier, "FeaturePrep": FeaturePrep}
#: fitted attributes of the helper objects as format v1 named them (without the trailing ``_``)
LEGACY_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "SeenClassifier": ("kind", "weights", "columns", "logit_dim", "head_residual", "head_stored"),
    "FeaturePrep": ("dim", "mean", "scale"),
}

__all__ = [
    "MODEL_FORMAT",
    "MODEL_FORMATS",
    "load_model",
    "read_manifest",
    "save_model",
]


def _encode(value: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"{path}: object arrays cannot be saved")
        arrays[path] = value
        return {"__array__": path}
    if isinstance(value, ClassVectors):
        arrays[f"{path}.wnids"] = np.asarray(value.wnids, dtype=np.str_)
        arrays[f"{path}.matrix"] = value.matrix
        return {"__class_vectors__": path, "missing": list(value.missing), "source": value.source}
    if isinstance(value, ClassGraph):
        coo = value.child_to_parent.tocoo()
        arrays[f"{path}.wnids"] = np.asarray(value.wnids, dtype=np.str_)
        arrays[f"{path}.parents"] = coo.col.astype(np.int64)
        arrays[f"{path}.children"] = coo.row.astype(np.int64)
        return {"__class_graph__": path, "source": value.source}
    if isinstance(value, STATE_TYPES.get(type(value).__name__, ())):
        return {"__object__": type(value).__name__, "state": _encode_attributes(vars(value), path, arrays)}
    if isinstance(value, list | tuple):
        return [_encode(v, f"{path}.{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, f"{path}.{k}", arrays) for k, v in value.items()}}
    raise TypeError(f"{path}: cannot save a {type(value).__name__}")


def _encode_attributes(attributes: dict[str, Any], prefix: str, arrays: dict[str, np.ndarray]) -> dict:
    return {
        name: _encode(value, f"{prefix}.{name}" if prefix else name, arrays)
        for name, value in sorted(attributes.items())
    }


def _decode(value: Any, arrays: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        return arrays[value["__array__"]]
    if "__class_vectors__" in value:
        key = value["__class_vectors__"]
        return ClassVectors(
            [str(w) for w in arrays[f"{key}.wnids"]],
            arrays[f"{key}.matrix"],
            missing=list(value["missing"]),
            source=value["source"],
        )
    if "__class_graph__" in value:
        key = value["__class_graph__"]
        return ClassGraph(
            [str(w) for w in arrays[f"{key}.wnids"]],
            arrays[f"{key}.parents"],
            arrays[f"{key}.children"],
            source=value["source"],
        )
    if "__object__" in value:
        kind = value["__object__"]
        cls = STATE_TYPES[kind]
        obj = cls.__new__(cls)
        legacy = LEGACY_ATTRIBUTES.get(kind, ())
        obj.__dict__.update(
            {(f"{k}_" if k in legacy else k): _decode(v, arrays) for k, v in value["state"].items()}
        )
        return obj
    if "__dict__" in value:
        return {k: _decode(v, arrays) for k, v in value["__dict__"].items()}
    raise ValueError(f"unreadable state entry {sorted(value)}")


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An npz (np.load-able) with fixed timestamps and sorted entries: reproducible bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key in sorted(arrays):
            payload = io.BytesIO()
            np.save(payload, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, payload.getvalue())
    return buffer.getvalue()


# ----------------------------------------------------------------------------- save / load
def save_model(
    model: ZSLModel,
    directory: str | Path,
    extra: dict[str, Any] | None = None,
    inputs: Sequence[str | Path] = (),
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write a fitted model to ``directory`` atomically; ``extra`` goes into the manifest (its
    ``inputs``: the manifest's inputs record; every other key a field beside the model's);
    ``files``: more files of the directory, {name: bytes} (``train``'s training image ids). An
    existing ``directory`` is replaced only if an earlier ``imagenet-zsl train`` wrote it, and never
    when it holds or lies inside one of ``inputs`` (the paths the caller read). Returns the
    directory."""
    check_is_fitted(model)
    arrays: dict[str, np.ndarray] = {}
    state = _encode_attributes({k: getattr(model, k) for k in model.fitted_attributes()}, "", arrays)
    fields = dict(extra or {})
    record = fields.pop("inputs", None)
    fields.pop("command", None)  # write_manifest records the command line itself
    directory = Path(directory)
    with atomic_directory(directory, tool=TOOL, inputs=inputs) as tmp:
        (tmp / "weights.npz").write_bytes(_npz_bytes(arrays))
        (tmp / "state.json").write_text(canonical_json(state))
        (tmp / "config.json").write_text(canonical_json({"model": model.name, "params": model.params}))
        for name, data in (files or {}).items():
            (tmp / name).write_bytes(data)
        write_manifest(
            tmp,
            format=MODEL_FORMAT,
            tool=TOOL,
            inputs=record,
            parameters=model.params,
            fields={
                "model": model.name,
                "class": f"{type(model).__module__}.{type(model).__qualname__}",
                "params": model.params,
                "fit": getattr(model, "fit_info_", {}),
                **fields,
            },
        )
    return directory


def read_manifest(directory: str | Path, hash_files: bool = False) -> dict[str, Any]:
    """The verified manifest of a model directory (format v2 or v1; each file's size checked, and
    its sha256 too with ``hash_files``); one-line UserInputError otherwise."""
    manifest = read_manifest_verified(directory, MODEL_FORMATS, hash_files=hash_files, rerun=RERUN)
    listed = {record["path"] for record in manifest["files"]}
    unlisted = sorted(set(MODEL_FILES) - listed)
    if unlisted:
        raise UserInputError(
            f"{Path(directory) / MANIFEST_NAME}: does not list {', '.join(unlisted)}; the model "
            f"manifest is damaged: {RERUN}"
        )
    if not isinstance(manifest.get("model"), str) or not isinstance(manifest.get("params"), dict):
        raise UserInputError(
            f"{Path(directory) / MANIFEST_NAME}: no 'model' name or 'params' mapping; the model "
            f"manifest is damaged: {RERUN}"
        )
    return manifest


def load_model(directory: str | Path, verify: bool = True) -> ZSLModel:
    """The fitted model saved in ``directory`` (with ``verify``, every file checked against the
    manifest's sha256)."""
    directory = Path(directory)
    manifest = read_manifest(directory, hash_files=verify)
    cls = MODELS.get(manifest["model"])
    model = cls.__new__(cls)
    model.params = dict(manifest["params"])
    state = json.loads((directory / "state.json").read_text())
    with np.load(directory / "weights.npz", allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    for name, value in state.items():
        if name.startswith("_"):  # saved before fitted attributes were named ``x_`` (was ``_x``)
            name = name[1:] + "_"
        setattr(model, name, _decode(value, arrays))
    return model
