"""Evaluation: exact faiss top-k search, flat/per-class hit@K, GZSL (H, calibrated stacking,
exact AUSUC), hierarchy-aware error breakdown, per-class tables and reports.

Functional API (small, numpy in / numbers out) used by the CLI and by other stages::

    topk_inner_product(queries, prototypes, k)     -> (scores (N,k), ids (N,k))
    hit_at_k(ids, labels, ks, topk_scores=...)     -> {K: flat hit@K}
    per_class_hit_at_k(ids, labels, ks, ...)       -> {K: per-class mean hit@K}
    GZSLTopK / gzsl_metrics / seen_unseen_curve / ausuc / choose_gamma
    metrics_from_scores(scores (N,C), labels, ks, seen_mask=None)  # full score matrices
"""

from imagenet_zsl.evaluation.hierarchy_errors import CATEGORIES, ErrorBreakdown, error_breakdown
from imagenet_zsl.scoring import (
    DEFAULT_KS,
    GZSLTopK,
    SeenUnseenCurve,
    ausuc,
    calibrated_topk,
    choose_gamma,
    gzsl_accuracies,
    gzsl_from_scores,
    gzsl_metrics,
    gzsl_thresholds,
    harmonic_mean,
    hit_at_k,
    hit_rates,
    metrics_from_scores,
    per_class_hit_at_k,
    per_class_rates,
    ranks_from_scores,
    seen_unseen_curve,
    true_rank,
)
from imagenet_zsl.evaluation.search import TopKSearcher, topk_from_scores, topk_inner_product

__all__ = [
    "CATEGORIES", "DEFAULT_KS", "ErrorBreakdown", "GZSLTopK", "SeenUnseenCurve", "TopKSearcher",
    "ausuc", "calibrated_topk", "choose_gamma", "error_breakdown", "gzsl_accuracies",
    "gzsl_from_scores", "gzsl_metrics", "gzsl_thresholds", "harmonic_mean", "hit_at_k",
    "hit_rates", "metrics_from_scores", "per_class_hit_at_k", "per_class_rates",
    "ranks_from_scores", "seen_unseen_curve", "topk_from_scores", "topk_inner_product",
    "true_rank",
]
