"""ZSL metrics of a run, a pure function of its inputs and search results: hit@K (flat and per
class, both tie rules) among the label space, and the hierarchy error breakdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.evaluation.hierarchical_precision import hierarchical_precision
from imagenet_zsl.evaluation.hierarchy_errors import expected_error_breakdown

if TYPE_CHECKING:
    from imagenet_zsl.evaluation.hierarchy_errors import ErrorBreakdown
    from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs
    from imagenet_zsl.evaluation.run.results import SearchResults


@dataclass(frozen=True, eq=False)
class ZSLResult:
    """``blocks``: metrics.json's ``label_space``, ``count_as_miss``, ``zsl`` and (with a graph)
    ``hierarchy`` and ``hierarchical_precision`` (hP@K); ``counts`` (len(eval_wnids),) test
    images per class; ``class_hits[k]`` / ``class_hits_strict[k]`` (len(eval_wnids),) per-class
    hit@k rates under each tie rule."""

    blocks: dict[str, Any]
    counts: np.ndarray
    class_hits: dict[int, np.ndarray] = field(default_factory=dict)
    class_hits_strict: dict[int, np.ndarray] = field(default_factory=dict)
    breakdown: ErrorBreakdown | None = None


def _suffix(tie_rule: str) -> str:
    return "" if tie_rule == "expected" else "_strict"


def label_space_block(inp: EvaluationInputs, counts: np.ndarray) -> dict[str, Any]:
    """metrics.json's ``label_space``: the spec, both counts and what left the space.

    ``counts``: (len(eval_wnids),) test images per class (label space, then count-as-miss)."""
    space = inp.space
    n_space = len(space.wnids)
    spec = str(space.spec)
    never = len(space.without_prototype) if space.kept_without_prototype else 0
    block: dict[str, Any] = {
        "spec": spec,
        "classes_in_label_space": space.size,
        "classes_with_test_images": int(np.count_nonzero(counts)),
        "split_classes": len(space.split),
        "split_classes_without_test_images": int(np.count_nonzero(inp.class_counts_all == 0)),
        "distractors_without_test_images": int(np.count_nonzero(counts[:n_space] == 0)) + never,
        "seen_classes_left_out": {"source": space.seen_source, "classes": space.seen_count},
        "without_prototype": {"classes": len(space.without_prototype), "wnids": space.without_prototype},
    }
    if space.kept_without_prototype:  # they stay in the space: classes the model never predicts
        block["without_prototype"]["kept_never_predicted"] = True
    if spec not in ("split", "all"):
        block["file"] = {"path": spec, "sha256": sha256_file(spec)}
    return block


def count_as_miss_block(inp: EvaluationInputs) -> dict[str, Any]:
    """metrics.json's ``count_as_miss``: the classes and how many test images each adds as misses."""
    counts = inp.miss_counts
    return {
        "classes": list(inp.space.miss),
        "images": int(counts.sum()),
        "classes_with_test_images": int(np.count_nonzero(counts)),
        "images_per_class": {w: int(c) for w, c in zip(inp.space.miss, counts, strict=True)},
    }


def scored_labels_and_ranks(results: SearchResults) -> tuple[np.ndarray, M.TieRanks]:
    """Labels and tie ranks of the scored test images (the searched ones, then the count-as-miss
    ones), joined without the top-k lists (a joined copy of the lists would cost 336 B per image)."""
    if results.misses is None:
        return results.test.labels, results.test.ranks
    parts = (results.test, results.misses)
    labels = np.concatenate([p.labels for p in parts])
    return labels, M.TieRanks(
        *(np.concatenate([getattr(p.ranks, f) for p in parts]) for f in ("above", "tied"))
    )


def zsl_metrics(inp: EvaluationInputs, results: SearchResults) -> ZSLResult:
    """ZSL hit@K (flat and per class, both tie rules) of the test images among the label space;
    count-as-miss images are in every denominator with no credit."""
    labels, ranks = scored_labels_and_ranks(results)
    n_eval = len(inp.eval_wnids)
    counts = np.bincount(labels, minlength=n_eval)
    misses = count_as_miss_block(inp)
    zsl: dict[str, Any] = {
        "images": int(len(labels)),
        "classes": int(np.count_nonzero(counts)),
        "classes_in_label_space": inp.space.size,
        "classes_with_test_images": int(np.count_nonzero(counts)),
        "label_space": str(inp.space.spec),
        "miss_images": misses["images"],
    }
    for rule in M.TIE_RULES:
        zsl[f"flat{_suffix(rule)}"] = M.hit_at_k(ranks, labels, inp.ks, tie_rule=rule)
        zsl[f"per_class{_suffix(rule)}"] = M.hit_at_k(
            ranks, labels, inp.ks, num_classes=n_eval, per_class=True, tie_rule=rule
        )
    zsl["tied_images"] = int(np.count_nonzero(ranks.tied))
    zsl["duplicate_prototypes"] = int(inp.spaces["unseen"].duplicate_classes)
    blocks = {"label_space": label_space_block(inp, counts), "count_as_miss": misses, "zsl": zsl}
    per_class = {"num_classes": n_eval, "per_class": True, "average": False}
    hits = M.hit_at_k(ranks, labels, inp.ks, **per_class)
    hits_strict = M.hit_at_k(ranks, labels, inp.ks, tie_rule="strict", **per_class)
    breakdown = None
    searched = results.test
    if inp.graph is not None and len(searched.labels):
        # over the searched images only: a count-as-miss image has no prediction to classify;
        # streamed in blocks of images (the lists may be memory-mapped)
        scores, ids = searched.lists["unseen"]
        breakdown = expected_error_breakdown(
            inp.graph, inp.space_wnids, searched.labels, ids, scores, searched.ranks
        )
        blocks["hierarchy"] = {"graph": inp.graph.source, **breakdown.to_dict()}
        blocks["hierarchical_precision"] = hierarchical_precision(
            inp.graph,
            inp.space_wnids,
            searched.labels,
            (scores, ids),
            inp.ks,
            searched.ranks,
            misses=misses["images"],
        )
    return ZSLResult(blocks, counts, hits, hits_strict, breakdown)
