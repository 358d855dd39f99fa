"""The correction ladder in the GZSL setting (Hascoet et al., CVPR 2019, Fig. 6, generalized).

GZSL (Hascoet show the ladder for both settings). For a cell evaluated with ``--gzsl`` the same
steps run in the joint label space (test classes, then the seen classes) at γ = 0: the test
images give the unseen accuracy u, the held-out seen images the seen accuracy s, and H is their
harmonic mean (per class, as GBU). Step 1 is exactly metrics.json's ``gzsl`` block (the
evaluation's rule: a cross-space tie at γ = 0 is a miss). From step 2 on each image's two stored
top-m lists are merged into the joint top m and re-ranked as above: a prediction of the true
class's parent or child counts whether it is a test or a *seen* class (Hascoet's GZSL false
negatives: "Cathartid" predicted as its seen parent "Vulture"), for a seen image its related
test classes count, the drop steps remove test classes only (seen classes always stay), and a
cross-space tie gets the expected credit like any tie. Each stored list's tail (the classes left
off it that score exactly its last score, ``topk/X.SPACE.tail.npy``) counts a tie group running
past the list whole, in the evaluated rung (so it equals metrics.json) and in the joint ranks.
Where the other space's list ends above the true class's score (or at it, in a run stored
without tails), the joint ranks are only lower bounds and that image gets bounds, not an exact
credit.

The steps, tie rules and bounds are those of :mod:`imagenet_zsl.analysis.ladder_steps`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.ladder_steps import (
    DEFAULT_KS,
    DEFAULT_MIN_IMAGES,
    ClassFlags,
    GroupBounds,
    class_mean,
    corrected_bounds,
    ladder_steps,
)
from imagenet_zsl.analysis.runs import RunCell


def _merged_lists(
    own_ids: np.ndarray, own_scores: np.ndarray, other_ids: np.ndarray, other_scores: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, scores) (n, m): the top m of two label spaces' top-m lists (joint indices; -1/-inf
    padding). Every class above the m-th merged score is in one of the two lists, so the merged
    list is the joint space's top m."""
    ids = np.hstack([own_ids, other_ids])
    scores = np.hstack([own_scores, other_scores]).astype(np.float64)
    scores = np.where((ids >= 0) & ~np.isnan(scores), scores, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :m]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)


def _other_space_ranks(
    own_ids: np.ndarray,
    own_scores: np.ndarray,
    labels: np.ndarray,
    other_ids: np.ndarray,
    other_scores: np.ndarray,
    other_size: int,
    other_tail: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classes of the *other* space scoring above / equal to the true class, from its list, and
    whether those counts are exact (the true class is listed in its own space, and the other
    list is complete, ends below the true score, or ends at it with its tail known: ``other_tail``
    (n,), the unlisted classes tied with the list's last score, None where not stored).
    (n,) int64, int64, bool."""
    is_true = (own_ids == labels[:, None]) & (own_ids >= 0)
    listed = is_true.any(axis=1)
    true_score = np.where(is_true, own_scores.astype(np.float64), -np.inf).max(axis=1)
    valid = other_ids >= 0
    scores = other_scores.astype(np.float64)
    above = (valid & (scores > true_score[:, None])).sum(axis=1)
    tied = (valid & (scores == true_score[:, None])).sum(axis=1)
    last = np.where(valid, scores, np.inf).min(axis=1)
    complete = (valid.sum(axis=1) >= other_size) | ~valid[:, -1]
    exact = listed & (complete | (last < true_score))
    if other_tail is not None:  # a tie group running past the list: counted whole
        at_last = listed & ~complete & (last == true_score)
        tied = tied + np.where(at_last, other_tail, 0)
        exact |= at_last
    return above.astype(np.int64), tied.astype(np.int64), exact


def joint_cells(cell: RunCell) -> tuple[RunCell, np.ndarray, RunCell, np.ndarray]:
    """The GZSL joint label space (test classes, then seen classes) as two cells: the test images
    and the held-out seen images, each with merged top-m lists, joint tie ranks and the (n,) mask
    of images whose joint ranks are exact (see :func:`corrected_bounds`)."""
    g = cell.gzsl
    assert g is not None
    n_unseen, m = len(cell.classes), cell.ids.shape[1]
    classes = cell.classes + g.seen_classes
    seen_joint = np.where(g.test_seen_ids >= 0, g.test_seen_ids + n_unseen, -1)
    ids, scores = _merged_lists(cell.ids, cell.scores, seen_joint, g.test_seen_scores, m)
    own = cell.tie_ranks()
    above, tied, exact = _other_space_ranks(
        cell.ids, cell.scores, cell.labels, g.test_seen_ids, g.test_seen_scores, len(g.seen_classes),
        g.test_seen_tail,
    )  # fmt: skip
    test = RunCell(
        cell.path, cell.metrics, classes, cell.labels, ids, scores, cell.rows,
        own.above + above, own.tied + tied,
    )  # fmt: skip
    seen_own = np.where(g.seen_ids >= 0, g.seen_ids + n_unseen, -1)
    ids, scores = _merged_lists(seen_own, g.seen_scores, g.unseen_ids, g.unseen_scores, m)
    above, tied, exact_seen = _other_space_ranks(
        g.seen_ids, g.seen_scores, g.labels, g.unseen_ids, g.unseen_scores, n_unseen, g.unseen_tail
    )
    seen = RunCell(
        cell.path, cell.metrics, classes, g.labels + n_unseen, ids, scores, np.arange(len(g.labels)),
        g.above + above, g.tied + tied,
    )  # fmt: skip
    return test, exact, seen, exact_seen


def gzsl_topk(cell: RunCell) -> M.GZSLTopK:
    """The evaluation's own GZSL lists (``evaluate``'s ``build_gzsl``): for the evaluated rung.

    Each list carries its stored tail (:class:`~imagenet_zsl.scoring.GZSLLists`), so a tie group
    running past a list gets the credit metrics.json gives it; a run stored without tails keeps
    the rule it was evaluated with (such an image is a miss)."""
    g = cell.gzsl
    assert g is not None
    n_unseen, n_seen = len(cell.classes), len(g.seen_classes)
    seen_mask = np.r_[np.zeros(n_unseen, bool), np.ones(n_seen, bool)]
    test = M.GZSLLists(
        g.test_seen_scores, g.test_seen_ids, cell.scores, cell.ids, n_unseen,
        g.test_seen_tail, g.test_unseen_tail,
    )  # fmt: skip
    seen = M.GZSLLists(
        g.seen_scores, g.seen_ids, g.unseen_scores, g.unseen_ids, n_unseen, g.seen_tail, g.unseen_tail
    )
    own = cell.tie_ranks()
    ranks = M.TieRanks(np.concatenate([own.above, g.above]), np.concatenate([own.tied, g.tied]))
    labels = np.concatenate([cell.labels, g.labels + n_unseen])
    return M.GZSLTopK.from_parts([test, seen], labels, seen_mask, ranks)


def _gzsl_evaluated(cell: RunCell, ks: Sequence[int]) -> dict:
    """The evaluated rung: seen/unseen/H at γ = 0 exactly as metrics.json ("gzsl")."""
    gz = gzsl_topk(cell)
    row: dict = {}
    for k in ks:
        for rule, suffix in (("expected", ""), ("strict", "_strict")):
            flat = M.gzsl_accuracies(gz, k, 0.0, per_class=False, tie_rule=rule)
            per = M.gzsl_accuracies(gz, k, 0.0, per_class=True, tie_rule=rule)
            row[f"hit@{k}{suffix}"] = flat["unseen"]
            row[f"per_class_hit@{k}{suffix}"] = per["unseen"]
            row[f"seen_hit@{k}{suffix}"] = flat["seen"]
            row[f"seen_per_class_hit@{k}{suffix}"] = per["seen"]
            row[f"H@{k}{suffix}"] = per["H"]
        row[f"hit@{k}_upper"] = row[f"hit@{k}"]
        row[f"undetermined@{k}"] = 0
    return row


def _gzsl_hits(
    test: RunCell,
    keep: np.ndarray,
    bounds: GroupBounds,
    seen: RunCell,
    seen_bounds: GroupBounds,
    ks: Sequence[int],
) -> dict:
    """u (test images, lower bound), s (seen images, lower bound) and per-class H per K."""
    n = len(test.classes)
    row: dict = {}
    for k in ks:
        # an image whose credit the bounds leave open under either rule, counted once (as step_hits)
        unseen_open: np.ndarray | bool = False
        seen_open: np.ndarray | bool = False
        for rule, suffix in (("expected", ""), ("strict", "_strict")):
            low, high = bounds.credit(k, rule)
            s_low, s_high = seen_bounds.credit(k, rule)
            u_flat = float(np.mean(low[keep])) if keep.any() else float("nan")
            u_class = class_mean(test.labels[keep], low[keep], n) if keep.any() else float("nan")
            s_class = class_mean(seen.labels, s_low, n) if len(s_low) else float("nan")
            row[f"hit@{k}{suffix}"] = u_flat
            row[f"per_class_hit@{k}{suffix}"] = u_class
            row[f"seen_hit@{k}{suffix}"] = float(np.mean(s_low)) if len(s_low) else float("nan")
            row[f"seen_per_class_hit@{k}{suffix}"] = s_class
            row[f"H@{k}{suffix}"] = M.harmonic_mean(s_class, u_class) if u_class == u_class else float("nan")
            if suffix == "":
                row[f"hit@{k}_upper"] = float(np.mean(high[keep])) if keep.any() else float("nan")
            unseen_open = unseen_open | (low[keep] < high[keep])
            seen_open = seen_open | (s_low < s_high)
        row[f"undetermined@{k}"] = int(np.sum(unseen_open) + np.sum(seen_open))
    return row


def gzsl_cell_ladder(
    cell: RunCell,
    related: np.ndarray,
    flags: ClassFlags,
    kept_images: np.ndarray | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    min_images: int = DEFAULT_MIN_IMAGES,
) -> list[dict]:
    """The ladder in the GZSL setting (Hascoet Fig. 6, generalized): test images classified among
    the test *and* seen classes at γ = 0. ``related``: :func:`related_keys` over the joint space
    (test classes, then seen classes), so a prediction of the true class's seen parent or child
    counts from step 2 on (for seen images, their related test classes). The drop steps remove
    test classes only; seen classes always stay. One row per step with unseen (``hit@K`` …),
    seen (``seen_*``) accuracy and per-class H."""
    test, exact, seen, seen_exact = joint_cells(cell)
    seen_active = np.ones(len(test.classes) - len(cell.classes), dtype=bool)  # seen classes stay
    rows = []
    for step, about, unseen_active, image_mask in ladder_steps(cell, flags, kept_images, min_images):
        active = np.concatenate([unseen_active, seen_active])
        keep = image_mask & active[cell.labels]
        row = {"model": cell.model, "split": cell.split, "setting": "gzsl", "step": step, "correction": about}
        row.update({"classes": int(len(np.unique(cell.labels[keep]))), "images": int(keep.sum())})
        row["seen_images"] = int(len(seen.labels))
        if step == "evaluated":
            row.update(_gzsl_evaluated(cell, ks))
        else:
            bounds = corrected_bounds(test, active, related, exact)
            seen_bounds = corrected_bounds(seen, active, related, seen_exact)
            row.update(_gzsl_hits(test, keep, bounds, seen, seen_bounds, ks))
        rows.append(row)
    return rows


def gzsl_columns(ks: Sequence[int]) -> list[str]:
    names = ["seen_images"]
    for suffix in ("", "_strict"):
        names += [f"seen_hit@{k}{suffix}" for k in ks] + [f"seen_per_class_hit@{k}{suffix}" for k in ks]
        names += [f"H@{k}{suffix}" for k in ks]
    return names
