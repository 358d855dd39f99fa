"""The candidate pool of a benchmark split: a pipeline of named filters with per-filter counts.

A filter is ``fn(candidates: list[str], ctx: PoolContext, **params) -> list[str]`` returning the
kept wnids (order preserved). Filters register under their function's name with
``@POOL_FILTERS.register`` where they are defined; a config lists them in order with their
parameters, and the report shows how many classes each removed::

    pool:
      - {filter: not_training}
      - {filter: min_images, min: 301}
      - {filter: not_related_to_training}

Stages further down the flow (label curation, image quality) register filters in their own
modules; ``splits`` never imports them. Their modules are named as entry points of the group
``imagenet_zsl.pool_filters`` in ``pyproject.toml`` and imported by the registry on the first
name it does not hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagenet_zsl.data import read_wnid_counts
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.registry import Registry
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.pretraining import label_set as pretraining_label_set

PoolFilter = Callable[..., list[str]]
#: every pool filter by name; downstream stages register theirs via the entry-point group
POOL_FILTERS: Registry[PoolFilter] = Registry("pool filter", group="imagenet_zsl.pool_filters")


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


def available_filters() -> list[str]:
    """Names of every pool filter, downstream stages' included (sorted)."""
    return POOL_FILTERS.names()


def run_pool(
    candidates: list[str], steps: list[dict[str, Any]], ctx: PoolContext, where: str = "pool"
) -> tuple[list[str], list[PoolStep]]:
    """Apply the filter pipeline; returns the pool and one PoolStep (counts) per filter."""
    pool = list(candidates)
    log: list[PoolStep] = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or "filter" not in step:
            raise UserInputError(f"{where}[{i}]: each pool step needs a 'filter' key, got {step!r}")
        params = {k: v for k, v in step.items() if k != "filter"}
        name = step["filter"]
        if name not in POOL_FILTERS:
            raise UserInputError(f"{where}[{i}]: {POOL_FILTERS.unknown_message(name)}")
        try:
            kept = POOL_FILTERS.get(name)(pool, ctx, **params)
        except TypeError as err:
            raise UserInputError(f"{where}[{i}] ({name}): bad parameters {params}: {err}") from err
        log.append(PoolStep(name, params, len(pool), len(kept)))
        pool = kept
    return pool, log


# --------------------------------------------------------------------------- core filters
@POOL_FILTERS.register
def not_training(candidates: list[str], ctx: PoolContext) -> list[str]:
    """Drop the training classes themselves."""
    train = set(ctx.train)
    return [w for w in candidates if w not in train]


@POOL_FILTERS.register
def min_images(candidates: list[str], ctx: PoolContext, min: int = 301) -> list[str]:  # noqa: A002
    """Keep classes with at least ``min`` images (fall11 counts, or the user's counts file)."""
    return [w for w in candidates if ctx.counts.get(w, 0) >= min]


def store_counts(ctx: PoolContext, path: str) -> dict[str, int]:
    """The per-class image counts of a store (its ``images count --out`` table), read once per
    context."""
    key = ("splits.store_counts", str(path))
    if key not in ctx.cache:
        ctx.cache[key] = read_wnid_counts(path)
    return ctx.cache[key]


@POOL_FILTERS.register
def held_by_store(candidates: list[str], ctx: PoolContext, counts: str, min: int = 1) -> list[str]:  # noqa: A002
    """Keep classes your image store holds with at least ``min`` images (``counts``: the table
    ``imagenet-zsl images count --out`` or ``splits coverage --out`` writes), so a split built
    from this pool is complete on that store (fall11, winter21 and ImageNet-21K-P copies differ)."""
    if not isinstance(min, int) or isinstance(min, bool) or min < 1:
        raise UserInputError(f"held_by_store: min must be an integer of at least 1, got {min!r}")
    held = store_counts(ctx, counts)
    return [w for w in candidates if held.get(w, 0) >= min]


@POOL_FILTERS.register
def connected(candidates: list[str], ctx: PoolContext) -> list[str]:
    """Keep classes reachable from the training classes (a ratio needs finite distances)."""
    dist = ctx.graph.distances_from(ctx.train)
    idx = ctx.graph.indices(candidates)
    return [w for w, d in zip(candidates, dist[idx], strict=True) if np.isfinite(d)]


@POOL_FILTERS.register
def not_related_to_training(candidates: list[str], ctx: PoolContext) -> list[str]:
    """Drop ancestors and descendants of training classes (structural consistency w.r.t. train)."""
    graph = ctx.graph
    train_idx = graph.indices(ctx.train)
    related = np.zeros(len(graph), dtype=bool)
    related[graph.ancestor_matrix[train_idx].indices] = True
    related[graph.descendant_matrix[train_idx].indices] = True
    idx = graph.indices(candidates)
    return [w for w, r in zip(candidates, related[idx], strict=True) if not r]


@POOL_FILTERS.register
def include_list(candidates: list[str], ctx: PoolContext, path: str) -> list[str]:
    """Keep only classes listed in a wnid file (one per line)."""
    allowed = set(read_wnid_list(path))
    return [w for w in candidates if w in allowed]


@POOL_FILTERS.register
def exclude_list(candidates: list[str], ctx: PoolContext, path: str) -> list[str]:
    """Drop classes listed in a wnid file (one per line)."""
    banned = set(read_wnid_list(path))
    return [w for w in candidates if w not in banned]


@POOL_FILTERS.register
def not_in_pretraining(candidates: list[str], ctx: PoolContext, label_set: str = "in12k") -> list[str]:
    """Drop the labels of a pretraining set (``in1k``, ``in12k``, ``in21k-p``, ``in22k`` or a wnid
    file): a benchmark from this pool has zero leakage for backbones pretrained on that set."""
    seen = pretraining_label_set(label_set)
    return [w for w in candidates if w not in seen]
