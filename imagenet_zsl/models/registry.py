"""Models by name, and saving/loading a fitted model as one self-describing directory.

A model directory::

    DIR/config.json     {"model": name, "params": {...}}
    DIR/state.json      the fitted state that is not an array (numbers, strings, nesting)
    DIR/weights.npz     every fitted array, keyed by its attribute path
    DIR/manifest.json   format, model, params, fit summary, software versions, sha256 of each file

The state is captured generically from the model's attributes (arrays, numbers, strings,
ClassVectors, ClassGraph and the small helper objects), so any :class:`ZSLModel` — including ones
written elsewhere — round-trips without writing its own serialiser. The npz is written with fixed
zip timestamps: the same fit gives the same bytes.
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_write_json,
    canonical_json,
    file_record,
    sha256_file,
    software_versions,
)
from imagenet_zsl.models.base import ZSLModel

log = logging.getLogger(__name__)

MODEL_FORMAT = "imagenet-zsl/model-v1"
MODEL_MODULES = (
    "imagenet_zsl.models.trivial",
    "imagenet_zsl.models.conse",
    "imagenet_zsl.models.closed_form",
    "imagenet_zsl.models.ranking",
    "imagenet_zsl.models.sync",
    "imagenet_zsl.models.gcn",
    "imagenet_zsl.models.lampert",  # DAP/IAP, written alongside the attribute datasets
)


def _discover() -> dict[str, type[ZSLModel]]:
    models: dict[str, type[ZSLModel]] = {}
    for module_name in MODEL_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, ZSLModel) and value.name
                    and value.__module__ == module.__name__):
                models[value.name] = value
    return dict(sorted(models.items()))


#: model name → class (``imagenet-zsl models`` lists them)
MODELS: dict[str, type[ZSLModel]] = _discover()


def model_class(name: str) -> type[ZSLModel]:
    key = str(name).lower()
    if key not in MODELS:
        raise UserInputError(f"unknown model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[key]


def create(name: str, **params: Any) -> ZSLModel:
    """A model by registry name with hyper-parameters (unknown or invalid ones: UserInputError)."""
    cls = model_class(name)
    try:
        return cls(**params)
    except (ValueError, TypeError) as err:
        raise UserInputError(f"model {cls.name}: {err}; see 'imagenet-zsl models'") from err


def describe(cls: type[ZSLModel]) -> str:
    """First line of the class docstring."""
    return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


# ----------------------------------------------------------------------------- state capture
def _state_types() -> dict[str, type]:
    from imagenet_zsl.models.common import FeaturePrep
    from imagenet_zsl.models.seen_classifier import SeenClassifier

    return {"SeenClassifier": SeenClassifier, "FeaturePrep": FeaturePrep}


def _encode(value: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors

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
    if type(value).__name__ in _state_types() and isinstance(value, _state_types()[type(value).__name__]):
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
        if not name.startswith("_cache") and name != "params"
    }


def _decode(value: Any, arrays: Any) -> Any:
    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors

    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        return arrays[value["__array__"]]
    if "__class_vectors__" in value:
        key = value["__class_vectors__"]
        return ClassVectors([str(w) for w in arrays[f"{key}.wnids"]], arrays[f"{key}.matrix"],
                            missing=list(value["missing"]), source=value["source"])
    if "__class_graph__" in value:
        key = value["__class_graph__"]
        return ClassGraph([str(w) for w in arrays[f"{key}.wnids"]], arrays[f"{key}.parents"],
                          arrays[f"{key}.children"], source=value["source"])
    if "__object__" in value:
        cls = _state_types()[value["__object__"]]
        obj = cls.__new__(cls)
        obj.__dict__.update({k: _decode(v, arrays) for k, v in value["state"].items()})
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
def save_model(model: ZSLModel, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write a fitted model to ``directory`` atomically (replacing it); ``extra`` goes into the
    manifest (e.g. inputs, hyper-parameter search). Returns the directory."""
    if not hasattr(model, "fit_info_") and not any(k.startswith("_") for k in vars(model)):
        raise ValueError(f"{model.name}: fit the model before saving it")
    arrays: dict[str, np.ndarray] = {}
    state = _encode_attributes(vars(model), "", arrays)
    directory = Path(directory)
    with atomic_directory(directory, tool="imagenet-zsl train") as tmp:
        (tmp / "weights.npz").write_bytes(_npz_bytes(arrays))
        (tmp / "state.json").write_text(canonical_json(state))
        (tmp / "config.json").write_text(canonical_json({"model": model.name, "params": model.params}))
        manifest = {
            "format": MODEL_FORMAT,
            "tool": "imagenet-zsl train",
            "model": model.name,
            "class": f"{type(model).__module__}.{type(model).__qualname__}",
            "params": model.params,
            "fit": getattr(model, "fit_info_", {}),
            "files": [file_record(tmp / name, tmp) for name in ("config.json", "state.json", "weights.npz")],
            "software": software_versions(),
            **(extra or {}),
        }
        atomic_write_json(tmp / MANIFEST_NAME, manifest)
    return directory


def read_manifest(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / MANIFEST_NAME
    if not path.exists():
        raise UserInputError(
            f"{path}: no model manifest; point to a directory written by 'imagenet-zsl train'"
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}: not valid JSON ({err})") from err
    if manifest.get("format") != MODEL_FORMAT:
        raise UserInputError(f"{path}: format is {manifest.get('format')!r}, expected {MODEL_FORMAT!r}")
    return manifest


def load_model(directory: str | Path, verify: bool = True) -> ZSLModel:
    """The fitted model saved in ``directory`` (files checked against the manifest's sha256)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if verify:
        bad = [r["path"] for r in manifest["files"]
               if not (directory / r["path"]).exists() or sha256_file(directory / r["path"]) != r["sha256"]]
        if bad:
            raise UserInputError(
                f"{directory}: {preview(bad)} missing or changed since the model was saved; retrain it"
            )
    cls = model_class(manifest["model"])
    model = cls.__new__(cls)
    model.params = dict(manifest["params"])
    state = json.loads((directory / "state.json").read_text())
    with np.load(directory / "weights.npz", allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    for name, value in state.items():
        setattr(model, name, _decode(value, arrays))
    return model


def select_hyperparameters(name: str, grid: dict[str, list[Any]] | None, data, semantics, graph=None,
                           val_fraction: float = 0.2, seed: int = 0, **options: Any) -> dict[str, Any]:
    """Best hyper-parameters on class-disjoint validation classes split from the seen classes.

    See :func:`imagenet_zsl.models.selection.search_hyperparameters` for ``options`` (mode="zsl" or
    "gzsl", base_params, ...). ``grid=None`` uses the model's own grid.
    """
    from imagenet_zsl.models.selection import search_hyperparameters

    return search_hyperparameters(name, grid, data, semantics, graph, val_fraction, seed,
                                  **options).best_params
