"""The columns of every results table, named and ordered once: ``imagenet-zsl report``
(:mod:`imagenet_zsl.evaluation.report`) and the summary of ``imagenet-zsl run``
(:mod:`imagenet_zsl.batch.summary`) both build their rows with these names, in :func:`all_columns`'
order, and print the columns :func:`select_columns` picks: the paper table by default
(:func:`paper_columns`, at most :data:`PAPER_MAX` columns), ``--columns NAME,...|all`` for the rest.
The CSV always carries every column.

What each column is (the legend under both tables, :func:`legend`):

* ``hit@K``: flat ZSL hit@K (per image), the expected value under uniform random tie-breaking.
* ``hit@1 95% CI``: the BCa interval of a paired, class-clustered bootstrap
  (:mod:`imagenet_zsl.scoring.bootstrap`); the paper table prints it inside the hit@1 cell
  (:data:`HIT1_CI`).
* ``per-class hit@1``: Xian et al.'s per-class mean top-1.
* ``strict hit@K``: ties count against the model, DGP's ``(table >= gth).sum() <= k`` rule.
* ``hP@K`` (K ≥ 2; hP@1 is hit@1): hierarchical precision (Frome et al. 2013).
* ``GZSL U/S/H``, ``AUSUC (per image)``: generalized ZSL as Chao et al. (2016) score ImageNet:
  flat hit@1 (per image) over the joint seen + unseen space, direct stacking (γ = 0), a
  seen/unseen tie shared as a joint tie; ``strict GZSL U/S/H`` the same under the strict rule
  (Hascoet et al. and DGP report it); ``calibrated H`` at the γ chosen on validation classes, beside
  the ``validation H`` that chose it. The per-class versions (Xian et al.'s GZSL) are named
  ``(per class)``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring.ranks import ks_of

#: the text columns that name a row, in table order
LEAD_COLUMNS = ("backbone", "model", "split", "class vectors", "label space", "classes")
CI_COLUMN = "hit@1 95% CI"
NS_COLUMN = "n.s. vs"
SEEN_COLUMN = "seen in pretraining"
STATUS_COLUMN = "status"
#: the text columns after the values, in order
TRAIL_COLUMNS = (NS_COLUMN, SEEN_COLUMN, STATUS_COLUMN)
SOURCE_COLUMN = "source"
COMPARABLE_COLUMN = "comparable"
DIFFERENCES_COLUMN = "differences"
#: the columns of a table with the published rows (``--published``), last, in order
PUBLISHED_COLUMNS = (SOURCE_COLUMN, COMPARABLE_COLUMN, DIFFERENCES_COLUMN)
#: every column printed as text (the others are fractions, printed in %)
TEXT_COLUMNS = (*LEAD_COLUMNS, CI_COLUMN, *TRAIL_COLUMNS, *PUBLISHED_COLUMNS)
#: the paper table's hit@1 cell: the value with its interval (``43.70 [40.12, 47.25]``)
HIT1_CI = "hit@1 [95% CI]"
#: the K of the paper table's hit@K columns (the field's: DGP, Hascoet et al.)
PAPER_KS = (1, 2, 5, 10, 20)
#: the most columns a paper table has (several backbones and GZSL: 12)
PAPER_MAX = 12
#: the GZSL columns (name, metrics.json mode, key) at K = 1, γ = 0, in table order
_GZSL_PRINTED = (
    ("GZSL U", "flat", "unseen"),
    ("GZSL S", "flat", "seen"),
    ("GZSL H", "flat", "H"),
    ("strict GZSL U", "flat_strict", "unseen"),
    ("strict GZSL S", "flat_strict", "seen"),
    ("strict GZSL H", "flat_strict", "H"),
)
#: the column groups ``--columns`` accepts besides single names
GROUPS = ("paper", "all", "strict", "gzsl")


def hit_columns(ks: Sequence[int]) -> list[str]:
    return [f"hit@{k}" for k in ks]


def column_ks(columns: Iterable[str]) -> list[int]:
    """The K of the ``hit@K`` names among ``columns`` (a row, a CSV header or a metrics dict),
    sorted: :func:`hit_columns` read back."""
    return sorted(int(c[4:]) for c in columns if c.startswith("hit@") and c[4:].isdigit())


def gzsl_columns() -> list[str]:
    """The GZSL columns in table order: per image, then the per-class twins."""
    per_image = [name for name, _, _ in _GZSL_PRINTED]
    per_image += ["AUSUC (per image)", "calibrated H", "validation H"]
    per_class = [f"{name} (per class)" for name, _, _ in _GZSL_PRINTED]
    return [*per_image, *per_class, "AUSUC (per class)", "calibrated H (per class)"]


def value_columns(ks: Sequence[int], gzsl: bool) -> list[str]:
    """The value columns (fractions) in table order, with :data:`CI_COLUMN` after hit@K."""
    cols = [*hit_columns(ks), CI_COLUMN, "per-class hit@1", *(f"strict hit@{k}" for k in ks)]
    cols += [f"hP@{k}" for k in ks if k > 1]
    return cols + (gzsl_columns() if gzsl else [])


def all_columns(ks: Sequence[int], gzsl: bool, published: bool = False) -> list[str]:
    """Every column of a table (the CSV's), in the one order of ``report`` and ``run``; with
    ``published`` (the published rows beside the user's) :data:`PUBLISHED_COLUMNS` last."""
    return [
        *LEAD_COLUMNS,
        *value_columns(ks, gzsl),
        *TRAIL_COLUMNS,
        *(PUBLISHED_COLUMNS if published else ()),
    ]


def in_table_order(columns: Iterable[str], ks: Sequence[int], gzsl: bool) -> list[str]:
    """``columns`` (names of :func:`all_columns` with published, or :data:`HIT1_CI`) in the one
    order, each once."""
    order = {c: i for i, c in enumerate(all_columns(ks, gzsl, published=True))}
    order[HIT1_CI] = order.get("hit@1", order[CI_COLUMN])
    return sorted(set(columns), key=lambda c: (order[c], c != HIT1_CI))


def several_backbones(rows: Sequence[dict]) -> bool:
    return len({str(row.get("backbone")) for row in rows}) > 1


def paper_columns(rows: Sequence[dict], ks: Sequence[int], gzsl: bool) -> list[str]:
    """The paper table: model, split, label space (name and size), hit@1 with its interval,
    hit@2/5/10/20, and GZSL U/S/H when on; the backbone first when the rows have several (one
    backbone is said in the legend). At most :data:`PAPER_MAX` columns."""
    cols = ["backbone"] if several_backbones(rows) else []
    cols += ["model", "split", "label space"]
    cols += [HIT1_CI if k == 1 else f"hit@{k}" for k in ks if k in PAPER_KS]
    if gzsl:
        cols += ["GZSL U", "GZSL S", "GZSL H"]
    return cols


def _group(name: str, rows: Sequence[dict], ks: Sequence[int], gzsl: bool) -> list[str] | None:
    if name == "paper":
        return paper_columns(rows, ks, gzsl)
    if name == "all":
        return all_columns(ks, gzsl)
    if name == "strict":
        strict = [f"strict hit@{k}" for k in ks]
        return strict + ([name for name, mode, _ in _GZSL_PRINTED if mode == "flat_strict"] if gzsl else [])
    if name == "gzsl":
        return gzsl_columns() if gzsl else []
    return None


def select_columns(spec: str | None, rows: Sequence[dict], ks: Sequence[int], gzsl: bool) -> list[str]:
    """The printed columns for ``--columns spec`` (None: ``paper``): comma-separated names of
    :func:`all_columns` (case-insensitive), :data:`HIT1_CI` or the groups :data:`GROUPS`; always
    with model and split (and the backbone when the rows have several), in the table's one order."""
    known = [*all_columns(ks, gzsl), HIT1_CI]
    by_lower = {c.lower(): c for c in known}
    chosen: set[str] = {"model", "split"} | ({"backbone"} if several_backbones(rows) else set())
    for item in (part.strip() for part in (spec or "paper").split(",")):
        if not item:
            continue
        group = _group(item.lower(), rows, ks, gzsl)
        if group is not None:
            chosen.update(group)
        elif item.lower() in by_lower:
            chosen.add(by_lower[item.lower()])
        else:
            close = difflib.get_close_matches(item.lower(), [*by_lower, *GROUPS], n=1)
            hint = f"did you mean {by_lower.get(close[0], close[0])!r}? " if close else ""
            raise UserInputError(
                f"--columns: no column {item!r} in this table; {hint}give names of "
                f"{', '.join(known)}, or {', '.join(GROUPS)}"
            )
    return in_table_order(chosen, ks, gzsl)


def _get(block: Any, *keys: str) -> float | None:
    for key in keys:
        if not isinstance(block, dict) or key not in block:
            return None
        block = block[key]
    return None if block is None else float(block)


def _gzsl_values(gzsl: dict) -> dict[str, float | None]:
    """The GZSL columns of one run's metrics.json ``gzsl`` block (None where it lacks one)."""
    cal = gzsl.get("calibration")
    row: dict[str, float | None] = {}
    for suffix, average in (("", "flat"), (" (per class)", "per_class")):
        for name, mode, key in _GZSL_PRINTED:
            row[name + suffix] = _get(gzsl, mode.replace("flat", average), "1", key)
        row["AUSUC" + (suffix or " (per image)")] = _get(gzsl, average, "1", "ausuc")
        row["calibrated H" + suffix] = _get(cal, "test", average, str(cal["k"]), "H") if cal else None
        if not suffix:
            row["validation H"] = _get(cal, "validation_H")
    return {name: row[name] for name in gzsl_columns()}


def metric_columns(metrics: dict, ks: Sequence[int] | None = None, gzsl: bool = True) -> dict[str, Any]:
    """One row's metric values (fractions; None where the run lacks one) in table order, without
    the interval (:data:`CI_COLUMN`, a bootstrap over the run's stored ranks).

    ``metrics``: a run's metrics.json content ({} for a failed cell); ``ks``: the hit@K columns
    (default: the run's own K values); ``gzsl``: add the GZSL columns."""
    zsl = metrics.get("zsl") or {}
    if ks is None:
        ks = ks_of(zsl.get("flat", {}))
    row: dict[str, Any] = {f"hit@{k}": _get(zsl, "flat", str(k)) for k in ks}
    row["per-class hit@1"] = _get(zsl, "per_class", "1")
    for k in ks:
        row[f"strict hit@{k}"] = _get(zsl, "flat_strict", str(k))
    hp = metrics.get("hierarchical_precision")
    for k in ks:
        if k > 1:
            row[f"hP@{k}"] = _get(hp, "flat", str(k))
    if gzsl:
        row.update(_gzsl_values(metrics.get("gzsl") or {}))
    return row


def label_space_text(name: str, size: int, full: int | None = None) -> str:
    """A label space as a table names it: ``All 20,842``, or ``All−vec 18,925`` when classes without
    a class vector left it (``size`` < ``full``); ``split 1,548``; a FILE by its stem."""
    shown = "All" if name == "all" else name
    cut = full is not None and size < full
    return f"{shown}{'−vec' if cut else ''} {size:,}"


def _is_hit(c: str) -> bool:
    return c.startswith("hit@")


#: one sentence per kind of printed column (the legend says only what the table shows)
_LEGEND: tuple[tuple[Any, str], ...] = (
    (
        lambda c: c == "label space",
        "label space: the classes each test image is ranked against, and how many (−vec: less "
        "the classes some model has no class vector for, dropped for every model)",
    ),
    (
        _is_hit,
        "hit@K: flat ZSL hit@K (per image), the expected value under uniform random tie-breaking",
    ),
    (lambda c: c == "per-class hit@1", "per-class hit@1: mean over test classes (Xian et al.)"),
    (lambda c: c.startswith("strict hit@"), "strict hit@K: ties count against the model, DGP's rule"),
    (lambda c: c.startswith("hP@"), "hP@K: hierarchical precision@K (Frome et al. 2013; hP@1 = hit@1)"),
    (
        lambda c: "GZSL" in c,
        "GZSL U/S/H: unseen and seen accuracy and their harmonic mean, per image (flat hit@1 over "
        "the test + seen classes, as Chao et al. (2016) score ImageNet), direct stacking (γ = 0), a "
        "tie shared (strict GZSL: a tie counts against the model, as Hascoet et al. and DGP report)",
    ),
    (lambda c: c.startswith("AUSUC"), "AUSUC: area under the seen-unseen curve"),
    (
        lambda c: c.startswith(("calibrated H", "validation H")),
        "calibrated H: H at the γ chosen on validation classes (flat H@1) and transferred to the "
        "test classes, beside the validation H that chose it; a transferred γ can give a lower H "
        "than direct stacking (a γ that suits the validation classes need not suit the test ones; "
        "a model that ranks the seen classes first everywhere gets γ ≈ 1 and H 0)",
    ),
    (lambda c: c.endswith("(per class)"), "(per class): Xian et al.'s per-class means, at the same γ"),
    (
        lambda c: c == SOURCE_COLUMN,
        "published rows (status 'published', never bold): figures read from the papers of the "
        "BibTeX file beside the table (data/published_results), each in the column that measures "
        "what it measures (a per-class top-1 in per-class hit@1, a figure under the strict rule in "
        "strict hit@K); rows of a split sorted by hit@1 (a row without one by its per-class hit@1); "
        "source: the paper's BibTeX key and the table or section the figure was read from",
    ),
    (
        lambda c: c == DIFFERENCES_COLUMN,
        "differences: each way a published row's protocol differs from your rows of the split, "
        "'theirs vs yours' (label space size, list, the classes your copy holds, averaging, hit "
        "rule, backbone pretraining, semantic space, images per class)",
    ),
    (
        lambda c: c == COMPARABLE_COLUMN,
        "comparable: yes only when no difference is material: the same label-space size, the same "
        "list (an exact match, held completely by your copy), the same averaging, and the same hit "
        "rule or one that cannot matter (your values are the same under the strict and the "
        "tie-fair rule); a different backbone, pretraining, semantic space or number of images per "
        "class is the method's or the sample's, named but not material",
    ),
)


def legend(columns: Iterable[str], every: Iterable[str] = ()) -> str:
    """The legend of a table printing ``columns`` of ``every`` column (the CSV's): what each kind
    of printed column is (the interval's own sentence is the bootstrap's note), and where the
    others are."""
    shown = list(columns)
    parts = ["Values in %"]
    parts += [text for applies, text in _LEGEND if any(applies(c) for c in shown)]
    if HIT1_CI in shown:
        parts.append(f"{HIT1_CI}: hit@1 with its interval")
    covered = set(shown) | ({"hit@1", CI_COLUMN} if HIT1_CI in shown else set())
    if set(every) - covered:
        parts.append(
            "every column (strict hit@K and strict GZSL U/S/H, per-class hit@1, hP@K, AUSUC, "
            "calibrated and validation H, ...) is in the CSV; print them with --columns "
            "NAME,... or --columns all"
        )
    return "; ".join(parts)
