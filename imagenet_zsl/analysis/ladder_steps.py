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

The GZSL ladder is :mod:`imagenet_zsl.analysis.ladder_gzsl`; the command that writes the tables
and plot is :mod:`imagenet_zsl.analysis.ladder`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.runs import RunCell
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph

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
    # the unlisted correct classes that may tie the last listed score in the best case: with
    # untrusted ranks (GZSL joint space) an unlisted true class may be one of them too
    u_correct_best = u_correct + (true_unlisted & ~trusted)

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
    extra_correct = np.where(known, np.minimum(u, u_correct), np.where(unknown, u_correct_best, 0))
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
    at_last = none & ~complete & (u_correct_best > 0)
    gt_last = (wrong & (scores > s_last[:, None])).sum(axis=1)
    eq_last = (wrong & (scores == s_last[:, None])).sum(axis=1)
    best = (
        np.where(at_last, gt_last, np.where(none, n_listed, r)),
        np.where(at_last, u_correct_best, np.where(none, one, c_best)),
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


def class_mean(labels: np.ndarray, credit: np.ndarray, n_classes: int) -> float:
    """Mean over classes with images of the class's mean credit."""
    counts = np.bincount(labels, minlength=n_classes)
    sums = np.bincount(labels, weights=credit, minlength=n_classes)
    present = counts > 0
    return float(np.mean(sums[present] / counts[present]))


def step_hits(cell: RunCell, keep: np.ndarray, bounds: GroupBounds, ks: Sequence[int]) -> dict:
    labels = cell.labels[keep]
    row: dict = {"classes": int(len(np.unique(labels))), "images": int(keep.sum())}
    for k in ks:
        if not keep.any():
            row.update({name: float("nan") for name in metric_columns([k])})
            row[f"undetermined@{k}"] = 0
            continue
        low, high = bounds.credit(k)
        low_strict, high_strict = bounds.credit(k, "strict")
        low, high, low_strict, high_strict = (x[keep] for x in (low, high, low_strict, high_strict))
        row[f"hit@{k}"] = float(np.mean(low))
        row[f"hit@{k}_strict"] = float(np.mean(low_strict))
        row[f"per_class_hit@{k}"] = class_mean(labels, low, len(cell.classes))
        row[f"per_class_hit@{k}_strict"] = class_mean(labels, low_strict, len(cell.classes))
        row[f"hit@{k}_upper"] = float(np.mean(high))
        row[f"undetermined@{k}"] = int(((low < high) | (low_strict < high_strict)).sum())
    return row


def metric_columns(ks: Sequence[int]) -> list[str]:
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
        row.update(step_hits(cell, keep, bounds, ks))
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
