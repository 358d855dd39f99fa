"""Hierarchical precision@K credit of top-k lists, given each listed class's membership of the
image's correct set (the set itself comes from the hierarchy: :mod:`imagenet_zsl.evaluation.
hierarchical_precision`). Pure numpy over a block of images.

hP@K of one image = |top-K ∩ correct set| / K (Frome et al. 2013); a label space of C < K
classes makes C predictions, and the precision is over those (/ C). Ties enter as they do in the
flat headline (expected value under uniform random tie-breaking): let ``s`` be the score at list
position K (1-based), ``a`` the listed classes scoring strictly above ``s`` and ``G`` (``g``
classes) the tie group at ``s``; the top-K holds the ``a`` classes and ``K − a`` classes drawn
uniformly from ``G``, so the expected count of correct classes in it is
``|above ∩ H| + (K − a) · |G ∩ H| / g``. With the correct set {true class} this is the expected
hit@K, ``min(1, max(0, (K − r) / (t + 1)))``.

Exactness: the credit is exact when the tie group ends inside the list (a top-m list, K < m).
When it runs past the list, its size is known exactly if the true class is in it (the search's
:class:`~imagenet_zsl.scoring.TieRanks`: ``g = t + 1``) and the unlisted members are assumed to be
in the correct set in the same proportion as the listed members other than the true class (as
:mod:`imagenet_zsl.evaluation.hierarchy_errors` does for the top-1 group); otherwise the listed
members' proportion is used.
"""

from __future__ import annotations

import numpy as np

from imagenet_zsl.scoring.ranks import TieRanks


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.maximum(den, 1), 0.0)


def hp_credit(
    ids: np.ndarray,
    scores: np.ndarray,
    member: np.ndarray,
    labels: np.ndarray,
    k: int,
    *,
    ranks: TieRanks | None = None,
    complete: bool = False,
) -> np.ndarray:
    """(B,) float64 hP@``k`` of each image under the expected tie rule.

    ids, scores: (B, m) top-m lists (-1 / -inf padding), m ≥ k; member: (B, m) bool, listed class
    in the image's correct set for this K (the true class always is); labels: (B,) true classes;
    ranks: the true class's exact tie ranks (None: judged from the lists); complete: the lists
    hold every class of the label space (no tie group runs past them).
    """
    ids = np.asarray(ids)
    n, m = ids.shape
    if not 1 <= k <= m:
        raise ValueError(f"hP@{k} needs lists of at least {k} classes, these hold {m}")
    listed = ids >= 0
    s = np.where(listed & ~np.isnan(scores), scores, -np.inf).astype(np.float64)
    member = np.asarray(member, dtype=bool) & listed
    s_k = s[:, k - 1 : k]
    above = listed & (s > s_k)
    group = listed & (s == s_k)
    a = above.sum(axis=1)
    g_listed = group.sum(axis=1)
    h_above = (above & member).sum(axis=1)
    h_group = (group & member).sum(axis=1)
    share = _safe_div(h_group, g_listed)
    if not complete and m > 0:
        share = _past_list_share(ids, group, member, labels, a, ranks, share)
    slots = np.clip(k - a, 0, None)
    # a label space of fewer than K classes makes fewer than K predictions: precision over those
    predictions = np.minimum(k, listed.sum(axis=1))
    return _safe_div(h_above + slots * share, predictions)


def _past_list_share(
    ids: np.ndarray,
    group: np.ndarray,
    member: np.ndarray,
    labels: np.ndarray,
    a: np.ndarray,
    ranks: TieRanks | None,
    share: np.ndarray,
) -> np.ndarray:
    """The correct share of a boundary tie group that reaches the end of the list (module doc)."""
    runs_past = group[:, -1]
    if ranks is None or not runs_past.any():
        return share
    is_true = ids == np.asarray(labels)[:, None]
    true_in_group = np.asarray(ranks.above) == a
    true_listed = (group & is_true).any(axis=1)
    size = np.asarray(ranks.tied) + 1.0
    others = group.sum(axis=1) - true_listed
    h_others = (group & member & ~is_true).sum(axis=1)
    h_total = 1.0 + _safe_div(h_others, others) * (size - 1.0)
    exact_share = h_total / size
    return np.where(runs_past & true_in_group, exact_share, share)
