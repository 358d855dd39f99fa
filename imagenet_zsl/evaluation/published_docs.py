"""The "Published results" section of docs/reproducing.md, generated from the packaged table.

Why: the page shows every packaged figure with what it rests on, and a page written by hand would
drift from the data; ``tests/evaluation/test_published_results.py`` checks that the block between
:data:`START` and :data:`END` equals :func:`render_published_results`. Run
``python -m imagenet_zsl.evaluation.published_docs`` to print it.

Layout: one table of the papers' split names (what each maps to, and why), then one table per
source table of a paper, laid out as the paper does: a row per model (and semantic space where it
varies), a column per split, metric or K that varies; what is the same for every figure of a table
(backbone, pretraining, semantic space, hit rule, averaging, unit, page) is said once above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from imagenet_zsl.evaluation.published import (
    PaperSplit,
    PublishedResult,
    PublishedTable,
    Reference,
    published_table,
)

START, END = "<!-- published-results:start -->", "<!-- published-results:end -->"
#: attributes said once above a table when every figure shares them, else given in the row label
ROW_ATTRIBUTES = ("semantic_space", "backbone", "pretraining", "averaging", "hit_rule", "unit", "page")
_ATTRIBUTE_LABELS = {
    "semantic_space": "semantic space",
    "backbone": "backbone",
    "pretraining": "backbone pretraining",
    "averaging": "averaging",
    "hit_rule": "hit rule",
    "unit": "values",
    "page": "page",
}
_UNIT_TEXT = {"%": "% (as printed)", "fraction": "fractions of 1 (as printed)"}


def _cell(text: object) -> str:
    """Text for a Markdown table cell: no column bar, no line break."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _count(number: int | None) -> str:
    return "not stated" if number is None else f"{number:,}"


def _metric(result: PublishedResult) -> str:
    return f"hit@{result.k}" if result.metric == "hit@K" else f"{result.metric} (hit@{result.k})"


def _split_rows(splits: Sequence[PaperSplit], references: dict[str, Reference]) -> list[str]:
    lines = [
        "| paper | split (as named) | classes | images per class | our list | match | why |",
        "|---|---|---:|---|---|---|---|",
    ]
    for split in splits:
        classes = _count(split.classes) + (f" ({split.classes_source})" if split.classes_source else "")
        ours = f"`{split.our_split}` ({split.defined_in})" if split.our_split else "—"
        cells = (references[split.paper].short, split.name, classes, split.images_per_class or "not stated")
        cells += (ours, split.match, split.why)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


Cell = tuple[tuple[str, ...], str]  # (row key, column label)


@dataclass
class _Group:
    """The figures of one source table (one paper, one table, one origin), pivoted."""

    results: list[PublishedResult]

    def varies(self, attribute: str) -> bool:
        return len({getattr(r, attribute) for r in self.results}) > 1

    @property
    def row_attributes(self) -> list[str]:
        """The attributes that differ between figures: each gets a column beside the model."""
        return [a for a in ROW_ATTRIBUTES if self.varies(a)]

    def column(self, result: PublishedResult) -> str:
        parts = []
        if self.varies("split"):
            parts.append(result.split.name)
        if self.varies("setting"):
            parts.append(result.setting)
        if self.varies("metric") or self.varies("k"):
            parts.append(_metric(result))
        return " ".join(parts) or _metric(result)

    def row(self, result: PublishedResult) -> tuple[str, ...]:
        return (result.model, *(getattr(result, a) for a in self.row_attributes))

    def cell(self, result: PublishedResult) -> Cell:
        return self.row(result), self.column(result)

    def caption(self) -> str:
        first = self.results[0]
        said = []
        if not self.varies("split"):
            said.append(f"split: {first.split.name}")
        if not self.varies("setting"):
            said.append(f"setting: {first.setting}")
        if not (self.varies("metric") or self.varies("k")):
            said.append(f"metric: {_metric(first)}")
        for attribute in ROW_ATTRIBUTES:
            if not self.varies(attribute):
                value = getattr(first, attribute)
                shown = _UNIT_TEXT[value] if attribute == "unit" else value
                said.append(f"{_ATTRIBUTE_LABELS[attribute]}: {shown}")
        return "; ".join(said) + "."


def _groups(results: Sequence[PublishedResult]) -> list[_Group]:
    groups: dict[tuple[str, str, str], _Group] = {}
    for result in results:
        groups.setdefault((result.paper, result.source, result.origin), _Group([])).results.append(result)
    return list(groups.values())


def _row_name(row: tuple[str, ...]) -> str:
    """A row named in a note: the model and what sets the row apart ('not stated' left out)."""
    return ", ".join(part for part in row if part != "not stated")


def _where(cells: list[Cell], everything: list[Cell]) -> str:
    """Which figures a note belongs to, in table order: '' (all), whole columns, whole rows, or
    row (columns)."""
    if len(cells) == len(everything):
        return ""
    chosen = set(cells)
    for axis in (1, 0):  # whole columns first, then whole rows
        keys = list(dict.fromkeys(cell[axis] for cell in everything if cell in chosen))
        if {c for c in everything if c[axis] in keys} == chosen:
            return "; ".join(k if axis == 1 else _row_name(k) for k in keys)  # type: ignore[arg-type]
    rows: dict[tuple[str, ...], list[str]] = {}
    for row, column in (c for c in everything if c in chosen):
        rows.setdefault(row, []).append(column)
    return "; ".join(f"{_row_name(row)} ({', '.join(columns)})" for row, columns in rows.items())


def _notes(group: _Group) -> list[str]:
    """One bullet per distinct note part ('; '-separated), naming the figures it belongs to."""
    everything = list(dict.fromkeys(group.cell(r) for r in group.results))
    cells_of: dict[str, list[Cell]] = {}
    for result in group.results:
        for part in filter(None, result.note.split("; ")):
            cells_of.setdefault(part, []).append(group.cell(result))
    lines = []
    for part, cells in cells_of.items():
        where = _where(cells, everything)
        lines.append(f"- {where}: {part}" if where else f"- {part}")
    return lines


def _label_space_row(group: _Group, columns: list[str]) -> str:
    cells = []
    for column in columns:
        sizes = {r.label_space for r in group.results if group.column(r) == column}
        cells.append(_count(sizes.pop()) if len(sizes) == 1 else "varies")
    blanks = " |" * len(group.row_attributes)
    return f"| *label space (classes ranked)* |{blanks} " + " | ".join(cells) + " |"


def _group_section(group: _Group, references: dict[str, Reference]) -> list[str]:
    first = group.results[0]
    title = f"{references[first.paper].short}, {first.source}"
    if first.origin:
        title += f" (figures quoted from {references[first.origin].short})"
    columns = list(dict.fromkeys(group.column(r) for r in group.results))
    rows = list(dict.fromkeys(group.row(r) for r in group.results))
    values = {group.cell(r): r.value + (f" ± {r.plus_minus}" if r.plus_minus else "") for r in group.results}
    head = ["model", *(_ATTRIBUTE_LABELS[a] for a in group.row_attributes), *columns]
    lines = [f"#### {title}", "", _cell(group.caption()), ""]
    lines += ["| " + " | ".join(_cell(h) for h in head) + " |"]
    lines += ["|---|" + "---|" * len(group.row_attributes) + "---:|" * len(columns)]
    lines.append(_label_space_row(group, columns))
    for row in rows:
        cells = [*row, *(values.get((row, c), "—") for c in columns)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    notes = _notes(group)
    return lines + ([""] + [_cell(n) for n in notes] if notes else []) + [""]


def render_published_results(table: PublishedTable | None = None) -> str:
    """The Markdown between the markers of docs/reproducing.md's "Published results" section."""
    table = published_table() if table is None else table
    lines = ["### Split names", ""]
    lines += _split_rows(list(table.splits.values()), table.references)
    lines += ["", "### Figures", "", '"—": the paper gives no figure for that cell.', ""]
    for group in _groups(table.results):
        lines += _group_section(group, table.references)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    print(render_published_results(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
