"""``imagenet-zsl run`` from names, without a recipe file (issue 47 §3)::

    imagenet-zsl run --backbones resnet50 --models conse,trivial \\
        --splits dgp-2hops,dgp-3hops,dgp-all --store /data/fall11 --out OUT

The flags build the same typed :class:`~imagenet_zsl.batch.recipe.Recipe` a YAML file gives (one
path from there on), and the run writes it to ``OUT/recipe.yaml``, from which ``imagenet-zsl run
OUT/recipe.yaml --out OUT2`` runs it again.

Names are shell-style patterns (``fnmatch``) over the registries: ``--models '*'`` (every
registered model), ``--models 'ridge*,sae'``, ``--splits 'dgp-*'`` (the published DGP lists and
the committed ``SPLITS_DIR/NAME.txt``), ``--backbones 'resnet*'`` (the registered backbones; a
``timm:``/``open_clip:`` name is taken as it is). A pattern matching nothing is one line naming it
with the closest names.

What a model name means: the model's config ``configs/models/NAME.yaml`` of the working
directory (a source checkout's hyper-parameters, semantics and graph) when there is one, else the
registry's defaults (``imagenet-zsl models``) with the GloVe 6B-50d class vectors and the WordNet
graph; either way its content is written into ``OUT/recipe.yaml`` (a later edit of the config
does not change the recorded run). ``--semantics`` overrides every model's class vectors. The test
images are a store scored while extracted (``--store`` with ``--backbones``, nothing stored) or
extracted test features (``--features``); ``--allow-incomplete`` reads a ``--store`` that lacks
what it declares (the recipe key ``features.test.allow_incomplete``). Path flags are written
absolute (``--semantics`` when it names a file; ``--weights random`` stays a name), and an empty
``NAME=`` path is one line. Seen-class training features are not a flag: the models fit on the
backbone's own head stored with the test features (ConSE, trivial, GCNZ/SGCN/DGP), and a model
that learns from seen-class images is refused before any work: give it a recipe with
``features.train``.

:class:`RunOptions` holds every flag of ``run``, one field each (built by
:func:`imagenet_zsl.cli.handler_config`); the helpers here read the recipe-building ones from it.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.recipe import NAME_PATTERN, Recipe
from imagenet_zsl.config import read_yaml, validate_config
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.backbones import BACKBONES, get_spec
from imagenet_zsl.features.hub_weights import RANDOM
from imagenet_zsl.models.base import MODELS
from imagenet_zsl.models.training import load_train_config
from imagenet_zsl.splits.named import PUBLISHED_SPLITS


@dataclass(frozen=True)
class RunOptions:
    """``imagenet-zsl run``: one field per flag (a recipe file, or the names that build one)."""

    #: run directory (re-running it resumes: finished cells are skipped)
    out: Path
    #: run recipe YAML; None: the recipe-building flags below
    recipe: Path | None = None
    #: a progress bar (``--no-progress``: one line per cell)
    progress: bool = True
    #: the columns of summary.md and summary.tex, comma-separated (None: the paper's)
    columns: str | None = None
    #: the published rows of the same splits beside the run's
    published: bool = False
    #: ``run -v``: the whole log (every stage's lines); else a bar, warnings, errors and the table
    whole_log: bool = False
    #: the global ``imagenet-zsl -v`` (handed on by the command layer): the whole log too
    verbose: bool = False
    allow_feature_mismatch: bool = False
    # the recipe-building flags (RECIPE_FLAGS): None (False) when not given
    models: str | None = None
    splits: str | None = None
    splits_dir: str | None = None
    store: str | None = None
    backbones: str | None = None
    weights: str | None = None
    features: str | None = None
    semantics: str | None = None
    label_space: str | None = None
    missing_semantics: str | None = None
    per_class: int | None = None
    device: str | None = None
    batch_size: int | None = None
    workers: int | None = None
    allow_incomplete: bool = False


#: where a model name's config is looked for (relative to the working directory)
MODEL_CONFIGS = Path("configs") / "models"
#: the flags that build a recipe (any of them given: no recipe file), by dest (a RunOptions field)
RECIPE_FLAGS = ("models", "splits", "splits_dir", "store", "backbones", "weights", "features", "semantics")
RECIPE_FLAGS += ("label_space", "missing_semantics", "per_class", "device", "batch_size", "workers")
RECIPE_FLAGS += ("allow_incomplete",)
#: where committed split names are found without --splits-dir
SPLITS_DIR = "splits"
#: the keys of a model config that an inline recipe entry takes over as they are
_INLINE_KEYS = ("params", "semantics", "graph", "select")
#: the extraction settings a flag gives, by TestImages key (a store_true flag: only when given)
_EXTRACT_FLAGS = ("per_class", "device", "workers", "batch_size", "allow_incomplete")


def names_given(cfg: RunOptions) -> list[str]:
    """The recipe-building flags the command line gives (``--models`` ...): none for a recipe file."""
    given = [flag for flag in RECIPE_FLAGS if _given(getattr(cfg, flag))]
    return ["--" + flag.replace("_", "-") for flag in given]


def _given(value: Any) -> bool:
    """A flag's value was given: not its field's default None, nor False (a store_true flag left out)."""
    return value is not None and value is not False


def _items(text: str | None) -> list[str]:
    """A comma-separated flag value as its items (empty ones dropped)."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def expand(patterns: list[str], names: list[str], what: str, flag: str) -> list[str]:
    """The names matching each pattern (fnmatch, case-insensitive), in the patterns' order, each
    once; a pattern matching nothing is one line with the closest names."""
    out: list[str] = []
    for pattern in patterns:
        found = fnmatch.filter(names, pattern.lower())
        if not found:
            close = difflib.get_close_matches(pattern.lower(), names, n=3, cutoff=0.5)
            hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(names)}"
            raise UserInputError(f"no {what} matches {pattern!r} ({flag}): {hint}")
        out += [name for name in found if name not in out]
    return out


def _is_pattern(text: str) -> bool:
    return any(c in text for c in "*?[")


def split_specs(patterns: list[str], splits_dir: Path) -> list[str]:
    """``--splits``: a path is kept (absolute, so that the written recipe runs from anywhere); a
    pattern expands over the published names and the committed ``splits_dir/*.txt``; a name is
    kept for the plan to resolve (``splits.named.resolve_split``)."""
    committed = sorted(p.stem for p in splits_dir.glob("*.txt")) if splits_dir.is_dir() else []
    known = sorted({*PUBLISHED_SPLITS, *committed})
    out: list[str] = []
    for spec in patterns:
        path = Path(spec)
        if "/" in spec or spec.endswith(".txt") or (path.is_file() and spec not in PUBLISHED_SPLITS):
            out.append(str(path.resolve()))
        elif _is_pattern(spec):
            out += [s for s in expand([spec], known, "split", "--splits") if s not in out]
        else:
            out.append(spec)
    return out


def _model_entry(name: str, semantics: str | None) -> dict[str, Any]:
    """A recipe entry for the registered model ``name``: its ``configs/models/NAME.yaml`` inlined
    when the working directory has one (checked as ``train`` checks it), else the registry's
    defaults."""
    path = MODEL_CONFIGS / f"{name}.yaml"
    entry: dict[str, Any] = {"model": name}
    if path.is_file():
        load_train_config(path)  # every key, parameter and grid value checked, naming the file
        data = read_yaml(path) or {}
        if "seen" in data:  # a key an inline entry cannot hold: the config file itself
            entry = {"config": str(path.resolve())}
        else:
            entry |= {key: data[key] for key in _INLINE_KEYS if key in data}
    if semantics is not None:
        entry["semantics"] = semantics
    return entry


def _dir_name(backbone: str) -> str:
    """A backbone name as a feature-set name (a directory: ``timm:x`` -> ``timm-x``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", backbone).strip("-.") or "backbone"
    return name if re.match(NAME_PATTERN, name) else f"b{name}"


def _weights(cfg: RunOptions, backbones: list[str]) -> dict[str, str]:
    """``--weights FILE`` (one backbone) or ``--weights NAME=FILE,...``: backbone -> weights."""
    items = _items(cfg.weights)
    if not items:
        return {}
    if len(items) == 1 and "=" not in items[0]:
        if len(backbones) != 1:
            raise UserInputError(
                f"--weights {items[0]}: {len(backbones)} backbones are given; name each one's: "
                "--weights NAME=FILE,..."
            )
        return {backbones[0]: _weights_value(items[0])}
    out = {}
    for item in items:
        name, sep, file = item.partition("=")
        if not sep or name not in backbones:
            raise UserInputError(
                f"--weights {item}: give NAME=FILE with NAME one of the backbones ({', '.join(backbones)})"
            )
        out[name] = _weights_value(_given_path(file, f"--weights {item}", "FILE", resolve=False))
    return out


def _store_features(cfg: RunOptions) -> dict[str, Any]:
    """``--store DIR --backbones ...``: per backbone, its test images scored while extracted."""
    if not cfg.backbones:
        raise UserInputError("--store needs --backbones NAME[,NAME] (the networks that extract the images)")
    backbones = []
    for spec in _items(cfg.backbones):
        if _is_pattern(spec):
            backbones += expand([spec], BACKBONES.names(), "backbone", "--backbones")
        else:
            get_spec(spec)  # an unknown name is one line before any work
            backbones.append(spec)
    weights = _weights(cfg, backbones)
    settings = {key: getattr(cfg, key) for key in _EXTRACT_FLAGS if _given(getattr(cfg, key))}
    sets = {}
    for backbone in backbones:
        test = {"store": str(Path(cfg.store).resolve()), "backbone": backbone, **settings}
        if backbone in weights:
            test["weights"] = weights[backbone]
        sets[_dir_name(backbone)] = {"test": test}
    return sets


def _stored_features(cfg: RunOptions) -> dict[str, Any]:
    """``--features DIR`` or ``--features NAME=DIR,...``: extracted test features."""
    if cfg.backbones or cfg.weights or cfg.allow_incomplete:
        raise UserInputError(
            "--features gives extracted features: --backbones, --weights and --allow-incomplete go "
            "with --store"
        )
    items = _items(cfg.features)
    if len(items) == 1 and "=" not in items[0]:
        return {"features": {"test": str(Path(items[0]).resolve())}}
    sets = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not re.match(NAME_PATTERN, name):
            raise UserInputError(f"--features {item}: give DIR, or NAME=DIR,... for several backbones")
        sets[name] = {"test": _given_path(path, f"--features {item}", "DIR")}
    return {"features": sets}


def _given_path(text: str, where: str, what: str, resolve: bool = True) -> str:
    """``NAME=PATH``'s path, absolute (the written recipe runs from anywhere) unless not
    ``resolve``; an empty one is one line naming the flag (it would otherwise be the working
    directory)."""
    if not text.strip():
        raise UserInputError(f"{where}: no path after '='; give NAME={what}")
    return str(Path(text).resolve()) if resolve else text


def _weights_value(text: str) -> str:
    """A ``--weights`` value: ``random`` (extract's seeded initialisation) as it is, a file
    absolute."""
    return text if text == RANDOM else str(Path(text).resolve())


def _semantics(spec: str | None) -> str | None:
    """``--semantics``: a vector-set name as it is; an existing file absolute, as the other path
    flags are (the written ``OUT/recipe.yaml`` then runs from any directory)."""
    if spec is not None and Path(spec).is_file():
        return str(Path(spec).resolve())
    return spec


def _features(cfg: RunOptions) -> dict[str, Any]:
    if bool(cfg.store) == bool(cfg.features):
        raise UserInputError(
            "give the test images: --store DIR with --backbones NAME[,NAME], or --features DIR "
            "(extracted test features)"
        )
    if cfg.features:
        return _stored_features(cfg)
    sets = _store_features(cfg)
    return {"features": next(iter(sets.values())) if len(sets) == 1 else sets}


def recipe_from_flags(cfg: RunOptions) -> Recipe:
    """The recipe the flags describe, validated as a YAML recipe is (one line naming the flag or
    the key on a mistake)."""
    for flag in ("models", "splits"):
        if not getattr(cfg, flag):
            raise UserInputError(f"without a recipe file, --{flag} is needed (e.g. --models conse,trivial)")
    splits_dir = Path(cfg.splits_dir or SPLITS_DIR)
    data: dict[str, Any] = _features(cfg)
    models = expand(_items(cfg.models), MODELS.names(), "model", "--models")
    semantics = _semantics(cfg.semantics)
    data["models"] = {name: _model_entry(name, semantics) for name in models}
    data["splits"] = split_specs(_items(cfg.splits), splits_dir)
    data["splits_dir"] = str(splits_dir.resolve())
    for key in ("label_space", "missing_semantics"):
        if getattr(cfg, key) is not None:
            data[key] = getattr(cfg, key)
    if cfg.label_space not in (None, "split", "all"):
        data["label_space"] = str(Path(cfg.label_space).resolve())
    return validate_config(data, Recipe, "command line")
