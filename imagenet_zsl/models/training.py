"""``imagenet-zsl train``: read a model config, fit on a feature directory's seen classes, save.

Config (YAML)::

    model: eszsl                  # registry name (imagenet-zsl models)
    params: {gamma: 1.0}          # hyper-parameters, typed (imagenet-zsl models lists each one's
                                  # type, range and default); the rest keep their defaults
    semantics: glove-6b-50d       # class vectors: a named set or a class-vector .npz
    graph: wordnet                # class graph for trivial / GCN models: wordnet | imagenet |
                                  # wordnet+instances | a parent<TAB>child edge file
    seen: null                    # class list file restricting the seen classes (default: all
                                  # classes with images in the feature directory; see below)
    select:                       # optional: choose hyper-parameters on validation classes
      grid: default               # 'default' (the model's grid) or {param: [values]}
      val_fraction: 0.2
      seed: 0
      mode: zsl                   # zsl | gzsl (Le Cacheux et al.: H after calibration)

Every hyper-parameter and every grid value is checked against the model's ``Params``
(:mod:`imagenet_zsl.models.params`) when the config is loaded, before any work: ``gamma: "1.0"``,
``gamma: true`` or ``epochs: 2.5`` is one line naming the file, the key and the value. Floats may
be written ``1e-3`` (YAML 1.2; PyYAML alone would read a string).

``--set PARAM=VALUE`` overrides ``params`` and wins over the ``select`` grid: a parameter fixed by
``--set`` leaves the grid (a warning says so; the manifest lists it under
``selection.fixed_by_set``).

The backbone's own classifier: ConSE, trivial, GCNZ, SGCN and DGP build on a seen-class classifier.
When the feature directory stores the backbone head (``head.npz``, written by ``extract``) and
``classifier`` is ``auto`` or ``head``, the head is that classifier, exactly as the papers take it
from the pretrained network, and no seen-class image is needed: the seen classes are then the
head's output classes (restricted by ``seen:``), less those without a semantic vector (ConSE) or
that are not nodes of the class graph (trivial, GCN models); a warning lists the ones left out.
``select`` then draws its validation classes from the seen classes that have images (at least two:
validation scores images); every other seen class fits through the head. Every other model learns
from images: a feature directory without images of at least two seen classes is a
one-line error. The vision-language zero-shot model (``vlm_zero_shot``) learns nothing and reads
no image.

The model directory keeps the image ids of its training features
(``training_image_ids.json.gz``): GZSL's held-out seen images are checked against them at
evaluation, whatever the training directory holds by then. Its manifest records the config, the
input manifests' sha256 (the training features' by absolute path), the identity of
the features (``feature_identity``: backbone, weights sha256, preprocessing, layer, dim) and of
the class vectors (``semantics_identity``: source, and the file's sha256) it was fitted on, the
selection grid with every validation score, and the fit summary.
"""

from __future__ import annotations

import difflib
import functools
import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.config import Config, load_config, validate_config
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, MODEL_SEMANTICS_KEY
from imagenet_zsl.features.image_ids import TRAINING_IDS_FILE, id_set_bytes
from imagenet_zsl.features.simulate import resolve_class_vectors
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.manifests import MANIFEST_NAME, file_record
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel, create
from imagenet_zsl.models.common import blas_threads, gram_flops
from imagenet_zsl.models.params import check_grid, validate_params
from imagenet_zsl.models.persistence import save_model
from imagenet_zsl.models.seen_classifier import uses_stored_head
from imagenet_zsl.models.selection import search_hyperparameters, split_seen_data
from imagenet_zsl.safe_output import check_out_dir
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.versions import command_line

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


def check_model_params(
    name: str, params: dict[str, Any], where: str, prefix: str = "params."
) -> dict[str, Any]:
    """An unknown model, an unknown hyper-parameter, a wrong type or a value out of range → one line
    naming ``where`` (the file), the key and the value. ``prefix``: the key path of ``params`` in
    the file (``models.NAME.params.`` in a recipe); the model's name sits beside them. Returns
    every hyper-parameter, defaults filled in."""
    if name not in MODELS:
        close = difflib.get_close_matches(name, MODELS.names(), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        key = prefix.removesuffix("params.") + "model"
        raise UserInputError(f"unknown model {name!r} ({where}: {key}): {hint}see 'imagenet-zsl models'")
    return validate_params(MODELS.get(name).Params, params, where, prefix).model_dump()


def check_select_grid(
    name: str, select: SelectConfig | None, params: dict[str, Any], where: str, prefix: str = "select."
) -> None:
    """The ``select`` block's grid is 'default' (the model's) or {hyper-parameter: [values]} whose
    every value is valid on top of ``params``: checked before any work, one line naming ``where``
    and ``prefix`` (the block's key path) + ``grid.NAME``."""
    if select is None:
        return
    if isinstance(select.grid, str):
        if select.grid != "default":
            raise UserInputError(
                f"invalid value ({where}: {prefix}grid = {select.grid!r}): give 'default' (the model's "
                "grid) or {hyper-parameter: [values]}"
            )
        return
    check_grid(MODELS.get(name).Params, select.grid, params, where, prefix=f"{prefix}grid.")


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a model config, its ``select`` grid included; every mistake is one line
    naming the file and key."""
    checked = load_config(path, TrainConfigFile)
    check_model_params(checked.model, checked.params, str(path))
    check_select_grid(checked.model, checked.select, checked.params, str(path))
    return TrainConfig(**checked.as_dict())


def load_seen_data(
    features_dir: str | Path | FeatureDir,
    seen: list[str] | None = None,
    *,
    with_logits: bool = True,
    head_classes: bool = False,
    images: bool = True,
) -> SeenData:
    """SeenData from a feature directory: the given classes, or every class that has images;
    its logits too when the directory has them and ``with_logits``; its stored backbone head
    (``SeenData.head``) when it has one.

    ``head_classes`` (models built on the seen classifier, whose classifier may be the stored
    head): the seen classes default to the head's output classes, and those need no image; the
    images of the seen classes that have some are still read. ``images=False`` reads no image at
    all (features (0, D)): for a model that does not learn from images.

    Memory bound (issue 27): no feature is read here. ``features`` (and ``logits``) are
    :class:`~imagenet_zsl.features.feature_dir.ShardRows` over the memory-mapped shards (float16
    as stored: file-backed page cache, reclaimable), and only labels and row indices are held
    (about 16 B per image). Every model reads them block by block (:meth:`SeenData.blocks`,
    sufficient statistics of the closed forms, L-BFGS loss and gradient summed over blocks) or
    by mini-batches (ranking, CMT, SSE); validation selection and dropped classes take subsets
    without reading. ``tools/bench_models.py --parts memory`` measures the peak per image.
    """
    features = features_dir if isinstance(features_dir, FeatureDir) else FeatureDir(features_dir)
    if features.simulated:
        log.warning("%s holds SIMULATED features (see its manifest)", features.path)
    head = features.head()
    outputs = set(head.classes) if head_classes and head is not None else set()
    counts = np.bincount(features.labels(), minlength=len(features.classes))
    have = {w for w, c in zip(features.classes, counts, strict=True) if c > 0}
    if seen is None:
        seen = list(head.classes) if outputs else [w for w in features.classes if w in have]
    elif images:
        empty = [w for w in seen if w not in have and w not in outputs]
        if empty:
            raise UserInputError(
                f"{features.path}: {len(empty)} seen classes have no images: {preview(empty)}"
            )
    read = [w for w in seen if w in have] if images else []
    logits = with_logits and features.has_logits
    if read:
        feats, labels, block_logits = features.mapped(read, with_logits=logits)
    else:
        feats, labels = np.zeros((0, features.dim), np.float32), np.zeros(0, np.int64)
        block_logits = np.zeros((0, len(features.logit_classes or ())), np.float32) if logits else None
    position = {w: i for i, w in enumerate(seen)}
    remap = np.array([position.get(w, -1) for w in features.classes], dtype=np.int64)
    return SeenData(
        features=feats,
        labels=remap[labels],
        seen_wnids=list(seen),
        logits=block_logits,
        logit_classes=features.logit_classes,
        head=head,
    )


def drop_classes(data: SeenData, drop: list[str], why: str = "has a semantic vector") -> SeenData:
    """``data`` without the classes ``drop`` and their images (labels re-indexed); ``why``: what
    the kept classes have, for the error when none is left."""
    dropped = set(drop)
    keep = np.array([w not in dropped for w in data.seen_wnids], dtype=bool)
    if not keep.any():
        raise UserInputError(f"no seen class is left to train on (none {why})")
    rows = keep[data.labels]
    new_index = np.cumsum(keep) - 1
    seen = [w for w, k in zip(data.seen_wnids, keep, strict=True) if k]
    return data.subset(rows, new_index[data.labels[rows]], seen)  # a row source: nothing is read


def _inputs(features_dir: str | Path, semantics: str, config_path: str | Path | None) -> list[Path]:
    """The files and directories ``train`` reads: its ``--out`` may neither hold nor lie in them."""
    inputs = [Path(features_dir)]
    if config_path is not None:
        inputs.append(Path(config_path))
    if _semantics_file(semantics) is not None:
        inputs.append(Path(semantics))
    return inputs


def _semantics_file(spec: str) -> Path | None:
    """The class-vector file ``semantics:`` names, or None for a named set (as
    :func:`~imagenet_zsl.features.simulate.resolve_class_vectors` decides)."""
    return Path(spec) if str(spec).endswith(".npz") or Path(str(spec)).is_file() else None


def semantics_identity(spec: str, semantics: ClassVectors | None) -> dict[str, Any] | None:
    """The identity of the class vectors a model was fitted with (manifest key
    ``MODEL_SEMANTICS_KEY``): their source name, and the sha256 of the file when they come from
    one (a named set is identified by its name). None when the model uses no class vectors."""
    if semantics is None:
        return None
    path = _semantics_file(spec)
    return {
        "source": semantics.source,
        "file": None if path is None else path.name,
        "sha256": None if path is None else sha256_file(path),
        "classes": len(semantics),
        "dim": semantics.dim,
    }


def _read_seen_list(config: TrainConfig) -> list[str] | None:
    if not config.seen:
        return None
    seen_path = Path(config.seen)
    if not seen_path.exists():
        raise UserInputError(f"{seen_path}: seen-class list not found")
    return read_wnid_list(seen_path)


def _usable_head(cls: type[ZSLModel], params: dict[str, Any], features: FeatureDir) -> BackboneHead | None:
    """The stored backbone head when ``cls`` builds on the seen classifier and may take it
    (classifier auto or head) and the feature directory stores one; else None."""
    if not cls.uses_training_logits or params.get("classifier", "auto") not in ("auto", "head"):
        return None
    return features.head()


def _head_record(features: FeatureDir) -> dict[str, Any]:
    """What the manifest says of the stored head the model took: its file and sha256."""
    record = features.manifest.get("head")
    sha = record.get("sha256") if isinstance(record, dict) else None
    return {"file": HEAD_FILE, "sha256": sha}


def _check_enough_classes(cls: type[ZSLModel], data: SeenData, features_dir: str | Path) -> None:
    """A model that learns from seen classes needs at least two: one is a one-line error."""
    if not cls.learns_from_images or len(data.seen_wnids) >= 2:
        return
    if not data.seen_wnids:
        hint = (
            f", or features extracted with the backbone head stored ({HEAD_FILE})"
            if cls.uses_training_logits
            else ""
        )
        raise UserInputError(
            f"{features_dir}: no image of a seen class here; {cls.name} learns from images of the "
            f"seen classes: give a feature directory that holds them{hint}"
        )
    if not len(data.labels):  # the head's classes, filtered down to one
        raise UserInputError(
            f"{features_dir}: one seen class is left to train on ({data.seen_wnids[0]}); "
            f"{cls.name} needs at least 2"
        )
    raise UserInputError(
        f"{features_dir}: all {len(data.labels)} training images are of one class "
        f"({data.seen_wnids[0]}); {cls.name} needs images of at least 2 seen classes"
    )


def train(
    config: TrainConfig,
    features_dir: str | Path,
    out_dir: str | Path,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Fit ``config.model`` on the seen classes of ``features_dir`` and save it to ``out_dir``.

    Seen classes: the config's ``seen`` list; else, for a model built on the seen classifier when
    the directory stores the backbone head, the head's classes, which need no image; else every
    class with images. ``overrides`` (``--set``) win over the config's params and its select grid.
    The manifest records the identity of the features (``feature_identity``) and of the class
    vectors (``semantics_identity``) the model was fitted on.

    ``out_dir`` is written atomically and only replaces an earlier ``imagenet-zsl train`` output;
    an ``out_dir`` holding or inside an input is refused before anything is read."""
    cls = MODELS.get(config.model)
    where = str(config_path or "train config")
    overrides = dict(overrides or {})
    params = {**config.params, **overrides}
    check_model_params(cls.name, config.params, where)
    check_model_params(cls.name, params, "--set", prefix="")
    select = config.selection(where)
    check_select_grid(cls.name, select, params, where)
    inputs = _inputs(features_dir, config.semantics, config_path)
    check_out_dir(Path(out_dir), TOOL, inputs, own_files=True)  # fail before loading anything
    seen = _read_seen_list(config)
    features = FeatureDir(features_dir)
    stored = _usable_head(cls, params, features)
    head = stored is not None
    # the head covers the seen classes: no logits are read, and no image unless selection
    # validates on them
    covered = head and (seen is None or set(seen) <= set(stored.classes))
    data = load_seen_data(
        features,
        seen,
        with_logits=cls.uses_training_logits and not covered,
        head_classes=head,
        images=cls.learns_from_images and not (covered and select is None),
    )
    semantics = None if not cls.needs_semantics else resolve_class_vectors(config.semantics)
    graph = resolve_graph(config.graph) if cls.needs_graph else None
    extra: dict[str, Any] = {
        "command": command_line(),
        "train_config": config.as_dict(),
        "inputs": {
            "features": _features_record(features),
            "semantics": None if semantics is None else semantics.source,
            "graph": None if graph is None else graph.source,
            "backbone_head": _head_record(features) if head else None,
        },
        MODEL_FEATURES_KEY: features.identity,
        MODEL_SEMANTICS_KEY: semantics_identity(config.semantics, semantics),
    }
    if config_path is not None:
        extra["inputs"]["config"] = file_record(config_path)
    data = _restrict_seen(cls, data, semantics, graph, head, extra["inputs"])
    _check_enough_classes(cls, data, features_dir)
    with blas_threads(gram_flops(data)):  # small problems: one BLAS thread (see blas_threads)
        if select is not None:
            params, extra["selection"] = _select(
                cls.name, select, params, overrides, data, (semantics, graph)
            )
        model = create(cls.name, **params).fit(data, semantics, graph)
    model.check_inputs(features.identity, semantics)  # after fit: its dimension checks come first
    ids = _training_ids(str(features.path), extra["inputs"]["features"]["sha256"])[0]
    return save_model(model, out_dir, extra, inputs=inputs, files={TRAINING_IDS_FILE: ids})


def _features_record(features: FeatureDir) -> dict[str, Any]:
    """The manifest's ``inputs.features``: the training features' manifest (absolute path, size,
    sha256) and where the model directory keeps their image ids (``image_ids``: file and count),
    which GZSL's held-out seen check reads whatever the directory holds later."""
    record = file_record(features.path.absolute() / MANIFEST_NAME)
    count = _training_ids(str(features.path), record["sha256"])[1]
    record["image_ids"] = {"file": TRAINING_IDS_FILE, "count": count}
    return record


@functools.lru_cache(maxsize=4)
def _training_ids(directory: str, manifest_sha256: str) -> tuple[bytes, int]:
    """(the :data:`TRAINING_IDS_FILE` bytes, the number of distinct ids) of a feature directory,
    keyed by its manifest's sha256: ``run`` fits every model on the same features, whose ids are
    read and packed once."""
    return id_set_bytes(FeatureDir(directory).ids())


def _restrict_seen(
    cls: type[ZSLModel],
    data: SeenData,
    semantics: ClassVectors | None,
    graph: ClassGraph | None,
    head: bool,
    record: dict[str, Any],
) -> SeenData:
    """Leave out the seen classes the model cannot train on, with a warning and a manifest record:
    those without a semantic vector (models whose seen classes need one), and, when the seen
    classes are the backbone head's outputs, those that are not nodes of the class graph."""
    if semantics is not None and cls.seen_need_vectors:
        without = [w for w in data.seen_wnids if w not in semantics]
        data = _leave_out(
            data,
            without,
            f"seen classes have no semantic vector ({semantics.source}) and are left out of training",
            f"has a semantic vector in {semantics.source}",
        )
        if without:
            record["seen_classes_without_vector"] = sorted(without)
    if head and graph is not None:
        outside = [w for w in data.seen_wnids if w not in graph]
        data = _leave_out(
            data,
            outside,
            f"backbone-head classes are not nodes of the {graph.source} graph and are left out",
            f"is a node of the {graph.source} graph",
        )
        if outside:
            record["seen_classes_outside_graph"] = sorted(outside)
    record["seen_classes"] = len(data.seen_wnids)
    record["images"] = int(len(data.labels))
    return data


def _leave_out(data: SeenData, wnids: list[str], what: str, condition: str) -> SeenData:
    """``data`` without the classes ``wnids`` (a warning "N <what>: <wnids>"; ``condition`` is what
    a kept class satisfies, for :func:`drop_classes`)."""
    if not wnids:
        return data
    log.warning("%d %s: %s", len(wnids), what, preview(wnids))
    return drop_classes(data, wnids, condition)


def _select(
    name: str,
    select: SelectConfig,
    params: dict[str, Any],
    overrides: dict[str, Any],
    data: SeenData,
    side: tuple[ClassVectors | None, ClassGraph | None],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config's ``select`` block → (chosen hyper-parameters, manifest record); ``side``: the
    class vectors and graph.

    A hyper-parameter fixed by ``--set`` (``overrides``) wins over the grid: it leaves the grid,
    with a warning, and the record lists it under ``fixed_by_set``. With a stored backbone head
    (seen classes without images), the validation classes are drawn from those with images."""
    semantics, graph = side
    default = select.grid in (None, "default")
    grid = dict(MODELS.get(name).grid if default else select.grid)
    fixed = sorted(set(grid) & set(overrides))
    for key in fixed:
        log.warning(
            "--set %s=%r wins over the select grid (%s: %s): %s is not searched",
            key,
            overrides[key],
            key,
            grid.pop(key),
            key,
        )
    mode = select.mode
    optional = MODELS.get(name).uses_training_logits and uses_stored_head(
        data, str(params.get("classifier", "auto"))
    )
    split = split_seen_data(
        data,
        select.val_fraction,
        select.seed,
        select.seen_holdout if mode == "gzsl" else None,
        images_optional=optional,
    )
    result = search_hyperparameters(name, grid, split, semantics, graph, mode=mode, base_params=params)
    summary = result.summary()
    if fixed:
        summary["fixed_by_set"] = {key: overrides[key] for key in fixed}
    return result.best_params, summary
