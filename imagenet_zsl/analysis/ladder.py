"""Hascoet et al.'s correction ladder (CVPR 2019, Fig. 6), recomputed from a run's stored top-k lists.

hit@K of a finished run under cumulative corrections, with no new search:

1. ``evaluated``  — as evaluated: exactly the run's ``metrics.json`` headline and strict twin;
2. ``structure``  — a prediction of a class related to the true class (its parent or child by
   default; any ancestor or descendant with ``relation="ancestor-descendant"``) also counts as
   correct: the structural flaws of the split no longer cost the model;
3. ``rare_labels`` — test classes whose label is rare are dropped;
4. ``secondary_meaning`` — classes whose label is used in a secondary meaning are dropped;
5. ``few_images`` — classes with fewer than ``min_images`` images (fall11 counts) are dropped;
6. ``ambiguous_images`` — only test images the ambiguous-image filter kept remain (when given).

Tie rules (as ``evaluate``, :mod:`imagenet_zsl.scoring`). Every step reports the expected value
under uniform random tie-breaking (the headline) and the strict twin (ties count against the
model). With a *set* of correct classes (step 2 on: the true class and its related classes) and
the best-scoring correct class having ``r`` wrong classes strictly above it and a tie group of
``c`` correct and ``w`` wrong classes, the expected credit is the probability that a random order
of the group puts a correct class among its first ``j = K − r`` places,
``1 − C(w, j) / C(c + w, j)`` (``(K − r) / (w + 1)`` when ``c = 1``, the evaluation's formula);
strict: a hit iff ``r + w < K``.

What is exact. Step 1 uses the true class's stored tie ranks (``true_above``/``true_tied``, over
all split classes) and is exact. Later steps re-rank within the corrected label space: a dropped
class leaves the test set *and* the label space (removed from every list). The stored list is
the top ``m = max(K) + 1`` of the full space, so every class scoring above the last listed score
is listed and ``r`` is always exact; the credit is exact unless (a) the best correct class's tie
group reaches the end of the list, or (b) no correct class is listed and fewer than K remaining
classes are, or an unlisted related class may tie with the last listed score. There the unlisted
classes' identities are unknown (only their numbers: unlisted
dropped, correct and wrong classes per image, and the true class's stored ranks, which give the
size of the last tie group when the true class is in it), and the step reports the **lower
bound** (unknown classes placed against the model) as ``hit@K``/``hit@K_strict``, the upper
bound as ``hit@K_upper``, and the number of such images as ``undetermined@K``.

GZSL (Hascoet show the ladder for both settings). For a cell evaluated with ``--gzsl`` the same
steps run in the joint label space (test classes, then the seen classes) at γ = 0: the test
images give the unseen accuracy u, the held-out seen images the seen accuracy s, and H is their
harmonic mean (per class, as GBU). Step 1 is exactly metrics.json's ``gzsl`` block (the
evaluation's rule: a cross-space tie at γ = 0 is a miss). From step 2 on each image's two stored
top-m lists are merged into the joint top m and re-ranked as above: a prediction of the true
class's parent or child counts whether it is a test or a *seen* class (Hascoet's GZSL false
negatives: "Cathartid" predicted as its seen parent "Vulture"), for a seen image its related
test classes count, the drop steps remove test classes only (seen classes always stay), and a
cross-space tie gets the expected credit like any tie. Where the other space's list ends at or
above the true class's score, the joint ranks are only lower bounds and that image gets
bounds, not an exact credit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.properties import label_properties, read_label_tables
from imagenet_zsl.analysis.runs import RunCell, check_cell_features, mismatch_note, read_cells
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.image_filter.outputs import kept_image_ids
from imagenet_zsl.io import atomic_directory, atomic_write_json, atomic_write_text, command_line, file_record
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.splits.build import resolve_counts

#: (step name, what it corrects), in ladder order
STEPS = (
    ("evaluated", "as evaluated"),
    ("structure", "related prediction counts as correct"),
    ("rare_labels", "drop classes with rare labels"),
    ("secondary_meaning", "drop classes named by a secondary meaning"),
    ("few_images", "drop classes with few images"),
    ("ambiguous_images", "keep only images the filter kept"),
)
RELATIONS = ("parent-child", "ancestor-descendant")
DEFAULT_KS = (1, 5)
DEFAULT_MIN_IMAGES = 301


@dataclass
class ClassFlags:
    """Per test class (aligned with the cell's class list): rare label, secondary meaning, images."""

    rare: np.ndarray
    secondary: np.ndarray
    images: np.ndarray


def related_keys(graph: ClassGraph, classes: Sequence[str], relation: str = "parent-child") -> np.ndarray:
    """Sorted int64 keys ``a * C + b`` of ordered pairs (a, b) of split classes where b is a or b is
    related to a (``RELATIONS``); classes absent from the graph relate only to themselves."""
    if relation not in RELATIONS:
        raise UserInputError(f"--relation must be one of {', '.join(RELATIONS)}, got {relation!r}")
    n = len(classes)
    position = {w: i for i, w in enumerate(classes)}
    keys = [i * n + i for i in range(n)]
    for i, wnid in enumerate(classes):
        if wnid not in graph:
            continue
        if relation == "parent-child":
            near = set(graph.parents(wnid)) | set(graph.children(wnid))
        else:
            near = graph.ancestors(wnid) | graph.descendants(wnid)
        keys.extend(i * n + position[w] for w in near if w in position)
    return np.unique(np.asarray(keys, dtype=np.int64))


@dataclass
class GroupBounds:
    """Per image, where the best correct class stands in the corrected label space, as a worst and
    a best case (equal where exact): ``r`` wrong classes strictly above, ``c`` correct and ``w``
    wrong classes in its tie group. Each field is (n,) int64; see the module docstring."""

    worst: tuple[np.ndarray, np.ndarray, np.ndarray]
    best: tuple[np.ndarray, np.ndarray, np.ndarray]
    #: (r, w) with c = 1: a second lower bound, the true class alone, where no correct class is listed
    true_worst: tuple[np.ndarray, np.ndarray] | None = None
    #: the true class's own tie ranks when they alone decide (step 1): the evaluation's exact credit
    ranks: M.TieRanks | None = None

    @classmethod
    def from_tie_ranks(cls, ranks: M.TieRanks) -> GroupBounds:
        """Exact bounds from the true class's own tie ranks (the label space as evaluated)."""
        above, tied = ranks.above.astype(np.int64), ranks.tied.astype(np.int64)
        exact = (above, np.ones_like(above), tied)
        return cls(exact, exact, ranks=ranks)

    def credit(self, k: int, tie_rule: str = "expected") -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) (n,) float64 hit@k credit under ``tie_rule``."""
        if self.ranks is not None:  # bit-identical to metrics.json (same formula as evaluate)
            exact = self.ranks.credit(k, tie_rule)
            return exact, exact
        low = group_credit(k, *self.worst, tie_rule=tie_rule)
        if self.true_worst is not None:
            r, w = self.true_worst
            low = np.maximum(low, group_credit(k, r, np.ones_like(r), w, tie_rule=tie_rule))
        return low, group_credit(k, *self.best, tie_rule=tie_rule)


def group_credit(
    k: int, r: np.ndarray, c: np.ndarray, w: np.ndarray, tie_rule: str = "expected"
) -> np.ndarray:
    """(n,) hit@k credit of a correct set whose best member has ``r`` wrong classes strictly above
    and a tie group of ``c`` correct and ``w`` wrong classes (all (n,) int).

    expected: P(a correct class is among the first ``j = k − r`` places of a uniformly random
    order of the group) = ``1 − C(w, j) / C(c + w, j)``; strict: ``r + w < k``; 0 when ``c = 0``.
    """
    r, c, w = (np.asarray(x, dtype=np.int64) for x in (r, c, w))
    if tie_rule == "strict":
        return ((c > 0) & (r + w < k)).astype(np.float64)
    if tie_rule != "expected":
        raise ValueError(f"tie_rule must be one of {M.TIE_RULES}, got {tie_rule!r}")
    j = np.clip(k - r, 0, k)
    miss = np.ones(len(r), dtype=np.float64)
    for i in range(k):
        term = np.where(w > i, (w - i) / np.maximum(c + w - i, 1), 0.0)
        miss *= np.where(i < j, term, 1.0)
    return np.where(c > 0, 1.0 - miss, 0.0)


def _correct_counts(cell: RunCell, active: np.ndarray, related: np.ndarray | None) -> np.ndarray:
    """(C,) number of active correct classes for each true class (itself and its related ones)."""
    n = len(cell.classes)
    if related is None:
        return np.ones(n, dtype=np.int64)
    a, b = np.divmod(related, n)
    return np.bincount(a[active[b]], minlength=n).astype(np.int64)


def corrected_bounds(
    cell: RunCell, active: np.ndarray, related: np.ndarray | None = None, exact: np.ndarray | None = None
) -> GroupBounds:
    """Where the best correct class stands among the ``active`` (C,) classes, from the stored
    lists and the true class's stored tie ranks (see the module docstring for what is exact).

    ``related``: keys of :func:`related_keys` (None: only the true class is correct). ``exact``
    (n,) bool: images whose stored tie ranks are exact (None: all); for the others the ranks are
    only lower bounds (the GZSL joint space, :func:`joint_cell`) and are not used. Images whose
    true class is inactive get meaningless bounds; callers drop them.
    """
    ids, labels, n_classes = cell.ids, cell.labels, len(cell.classes)
    scores = np.where(np.isnan(cell.scores), -np.inf, cell.scores).astype(np.float64)
    ranks = cell.tie_ranks()
    valid = ids >= 0
    safe = np.where(valid, ids, 0)
    listed = valid & active[safe]
    if related is None:
        correct = listed & (ids == labels[:, None])
    else:
        correct = listed & np.isin(labels[:, None] * n_classes + safe, related)
    wrong = listed & ~correct
    n_valid = valid.sum(axis=1)
    complete = (n_valid >= n_classes) | ~valid[:, -1]
    s_last = np.where(valid, scores, np.inf).min(axis=1)
    is_true = valid & (ids == labels[:, None])
    true_unlisted = ~is_true.any(axis=1)
    true_score = np.where(is_true, scores, -np.inf).max(axis=1)
    # the true class scores exactly the last listed score: the last tie group's size is known
    trusted = np.ones(len(ids), dtype=bool) if exact is None else np.asarray(exact, dtype=bool)
    true_at_last = ~complete & trusted & np.where(true_unlisted, ranks.above < n_valid, true_score == s_last)
    unlisted_tied = np.maximum(ranks.above + ranks.tied + 1 - n_valid - true_unlisted, 0)
    n_correct = _correct_counts(cell, active, related)[labels]
    u_correct = n_correct - correct.sum(axis=1) - true_unlisted  # unlisted correct, true excluded
    u_wrong = int(active.sum()) - n_correct - wrong.sum(axis=1)
    u_dropped = (n_classes - n_valid) - true_unlisted - u_correct - u_wrong

    has_star = correct.any(axis=1) | (true_unlisted & true_at_last)
    star = np.where(correct.any(axis=1), np.where(correct, scores, -np.inf).max(axis=1), s_last)
    r = (wrong & (scores > star[:, None])).sum(axis=1)
    c = (correct & (scores == star[:, None])).sum(axis=1) + (true_unlisted & true_at_last & (star == s_last))
    w = (wrong & (scores == star[:, None])).sum(axis=1)
    at_end = has_star & ~complete & (star == s_last)
    known = at_end & true_at_last
    unknown = at_end & ~true_at_last
    # the last tie group's unlisted members: known number, unknown identities
    u = unlisted_tied
    c_worst = c + np.where(known, np.maximum(u - u_wrong - u_dropped, 0), 0)
    w_worst = w + np.where(known, np.minimum(u, u_wrong), np.where(unknown, u_wrong, 0))
    extra_correct = np.where(known, np.minimum(u, u_correct), np.where(unknown, u_correct, 0))
    rest = np.where(known, u - extra_correct, 0)
    c_best = c + extra_correct
    w_best = w + rest - np.minimum(rest, u_dropped)
    # no correct class listed: at worst below every remaining class; at best right after the
    # listed ones, or (unlisted related classes) all tied with the last listed score
    n_listed = listed.sum(axis=1)
    none = ~has_star
    r_worst = np.where(none, n_listed + u_wrong, r)
    one = np.ones_like(r)
    worst = (r_worst, np.where(none, one, c_worst), np.where(none, 0, w_worst))
    at_last = none & ~complete & (u_correct > 0)
    gt_last = (wrong & (scores > s_last[:, None])).sum(axis=1)
    eq_last = (wrong & (scores == s_last[:, None])).sum(axis=1)
    best = (
        np.where(at_last, gt_last, np.where(none, n_listed, r)),
        np.where(at_last, u_correct, np.where(none, one, c_best)),
        np.where(at_last, eq_last, np.where(none, 0, w_best)),
    )
    # ... and the true class itself can have at most this many active classes above / tied
    others = np.maximum(u_wrong + u_correct, 0)
    above_unlisted = np.minimum(np.maximum(ranks.above - n_valid, 0), others)
    use = none & trusted
    true_r = np.where(use, n_listed + above_unlisted, r_worst)
    true_w = np.where(use, np.minimum(ranks.tied, others - above_unlisted), w_worst)
    true_worst = (true_r, true_w) if use.any() else None
    return GroupBounds(worst, best, true_worst)


def _class_mean(labels: np.ndarray, credit: np.ndarray, n_classes: int) -> float:
    """Mean over classes with images of the class's mean credit."""
    counts = np.bincount(labels, minlength=n_classes)
    sums = np.bincount(labels, weights=credit, minlength=n_classes)
    present = counts > 0
    return float(np.mean(sums[present] / counts[present]))


def _hits(cell: RunCell, keep: np.ndarray, bounds: GroupBounds, ks: Sequence[int]) -> dict:
    labels = cell.labels[keep]
    row: dict = {"classes": int(len(np.unique(labels))), "images": int(keep.sum())}
    for k in ks:
        if not keep.any():
            row.update({name: float("nan") for name in _metric_columns([k])})
            row[f"undetermined@{k}"] = 0
            continue
        low, high = bounds.credit(k)
        low_strict, high_strict = bounds.credit(k, "strict")
        low, high, low_strict, high_strict = (x[keep] for x in (low, high, low_strict, high_strict))
        row[f"hit@{k}"] = float(np.mean(low))
        row[f"hit@{k}_strict"] = float(np.mean(low_strict))
        row[f"per_class_hit@{k}"] = _class_mean(labels, low, len(cell.classes))
        row[f"per_class_hit@{k}_strict"] = _class_mean(labels, low_strict, len(cell.classes))
        row[f"hit@{k}_upper"] = float(np.mean(high))
        row[f"undetermined@{k}"] = int(((low < high) | (low_strict < high_strict)).sum())
    return row


def _metric_columns(ks: Sequence[int]) -> list[str]:
    names = [f"hit@{k}" for k in ks] + [f"hit@{k}_strict" for k in ks]
    names += [f"per_class_hit@{k}" for k in ks] + [f"per_class_hit@{k}_strict" for k in ks]
    return names + [f"hit@{k}_upper" for k in ks]


def ladder_steps(
    cell: RunCell, flags: ClassFlags, kept_images: np.ndarray | None, min_images: int
) -> Iterator[tuple[str, str, np.ndarray, np.ndarray]]:
    """The cumulative corrections of the ladder, in ``STEPS`` order: (step, what it corrects, the
    test classes still in play (C,) bool, the images still in play (n,) bool). The drop steps take
    classes out (rare labels, secondary meanings, few images); the last step keeps only the images
    the filter kept, and is skipped without ``kept_images``."""
    drops = {
        "rare_labels": flags.rare,
        "secondary_meaning": flags.secondary,
        "few_images": flags.images < min_images,
    }
    active = np.ones(len(cell.classes), dtype=bool)
    image_mask = np.ones(len(cell.labels), dtype=bool)
    for step, about in STEPS:
        if step == "ambiguous_images":
            if kept_images is None:
                continue
            image_mask = image_mask & kept_images
        if step in drops:
            active = active & ~np.asarray(drops[step], dtype=bool)
        yield step, about, active, image_mask


def cell_ladder(
    cell: RunCell,
    related: np.ndarray,
    flags: ClassFlags,
    kept_images: np.ndarray | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    min_images: int = DEFAULT_MIN_IMAGES,
) -> list[dict]:
    """One row per ladder step (``STEPS``; the last only with ``kept_images``, (n,) bool)."""
    rows = []
    for step, about, active, image_mask in ladder_steps(cell, flags, kept_images, min_images):
        if step == "evaluated":
            bounds = GroupBounds.from_tie_ranks(cell.tie_ranks())
        else:
            bounds = corrected_bounds(cell, active, related)
        keep = image_mask & active[cell.labels]
        row = {"model": cell.model, "split": cell.split, "setting": "zsl", "step": step, "correction": about}
        row.update(_hits(cell, keep, bounds, ks))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- GZSL


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classes of the *other* space scoring above / equal to the true class, from its list, and
    whether those counts are exact (the true class is listed in its own space, and the other
    list is complete or ends below the true score). (n,) int64, int64, bool."""
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
        cell.ids, cell.scores, cell.labels, g.test_seen_ids, g.test_seen_scores, len(g.seen_classes)
    )
    test = RunCell(
        cell.path, cell.metrics, classes, cell.labels, ids, scores, cell.rows,
        own.above + above, own.tied + tied,
    )  # fmt: skip
    seen_own = np.where(g.seen_ids >= 0, g.seen_ids + n_unseen, -1)
    ids, scores = _merged_lists(seen_own, g.seen_scores, g.unseen_ids, g.unseen_scores, m)
    above, tied, exact_seen = _other_space_ranks(
        g.seen_ids, g.seen_scores, g.labels, g.unseen_ids, g.unseen_scores, n_unseen
    )
    seen = RunCell(
        cell.path, cell.metrics, classes, g.labels + n_unseen, ids, scores, np.arange(len(g.labels)),
        g.above + above, g.tied + tied,
    )  # fmt: skip
    return test, exact, seen, exact_seen


def gzsl_topk(cell: RunCell) -> M.GZSLTopK:
    """The evaluation's own GZSL lists (``evaluate``'s ``build_gzsl``): for the evaluated rung."""
    g = cell.gzsl
    assert g is not None
    n_unseen, n_seen = len(cell.classes), len(g.seen_classes)
    seen_mask = np.r_[np.zeros(n_unseen, bool), np.ones(n_seen, bool)]

    def shift(ids: np.ndarray) -> np.ndarray:
        return np.where(ids >= 0, ids + n_unseen, -1)

    test = M.GZSLTopK(
        g.test_seen_scores, shift(g.test_seen_ids), cell.scores, cell.ids, cell.labels, seen_mask,
        cell.tie_ranks(),
    )  # fmt: skip
    seen = M.GZSLTopK(
        g.seen_scores, shift(g.seen_ids), g.unseen_scores, g.unseen_ids, g.labels + n_unseen, seen_mask,
        M.TieRanks(g.above, g.tied),
    )  # fmt: skip
    return M.GZSLTopK.concat([test, seen])


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
        undetermined = 0
        for rule, suffix in (("expected", ""), ("strict", "_strict")):
            low, high = bounds.credit(k, rule)
            s_low, s_high = seen_bounds.credit(k, rule)
            u_flat = float(np.mean(low[keep])) if keep.any() else float("nan")
            u_class = _class_mean(test.labels[keep], low[keep], n) if keep.any() else float("nan")
            s_class = _class_mean(seen.labels, s_low, n) if len(s_low) else float("nan")
            row[f"hit@{k}{suffix}"] = u_flat
            row[f"per_class_hit@{k}{suffix}"] = u_class
            row[f"seen_hit@{k}{suffix}"] = float(np.mean(s_low)) if len(s_low) else float("nan")
            row[f"seen_per_class_hit@{k}{suffix}"] = s_class
            row[f"H@{k}{suffix}"] = M.harmonic_mean(s_class, u_class) if u_class == u_class else float("nan")
            if suffix == "":
                row[f"hit@{k}_upper"] = float(np.mean(high[keep])) if keep.any() else float("nan")
            undetermined += int((low[keep] < high[keep]).sum() + (s_low < s_high).sum())
        row[f"undetermined@{k}"] = undetermined
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


def flags_for(classes: Sequence[str], labels: pd.DataFrame, counts: Mapping[str, int]) -> ClassFlags:
    """Class flags from a label table (``analysis.properties.LABEL_COLUMNS``) and image counts."""
    table = labels.set_index("wnid").loc[list(classes)]
    return ClassFlags(
        rare=table["rare"].to_numpy(dtype=bool),
        secondary=~table["primary"].to_numpy(dtype=bool),
        images=np.asarray([counts.get(w, 0) for w in classes], dtype=np.int64),
    )


def _gzsl_columns(ks: Sequence[int]) -> list[str]:
    names = ["seen_images"]
    for suffix in ("", "_strict"):
        names += [f"seen_hit@{k}{suffix}" for k in ks] + [f"seen_per_class_hit@{k}{suffix}" for k in ks]
        names += [f"H@{k}{suffix}" for k in ks]
    return names


def ladder_table(rows: list[dict], ks: Sequence[int] = DEFAULT_KS) -> pd.DataFrame:
    """The ladder rows as a table with a fixed column order (GZSL-only columns empty for ZSL rows)."""
    columns = ["model", "split", "setting", "step", "correction", "classes", "images"]
    columns += _metric_columns(ks) + [f"undetermined@{k}" for k in ks] + _gzsl_columns(ks)
    return pd.DataFrame(rows, columns=columns)


def render_markdown(table: pd.DataFrame, ks: Sequence[int] = DEFAULT_KS) -> str:
    """Markdown tables: ZSL hit@K in percent, expected (headline) and strict, flat and per class,
    one row per (model, split, step); then, for cells evaluated with ``--gzsl``, the GZSL ladder
    (per-class unseen u, seen s and H, flat u)."""
    zsl = table[table["setting"] == "zsl"]
    head = ["model", "split", "step", "classes", "images"]
    head += [f"hit@{k} %" for k in ks] + [f"strict hit@{k} %" for k in ks]
    head += [f"per-class hit@{k} %" for k in ks] + [f"per-class strict hit@{k} %" for k in ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for values in zsl.to_dict("records"):
        cells = [str(values["model"]), str(values["split"]), str(values["step"])]
        cells += [f"{values['classes']:,}", f"{values['images']:,}"]
        cells += [_pct(values[name]) for name in _metric_columns(ks) if not name.endswith("_upper")]
        lines.append("| " + " | ".join(cells) + " |")
    gzsl = table[table["setting"] == "gzsl"]
    if len(gzsl):
        lines += ["", "GZSL (test images among the test and seen classes, γ = 0; per class as GBU):", ""]
        head = ["model", "split", "step", "classes", "images"]
        head += [f"u@{k} %" for k in ks] + [f"s@{k} %" for k in ks] + [f"H@{k} %" for k in ks]
        head += [f"flat u@{k} %" for k in ks]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
        names = [f"per_class_hit@{k}" for k in ks] + [f"seen_per_class_hit@{k}" for k in ks]
        names += [f"H@{k}" for k in ks] + [f"hit@{k}" for k in ks]
        for values in gzsl.to_dict("records"):
            cells = [str(values["model"]), str(values["split"]), str(values["step"])]
            cells += [f"{values['classes']:,}", f"{values['images']:,}"]
            cells += [_pct(values[name]) for name in names]
            lines.append("| " + " | ".join(cells) + " |")
    undetermined = sum(int(table[f"undetermined@{k}"].sum()) for k in ks)
    if undetermined:
        lines.append(
            "\nSome hits could not be decided from the stored lists (`undetermined@K` in ladder.csv); "
            "they count as lower bounds (upper bounds in `hit@K_upper`)."
        )
    return "\n".join(lines) + "\n"


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.2f}"


def plot_ladder(table: pd.DataFrame, path: str | Path, ks: Sequence[int] = DEFAULT_KS) -> None:
    """Grouped bars: one panel per (setting, K), one group per step, one bar per (model, split);
    GZSL panels show the unseen accuracy u (flat, as the ZSL panels).

    Step names are the (rotated) tick labels and the layout is constrained, so neither the
    captions of neighbouring panels nor the legend overlap."""
    steps = list(dict.fromkeys(table["step"]))
    cells = list(dict.fromkeys(zip(table["model"], table["split"], strict=True)))
    panels = [(setting, k) for setting in ("zsl", "gzsl") if (table["setting"] == setting).any() for k in ks]
    fig, axes = subplots(
        1, len(panels), figsize=(4.8 * len(panels), 4.0), squeeze=False, layout="constrained"
    )
    width = 0.8 / max(len(cells), 1)
    for ax, (setting, k) in zip(axes[0], panels, strict=True):
        part_of = table[table["setting"] == setting]
        for j, (model, split) in enumerate(cells):
            part = part_of[(part_of["model"] == model) & (part_of["split"] == split)].set_index("step")
            values = [100 * part.loc[s, f"hit@{k}"] if s in part.index else np.nan for s in steps]
            ax.bar(np.arange(len(steps)) + j * width, values, width, label=f"{model} / {split}")
        ax.set_xticks(np.arange(len(steps)) + 0.4 - width / 2)
        ax.set_xticklabels(
            [f"{i + 1}. {s.replace('_', ' ')}" for i, s in enumerate(steps)],
            rotation=35,
            ha="right",
            fontsize=7,
        )
        ax.set_xlabel("cumulative correction")
        name = f"hit@{k}" if setting == "zsl" else f"unseen u@{k}"
        ax.set_ylabel(f"{name} (%)")
        ax.set_title(
            f"{'ZSL' if setting == 'zsl' else 'GZSL'}: {name} under cumulative corrections", fontsize=9
        )
    axes[0][0].legend(fontsize=6)
    save_figure(fig, path)


@dataclass
class LadderOptions:
    """``imagenet-zsl analyze ladder`` settings (see the module docstring for the steps)."""

    run_dir: Path
    out: Path | None = None
    filter_dir: Path | None = None
    labels_dir: Path | None = None
    graph: str = "wordnet"
    counts: str | None = None
    relation: str = "parent-child"
    min_images: int = DEFAULT_MIN_IMAGES
    ks: Sequence[int] = field(default_factory=lambda: list(DEFAULT_KS))
    allow_feature_mismatch: bool = False

    @property
    def out_dir(self) -> Path:
        """``--out``, by default ``RUN_DIR-ladder`` next to the run (the run itself stays untouched)."""
        return Path(self.out) if self.out is not None else Path(f"{Path(self.run_dir)}-ladder")


def _check_options(opts: LadderOptions) -> list[int]:
    ks = sorted({int(k) for k in opts.ks})
    if not ks or ks[0] < 1:
        raise UserInputError(f"--k values must be positive integers, got {list(opts.ks)}")
    if opts.min_images < 0:
        raise UserInputError(f"--min-images must be >= 0, got {opts.min_images}")
    if opts.relation not in RELATIONS:
        raise UserInputError(f"--relation must be one of {', '.join(RELATIONS)}, got {opts.relation!r}")
    return ks


def run_ladder(opts: LadderOptions) -> pd.DataFrame:
    """Compute the ladder of every cell of a run and write table (md, csv), plot and manifest."""
    ks = _check_options(opts)
    cells = read_cells(opts.run_dir)
    overrides = check_cell_features(cells, opts.allow_feature_mismatch)
    too_short = [c.path for c in cells if c.ids.shape[1] < ks[-1]]
    if too_short:
        raise UserInputError(f"{too_short[0]}: its top-k lists are shorter than --k {ks[-1]}")
    graph = resolve_graph(opts.graph)
    if graph is None:
        raise UserInputError("--graph: the structure step needs a graph (wordnet, imagenet or an edge file)")
    counts = resolve_counts(opts.counts)
    kept = kept_image_ids(opts.filter_dir) if opts.filter_dir is not None else None
    wnids = sorted({w for c in cells for w in c.classes})
    labels = read_label_tables(opts.labels_dir, wnids) if opts.labels_dir else label_properties(wnids)
    rows = []
    for cell in cells:
        mask = None if kept is None else np.isin(cell.image_ids(), sorted(kept))
        flags = flags_for(cell.classes, labels, counts)
        related = related_keys(graph, cell.classes, opts.relation)
        rows += cell_ladder(cell, related, flags, mask, ks, opts.min_images)
        if cell.gzsl is not None:
            joint = related_keys(graph, cell.classes + cell.gzsl.seen_classes, opts.relation)
            rows += gzsl_cell_ladder(cell, joint, flags, mask, ks, opts.min_images)
    table = ladder_table(rows, ks)
    table.attrs["feature_mismatch"] = overrides
    inputs = [opts.run_dir, opts.filter_dir, opts.labels_dir]
    with atomic_directory(opts.out_dir, tool="imagenet-zsl analyze ladder", inputs=inputs) as tmp:
        atomic_write_text(tmp / "ladder.md", render_markdown(table, ks) + mismatch_note(overrides))
        atomic_write_text(
            tmp / "ladder.csv", table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        )
        plot_ladder(table, tmp / "ladder.png", ks)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
        atomic_write_json(
            tmp / "manifest.json",
            {
                "format": "imagenet-zsl/ladder-v1",
                "tool": "imagenet-zsl analyze ladder",
                "command": command_line(),
                "settings": {**settings, "ks": ks, "out": str(opts.out_dir)},
                "steps": [{"step": s, "correction": a} for s, a in STEPS],
                "tie_rule": {
                    "headline": "expected",
                    **M.TIE_RULE_TEXT,
                    "bounds": "where the stored lists cannot decide a hit, hit@K is the lower bound, "
                    "hit@K_upper the upper bound and undetermined@K counts those images",
                },
                "cells": [str(c.path) for c in cells],
                "feature_mismatch": overrides,
                "outputs": [file_record(p, tmp) for p in sorted(tmp.glob("*")) if p.is_file()],
            },
        )
    return table
