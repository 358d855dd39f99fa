"""``imagenet-zsl train``: read a model config, fit on a feature directory's seen classes, save.

Config (YAML)::

    model: eszsl                  # registry name (imagenet-zsl models)
    params: {gamma: 1.0}          # hyper-parameters; the rest keep their defaults
    semantics: glove-6b-50d       # class vectors: a named set or a class-vector .npz
    graph: wordnet                # class graph for trivial / GCN models: wordnet | imagenet |
                                  # wordnet+instances | a parent<TAB>child edge file
    seen: null                    # class list file restricting the seen classes (default: all
                                  # classes with images in the feature directory)
    select:                       # optional: choose hyper-parameters on validation classes
      grid: default               # 'default' (the model's grid) or {param: [values]}
      val_fraction: 0.2
      seed: 0
      mode: zsl                   # zsl | gzsl (Le Cacheux et al.: H after calibration)

The model directory's manifest records the config, the input manifests' sha256, the selection
grid with every validation score, and the fit summary.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.features.simulate import resolve_class_vectors
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.io import MANIFEST_NAME, command_line, file_record
from imagenet_zsl.models.base import MODELS, SeenData, create
from imagenet_zsl.models.registry import save_model
from imagenet_zsl.models.selection import search_hyperparameters, split_seen_data
from imagenet_zsl.splits.io import read_wnid_list

log = logging.getLogger(__name__)

SELECT_KEYS = {"grid", "val_fraction", "seed", "mode", "seen_holdout"}


@dataclass
class TrainConfig:
    model: str
    params: dict[str, Any] = field(default_factory=dict)
    semantics: str = "glove-6b-50d"
    graph: str = "wordnet"
    seen: str | None = None
    select: dict[str, Any] | None = None


def train_config_from_dict(raw: dict[str, Any], where: str = "train config") -> TrainConfig:
    if not isinstance(raw, dict) or "model" not in raw:
        raise UserInputError(f"{where}: needs a 'model' key (see 'imagenet-zsl models')")
    known = set(TrainConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserInputError(f"{where}: unknown keys {preview(unknown)}; known: {', '.join(sorted(known))}")
    config = TrainConfig(**raw)
    config.params = dict(config.params or {})
    if config.select is not None:
        if not isinstance(config.select, dict) or set(config.select) - SELECT_KEYS:
            raise UserInputError(f"{where}: select takes {', '.join(sorted(SELECT_KEYS))}")
    return config


def load_train_config(path: str | Path) -> TrainConfig:

    path = Path(path)
    if not path.exists():
        raise UserInputError(f"{path}: model config not found")
    return train_config_from_dict(yaml.safe_load(path.read_text()) or {}, str(path))


def load_seen_data(features_dir: str | Path, seen: list[str] | None = None) -> SeenData:
    """SeenData from a feature directory: the given classes, or every class that has images."""
    features = FeatureDir(features_dir)
    if features.simulated:
        log.warning("%s holds SIMULATED features (see its manifest)", features_dir)
    counts = np.bincount(features.labels(), minlength=len(features.classes))
    if seen is None:
        seen = [w for w, c in zip(features.classes, counts, strict=True) if c > 0]
    else:
        index = {w: i for i, w in enumerate(features.classes)}
        empty = [w for w in seen if w not in index or counts[index[w]] == 0]
        if empty:
            raise UserInputError(
                f"{features_dir}: {len(empty)} seen classes have no images: {preview(empty)}"
            )
    block = features.load(seen, with_logits=features.has_logits)
    position = {w: i for i, w in enumerate(seen)}
    remap = np.array([position.get(w, -1) for w in features.classes], dtype=np.int64)
    return SeenData(
        features=block.features,
        labels=remap[block.labels],
        seen_wnids=list(seen),
        logits=block.logits,
        logit_classes=features.logit_classes,
    )


def drop_classes(data: SeenData, drop: list[str]) -> SeenData:
    """``data`` without the images of the classes ``drop`` (labels re-indexed)."""
    dropped = set(drop)
    keep = np.array([w not in dropped for w in data.seen_wnids])
    if not keep.any():
        raise UserInputError("no seen class is left to train on (none has a semantic vector)")
    rows = keep[data.labels]
    new_index = np.cumsum(keep) - 1
    return SeenData(
        features=data.features[rows],
        labels=new_index[data.labels[rows]],
        seen_wnids=[w for w, k in zip(data.seen_wnids, keep, strict=True) if k],
        logits=None if data.logits is None else data.logits[rows],
        logit_classes=data.logit_classes,
    )


def train(
    config: TrainConfig,
    features_dir: str | Path,
    out_dir: str | Path,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Fit ``config.model`` on the seen classes of ``features_dir`` and save it to ``out_dir``."""
    cls = MODELS.get(config.model)
    params = {**config.params, **(overrides or {})}
    create(cls.name, **params)  # validate before any loading
    seen = None
    if config.seen:
        seen_path = Path(config.seen)
        if not seen_path.exists():
            raise UserInputError(f"{seen_path}: seen-class list not found")
        seen = read_wnid_list(seen_path)
    data = load_seen_data(features_dir, seen)
    semantics = None if not getattr(cls, "needs_semantics", True) else resolve_class_vectors(config.semantics)
    graph = resolve_graph(config.graph) if getattr(cls, "needs_graph", False) else None
    extra: dict[str, Any] = {
        "command": command_line(),
        "train_config": asdict(config),
        "inputs": {
            "features": file_record(Path(features_dir) / MANIFEST_NAME),
            "seen_classes": len(data.seen_wnids),
            "images": int(len(data.labels)),
            "semantics": None if semantics is None else semantics.source,
            "graph": None if graph is None else graph.source,
        },
    }
    if config_path is not None:
        extra["inputs"]["config"] = file_record(config_path)
    if semantics is not None and getattr(cls, "seen_need_vectors", True):
        without = [w for w in data.seen_wnids if w not in semantics]
        if without:
            log.warning(
                "%d seen classes have no semantic vector (%s) and are left out of training: %s",
                len(without),
                semantics.source,
                preview(without),
            )
            data = drop_classes(data, without)
            extra["inputs"]["seen_classes_without_vector"] = sorted(without)
            extra["inputs"]["seen_classes"] = len(data.seen_wnids)
            extra["inputs"]["images"] = int(len(data.labels))
    if config.select:
        params, extra["selection"] = _select(cls.name, config.select, params, data, semantics, graph)
    model = create(cls.name, **params).fit(data, semantics, graph)
    return save_model(model, out_dir, extra)


def _select(
    name: str, select: dict[str, Any], params: dict[str, Any], data: SeenData, semantics: Any, graph: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config's ``select`` block → (chosen hyper-parameters, manifest record)."""
    grid = select.get("grid", "default")
    mode = select.get("mode", "zsl")
    split = split_seen_data(
        data,
        float(select.get("val_fraction", 0.2)),
        int(select.get("seed", 0)),
        float(select.get("seen_holdout", 0.2)) if mode == "gzsl" else None,
    )
    result = search_hyperparameters(
        name,
        None if grid in (None, "default") else grid,
        split,
        semantics,
        graph,
        mode=mode,
        base_params=params,
    )
    return result.best_params, result.summary()
