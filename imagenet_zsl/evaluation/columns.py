"""The metric columns of every results table, named and ordered once: ``imagenet-zsl report``
(:mod:`imagenet_zsl.evaluation.report`) and the summary of ``imagenet-zsl run``
(:mod:`imagenet_zsl.batch.summary`) both take a row's values from :func:`metric_columns`.

What each column is (the legend under both tables, :data:`COLUMN_LEGEND`):

* ``hit@K``: flat ZSL hit@K (per image), the expected value under uniform random tie-breaking.
* ``per-class hit@1``: Xian et al.'s per-class mean top-1.
* ``strict hit@K``: ties count against the model, DGP's ``(table >= gth).sum() <= k`` rule
  (strict hit@1 in every table; every K in the CSV).
* ``hP@K`` (K ≥ 2; hP@1 is hit@1): hierarchical precision (Frome et al. 2013),
  :mod:`imagenet_zsl.evaluation.hierarchical_precision`.
* ``GZSL U/S/H``, ``AUSUC (per image)``, ``calibrated H``: generalized ZSL as Chao et al. (2016)
  score ImageNet: seen and unseen accuracy are flat hit@1 (per image), the Seen-Unseen curve and
  its area likewise; U/S/H under direct stacking (a seen/unseen tie shared as a joint tie);
  calibrated H at the γ that maximises flat H@1 on validation classes, the same averaging. The
  per-class versions (Xian et al.'s GZSL) are in the CSV, named ``(per class)``, at that same γ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: GZSL columns (name, metrics.json key) in table order; the per-image ones print, all go to the CSV
_GZSL = (("GZSL U", "unseen"), ("GZSL S", "seen"), ("GZSL H", "H"))

COLUMN_LEGEND = (
    "hit@K: flat ZSL hit@K (per image), the expected value under uniform random tie-breaking; "
    "per-class hit@1: mean over test classes (Xian et al.); strict hit@K: ties count against the "
    "model, DGP's rule (every K in the CSV); hP@K: hierarchical precision@K (Frome et al. 2013; "
    "hP@1 = hit@1); GZSL U/S/H, AUSUC (per image) and calibrated H: per image (flat hit@1), as "
    "Chao et al. (2016) score ImageNet, direct stacking, calibrated H at the γ maximising flat "
    "H@1 on validation classes (the per-class versions are in the CSV, at that same γ)"
)


def csv_only(column: str) -> bool:
    """A column written to the CSV only (kept out of the Markdown and LaTeX tables)."""
    return column.endswith("(per class)") or (column.startswith("strict hit@") and column != "strict hit@1")


def _get(block: Any, *keys: str) -> float | None:
    for key in keys:
        if not isinstance(block, dict) or key not in block:
            return None
        block = block[key]
    return None if block is None else float(block)


def _gzsl_columns(gzsl: dict) -> dict[str, float | None]:
    cal = gzsl.get("calibration")
    row: dict[str, float | None] = {}
    for mode, suffix in (("flat", ""), ("per_class", " (per class)")):
        for name, key in _GZSL:
            row[name + suffix] = _get(gzsl, mode, "1", key)
        row["AUSUC" + (suffix or " (per image)")] = _get(gzsl, mode, "1", "ausuc")
        row["calibrated H" + suffix] = _get(cal, "test", mode, str(cal["k"]), "H") if cal else None
    return row


def metric_columns(metrics: dict, ks: Sequence[int] | None = None, gzsl: bool = True) -> dict[str, Any]:
    """One row's metric values (fractions; None where the run lacks one) in table order.

    ``metrics``: a run's metrics.json content ({} for a failed cell); ``ks``: the hit@K columns
    (default: the run's own K values); ``gzsl``: add the GZSL columns."""
    zsl = metrics.get("zsl") or {}
    if ks is None:
        ks = sorted(int(k) for k in zsl.get("flat", {}))
    row: dict[str, Any] = {f"hit@{k}": _get(zsl, "flat", str(k)) for k in ks}
    row["per-class hit@1"] = _get(zsl, "per_class", "1")
    for k in ks:
        row[f"strict hit@{k}"] = _get(zsl, "flat_strict", str(k))
    hp = metrics.get("hierarchical_precision")
    for k in ks:
        if k > 1:
            row[f"hP@{k}"] = _get(hp, "flat", str(k))
    if gzsl:
        row.update(_gzsl_columns(metrics.get("gzsl") or {}))
    return row
