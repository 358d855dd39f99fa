"""GZSL accuracies and metric blocks at a calibration γ, calibrated top-k lists, and both ZSL and
GZSL metrics from full score matrices. See :mod:`imagenet_zsl.scoring`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring.gzsl import class_weights, image_credit, seen_unseen_curve
from imagenet_zsl.scoring.gzsl_lists import GZSLLists, GZSLTopK
from imagenet_zsl.scoring.ranks import (
    DEFAULT_KS,
    SORT_BLOCK,
    TIE_RULES,
    TieRanks,
    check_ks,
    check_labels,
    check_scores_finite,
    harmonic_mean,
    hit_at_k,
    hit_ks,
    sort_topk,
    topk_from_scores,
    true_ranks,
)


def gzsl_accuracies(
    gz: GZSLTopK, k: int, gamma: float, per_class: bool, tie_rule: str = "expected"
) -> dict[str, float]:
    """{'seen', 'unseen', 'H'} hit@k accuracies at calibration ``gamma`` (0 = direct stacking),
    exact at a breakpoint too: a seen/unseen tie is a joint tie (:func:`image_credit`)."""
    return _side_accuracies(gz, image_credit(gz, k, gamma, tie_rule), per_class)


def _side_accuracies(gz: GZSLTopK, credit: np.ndarray, per_class: bool) -> dict[str, float]:
    """{'seen', 'unseen', 'H'} from the (N,) per-image ``credit``."""
    # each image's weight within its side (built from a (C,) table), summed over that side's images
    # only, in image order: a perfect side sums its weights alone (no interleaved zeros), so
    # numbers do not move with the other side's layout
    weight, seen_img = class_weights(gz, per_class)[gz.labels], gz.seen_images
    seen = min(float(np.sum(weight[seen_img] * credit[seen_img])), 1.0)
    unseen = min(float(np.sum(weight[~seen_img] * credit[~seen_img])), 1.0)
    return {"seen": seen, "unseen": unseen, "H": harmonic_mean(seen, unseen)}


def _accuracy_blocks(gz: GZSLTopK, ks: Sequence[int], gamma: float) -> dict[str, dict[int, dict[str, float]]]:
    """{"per_class", "flat", "per_class_strict", "flat_strict"} → {K: seen/unseen/H} at ``gamma``;
    one pass over the lists per K and tie rule (the credit serves both averagings)."""
    out: dict[str, dict[int, dict[str, float]]] = {
        _strict_key(mode, rule): {} for rule in TIE_RULES for mode in ("per_class", "flat")
    }
    for rule in TIE_RULES:
        for k in ks:
            credit = image_credit(gz, k, gamma, rule)
            for mode, per_class in (("per_class", True), ("flat", False)):
                out[_strict_key(mode, rule)][k] = _side_accuracies(gz, credit, per_class)
    return out


def gzsl_class_rates(gz: GZSLTopK, k: int, gamma: float = 0.0, tie_rule: str = "expected") -> np.ndarray:
    """(C,) per-class GZSL hit@k at ``gamma`` over the joint label space (NaN: no image)."""
    credit = image_credit(gz, k, gamma, tie_rule)
    size = len(gz.seen_mask)
    per = np.bincount(gz.labels, weights=credit, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return per / np.bincount(gz.labels, minlength=size)


def _strict_key(mode: str, tie_rule: str) -> str:
    return mode if tie_rule == "expected" else f"{mode}_strict"


def gzsl_metrics(
    gz: GZSLTopK,
    ks: Sequence[int] = DEFAULT_KS,
    gamma: float | None = None,
) -> dict:
    """Every GZSL figure for each K: seen/unseen/H under direct stacking (γ = 0) and AUSUC,
    per class (Xian et al., the default) and flat; plus seen/unseen/H at ``gamma`` if given.

    Returns {"per_class": {K: {...}}, "flat": {K: {...}}, "calibrated": {...} | absent} under
    the expected tie rule, with the strict twins under "per_class_strict" and "flat_strict".
    """
    ks = check_ks(ks, gz.m, True)
    seen_img = gz.seen_images
    if not seen_img.any() or seen_img.all():
        raise UserInputError("GZSL needs test images of both seen and unseen classes")
    # the γ = 0 points exactly (a seen/unseen tie at γ = 0 sits on a breakpoint of the curve:
    # image_credit shares it as a joint tie); the area from the curve's open intervals
    out: dict = _accuracy_blocks(gz, ks, 0.0)
    for tie_rule in TIE_RULES:
        for mode, per_class in (("per_class", True), ("flat", False)):
            for k in ks:
                out[_strict_key(mode, tie_rule)][k]["ausuc"] = seen_unseen_curve(
                    gz, k, per_class, tie_rule
                ).ausuc
    if gamma is not None:
        out["calibrated"] = gzsl_calibrated(gz, ks, gamma)
    return out


def gzsl_calibrated(gz: GZSLTopK, ks: Sequence[int], gamma: float) -> dict:
    """seen/unseen/H at calibration ``gamma`` for each K: :func:`gzsl_metrics`'s "calibrated"
    block, {"gamma", "per_class", "flat", "per_class_strict", "flat_strict"}, without the curves."""
    ks = check_ks(ks, gz.m, True)
    return {"gamma": float(gamma), **_accuracy_blocks(gz, ks, gamma)}


def calibrated_topk(
    gz: GZSLTopK, gamma: float, k: int, block: int = SORT_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """Merged top-k over the joint label space after subtracting γ from seen scores.

    Returns (scores float64 (N, k), ids int64 (N, k)); ties by ascending class index. Rows are
    merged ``block`` images at a time (:func:`calibrated_topk_block`), so the (block, 2m)
    float64/int64 temporaries of the merge stay bounded whatever N (the result is the same for
    any block size). Callers that can use the merged lists block by block should: this (N, k)
    result is 16 bytes per image and class.
    """
    n = len(gz.labels)
    width = min(k, 2 * gz.m)
    scores = np.empty((n, width), np.float64)
    ids = np.empty((n, width), np.int64)
    for lo, hi, lists in gz.blocks(block):
        scores[lo:hi], ids[lo:hi] = calibrated_topk_block(lists, gamma, k)
    return scores, ids


def calibrated_topk_block(lists: GZSLLists, gamma: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`calibrated_topk` of one block of images (:meth:`GZSLTopK.blocks`) → (scores (B, k)
    float64, ids (B, k) int64 joint indices)."""
    scores = np.hstack([lists.seen_scores.astype(np.float64) - gamma, lists.unseen_scores.astype(np.float64)])
    ids = np.hstack([lists.joint_seen_ids(), lists.unseen_ids.astype(np.int64)])
    scores, ids = sort_topk(scores, ids, block=max(len(scores), 1))
    return scores[:, :k], ids[:, :k]


# ----------------------------------------------------------------------------- full score matrices


def _own_space_ranks(scores: np.ndarray, labels: np.ndarray, seen_mask: np.ndarray) -> TieRanks:
    """Exact TieRanks of each true class within its own label space (seen or unseen columns)."""
    check_scores_finite(scores)
    n = len(scores)
    true_score = scores[np.arange(n), labels]
    own = seen_mask[None, :] == seen_mask[labels][:, None]
    above = (own & (scores > true_score[:, None])).sum(axis=1).astype(np.int64)
    tied = (own & (scores == true_score[:, None])).sum(axis=1).astype(np.int64) - 1
    nan_true = np.isnan(true_score)
    return TieRanks(np.where(nan_true, scores.shape[1], above), np.where(nan_true, 0, tied))


def gzsl_from_scores(scores: np.ndarray, labels: np.ndarray, seen_mask: np.ndarray, m: int) -> GZSLTopK:
    """GZSL top-m lists from a full (N, C) score matrix and a (C,) seen-class mask (with the
    exact own-space tie ranks)."""

    scores = np.asarray(scores, dtype=np.float32)
    seen_mask = np.asarray(seen_mask, dtype=bool)
    if seen_mask.shape != (scores.shape[1],):
        raise ValueError(f"seen_mask must have shape ({scores.shape[1]},), got {seen_mask.shape}")
    if seen_mask.all() or not seen_mask.any():
        raise UserInputError(
            f"seen_mask marks {int(seen_mask.sum())} of {len(seen_mask)} classes as seen; GZSL needs "
            "both seen and unseen classes (drop seen_mask for plain ZSL)"
        )
    labels = check_labels(labels, len(scores), scores.shape[1])
    ranks = _own_space_ranks(scores, labels, seen_mask)
    lists, tails = [], []
    for mask in (seen_mask, ~seen_mask):
        columns = np.flatnonzero(mask)
        space = scores[:, columns]
        top_scores, top = topk_from_scores(space, m)
        lists += [top_scores, np.where(top >= 0, columns[np.maximum(top, 0)], -1)]
        tails.append(tail_ties(space, top_scores))
    parts = [GZSLLists(*lists, seen_tail=tails[0], unseen_tail=tails[1])]
    return GZSLTopK.from_parts(parts, labels, seen_mask, ranks)


def tail_ties(scores: np.ndarray, top_scores: np.ndarray) -> np.ndarray:
    """(N,) int64: per row of a full (N, C) score matrix, the classes left out of its top-m list
    ``top_scores`` (N, m) that score exactly the list's last score (0 for a list of every class).
    What the search stores beside each list (:class:`~imagenet_zsl.scoring.GZSLLists`)."""
    n, m = top_scores.shape
    if scores.shape[1] <= m:
        return np.zeros(n, np.int64)
    last = top_scores[:, -1:]
    return ((scores == last).sum(axis=1) - (top_scores == last).sum(axis=1)).astype(np.int64)


def metrics_from_scores(
    scores: np.ndarray,
    labels: np.ndarray,
    ks: Sequence[int] = (1,),
    seen_mask: np.ndarray | None = None,
    gamma: float | None = None,
) -> dict:
    """All metrics of a full (N, C) score matrix (small label spaces, e.g. 717 SUN classes).

    Without ``seen_mask``: ZSL {"flat": {K: hit}, "per_class": {K: hit}} over all C columns
    (expected tie rule) plus "flat_strict"/"per_class_strict". With it: the
    :func:`gzsl_metrics` dict (labels index the same C columns).
    """
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2:
        raise ValueError(f"scores must be (N, C), got {scores.shape}")
    if seen_mask is None:
        ranks = true_ranks(labels, scores=scores)
        ks = check_ks(ks, scores.shape[1], False)
        labels = np.asarray(labels, dtype=np.int64)
        out = {}
        for tie_rule in TIE_RULES:
            out[_strict_key("flat", tie_rule)] = hit_at_k(ranks, labels, ks, tie_rule=tie_rule)
            out[_strict_key("per_class", tie_rule)] = hit_at_k(
                ranks, labels, ks, num_classes=scores.shape[1], per_class=True, tie_rule=tie_rule
            )
        return out
    ks = hit_ks(ks)
    gz = gzsl_from_scores(scores, labels, seen_mask, max(ks) + 1)
    return gzsl_metrics(gz, ks, gamma)
