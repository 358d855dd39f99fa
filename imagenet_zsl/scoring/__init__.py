"""ZSL and generalized-ZSL metrics computed from per-image top-k lists, without searching again.

Tie rules. For each image let ``r`` be the number of classes scoring strictly above the true
class and ``t`` the number of *other* classes scoring exactly the same (its tie group).

* ``expected`` (the headline): hit@K is the expected value under uniform random tie-breaking,
  credit ``min(1, max(0, (K − r) / (t + 1)))``. A model that gives every class the same score
  scores K/C, chance, not 0.
* ``strict`` (ties count against the model): hit iff ``r + t < K``.

With continuous scores ``t = 0`` and the two coincide. Classes with exactly identical prototypes
form one tie group whatever the float rounding: the search hashes prototype rows up front and
scores each distinct row once (see :mod:`imagenet_zsl.evaluation.search`), which then reports
``r`` and ``t`` of the true class exactly (:class:`TieRanks`).

Exactness: a top-m list decides hit@K for every K < m under both rules when the true class's
tie group does not reach the end of the list (if the true class is absent from the list, at
least m > K classes score above it or tie with the last listed one). Only the list's last value
can run past its end, so the number of unlisted classes tied with it (``tail_ties``, which the
search stores beside every list) makes a list exact; or pass the exact :class:`TieRanks` of the
search. The evaluate command searches ``max(K) + 1`` classes.

Non-finite scores: a NaN true-class score is never a hit (it ranks below every class); scores
that overflow to ±inf are an error.

GZSL (Chao et al. 2016, calibrated stacking): seen-class scores are lowered by γ. Per image we keep
the top-m among seen classes and the top-m among unseen classes separately. Under the strict
rule, whether an image is a hit@K is a threshold test on γ (``γ > θ`` for unseen-class images,
``γ < φ`` for seen-class images, strict at the breakpoint). Under the expected rule an image
whose true class has ``t`` tied classes in its own label space is ``t + 1`` equally weighted
entries, one per position of the true class inside its tie group (rank ``r + i``), each a
threshold test. The whole Seen-Unseen accuracy Curve, its area (AUSUC) and the γ maximising H
follow exactly from these thresholds — one sort over the breakpoints, no grid; the curve's
intervals are open, so a breakpoint's own value never enters AUSUC, and a chosen γ is 0 inside an
interval or an interval's midpoint. The accuracies at a given γ (direct stacking is γ = 0) are
exact at a breakpoint too (:func:`image_credit`): a seen class tied with an unseen class after
calibration is a tie of the joint ranking, r and t counted in the joint space, not a miss on both
sides. Where every class of the other space's top-m list scores at or above the true class, its
tie group may run past that list's end: the list's tail (:class:`GZSLLists`: the unlisted classes
tied with its last score, 0 for a list holding its whole space) counts the rest of it, so the
credit is exact; only lists stored without their tails leave such an image a miss (k < m always).

Memory: :class:`GZSLTopK` holds the lists in parts that are never copied (the search's lists may
be memory-mapped) and every pass over them runs one block of ``SORT_BLOCK`` images at a time, so
what grows with the number of images is O(1) arrays per image or threshold entry; the results are
the same bit for bit whatever the block size or the parts.
"""

from imagenet_zsl.scoring.gzsl import (
    GZSLTopK,
    SeenUnseenCurve,
    ausuc,
    choose_gamma,
    gzsl_entries,
    gzsl_thresholds,
    image_credit,
    seen_unseen_curve,
)
from imagenet_zsl.scoring.gzsl_lists import GZSLLists, index_dtype, release_pages
from imagenet_zsl.scoring.gzsl_metrics import (
    calibrated_topk,
    calibrated_topk_block,
    gzsl_accuracies,
    gzsl_calibrated,
    gzsl_class_rates,
    gzsl_from_scores,
    gzsl_metrics,
    metrics_from_scores,
    tail_ties,
)
from imagenet_zsl.scoring.ranks import (
    DEFAULT_KS,
    SORT_BLOCK,
    TIE_RULE_TEXT,
    TIE_RULES,
    TieRanks,
    harmonic_mean,
    hit_at_k,
    hit_ks,
    ks_of,
    sort_topk,
    topk_from_scores,
    true_ranks,
)

__all__ = [
    "DEFAULT_KS",
    "SORT_BLOCK",
    "TIE_RULES",
    "TIE_RULE_TEXT",
    "GZSLLists",
    "GZSLTopK",
    "SeenUnseenCurve",
    "TieRanks",
    "ausuc",
    "calibrated_topk",
    "calibrated_topk_block",
    "choose_gamma",
    "gzsl_accuracies",
    "gzsl_calibrated",
    "gzsl_class_rates",
    "gzsl_entries",
    "gzsl_from_scores",
    "gzsl_metrics",
    "gzsl_thresholds",
    "harmonic_mean",
    "hit_at_k",
    "hit_ks",
    "image_credit",
    "index_dtype",
    "ks_of",
    "metrics_from_scores",
    "release_pages",
    "seen_unseen_curve",
    "sort_topk",
    "tail_ties",
    "topk_from_scores",
    "true_ranks",
]
