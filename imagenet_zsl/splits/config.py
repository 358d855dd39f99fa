"""The typed split recipe (``configs/default.yaml``): one pydantic model per split kind, strict.

Unknown keys, wrong types, out-of-range values and unsafe split names are one-line errors naming
the file and key path (see :mod:`imagenet_zsl.config`); pool steps are checked against the
signature of the registered filter function, so a misspelt filter or parameter is an error too.
"""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from imagenet_zsl.config import Config, load_config
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.splits.pool import POOL_FILTERS

#: a split name becomes ``<name>.txt`` inside --out: a plain file name, never a path
SplitName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)]
Count = Annotated[int, Field(ge=1)]


class GraphConfig(Config):
    source: Literal["wordnet", "imagenet"] = "wordnet"
    include_instances: bool = False


class HopsSplit(Config):
    """Classes within ``k`` is-a edges of the nearest training class."""

    name: SplitName
    kind: Literal["hops"]
    k: Count = 1


class AllSplit(Config):
    name: SplitName
    kind: Literal["all"]


class PopulationSplit(Config):
    """The ``n`` most (or least) populated candidates."""

    name: SplitName
    kind: Literal["population"]
    n: Count
    most: bool = True


class ListSplit(Config):
    name: SplitName
    kind: Literal["list"]
    path: str


class OptimiserConfig(Config):
    """Knobs of both optimisers (exact: levels, time_limit, shortlist_factor; local search: the rest)."""

    levels: Annotated[int, Field(ge=2, le=12)] = 3
    time_limit: Annotated[float, Field(gt=0)] = 120.0
    shortlist_factor: Annotated[float, Field(ge=1)] = 2.0
    shortlist_factors: list[Annotated[float, Field(gt=0)]] = [2.0, 2.5, 3.0]
    max_passes: Annotated[int, Field(ge=0)] = 4
    horizon: Annotated[int, Field(ge=2, le=254)] = 10


class BenchmarkSplit(Config):
    """A structurally consistent set of ``size`` classes of maximal structural ratio."""

    name: SplitName
    kind: Literal["benchmark"]
    size: Annotated[int, Field(ge=2)] = 500
    seed: int = 0
    pool: list[dict[str, Any]] = []
    optimizer: Literal["exact", "local_search"] = "exact"
    optimiser: OptimiserConfig = OptimiserConfig()
    max_branch_share: Annotated[float, Field(gt=0, le=1)] | None = None
    branch_quota: dict[str, Annotated[int, Field(ge=0)]] = {}
    include: str | None = None
    exclude: str | None = None


SplitSpec = Annotated[
    HopsSplit | AllSplit | PopulationSplit | ListSplit | BenchmarkSplit, Field(discriminator="kind")
]


class StoreConfig(Config):
    """The classes an image store holds (``counts``: its ``images count --out`` table; a class is
    held with at least ``min_images`` images): every split is built again on them, the structurally
    closest complete replacement (the same rule with the candidates restricted to the held
    classes), and reported beside the split built on every fall11 candidate."""

    counts: str
    min_images: Count = 1


class SplitsConfig(Config):
    """A split recipe: graph, training classes, image counts, the store to build on, the splits."""

    graph: GraphConfig = GraphConfig()
    train: str = "ilsvrc2012"
    counts: str = "fall11"
    store: StoreConfig | None = None
    splits: list[SplitSpec]


def load_splits_config(path: str | Path) -> SplitsConfig:
    """Read and validate a split recipe; unique split names; pool steps checked."""
    config = load_config(path, SplitsConfig)
    seen: set[str] = set()
    for i, spec in enumerate(config.splits):
        if spec.name in seen:
            raise UserInputError(f"split names must be unique ({path}: splits[{i}].name = {spec.name!r})")
        seen.add(spec.name)
        if isinstance(spec, BenchmarkSplit):
            check_pool_steps(spec.pool, f"{path}: splits[{i}].pool")
    return config


def check_pool_steps(steps: list[dict[str, Any]], where: str) -> None:
    """Each step names a registered filter and only parameters its function accepts."""
    for j, step in enumerate(steps):
        here = f"{where}[{j}]"
        name = step.get("filter")
        if not isinstance(name, str):
            raise UserInputError(f"missing key ({here}.filter): each pool step needs 'filter: NAME'")
        if name not in POOL_FILTERS:
            raise UserInputError(
                f"unknown pool filter ({here}.filter = {name!r}): {POOL_FILTERS.unknown_message(name)}"
            )
        signature = inspect.signature(POOL_FILTERS.get(name))
        params = list(signature.parameters.values())[2:]  # after (candidates, ctx)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            continue  # the filter checks its own extra parameters
        allowed = sorted(p.name for p in params)
        for key in step:
            if key != "filter" and key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise UserInputError(
                    f"unknown key {key!r} ({here}.{key}): {hint}filter {name!r} takes: "
                    f"{', '.join(allowed) or 'no parameters'}"
                )
        for p in params:
            if p.default is inspect.Parameter.empty and p.name not in step:
                raise UserInputError(f"missing key ({here}.{p.name}): filter {name!r} needs it")
