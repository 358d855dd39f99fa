"""``imagenet-zsl report RUN... --html DIR``: one static page to look at, not only a table to read.

Why: a table says how often a model fails; a reader also wants to sort it, see each split's hit@K
curves, and see *where* a model fails in the hierarchy: per test class, its hit@K and the classes
it is most often taken for, with their WordNet distance
(:mod:`~imagenet_zsl.evaluation.class_confusions`, from the runs' stored top-k lists).

The directory (written whole, atomically, with the one manifest writer)::

    DIR/index.html        the page: the results table (the same rows and columns as report's
                          Markdown, the published rows with --published), sortable by clicking a
                          header; hit@K curves per split (inline SVG); the per-class view
    DIR/report.css        packaged assets (data/html/), copied: no server, no network, no CDN
    DIR/report.js         plain JavaScript: sorting, the row picker, the per-class table
    DIR/classes/ROW.js    one row's per-class data, loaded when the row is picked (compact JSON:
                          class indices, hit@K to 4 decimals, the top few confusions), so a
                          20,000-class run costs the page nothing until it is looked at
    DIR/manifest.json     format imagenet-zsl/html-report-v1: the inputs, the flags, every file

Opened from disk (``file://``) or served, the page loads only files of its own directory.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from imagenet_zsl.data import DATA_DIR
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.class_confusions import graph_name, read_class_view, view_json
from imagenet_zsl.evaluation.columns import (
    DIFFERENCES_COLUMN,
    HIT1_CI,
    STATUS_COLUMN,
    TEXT_COLUMNS,
    column_ks,
)
from imagenet_zsl.evaluation.plots import hit_curves_svg
from imagenet_zsl.evaluation.published import published_table
from imagenet_zsl.evaluation.published_compare import PUBLISHED_STATUS
from imagenet_zsl.evaluation.report import ReportTable, cell_text, table_columns, table_note, with_published
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.safe_output import atomic_directory

log = logging.getLogger(__name__)

HTML_FORMAT = "imagenet-zsl/html-report-v1"
REPORT_TOOL = "imagenet-zsl report"
PAGE = "index.html"
#: the packaged assets copied beside the page
ASSETS_DIR = DATA_DIR / "html"
ASSETS = ("report.css", "report.js")
CLASSES_DIR = "classes"
#: the attribute of a long text cell (the differences), which the stylesheet gives room
WIDE = ' class="wide"'


def _names() -> dict[str, str]:
    """wnid → first WordNet lemma ({} when WordNet is not installed: the page shows wnids)."""
    try:
        nouns = load_wordnet_nouns()
    except (UserInputError, OSError) as err:
        log.warning("no class names on the page: %s", err)
        return {}
    return {w: nouns.lemmas[i][0].replace("_", " ") for i, w in enumerate(nouns.wnids)}


class _Graphs:
    """The class graphs of the runs' evaluations, each loaded once (None: none, or not loadable)."""

    def __init__(self) -> None:
        self.loaded: dict[str, ClassGraph | None] = {}
        self.problems: list[str] = []

    def get(self, spec: str) -> ClassGraph | None:
        if spec not in self.loaded:
            try:
                self.loaded[spec] = resolve_graph(spec)
            except UserInputError as err:
                self.loaded[spec] = None
                self.problems.append(f"no WordNet distances for runs evaluated with --graph {spec}: {err}")
        return self.loaded[spec]


def _cell_attrs(row: dict, column: str) -> str:
    """A table cell's attributes: the sort key of a value column (its fraction), none for text (a
    long one gets room)."""
    key = "hit@1" if column == HIT1_CI else column
    if key in TEXT_COLUMNS:
        return WIDE if key == DIFFERENCES_COLUMN else ""
    value = row.get(key)
    if value is None or value != value:
        return ' data-value=""'
    return f' data-value="{float(value):.10g}"'


def results_table(rows: Sequence[dict], columns: Sequence[str], picks: dict[int, str]) -> str:
    """The results table as HTML: one header per column (sortable by the script), one row per
    table row (published rows marked), the row's per-class data id when it has one."""
    head = "".join(
        f'<th scope="col" data-type="{"text" if c in TEXT_COLUMNS else "number"}">{html.escape(c)}</th>'
        for c in columns
    )
    body = []
    for row in rows:
        classes = ["published"] if row.get(STATUS_COLUMN) == PUBLISHED_STATUS else []
        if row.get("comparable") == "yes":
            classes.append("comparable")
        attrs = f' class="{" ".join(classes)}"' if classes else ""
        if id(row) in picks:
            attrs += f' data-cell="{picks[id(row)]}"'
        cells = "".join(f"<td{_cell_attrs(row, c)}>{html.escape(cell_text(row, c))}</td>" for c in columns)
        body.append(f"<tr{attrs}>{cells}</tr>")
    return (
        '<table class="sortable" id="results-table">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def curves(rows: Sequence[dict]) -> list[str]:
    """One SVG per split: hit@K of each of the user's finished rows."""
    figures = []
    for split in dict.fromkeys(str(r["split"]) for r in rows):
        lines = []
        for row in rows:
            if row["split"] != split or row.get(STATUS_COLUMN) != "ok":
                continue
            ks = column_ks(row)
            label = str(row.get("_series") or row["model"])
            lines.append((label, ks, [row.get(f"hit@{k}") for k in ks]))
        if lines:
            figures.append(hit_curves_svg(lines, f"{split}: hit@K"))
    return figures


def references(keys: Sequence[str]) -> str:
    """The cited papers as a list (key: authors, year, title, venue), from references.bib."""
    known = published_table().references
    items = []
    for key in keys:
        fields = known[key].fields
        venue = fields.get("journal") or fields.get("booktitle") or fields.get("eprint", "")
        who, year, title = (fields.get(f, "") for f in ("author", "year", "title"))
        text = f"{key}: {who} ({year}). {title}. {venue}"
        items.append(f"<li>{html.escape(text.replace('{', '').replace('}', ''))}</li>")
    return f'<h3>References</h3><ul class="references">{"".join(items)}</ul>' if items else ""


def _page(
    table: str, figures: Sequence[str], picker: str, legend: str, notes: Sequence[str], cited: Sequence[str]
) -> str:
    listed = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    svgs = "".join(f'<figure class="curve">{svg}</figure>' for svg in figures)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>imagenet-zsl report</title>
<link rel="stylesheet" href="report.css">
</head>
<body>
<header><h1>imagenet-zsl report</h1>
<p>Click a column header to sort; pick a row below to see where it fails, class by class.</p></header>
<section id="results"><h2>Results</h2>
<div class="scroll">{table}</div>
<p class="legend">{html.escape(legend)}.</p>
<ul class="notes">{listed}</ul>
{references(cited)}
</section>
<section id="curves"><h2>hit@K per split</h2>
<div class="curves">{svgs or "<p>No finished row.</p>"}</div>
</section>
<section id="classes"><h2>Per class</h2>
<p>Each test class of the picked row: its hit@K (tie-fair, per class) and the classes its images
are most often taken for (top-ranked instead of the true class), with the share of its images and
the is-a hops between the two classes on the row's class graph.</p>
{picker}
<p id="class-status" role="status"></p>
<div class="scroll"><table class="sortable" id="class-table"><thead></thead><tbody></tbody></table></div>
</section>
<script src="report.js"></script>
</body>
</html>
"""


def _picker(options: Sequence[tuple[str, str]]) -> str:
    if not options:
        return "<p>No row has its top-k lists here (give run directories, not only records).</p>"
    choices = "".join(f'<option value="{v}">{html.escape(t)}</option>' for v, t in options)
    return (
        '<div class="controls"><label>Row <select id="cell-select">'
        f"{choices}</select></label> "
        '<label>Filter <input id="class-filter" type="search" placeholder="wnid or name"></label></div>'
    )


def _row_title(row: dict, several: bool) -> str:
    title = f"{row['model']} on {row['split']}"
    return f"{title} ({row['backbone']})" if several else title


def write_html_report(
    table: ReportTable,
    out: str | Path,
    columns: str | None = None,
    published: bool = False,
    inputs: Sequence[str | Path] = (),
) -> Path:
    """Write the page of ``table`` (report's rows with their records and run directories) into
    the directory ``out``; ``columns``: ``--columns`` (None: the paper table); ``published``: the
    published rows beside the user's. Returns ``out``."""
    if published:
        comparison = with_published(table.rows, table.records, columns)
        rows, printed, every = comparison.rows, comparison.columns, comparison.every
        notes, cited = [*table.notes, *comparison.notes], comparison.cited
    else:
        printed, every = table_columns(table.rows, columns)
        rows, notes, cited = list(table.rows), list(table.notes), []
    graphs, names = _Graphs(), _names()
    several = len({r.get("backbone") for r in table.rows}) > 1
    picks: dict[int, str] = {}
    with atomic_directory(out, tool=REPORT_TOOL, inputs=inputs) as tmp:
        (tmp / CLASSES_DIR).mkdir()
        sources: dict[str, str] = {}
        for index, (row, cell) in enumerate(zip(table.rows, table.cells, strict=True)):
            if cell is None or row.get(STATUS_COLUMN) != "ok":
                continue
            name = f"row{index}"
            view = read_class_view(cell, graphs.get(graph_name(cell)))
            data = json.dumps(view_json(view, names, _row_title(row, several)), separators=(",", ":"))
            (tmp / CLASSES_DIR / f"{name}.js").write_text(f'ZSL_CELL("{name}",{data});\n', encoding="utf-8")
            picks[id(row)], sources[name] = name, str(cell)
        options = [(picks[id(r)], _row_title(r, several)) for r in rows if id(r) in picks]
        page = _page(
            results_table(rows, printed, picks),
            curves(table.rows),
            _picker(options),
            table_note(rows, printed, every),
            [*notes, *graphs.problems],
            cited,
        )
        (tmp / PAGE).write_text(page, encoding="utf-8")
        for asset in ASSETS:
            shutil.copyfile(ASSETS_DIR / asset, tmp / asset)
        write_manifest(
            tmp,
            format=HTML_FORMAT,
            tool=REPORT_TOOL,
            inputs={"runs": [str(p) for p in inputs]},
            parameters={"columns": columns, "published": published},
            fields={"rows": len(rows), "class_views": sources},
        )
    return Path(out)
