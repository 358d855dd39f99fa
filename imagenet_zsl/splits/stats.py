"""``splits stats``: the structural facts of any wnid list against a training set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.build import benchmark_pool, config_graph, resolve_counts, resolve_train, select_for
from imagenet_zsl.splits.config import load_splits_config
from imagenet_zsl.splits.frontier import pick_benchmark
from imagenet_zsl.splits.io import check_noun_synsets, read_wnid_list
from imagenet_zsl.splits.pool import PoolContext
from imagenet_zsl.splits.structure import structure_stats


def split_stats(
    path: str | Path, train: list[str], graph: ClassGraph, counts: dict[str, int]
) -> dict[str, Any]:
    """Keys: n_classes, n_images, structural_ratio, pairs_within, pairs_with_train, consistent."""
    wnids = read_wnid_list(path)
    if not wnids:
        raise UserInputError(f"{path}: the wnid list is empty")
    check_noun_synsets(wnids, str(path))
    outside = [w for w in wnids if w not in graph]
    if outside:
        raise UserInputError(
            f"{path}: {len(outside)} wnids are noun synsets but not ImageNet-21K "
            f"classes or their ancestors: {preview(outside)}"
        )
    overlap = sorted(set(wnids) & set(train))
    if overlap:
        raise UserInputError(f"{path}: {len(overlap)} wnids are training classes: {preview(overlap)}")
    stats = structure_stats(graph, wnids, train)
    return {
        "n_classes": stats.n_classes,
        "n_images": sum(counts.get(w, 0) for w in wnids),
        "structural_ratio": round(stats.structural_ratio, 6),
        "pairs_within": stats.pairs_within,
        "pairs_with_train": stats.pairs_with_train,
        "consistent": stats.consistent,
    }


def default_pool_config() -> Path | None:
    """``configs/default.yaml`` of a source checkout (None in an installed package)."""
    path = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
    return path if path.is_file() else None


def optimum_for_size(config_path: str | Path, split: str | None, size: int) -> dict[str, Any]:
    """The exact optimum R (and bound, gap) of a ``size``-class set from a recipe's benchmark pool,
    so that any published list can be compared with what was possible."""
    config = load_splits_config(config_path)
    spec = pick_benchmark(config_path, split)
    train = resolve_train(config.train, str(config_path))
    counts = resolve_counts(config.counts)
    graph = config_graph(config)
    candidates = sorted(w for w in fall11_counts() if w not in set(train))
    pool, _ = benchmark_pool(
        spec, PoolContext(graph, train, counts), candidates, f"{config_path}: {spec.name}"
    )
    if size < 2 or size > len(pool):
        return {"optimum_pool": f"{Path(config_path).name}:{spec.name}", "optimum_ratio": None}
    sel = select_for(spec, graph, train, pool, size=size, optimizer="exact")
    return {
        "optimum_pool": f"{Path(config_path).name}:{spec.name}",
        "optimum_ratio": round(sel.ratio, 6),
        "optimum_upper_bound": None if sel.upper_bound is None else round(sel.upper_bound, 6),
        "optimum_gap": None if sel.gap is None else round(sel.gap, 6),
    }
