"""GZSL metrics of a run, a pure function of its inputs and search results: the joint label space
(test then seen classes), direct stacking, AUSUC, the calibrated γ, the curves to plot and the
hierarchy breakdown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.hierarchy_errors import gzsl_error_breakdowns
from imagenet_zsl.evaluation.run.config import calibration_rows

if TYPE_CHECKING:
    from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs
    from imagenet_zsl.evaluation.run.results import SearchResults
    from imagenet_zsl.evaluation.run.search_sets import SetResult


@dataclass(frozen=True, eq=False)
class GZSLResult:
    """``block``: metrics.json's ``gzsl``; ``curves`` / ``direct_points`` / ``calibrated_points``:
    the Seen-Unseen curves at hit@1 and hit@max(K) with their γ = 0 and calibrated points;
    ``counts`` (n_test + n_seen,) images per joint class; ``class_hits[k]``: per-class GZSL hit@k
    at γ = 0."""

    block: dict[str, Any]
    counts: np.ndarray
    class_hits: dict[int, np.ndarray]
    curves: dict[str, M.SeenUnseenCurve] = field(default_factory=dict)
    direct_points: dict[str, tuple[float, float]] = field(default_factory=dict)
    calibrated_points: dict[str, tuple[float, float]] = field(default_factory=dict)


def build_gzsl(
    unseen_parts: Sequence[SetResult | None],
    seen_part: SetResult,
    n_unseen: int,
    n_seen: int,
    unseen_space: str,
) -> M.GZSLTopK:
    """Joint label space = unseen classes then seen classes; the images of ``unseen_parts`` (None:
    left out), then those of ``seen_part``.

    The top-k lists are shared with the search results, never copied (at scale they are
    memory-mapped from the search cache): seen ids are shifted into the joint space block by
    block (:class:`~imagenet_zsl.scoring.GZSLLists`). Only the joint labels (narrowest dtype)
    and the tie ranks (int32) are new arrays, filled in place: 10 bytes per image.
    """
    sets = [p for p in unseen_parts if p is not None] + [seen_part]
    n = sum(len(p.labels) for p in sets)
    labels = np.empty(n, M.index_dtype(n_unseen + n_seen))
    above, tied = np.empty(n, np.int32), np.empty(n, np.int32)
    lists, start = [], 0
    for part in sets:
        offset = n_unseen if part is seen_part else 0
        rows = slice(start, start + len(part.labels))
        labels[rows] = part.labels
        labels[rows] += offset
        above[rows], tied[rows] = part.ranks.above, part.ranks.tied
        (s_scores, s_ids), (u_scores, u_ids) = part.lists["seen"], part.lists[unseen_space]
        tails = {"seen_tail": part.tails.get("seen"), "unseen_tail": part.tails.get(unseen_space)}
        lists.append(M.GZSLLists(s_scores, s_ids, u_scores, u_ids, seen_offset=n_unseen, **tails))
        start = rows.stop
    seen_mask = np.r_[np.zeros(n_unseen, bool), np.ones(n_seen, bool)]
    return M.GZSLTopK.from_parts(lists, labels, seen_mask, M.TieRanks(above, tied))


def _given_calibration(inp: EvaluationInputs, gz: M.GZSLTopK) -> dict[str, Any]:
    """A γ chosen outside this evaluation (``cfg.gamma``; ``run``: by the model fitted without the
    carved validation classes) and the test figures of this model at that γ."""
    gamma = float(inp.cfg.gamma)  # type: ignore[arg-type]
    calibrated = M.gzsl_calibrated(gz, inp.ks, gamma)
    source = dict(inp.cfg.gamma_source or {})
    # the averaging of H@1 that chose γ, as its source records it (a γ a user gave: not known)
    averaging = {"flat": ", flat (per-image) H@1", "per_class": ", per-class H@1"}.get(
        source.get("h_averaging"), ""
    )
    return {
        "gamma": gamma,
        "k": 1,
        "criterion": f"given: chosen outside this evaluation (see 'chosen_by'){averaging}",
        "h_averaging": source.get("h_averaging"),
        "chosen_by": source,
        "validation_split": f"the validation classes of {source.get('chosen_with', 'another model')}",
        "validation_H": source.get("validation_H"),
        "validation_images": source.get("validation_images"),
        "test": {key: calibrated[key] for key in ("per_class", "flat", "per_class_strict", "flat_strict")},
    }


def held_calibration_rows(inp: EvaluationInputs, results: SearchResults) -> SearchResults:
    """With ``cfg.hold_calibration_rows``, the seen images without the seeded rows that chose the
    given γ (:func:`~imagenet_zsl.evaluation.run.config.calibration_rows`): GZSL S is measured on
    images no choice has seen."""
    if not inp.cfg.hold_calibration_rows or results.seen is None or inp.sets.seen_fd is None:
        return results
    held = calibration_rows(inp.sets.seen_fd.num_rows, inp.cfg.val_seen_fraction, inp.cfg.seed)
    seen = results.seen.take(~held[results.seen.rows])
    if len(seen.labels) == 0:
        raise UserInputError(
            f"{inp.sets.seen_fd.path}: every held-out seen image chose γ (val_seen_fraction "
            f"{inp.cfg.val_seen_fraction}); none is left to measure GZSL S: add held-out seen images"
        )
    return replace(results, seen=seen)


def _calibration(inp: EvaluationInputs, results: SearchResults, gz: M.GZSLTopK) -> dict[str, Any]:
    """γ chosen on the validation images (never the test images) and the test figures at γ."""
    if inp.cfg.gamma is not None:
        return _given_calibration(inp, gz)
    gz_val = build_gzsl(
        (results.val,), results.val_seen, len(inp.val_wnids), len(inp.seen_wnids), "val_unseen"
    )
    # flat H@1: the averaging of the calibrated H the tables print (evaluation/columns.py)
    gamma, val_h = M.choose_gamma(gz_val, k=1, per_class=False)
    calibrated = M.gzsl_calibrated(gz, inp.ks, gamma)
    return {
        "gamma": gamma,
        "k": 1,
        "criterion": "flat (per-image) H@1 on validation (expected tie rule)",
        "h_averaging": "flat",
        "validation_split": str(inp.cfg.val_split),
        "validation_H": val_h,
        "validation_images": {
            "unseen": int(len(results.val.labels)),
            "seen": int(len(results.val_seen.labels)),
        },
        "test": {key: calibrated[key] for key in ("per_class", "flat", "per_class_strict", "flat_strict")},
    }


def _gzsl_breakdown(inp: EvaluationInputs, gz: M.GZSLTopK, gamma: float) -> dict[str, Any]:
    """Hierarchy-aware error breakdown of the GZSL top-1 (joint space: label space, count-as-miss
    classes, then seen classes) at calibration ``gamma``, under the expected tie rule (a top-1 tie
    group shares its image); ``gz`` holds the searched images only."""
    joint = list(inp.eval_wnids) + list(inp.seen_wnids)
    parts = gzsl_error_breakdowns(inp.graph, joint, gz, gamma)  # streamed in blocks of images
    return {"gamma": float(gamma), **{name: breakdown.to_dict() for name, breakdown in parts.items()}}


def _hierarchy(inp: EvaluationInputs, results: SearchResults, gz: M.GZSLTopK, gzsl: dict) -> dict[str, Any]:
    """The GZSL breakdown at γ = 0 and (with a validation split) at the calibrated γ, over the
    searched images (count-as-miss images have no prediction to classify)."""
    searched = gz
    if results.misses is not None:
        searched = build_gzsl(
            (results.test,), results.seen, len(inp.eval_wnids), len(inp.seen_wnids), "unseen"
        )
    block = {"graph": inp.graph.source, "direct": _gzsl_breakdown(inp, searched, 0.0)}
    if "calibration" in gzsl:
        block["calibrated"] = _gzsl_breakdown(inp, searched, gzsl["calibration"]["gamma"])
    return block


def _curves(inp: EvaluationInputs, gz: M.GZSLTopK, gamma: float | None) -> tuple[dict, dict, dict]:
    """Seen-Unseen curves at hit@1 and hit@max(K) (kept without their per-entry arrays: only
    drawn), their γ = 0 points and calibrated points."""
    curves, direct, calibrated = {}, {}, {}
    for k in inp.ks:
        if k in (1, inp.ks[-1]):
            curves[f"hit@{k}"] = M.seen_unseen_curve(gz, k, per_class=True).without_entries()
            # the points exactly, a seen/unseen tie at γ shared (γ = 0 is a breakpoint then)
            for points, at in ((direct, 0.0), (calibrated, gamma)):
                if at is not None:
                    acc = M.gzsl_accuracies(gz, k, at, per_class=True)
                    points[f"hit@{k}"] = (acc["seen"], acc["unseen"])
    return curves, direct, calibrated


def gzsl_metrics(inp: EvaluationInputs, results: SearchResults) -> GZSLResult:
    """GZSL over test ∪ seen classes: direct stacking, AUSUC, the calibrated γ (with a validation
    split), the curves to plot, per-class GZSL hit@K at γ = 0 and the hierarchy breakdown."""
    n_test, n_seen = len(inp.eval_wnids), len(inp.seen_wnids)
    # the scored test images (searched, then count-as-miss), then the seen images
    gz = build_gzsl((results.test, results.misses), results.seen, n_test, n_seen, "unseen")
    gzsl = M.gzsl_metrics(gz, inp.ks)
    counts = np.bincount(gz.labels, minlength=n_test + n_seen)
    n_seen_images = len(results.seen.labels)
    gzsl["images"] = {"unseen": len(gz.labels) - n_seen_images, "seen": int(n_seen_images)}
    gzsl["classes"] = {
        "unseen": len(inp.space_wnids),
        "unseen_with_test_images": int(np.count_nonzero(counts[:n_test])),
        "seen": n_seen,
    }
    gzsl["seen_classes_without_prototypes"] = list(inp.sets.excluded_seen)
    if results.val is not None or inp.cfg.gamma is not None:
        gzsl["calibration"] = _calibration(inp, results, gz)
    if inp.graph is not None and len(results.test.labels):
        gzsl["hierarchy"] = _hierarchy(inp, results, gz, gzsl)
    gamma = gzsl["calibration"]["gamma"] if "calibration" in gzsl else None
    curves, direct, calibrated = _curves(inp, gz, gamma)
    hits = {k: M.gzsl_class_rates(gz, k, 0.0) for k in inp.ks}
    return GZSLResult(gzsl, counts, hits, curves, direct, calibrated)
