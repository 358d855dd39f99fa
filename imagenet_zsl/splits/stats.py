"""``splits stats``: the structural facts of any wnid list against a training set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.io import check_noun_synsets, read_wnid_list
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
