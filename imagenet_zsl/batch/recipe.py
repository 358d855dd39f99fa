"""The recipe of ``imagenet-zsl run``: one YAML file naming features, semantics, models and splits.

Example (``configs/demo.yaml`` is a complete one)::

    features:                       # seen-class training features and test features ...
      train: feats/train            # optional: without it the models fit on the backbone head
                                    # stored with the test features (ConSE, trivial, GCNZ/SGCN/DGP)
      test: feats/test              # one directory, or {split name: directory}, or an image store
                                    # scored while extracted: {store: DIR, backbone: NAME, ...}
                                    # (batch.scored_test_images: no test feature is stored)
      seen: feats/ilsvrc_val        # optional: held-out seen images (GZSL)
    # features: {simulate: configs/demo-simulate.yaml}   # ... or SIMULATED ones, written to OUT/features
    semantics: glove-6b-50d         # optional: overrides the models' own (a vector set or a .npz)
    models:                         # name -> a model config, a fitted model directory, or inline
      trivial: configs/models/trivial.yaml
      sgcn: {config: configs/models/sgcn.yaml, params: {epochs: 300}}
      ridge: {model: ridge, params: {alpha: 1.0}, select: {grid: {alpha: [0.1, 1.0]}}}
      eszsl: {config: configs/models/eszsl.yaml, splits: [hop1]}   # only on these splits
    splits: [hop1, benchmark, my/split.txt]   # committed split names (splits/NAME.txt) or paths
    ks: [1, 2, 5, 10, 20]
    gzsl: true
    calibration: {classes: val_classes.txt}   # optional: validation classes choosing the GZSL γ;
                                    # default with gzsl: a seeded 20% of the seen classes, left out
                                    # of a calibration copy of each model that chooses γ; the
                                    # models themselves fit every seen class ({fraction: 0.2,
                                    # seed: 0}); false: no calibration
    missing_semantics: drop         # drop | count_as_miss | keep | error: classes some model cannot
                                    # represent (keep: in the label space, never predicted, a miss)
    label_space: split              # split | all | FILE: the classes each test image is ranked against
    data_parallel: [all]            # under torchrun: splits whose test shards every rank searches a
                                    # share of (one rank merges them exactly); ignored in one process

Every key is validated strictly (:mod:`imagenet_zsl.config`): a typo is a one-line error naming
the file and the key, a model's ``params`` and ``select`` block included: each value is checked
against the model's typed hyper-parameters (``imagenet-zsl models``), grid values too, before any
work.
Relative paths are taken from the working directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from imagenet_zsl.atomic import canonical_json
from imagenet_zsl.batch.scored_test_images import TestImages, check_test_images
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.config import Config, Seed, read_yaml, validate_config
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.features.simulate import load_simulation_config
from imagenet_zsl.hierarchy.universe import GRAPH_SOURCES
from imagenet_zsl.manifests import MANIFEST_NAME
from imagenet_zsl.models.base import MODELS
from imagenet_zsl.models.persistence import read_manifest as read_model_manifest
from imagenet_zsl.models.training import (
    SelectConfig,
    TrainConfig,
    check_model_params,
    check_select_grid,
    load_train_config,
)
from imagenet_zsl.scoring import DEFAULT_KS
from imagenet_zsl.semantics.word_vectors import NAMED_SETS
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import NAMED_LABEL_SPACES, check_label_space_spec
from imagenet_zsl.splits.named import resolve_split

RUN_TOOL = "imagenet-zsl run"
#: model names become directory names (cells/<model>__<split>)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class FeatureDirs(Config):
    """Feature directories given by path (the test images may be a store and a backbone instead:
    :class:`~imagenet_zsl.batch.scored_test_images.TestImages`)."""

    #: seen-class training features; None: test features only (:mod:`~imagenet_zsl.batch.head_only`:
    #: the models fit on the backbone head stored with them)
    train: str | None = None
    test: Annotated[str | dict[str, str] | TestImages, Field(union_mode="left_to_right")]
    seen: str | None = None

    @field_validator("test", mode="before")
    @classmethod
    def _store_keys(cls, value: Any) -> Any:
        """A mapping naming ``store`` is the images: its typo is reported as such (not as a split)."""
        if isinstance(value, Mapping) and ("store" in value or "backbone" in value):
            return TestImages.model_validate(dict(value))
        return value


class SimulatedFeatures(Config):
    """SIMULATED features (``imagenet-zsl simulate``) written once to ``OUT/features``."""

    simulate: str


#: one backbone's features: directories or a simulation
FeatureSet = FeatureDirs | SimulatedFeatures


def feature_sets(recipe: Recipe) -> dict[str | None, FeatureSet]:
    """The recipe's feature sets by backbone name (``{None: set}`` for a single one)."""
    features = recipe.features
    return dict(features) if isinstance(features, dict) else {None: features}


def features_key(name: str | None) -> str:
    return "features" if name is None else f"features.{name}"


class InlineModel(Config):
    """A model given in the recipe: a registry name or a model config, with parameter overrides."""

    model: str | None = None
    config: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    semantics: str | None = None
    graph: str | None = None
    #: the models' own selection schema, so a typo is caught with the recipe's key path
    select: SelectConfig | None = None
    #: evaluate this model on these of the recipe's splits only (split names; default: all)
    splits: Annotated[list[str], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> InlineModel:
        if (self.model is None) == (self.config is None):
            raise ValueError("give exactly one of 'model' (a registry name) or 'config' (a model YAML)")
        return self


class Calibration(Config):
    """Validation classes choosing the GZSL calibration γ: a class list (disjoint from test and
    seen classes, images in ``features`` or the test features), or, without ``classes``, a seeded
    ``fraction`` of the seen classes carved out: a copy of each model fitted without them chooses
    γ, which is applied to the model fitted on every seen class (Le Cacheux et al. §3.2)."""

    classes: str | None = None
    features: str | None = None
    fraction: float = Field(0.2, gt=0, lt=1)
    seed: Seed = 0

    @model_validator(mode="after")
    def _carve_or_list(self) -> Calibration:
        if self.classes is None and self.features is not None:
            raise ValueError("'features' holds the images of listed 'classes': give 'classes' too")
        if self.classes is not None and "fraction" in self.model_fields_set:
            raise ValueError(
                "'fraction' carves validation classes out of the seen ones; listed 'classes' leave it unused"
            )
        return self


class Recipe(Config):
    """The whole ``imagenet-zsl run`` recipe (see the module docstring)."""

    #: one feature set, or several by backbone name (each model is trained once per backbone)
    features: FeatureDirs | SimulatedFeatures | dict[Annotated[str, Field(pattern=NAME_PATTERN)], FeatureSet]
    semantics: str | None = None
    models: Annotated[
        dict[Annotated[str, Field(pattern=NAME_PATTERN)], str | InlineModel], Field(min_length=1)
    ]
    splits: list[str]
    splits_dir: str = "splits"
    ks: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: list(DEFAULT_KS)
    )
    gzsl: bool = False
    #: None: the default (carved validation classes when gzsl); false: no calibration
    calibration: Calibration | Literal[False] | None = None
    missing_semantics: Literal["drop", "count_as_miss", "keep", "error"] = "drop"
    label_space: str = "split"
    graph: str = "auto"
    label_frequency: bool = True
    plots: bool = True
    #: a split's test features (float32) are kept in memory up to this size, so that every model
    #: evaluated on the split reads them once; a larger split is streamed once per model
    feature_memory_gb: Annotated[float, Field(ge=0)] = 4.0
    #: splits too large for one process: under torchrun every rank searches a share of their
    #: test-feature shards, then one rank merges them (the same bytes); ignored in one process
    data_parallel: list[str] = Field(default_factory=list)

    @field_validator("splits")
    @classmethod
    def _some_split(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(
                "no split to evaluate on: list at least one (a committed split name or a wnid file)"
            )
        return value


@dataclass
class ModelSpec:
    """One model of a recipe: either ``train`` (a config to fit) or ``fitted`` (a model directory)."""

    name: str
    train: TrainConfig | None = None
    fitted: Path | None = None
    config_path: Path | None = None
    #: the split names this model is evaluated on (None: every split of the recipe)
    splits: list[str] | None = None

    def evaluates(self, split: str) -> bool:
        """Whether the (model, ``split``) cell is part of the run."""
        return self.splits is None or split in self.splits

    def digest(self, features_sha256: str) -> str:
        """Cache key of the fitted model: config, training-features manifest and semantics."""
        if self.fitted is not None:
            return sha256_file(self.fitted / MANIFEST_NAME)
        assert self.train is not None
        record = {
            "config": self.train.as_dict(),
            "features": features_sha256,
            "semantics": _file_or_name(self.train.semantics),
            "graph": _file_or_name(self.train.graph),
            "seen": _file_or_name(self.train.seen) if self.train.seen else None,
        }
        return hashlib.sha256(canonical_json(record).encode()).hexdigest()


def _file_or_name(spec: str) -> str:
    """A named resource stays its name; a file is identified by its sha256 too."""
    path = Path(spec)
    return f"{spec}@{sha256_file(path)}" if path.is_file() else spec


class _InlineModels(Config):
    """The inline model entries alone: validated first, so that a mistake inside one is reported
    with its key path (``models.NAME.select.KEY``) rather than as "not a string" by the union."""

    models: dict[str, InlineModel]


class _FeatureDirs(Config):
    """``features`` given by path alone: validated first, so that a typo under it is reported with
    its key path (``features.KEY``) and the keys it may have, not as a mismatch of the union."""

    features: FeatureDirs


class _SimulatedFeatures(Config):
    """``features: {simulate: ...}`` alone (see :class:`_FeatureDirs`)."""

    features: SimulatedFeatures


class _NamedFeatureDirs(Config):
    """One backbone's feature directories (``features: {NAME: {train: ...}}``) alone."""

    features: dict[Annotated[str, Field(pattern=NAME_PATTERN)], FeatureDirs]


class _NamedSimulated(Config):
    """One backbone's SIMULATED features (``features: {NAME: {simulate: ...}}``) alone."""

    features: dict[Annotated[str, Field(pattern=NAME_PATTERN)], SimulatedFeatures]


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe; a typo or a wrong type is a one-line error."""
    data = read_yaml(path)
    features = data.get("features") if isinstance(data, Mapping) else None
    if isinstance(features, Mapping) and set(features) & {"simulate", "train", "test", "seen"}:
        form = _SimulatedFeatures if "simulate" in features else _FeatureDirs
        validate_config({"features": features}, form, str(path))
    elif isinstance(features, Mapping):  # several feature sets, by backbone name
        for name, entry in features.items():
            form = (
                _NamedSimulated if isinstance(entry, Mapping) and "simulate" in entry else _NamedFeatureDirs
            )
            validate_config({"features": {name: entry}}, form, str(path))
    models = data.get("models") if isinstance(data, Mapping) else None
    if isinstance(models, Mapping):
        inline = {name: entry for name, entry in models.items() if isinstance(entry, Mapping)}
        if inline:
            validate_config({"models": inline}, _InlineModels, str(path))
    return validate_config({} if data is None else data, Recipe, str(path))


def split_paths(recipe: Recipe, where: str) -> dict[str, Path]:
    """Split name -> wnid file (``splits.named.resolve_split``: a path, a published name such as
    ``dgp-2hops``, or ``splits_dir/NAME.txt``)."""
    out: dict[str, Path] = {}
    for spec in recipe.splits:
        path = resolve_split(spec, recipe.splits_dir, f"{where}: splits")
        name = path.stem
        if name in out:
            raise UserInputError(f"split {name!r} is given twice ({where}: splits): give each once")
        out[name] = path
    return out


def model_specs(recipe: Recipe, where: str) -> list[ModelSpec]:
    """Each recipe model as a :class:`ModelSpec`, its hyper-parameters and selection grid checked
    (types, ranges, choices) before any work."""
    specs = []
    for name, entry in recipe.models.items():
        key = f"{where}: models.{name}"
        if isinstance(entry, str):
            path = Path(entry)
            if path.is_dir():
                _check_fitted(path, key)
                specs.append(ModelSpec(name, fitted=path))
                continue
            if not path.is_file():
                raise UserInputError(
                    f"model {entry!r} not found ({key}): give a model config, a fitted model "
                    "directory or {model: NAME, params: {...}}"
                )
            config = load_train_config(path)
            specs.append(ModelSpec(name, train=_with_recipe_semantics(config, recipe), config_path=path))
            continue
        specs.append(_inline_spec(recipe, name, entry, where))
    return specs


def _check_fitted(path: Path, key: str) -> None:
    """``path`` is a model directory written by ``train`` (its manifest and file sizes checked)."""
    try:
        read_model_manifest(path)
    except UserInputError as err:
        raise UserInputError(f"{path} is not a fitted model directory ({key}): {err}") from None


def _with_recipe_semantics(config: TrainConfig, recipe: Recipe) -> TrainConfig:
    if recipe.semantics is not None:
        config.semantics = recipe.semantics
    return config


def _inline_spec(recipe: Recipe, name: str, entry: InlineModel, where: str) -> ModelSpec:
    """An inline model entry: a registry name or a config file, with parameter, semantics, graph
    and select overrides; the merged hyper-parameters and the grid are checked here."""
    key = f"{where}: models.{name}"
    config_path = Path(entry.config) if entry.config else None
    if config_path is not None and not config_path.is_file():
        raise UserInputError(f"model config {entry.config!r} not found ({key}.config)")
    config = load_train_config(config_path) if config_path else TrainConfig(model=entry.model or "")
    for field in ("semantics", "graph"):
        if getattr(entry, field) is not None:
            setattr(config, field, getattr(entry, field))
    if entry.select is not None:
        config.select = entry.select.as_dict()
    config.params = {**config.params, **entry.params}
    check_model_params(config.model, config.params, where, prefix=f"models.{name}.params.")
    if entry.select is not None:
        check_select_grid(config.model, entry.select, config.params, where, prefix=f"models.{name}.select.")
    elif config_path is not None:
        check_select_grid(config.model, config.selection(str(config_path)), config.params, str(config_path))
    config = _with_recipe_semantics(config, recipe)
    return ModelSpec(name, train=config, config_path=config_path, splits=entry.splits)


def check_model_splits(models: list[ModelSpec], splits: dict[str, Path], where: str) -> None:
    """A model's ``splits`` names only splits of the recipe (by name: ``hop1``, or a path's stem),
    and no two (model, split) cells share a directory (``cells/MODEL__SPLIT``: model ``a__b`` on
    split ``c`` and model ``a`` on split ``b__c``)."""
    cells: dict[str, tuple[str, str]] = {}
    for spec in models:
        for split in filter(spec.evaluates, splits):
            name = f"{spec.name}__{split}"
            if name in cells:
                other = cells[name]
                raise UserInputError(
                    f"model {spec.name!r} on split {split!r} and model {other[0]!r} on split {other[1]!r} "
                    f"would share the cell directory cells/{name} ({where}: models, splits): rename a model"
                )
            cells[name] = (spec.name, split)
    for spec in models:
        for name in spec.splits or ():
            if name not in splits:
                raise UserInputError(
                    f"split {name!r} is not one of the recipe's splits ({where}: models.{spec.name}.splits): "
                    f"give some of {', '.join(splits)}"
                )


def check_data_parallel(recipe: Recipe, splits: dict[str, Path], where: str) -> None:
    """``data_parallel`` names only splits of the recipe."""
    for name in recipe.data_parallel:
        if name not in splits:
            raise UserInputError(
                f"split {name!r} is not one of the recipe's splits ({where}: data_parallel): "
                f"give some of {', '.join(splits)}"
            )


def input_paths(
    recipe: Recipe, recipe_path: Path, splits: dict[str, Path], models: list[ModelSpec]
) -> list[Path]:
    """Every file or directory the run reads (an ``--out`` must not overlap any of them)."""
    paths: list[Path] = [recipe_path, *splits.values()]
    for features in feature_sets(recipe).values():
        if isinstance(features, FeatureDirs):
            paths += [
                Path(p) for p in (features.train, *_test_dirs(features), features.seen) if p is not None
            ]
            if isinstance(features.test, TestImages):
                paths += features.test.input_paths()
        else:
            paths.append(Path(features.simulate))
    for spec in models:
        paths += [p for p in (spec.fitted, spec.config_path) if p is not None]
    if recipe.calibration:
        paths += [Path(p) for p in (recipe.calibration.classes, recipe.calibration.features) if p]
    if recipe.label_space not in NAMED_LABEL_SPACES:
        paths.append(Path(recipe.label_space))
    if recipe.semantics is not None and Path(recipe.semantics).is_file():
        paths.append(Path(recipe.semantics))
    return paths


def _test_dirs(features: FeatureDirs) -> list[str]:
    """The test feature directories given (none for test images scored while extracted)."""
    if isinstance(features.test, TestImages):
        return []
    return list(features.test.values()) if isinstance(features.test, dict) else [features.test]


def check_features(recipe: Recipe, splits: dict[str, Path], where: str) -> None:
    """Feature directories exist, a per-split mapping covers every split, GZSL has seen images
    (in every feature set)."""
    for name, features in feature_sets(recipe).items():
        _check_feature_set(recipe, features, splits, f"{where}: {features_key(name)}")


def _check_feature_set(recipe: Recipe, features: FeatureSet, splits: dict[str, Path], key: str) -> None:
    if isinstance(features, SimulatedFeatures):
        load_simulation_config(features.simulate)
        return
    if isinstance(features.test, dict):
        missing = sorted(set(splits) - set(features.test))
        if missing:
            raise UserInputError(
                f"no test features for split {missing[0]!r} ({key}.test): "
                "give one directory for every split, or one directory for all"
            )
    if isinstance(features.test, TestImages):
        calibration = recipe.calibration
        in_test = bool(calibration and calibration.classes and not calibration.features)
        check_test_images(features.test, f"{key}.test", in_test)
    tests = _test_dirs(features)
    if features.train is not None and any(Path(features.train).resolve() == Path(t).resolve() for t in tests):
        raise UserInputError(
            f"{features.train} is both the training and the test features ({key}.train): a zero-shot "
            "test class is never a training class; for test features alone leave 'train' out (ConSE, "
            "trivial, GCNZ/SGCN/DGP then fit on the backbone head stored with them, head.npz)"
        )
    for part, value in (("train", features.train), *(("test", t) for t in tests), ("seen", features.seen)):
        if value is not None and not (Path(value) / MANIFEST_NAME).is_file():
            raise UserInputError(
                f"{value} is not a feature directory ({key}.{part}): it has no {MANIFEST_NAME}"
            )
    if recipe.gzsl and features.seen is None:
        raise UserInputError(
            f"gzsl needs held-out seen images ({key}.seen): add the directory, "
            "e.g. ILSVRC-2012 validation features"
        )


# ----------------------------------------------------------------------------- names and files


def _model_key(recipe: Recipe, spec: ModelSpec, field: str, where: str) -> str:
    """Where a model's ``semantics``/``graph`` comes from: the recipe's key, the inline model's,
    or its config file's."""
    if field == "semantics" and recipe.semantics is not None:
        return f"{where}: semantics"
    entry = recipe.models[spec.name]
    if isinstance(entry, InlineModel) and getattr(entry, field) is not None:
        return f"{where}: models.{spec.name}.{field}"
    if spec.config_path is not None:
        return f"{spec.config_path}: {field}"
    return f"{where}: models.{spec.name}"


def check_semantics_spec(spec: str, key: str) -> None:
    """A class-semantics spec is a named vector set or an existing file (a class-vector ``.npz``,
    a word-vector file or a labels YAML); anything else is one line naming ``key``."""
    if spec in NAMED_SETS or Path(spec).is_file():
        return
    if Path(spec).suffix or "/" in spec:
        raise UserInputError(
            f"semantics file {spec} not found ({key}): give an existing class-vector .npz or word-vector file"
        )
    raise UserInputError(
        f"unknown semantics {spec!r} ({key}): give a vector-set name ({', '.join(sorted(NAMED_SETS))}) "
        "or a class-vector .npz / word-vector file"
    )


def check_graph_spec(spec: str, key: str) -> None:
    """A class-graph spec is auto, none, wordnet/imagenet (optionally +instances) or an edge file."""
    base, _, extra = spec.partition("+")
    if spec in ("auto", "none") or (base in GRAPH_SOURCES and extra in ("", "instances")):
        return
    if not Path(spec).is_file():
        raise UserInputError(
            f"unknown graph {spec!r} ({key}): give auto, none, {', '.join(GRAPH_SOURCES)} "
            "or a parent<TAB>child edge file"
        )


def check_resources(recipe: Recipe, models: list[ModelSpec], where: str) -> None:
    """Every semantics, graph and label-space name or file of the recipe exists (before any work)."""
    for spec in models:
        if spec.train is None:
            continue
        cls = MODELS.get(spec.train.model)
        if cls.needs_semantics:
            check_semantics_spec(spec.train.semantics, _model_key(recipe, spec, "semantics", where))
        if cls.needs_graph:
            check_graph_spec(spec.train.graph, _model_key(recipe, spec, "graph", where))
    if recipe.semantics is not None:
        check_semantics_spec(recipe.semantics, f"{where}: semantics")
    check_graph_spec(recipe.graph, f"{where}: graph")
    check_label_space_spec(recipe.label_space, f"{where}: label_space")


def calibration_classes(recipe: Recipe, split_wnids: dict[str, list[str]], where: str) -> list[str] | None:
    """The recipe's listed validation classes (None: none listed), checked against the splits:
    the file exists, is not empty and shares no class with a test split."""
    calibration = recipe.calibration
    if calibration and not recipe.gzsl:
        raise UserInputError(f"calibration chooses the GZSL γ ({where}: calibration): add 'gzsl: true'")
    if not calibration or calibration.classes is None:
        return None
    key = f"{where}: calibration.classes"
    if not Path(calibration.classes).is_file():
        raise UserInputError(f"{calibration.classes}: validation classes not found ({key})")
    if calibration.features is not None and not (Path(calibration.features) / MANIFEST_NAME).is_file():
        raise UserInputError(
            f"{calibration.features} is not a feature directory ({where}: calibration.features): "
            f"it has no {MANIFEST_NAME}"
        )
    wnids = read_wnid_list(calibration.classes)
    if not wnids:
        raise UserInputError(f"{calibration.classes}: no validation class ({key}): one wnid a line")
    for split, test in split_wnids.items():
        overlap = sorted(set(wnids) & set(test))
        if overlap:
            raise UserInputError(
                f"{len(overlap)} validation classes are test classes of split {split!r} ({key}): "
                f"{preview(overlap)}; "
                "validation classes must be disjoint from every test split"
            )
    return wnids
