"""The candidate pool of a benchmark split: a pipeline of named filters with per-filter counts.

A filter is ``fn(candidates: list[str], ctx: PoolContext, **params) -> list[str]`` returning the
kept wnids (order preserved). Filters register by name with ``@pool_filter("name")``; a config
lists them in order with their parameters, and the report shows how many classes each removed::

    pool:
      - {filter: not_training}
      - {filter: min_images, min: 301}
      - {filter: not_related_to_training}

Stages that add filters (label curation, image quality) register them in their own modules,
listed in ``FILTER_MODULES`` so that a config can name them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph

PoolFilter = Callable[..., list[str]]
POOL_FILTERS: dict[str, PoolFilter] = {}
#: modules whose import registers more filters (label curation, image quality)
FILTER_MODULES = ("imagenet_zsl.semantics.pool_filters", "imagenet_zsl.images.pool_filters")


def pool_filter(name: str) -> Callable[[PoolFilter], PoolFilter]:
    """Register ``fn`` as the pool filter ``name``."""

    def register(fn: PoolFilter) -> PoolFilter:
        POOL_FILTERS[name] = fn
        return fn

    return register


@dataclass
class PoolContext:
    """What filters may look at: the graph, the training classes, image counts, and a cache."""

    graph: ClassGraph
    train: list[str]
    counts: dict[str, int]
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass
class PoolStep:
    filter: str
    params: dict[str, Any]
    before: int
    after: int

    @property
    def removed(self) -> int:
        return self.before - self.after


def _load_filter_modules() -> None:
    for module in FILTER_MODULES:
        importlib.import_module(module)


def available_filters() -> list[str]:
    _load_filter_modules()
    return sorted(POOL_FILTERS)


def run_pool(candidates: list[str], steps: list[dict[str, Any]], ctx: PoolContext,
             where: str = "pool") -> tuple[list[str], list[PoolStep]]:
    """Apply the filter pipeline; returns the pool and one PoolStep (counts) per filter."""
    _load_filter_modules()
    pool = list(candidates)
    log: list[PoolStep] = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or "filter" not in step:
            raise UserInputError(f"{where}[{i}]: each pool step needs a 'filter' key, got {step!r}")
        params = {k: v for k, v in step.items() if k != "filter"}
        name = step["filter"]
        if name not in POOL_FILTERS:
            raise UserInputError(
                f"{where}[{i}]: unknown pool filter {name!r}; available: {', '.join(sorted(POOL_FILTERS))}"
            )
        try:
            kept = POOL_FILTERS[name](pool, ctx, **params)
        except TypeError as err:
            raise UserInputError(f"{where}[{i}] ({name}): bad parameters {params}: {err}") from err
        log.append(PoolStep(name, params, len(pool), len(kept)))
        pool = kept
    return pool, log


# --------------------------------------------------------------------------- core filters
@pool_filter("not_training")
def not_training(candidates: list[str], ctx: PoolContext) -> list[str]:
    """Drop the training classes themselves."""
    train = set(ctx.train)
    return [w for w in candidates if w not in train]


@pool_filter("min_images")
def min_images(candidates: list[str], ctx: PoolContext, min: int = 301) -> list[str]:  # noqa: A002
    """Keep classes with at least ``min`` images (fall11 counts, or the user's counts file)."""
    return [w for w in candidates if ctx.counts.get(w, 0) >= min]


@pool_filter("connected")
def connected(candidates: list[str], ctx: PoolContext) -> list[str]:
    """Keep classes reachable from the training classes (a ratio needs finite distances)."""
    dist = ctx.graph.distances_from(ctx.train)
    idx = ctx.graph.indices(candidates)
    return [w for w, d in zip(candidates, dist[idx], strict=True) if np.isfinite(d)]


@pool_filter("not_related_to_training")
def not_related_to_training(candidates: list[str], ctx: PoolContext) -> list[str]:
    """Drop ancestors and descendants of training classes (structural consistency w.r.t. train)."""
    graph = ctx.graph
    train_idx = graph.indices(ctx.train)
    related = np.zeros(len(graph), dtype=bool)
    related[graph.ancestor_matrix[train_idx].indices] = True
    related[graph.descendant_matrix[train_idx].indices] = True
    idx = graph.indices(candidates)
    return [w for w, r in zip(candidates, related[idx], strict=True) if not r]


@pool_filter("include_list")
def include_list(candidates: list[str], ctx: PoolContext, path: str) -> list[str]:
    """Keep only classes listed in a wnid file (one per line)."""
    from imagenet_zsl.splits.io import read_wnid_list

    allowed = set(read_wnid_list(path))
    return [w for w in candidates if w in allowed]


@pool_filter("exclude_list")
def exclude_list(candidates: list[str], ctx: PoolContext, path: str) -> list[str]:
    """Drop classes listed in a wnid file (one per line)."""
    from imagenet_zsl.splits.io import read_wnid_list

    banned = set(read_wnid_list(path))
    return [w for w in candidates if w not in banned]
