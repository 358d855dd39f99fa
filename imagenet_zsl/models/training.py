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

import difflib
import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from imagenet_zsl.config import Config, load_config, validate_config
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.features.simulate import resolve_class_vectors
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.io import MANIFEST_NAME, check_out_dir, command_line, file_record
from imagenet_zsl.models.base import MODELS, SeenData, create
from imagenet_zsl.models.common import blas_threads, gram_flops
from imagenet_zsl.models.registry import save_model
from imagenet_zsl.models.selection import search_hyperparameters, split_seen_data
from imagenet_zsl.splits.io import read_wnid_list

log = logging.getLogger(__name__)

TOOL = "imagenet-zsl train"


class SelectConfig(Config):
    """The ``select`` block: choose hyper-parameters on validation classes."""

    grid: str | dict[str, list[Any]] = "default"
    val_fraction: float = Field(0.2, gt=0, lt=1)
    seed: int = 0
    mode: Literal["zsl", "gzsl"] = "zsl"
    seen_holdout: float = Field(0.2, gt=0, lt=1)


class TrainConfigFile(Config):
    """The schema of a model config file (configs/models/*.yaml), ``select`` typed in full."""

    model: str
    params: dict[str, Any] = Field(default_factory=dict)
    semantics: str = "glove-6b-50d"
    graph: str = "wordnet"
    seen: str | None = None
    select: SelectConfig | None = None


class TrainConfig(Config):
    """A validated model config. Mutable (validated on assignment) because recipes and the demo
    override fields of a loaded config; ``select`` is the plain dict of a :class:`SelectConfig`
    (every key filled in), so ``vars(config)`` stays JSON-able for cache digests."""

    model_config = ConfigDict(
        extra="forbid", frozen=False, strict=True, validate_default=True, validate_assignment=True
    )

    model: str
    params: dict[str, Any] = Field(default_factory=dict)
    semantics: str = "glove-6b-50d"
    graph: str = "wordnet"
    seen: str | None = None
    select: dict[str, Any] | None = None

    def selection(self, where: str = "select") -> SelectConfig | None:
        """The ``select`` block validated (it may have been assigned after loading)."""
        return None if self.select is None else validate_config(self.select, SelectConfig, where)


def check_model_params(name: str, params: dict[str, Any], where: str) -> None:
    """An unknown model, an unknown hyper-parameter or an invalid value → one line naming ``where``
    (the config file) and the key, with the closest allowed name."""
    if name not in MODELS:
        close = difflib.get_close_matches(name, MODELS.names(), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UserInputError(f"unknown model {name!r} ({where}: model): {hint}see 'imagenet-zsl models'")
    cls = MODELS.get(name)
    for key in params:
        if key not in cls.defaults:
            allowed = sorted(cls.defaults)
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UserInputError(
                f"unknown key {key!r} ({where}: params.{key}): {hint}allowed for {name}: {', '.join(allowed)}"
            )
    try:
        create(name, **params)
    except UserInputError as err:
        raise UserInputError(f"invalid value ({where}: params): {err}") from None


def train_config_from_dict(raw: dict[str, Any], where: str = "train config") -> TrainConfig:
    """A validated :class:`TrainConfig` (typed, unknown keys rejected, model params checked)."""
    checked = validate_config(raw, TrainConfigFile, where)
    check_model_params(checked.model, checked.params, where)
    return TrainConfig(**checked.as_dict())


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a model config; every mistake is one line naming the file and key."""
    checked = load_config(path, TrainConfigFile)
    check_model_params(checked.model, checked.params, str(path))
    return TrainConfig(**checked.as_dict())


def load_seen_data(
    features_dir: str | Path, seen: list[str] | None = None, *, with_logits: bool = True
) -> SeenData:
    """SeenData from a feature directory: the given classes, or every class that has images;
    its logits too when the directory has them and ``with_logits``.

    Memory bound (issue 16): the seen features are held in memory once, N x D float32 (ImageNet-1K
    at D = 2048: 1.28M x 2048 x 4 B = 10.5 GB), plus logits N x 1000 x 4 B only ``with_logits``
    (``train`` asks for them only for models that read them). Every model then streams over them
    in blocks of ``BLOCK_ROWS`` rows (closed forms, GFZSL, the feature statistics) or mini-batches
    (ranking, CMT, SSE); the full-batch ones (softmax seen classifier, SYNC) make more copies.
    Validation selection copies the fit classes' rows. Measured peak growth of ``train`` per
    2,048-d image: ESZSL 18 KB, SYNC 32 KB, ConSE with a softmax classifier 35 KB (README).
    """
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
    block = features.load(seen, with_logits=with_logits and features.has_logits)
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


def _inputs(features_dir: str | Path, semantics: str, config_path: str | Path | None) -> list[Path]:
    """The files and directories ``train`` reads: its ``--out`` may neither hold nor lie in them."""
    inputs = [Path(features_dir)]
    if config_path is not None:
        inputs.append(Path(config_path))
    if str(semantics).endswith(".npz") or Path(str(semantics)).is_file():
        inputs.append(Path(semantics))
    return inputs


def train(
    config: TrainConfig,
    features_dir: str | Path,
    out_dir: str | Path,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Fit ``config.model`` on the seen classes of ``features_dir`` and save it to ``out_dir``.

    ``out_dir`` is written atomically and only replaces an earlier ``imagenet-zsl train`` output;
    an ``out_dir`` holding or inside an input is refused before anything is read."""
    cls = MODELS.get(config.model)
    params = {**config.params, **(overrides or {})}
    check_model_params(cls.name, params, "--set" if overrides else str(config_path or "train config"))
    select = config.selection(str(config_path or "train config"))
    inputs = _inputs(features_dir, config.semantics, config_path)
    check_out_dir(Path(out_dir), TOOL, inputs)  # fail before loading anything
    seen = None
    if config.seen:
        seen_path = Path(config.seen)
        if not seen_path.exists():
            raise UserInputError(f"{seen_path}: seen-class list not found")
        seen = read_wnid_list(seen_path)
    data = load_seen_data(features_dir, seen, with_logits=cls.uses_training_logits)
    semantics = None if not getattr(cls, "needs_semantics", True) else resolve_class_vectors(config.semantics)
    graph = resolve_graph(config.graph) if getattr(cls, "needs_graph", False) else None
    extra: dict[str, Any] = {
        "command": command_line(),
        "train_config": config.as_dict(),
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
    with blas_threads(gram_flops(data)):  # small problems: one BLAS thread (see blas_threads)
        if select is not None:
            params, extra["selection"] = _select(cls.name, select, params, data, semantics, graph)
        model = create(cls.name, **params).fit(data, semantics, graph)
    return save_model(model, out_dir, extra, inputs=inputs)


def _select(
    name: str, select: SelectConfig, params: dict[str, Any], data: SeenData, semantics: Any, graph: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config's ``select`` block → (chosen hyper-parameters, manifest record)."""
    grid = select.grid
    mode = select.mode
    split = split_seen_data(
        data, select.val_fraction, select.seed, select.seen_holdout if mode == "gzsl" else None
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
