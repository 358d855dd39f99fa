"""The published rows beside the user's (``report --published``, ``run --published``): for each
split of the table, the packaged figures (:mod:`imagenet_zsl.evaluation.published`) of the paper
splits our list stands for, each in the column that measures what it measures, with its source and
every way its protocol differs from the user's rows of the split.

Why: a new result is put in a paper next to published ones, and a published figure only compares
with one measured the same way. So each published row names its differences, "theirs vs yours":
the label-space size (GBU's "2 H" ranks 1,509 classes, our ``hop1`` 1,548), the list (a same-rule
list is not the same classes; a packaged list the user edited is not the packaged one), the
classes the user's copy of ImageNet holds (a published list held in part is another list), the
averaging (a per-class top-1 is not flat hit@1), the hit rule (DGP's code counts a tie with the
true class as a miss), the backbone pretraining, the semantic space and the images per class.
A row is marked comparable only when no difference is *material*: the same label-space size, the
same list held completely, the same averaging, and the same hit rule or one that cannot matter
(the user's values are the same under the strict and the tie-fair rule: no tie at the true class).
A different backbone, pretraining or semantic space is the method's, and a different number of
test images per class the sample's: named, not material.

Placement: a figure fills the table's column of its metric: ZSL hit@K (per image or unstated) in
``hit@K``, a per-class top-1 in ``per-class hit@1``, a figure under the strict rule in ``strict
hit@K``, GZSL U/S/H and AUSUC at K = 1 in the GZSL columns (per class: the ``(per class)`` ones).
The columns the published rows fill are printed (a per-class top-1 adds ``per-class hit@1`` to
the paper table), and so is the backbone; a figure the table has no column for (a K it lacks, a
GZSL figure at K > 1) is left out and counted in a note.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from imagenet_zsl.evaluation.columns import (
    CI_COLUMN,
    COMPARABLE_COLUMN,
    DIFFERENCES_COLUMN,
    HIT1_CI,
    NS_COLUMN,
    PUBLISHED_COLUMNS,
    SEEN_COLUMN,
    SOURCE_COLUMN,
    STATUS_COLUMN,
    all_columns,
    in_table_order,
)
from imagenet_zsl.evaluation.published import PaperSplit, PublishedResult, PublishedTable, published_table
from imagenet_zsl.splits.named import PUBLISHED_SPLITS

#: the status of a published row (never bold, never a failed row)
PUBLISHED_STATUS = "published"
#: a row's key (never a column): {column: the figure as printed}, shown instead of the 2-decimal %
PRINTED = "_printed"
#: a row's key (never a column): {column: raw LaTeX} (the ``\\cite`` of the source)
TEX = "_tex"
#: the column a per-class top-1 fills
PER_CLASS_TOP1 = "per-class hit@1"
_LABEL_SETS = {
    "in1k": "ImageNet-1K",
    "in12k": "ImageNet-12K",
    "in21k": "ImageNet-21K",
    "in21k-p": "ImageNet-21K-P",
    "in21k-p-w21": "ImageNet-21K-P (winter21)",
    "in22k": "ImageNet-22K",
}
_NUMBER = re.compile(r"[0-9][0-9,]*(\.[0-9]+)?")
#: a stated images-per-class figure differs from the user's mean by more than this share
IMAGES_TOLERANCE = 0.05


def _short(text: str) -> str:
    """A long description cut before its first parenthesis or colon: "ResNet-101 (2048-d …)" →
    "ResNet-101"."""
    return re.split(r" \(|:", text, maxsplit=1)[0].strip() or text


def published_pretraining(text: str) -> str:
    """A paper's backbone pretraining in the words :func:`measured_pretraining` uses."""
    lower = text.lower()
    if lower in ("", "not stated"):
        return "not stated"
    if "21k" in lower or "22k" in lower:
        return _short(text)
    if "1k" in lower or "ilsvrc" in lower:
        return "ImageNet-1K"
    return _short(text)


def measured_pretraining(protocol: dict) -> str:
    """The user's backbone pretraining from a result record's protocol: its label sets, "none
    (simulated features)", or "not recorded"."""
    if (protocol.get("features") or {}).get("simulated"):
        return "none (simulated features)"
    pretraining = protocol.get("pretraining") or {}
    sets = pretraining.get("label_sets")
    if sets:
        return " + ".join(_LABEL_SETS.get(str(s), str(s)) for s in sets)
    seen = str(pretraining.get("test_classes_seen"))
    return "web data" if "web" in seen else "not recorded"


def figure_column(result: PublishedResult, ks: Sequence[int], gzsl: bool) -> str | None:
    """The table column that measures what ``result`` measures, or None (no such column: a K
    the table lacks, GZSL off, a GZSL figure at K > 1, a per-class hit@K for K > 1)."""
    per_class = result.averaging == "per-class"
    strict = "strict " if result.hit_rule == "strict" else ""
    if result.metric == "hit@K":
        if result.k not in ks:
            return None
        if per_class:
            return PER_CLASS_TOP1 if result.k == 1 and not strict else None
        return f"{strict}hit@{result.k}"
    if not gzsl or result.k != 1:
        return None
    suffix = " (per class)" if per_class else ""
    if result.metric == "AUSUC":
        return None if strict else f"AUSUC{suffix or ' (per image)'}"
    return f"{strict}GZSL {result.metric}{suffix}"


def _strict_twin(column: str) -> tuple[str, str] | None:
    """(tie-fair column, strict column) whose equality says the hit rule cannot matter for
    ``column`` (a per-class top-1: flat hit@1, whose ties are the same images' ties); None for a
    column without a strict twin (AUSUC)."""
    if column == PER_CLASS_TOP1:
        return "hit@1", "strict hit@1"
    if column.startswith("strict "):
        return column[len("strict ") :], column
    if column.startswith(("hit@", "GZSL ")):
        return column, f"strict {column}"
    return None


@dataclass(frozen=True)
class Measured:
    """What one of the user's rows was measured under (from its result record)."""

    label_space: int | None
    joint_space: int | None  # GZSL: the seen and unseen classes ranked together
    in_split: int | None
    list_sha256: str | None  # of the whole split list (the run's; else the evaluated list's)
    coverage: dict | None  # classes of the split the user's copy holds (``protocol.coverage``)
    pretraining: str
    vectors: str
    images_per_class: float | None
    metrics: dict

    @classmethod
    def of(cls, record: dict) -> Measured:
        protocol = record["protocol"]
        classes = protocol.get("classes") or {}
        gzsl = (protocol.get("gzsl") or {}).get("classes") or {}
        joint = None
        if gzsl.get("seen") is not None and gzsl.get("unseen") is not None:
            joint = int(gzsl["seen"]) + int(gzsl["unseen"])
        coverage = protocol.get("coverage")
        images, with_images = protocol.get("images"), classes.get("with_test_images")
        vectors = str(protocol.get("class_vectors") or "–")
        return cls(
            label_space=(protocol.get("label_space") or {}).get("size"),
            joint_space=joint,
            in_split=classes.get("in_split"),
            list_sha256=(coverage or {}).get("split_sha256") or (protocol.get("split") or {}).get("sha256"),
            coverage=coverage,
            pretraining=measured_pretraining(protocol),
            vectors="none" if vectors == "–" else _short(vectors),
            images_per_class=images / with_images if images and with_images else None,
            metrics=record.get("metrics") or {},
        )

    def ties_cannot_matter(self, column: str) -> bool:
        """True when this row's value of ``column`` is the same under the strict and the tie-fair
        rule (no tie at the true class decides it)."""
        twin = _strict_twin(column)
        if twin is None:
            return False
        fair, strict = (self.metrics.get(c) for c in twin)
        return fair is not None and strict is not None and abs(float(fair) - float(strict)) < 1e-12

    @property
    def incomplete(self) -> bool:
        return bool(self.coverage) and not self.coverage.get("complete", True)


def _numbers(values: Sequence[Any]) -> str:
    shown = [f"{v:,}" if isinstance(v, int) else str(v) for v in dict.fromkeys(values)]
    return "/".join(shown)


def _label_space(figures: Sequence[PublishedResult], users: Sequence[Measured]) -> list[tuple[str, bool]]:
    gzsl = figures[0].setting == "GZSL"
    theirs = list(dict.fromkeys(f.label_space for f in figures))
    ours = list(dict.fromkeys(u.joint_space if gzsl else u.label_space for u in users))
    if len(theirs) == 1 and theirs == ours and theirs[0] is not None:
        return []
    stated = [t for t in theirs if t is not None]
    text = _numbers(stated) if stated else "not stated"
    return [(f"{'joint ' if gzsl else ''}label space {text} vs {_numbers(ours)}", True)]


def _list(split: PaperSplit, users: Sequence[Measured]) -> list[tuple[str, bool]]:
    if split.match == "same-rule":
        return [("list: the same rule, not the same classes", True)]
    if split.packaged:
        packaged = PUBLISHED_SPLITS[split.our_split]
        if any(u.list_sha256 != packaged.sha256 for u in users):
            return [(f"list: yours is not the packaged {packaged.name}", True)]
        return []
    if split.classes is not None and any(u.in_split != split.classes for u in users):
        return [(f"list: {split.classes:,} classes vs {_numbers([u.in_split for u in users])}", True)]
    return []


def _copy(users: Sequence[Measured]) -> list[tuple[str, bool]]:
    held = [u.coverage for u in users if u.incomplete and u.coverage]
    if not held:
        return []
    texts = _numbers([f"{c['held']:,} of {c['classes']:,}" for c in held])
    return [(f"your copy holds {texts} classes of the list", True)]


def _hit_rule(
    figures: Sequence[PublishedResult], columns: Sequence[str], users: Sequence[Measured]
) -> list[tuple[str, bool]]:
    out = []
    for rule in dict.fromkeys(f.hit_rule for f in figures):
        placed = [c for f, c in zip(figures, columns, strict=True) if f.hit_rule == rule]
        ours = "strict" if placed[0].startswith("strict ") else "tie-fair"
        if rule == ours:
            continue
        cannot = bool(users) and all(u.ties_cannot_matter(c) for u in users for c in placed)
        text = f"hit rule {rule} vs {ours}"
        out.append(
            (text + (" (cannot matter: no tie at the true class in yours)" if cannot else ""), not cannot)
        )
    return out


def _images(split: PaperSplit, users: Sequence[Measured]) -> list[tuple[str, bool]]:
    match = _NUMBER.search(split.images_per_class)
    ours = [u.images_per_class for u in users if u.images_per_class is not None]
    if match is None or not ours:
        return []
    stated = float(match.group(0).replace(",", ""))
    if all(abs(o - stated) <= IMAGES_TOLERANCE * stated for o in ours):
        return []
    return [
        (
            f"images per class {_short(split.images_per_class)} vs {_numbers([f'{o:.1f}' for o in ours])}",
            False,
        )
    ]


def differences(
    figures: Sequence[PublishedResult], columns: Sequence[str], users: Sequence[Measured]
) -> list[tuple[str, bool]]:
    """Each difference of a published row (its ``figures``, placed in ``columns``) from the user's
    rows of the split (``users``): (text "theirs vs yours", material)."""
    first = figures[0]
    found = [*_label_space(figures, users), *_list(first.split, users), *_copy(users)]
    if any(f.averaging == "unstated" for f in figures):
        found.append(("averaging unstated vs per-image", True))
    found += _hit_rule(figures, columns, users)
    theirs = published_pretraining(first.pretraining)
    ours = list(dict.fromkeys(u.pretraining for u in users))
    if ours != [theirs]:
        found.append((f"pretraining {theirs} vs {'/'.join(ours)}", False))
    space = _short(first.semantic_space)
    vectors = list(dict.fromkeys(u.vectors for u in users))
    if vectors != [space]:
        found.append((f"semantic space {space} vs {'/'.join(vectors)}", False))
    return found + _images(first.split, users)


# ----------------------------------------------------------------------------- rows


def _source(result: PublishedResult) -> tuple[str, str]:
    """(the source cell: key and table, the quoted paper when quoted; its LaTeX with \\cite)."""
    text, tex = f"{result.paper} {result.source}", f"\\cite{{{result.paper}}}, {_tex_words(result.source)}"
    if result.origin:
        text += f" (quoting {result.origin})"
        tex += f" (quoting \\cite{{{result.origin}}})"
    return text, tex


def _tex_words(text: str) -> str:
    return text.replace("§", "\\S{}").replace("&", "\\&").replace("%", "\\%").replace("_", "\\_")


def _printed(result: PublishedResult) -> str | None:
    """The figure as printed (a % figure), with its spread; None for a fraction (shown in %)."""
    if result.unit != "%":
        return None
    return result.value + (f" ± {result.plus_minus}" if result.plus_minus else "")


def _group_key(result: PublishedResult) -> tuple[str, ...]:
    return (
        result.paper,
        result.source,
        result.origin,
        result.model,
        result.backbone,
        result.pretraining,
        result.semantic_space,
        result.split.id,
        result.setting,
    )


def _space_text(figures: Sequence[PublishedResult]) -> str:
    split, gzsl = figures[0].split, figures[0].setting == "GZSL"
    sizes = [f.label_space for f in figures if f.label_space is not None]
    size = _numbers(sizes) if sizes else "(size not stated)"
    return f"{split.name}{' joint' if gzsl else ''} {size}"


def published_row(
    figures: Sequence[PublishedResult],
    columns: Sequence[str],
    split: str,
    users: Sequence[Measured],
    every: Sequence[str],
) -> dict[str, Any]:
    """One table row of a paper's figures of one model (``figures``, placed in ``columns``) on
    the user's ``split``: values as fractions, their printed text, the source, the differences."""
    first = figures[0]
    row: dict[str, Any] = dict.fromkeys(every)
    row.update(
        {
            "backbone": _short(first.backbone),
            "model": first.model,
            "split": split,
            "class vectors": _short(first.semantic_space),
            "label space": _space_text(figures),
            "classes": "–" if first.split.classes is None else f"{first.split.classes:,}",
            CI_COLUMN: "–",
            NS_COLUMN: "–",
            SEEN_COLUMN: "–",
            STATUS_COLUMN: PUBLISHED_STATUS,
        }
    )
    row[PRINTED], row[TEX] = {}, {}
    for result, column in zip(figures, columns, strict=True):
        row[column] = result.percent / 100
        printed = _printed(result)
        if printed is not None:
            row[PRINTED][column] = printed
    row[SOURCE_COLUMN], row[TEX][SOURCE_COLUMN] = _source(first)
    if not users:
        row[COMPARABLE_COLUMN], row[DIFFERENCES_COLUMN] = "no", "none of your rows of this split finished"
        return row
    found = differences(figures, columns, users)
    row[COMPARABLE_COLUMN] = "no" if any(material for _, material in found) else "yes"
    row[DIFFERENCES_COLUMN] = "; ".join(text for text, _ in found) or "none"
    return row


@dataclass
class Comparison:
    """A table with the published rows: rows by split (the user's first-seen order), each split's
    rows sorted by hit@1; the printed and CSV columns; the notes; the cited BibTeX keys."""

    rows: list[dict[str, Any]]
    columns: list[str]
    every: list[str]
    notes: list[str] = field(default_factory=list)
    cited: list[str] = field(default_factory=list)


def _top1(row: dict) -> float | None:
    for column in ("hit@1", PER_CLASS_TOP1):
        value = row.get(column)
        if value is not None and value == value:  # not NaN
            return float(value)
    return None


def _sorted(rows: Sequence[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (_top1(r) is None, -(_top1(r) or 0.0)))


def _figures_of(
    table: PublishedTable, split: str, ks: Sequence[int], gzsl: bool
) -> tuple[dict[tuple[str, ...], list[tuple[PublishedResult, str]]], list[PublishedResult]]:
    """The figures of the paper splits ``split`` stands for, grouped into rows (with their
    column), and those the table has no column for."""
    groups: dict[tuple[str, ...], list[tuple[PublishedResult, str]]] = {}
    left: list[PublishedResult] = []
    for result in table.results:
        if result.split.our_split != split or result.split.match == "none":
            continue
        column = figure_column(result, ks, gzsl)
        if column is None:
            left.append(result)
        else:
            groups.setdefault(_group_key(result), []).append((result, column))
    return groups, left


def _split_notes(table: PublishedTable, splits: Sequence[str]) -> list[str]:
    notes = []
    for split in splits:
        for paper_split in table.splits.values():
            if paper_split.our_split == split and paper_split.match != "none":
                who = table.references[paper_split.paper].short
                match = f"{paper_split.match}: {paper_split.why}"
                notes.append(f"{split} stands for {who}'s '{paper_split.name}' ({match})")
    return notes


def compare_published(
    rows: Sequence[dict],
    records: Sequence[dict | None],
    printed: Sequence[str],
    ks: Sequence[int],
    gzsl: bool,
    table: PublishedTable | None = None,
) -> Comparison:
    """The user's ``rows`` (their result ``records``, None for a failed row) with the published
    rows of their splits, for a table printing ``printed`` at ``ks`` (GZSL columns if ``gzsl``)."""
    table = table or published_table()
    every = all_columns(ks, gzsl, published=True)
    splits = list(dict.fromkeys(str(r["split"]) for r in rows))
    added: dict[str, list[dict]] = {}
    left: list[PublishedResult] = []
    filled: set[str] = set()
    for split in splits:
        mine = zip(rows, records, strict=True)
        users = [Measured.of(rec) for row, rec in mine if rec and row["split"] == split]
        groups, unplaced = _figures_of(table, split, ks, gzsl)
        left += unplaced
        for placed in groups.values():
            figures, columns = [f for f, _ in placed], [c for _, c in placed]
            added.setdefault(split, []).append(published_row(figures, columns, split, users, every))
            filled.update(columns)
    # the published rows fill the columns of their metrics: printed, as are their backbones
    if HIT1_CI in printed:  # hit@1 is printed with its interval
        filled = {HIT1_CI if c == "hit@1" else c for c in filled}
    shown = (
        in_table_order([*printed, *filled, "backbone", *PUBLISHED_COLUMNS], ks, gzsl)
        if added
        else list(printed)
    )
    merged = [
        row
        for split in splits
        for row in _sorted([*(r for r in rows if r["split"] == split), *added.get(split, [])])
    ]
    cited = [key for row in merged if row.get(STATUS_COLUMN) == PUBLISHED_STATUS for key in _keys(row)]
    notes = _split_notes(table, [s for s in splits if s in added])
    if left:
        notes.append(
            f"{len(left)} published figures of these splits have no column in this table (a K it "
            "lacks, GZSL off, a GZSL figure or AUSUC at K > 1): not shown"
        )
    if not added:
        notes.append(
            "no published figure stands for these splits; published splits: "
            + ", ".join(sorted({s.our_split for s in table.splits.values() if s.our_split}))
        )
    return Comparison(merged, shown, every, notes, list(dict.fromkeys(cited)))


def _keys(row: dict) -> list[str]:
    return re.findall(r"\\cite\{([^}]+)\}", row[TEX][SOURCE_COLUMN])
