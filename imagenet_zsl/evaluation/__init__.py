"""Evaluation: exact top-k search (blocked BLAS matmul), flat/per-class hit@K, GZSL (H, calibrated stacking,
exact AUSUC), hierarchy-aware error breakdown, per-class tables and reports.

Functional API (small, numpy in / numbers out) used by the CLI and by other stages::

    topk_inner_product(queries, prototypes, k)          -> (scores (N,k), ids (N,k))
    hit_at_k(ids, labels, ks, topk_scores=..., per_class=False, tie_rule="expected")  -> {K: hit@K}
    true_ranks(labels, topk_ids=ids, topk_scores=s) / true_ranks(labels, scores=S) -> TieRanks
    GZSLTopK / gzsl_metrics / seen_unseen_curve / ausuc / choose_gamma
    metrics_from_scores(scores (N,C), labels, ks, seen_mask=None)  # full score matrices

The metric functions live in :mod:`imagenet_zsl.scoring` (below the models, which select
hyper-parameters with them) and are re-exported here.
"""

from imagenet_zsl.evaluation.hierarchy_errors import CATEGORIES, ErrorBreakdown, error_breakdown
from imagenet_zsl.evaluation.search import TopKSearcher, topk_inner_product
from imagenet_zsl.scoring import (
    DEFAULT_KS,
    TIE_RULES,
    GZSLTopK,
    SeenUnseenCurve,
    TieRanks,
    ausuc,
    calibrated_topk,
    choose_gamma,
    gzsl_accuracies,
    gzsl_class_rates,
    gzsl_entries,
    gzsl_from_scores,
    gzsl_metrics,
    gzsl_thresholds,
    harmonic_mean,
    hit_at_k,
    metrics_from_scores,
    seen_unseen_curve,
    topk_from_scores,
    true_ranks,
)

__all__ = [
    "CATEGORIES",
    "DEFAULT_KS",
    "TIE_RULES",
    "ErrorBreakdown",
    "GZSLTopK",
    "SeenUnseenCurve",
    "TieRanks",
    "TopKSearcher",
    "ausuc",
    "calibrated_topk",
    "choose_gamma",
    "error_breakdown",
    "gzsl_accuracies",
    "gzsl_class_rates",
    "gzsl_entries",
    "gzsl_from_scores",
    "gzsl_metrics",
    "gzsl_thresholds",
    "harmonic_mean",
    "hit_at_k",
    "metrics_from_scores",
    "seen_unseen_curve",
    "true_ranks",
    "topk_from_scores",
    "topk_inner_product",
]
