"""Published ImageNet ZSL and GZSL figures, each with its source, and the paper split names they
rest on.

Why: a new result is put in a paper next to published ones, and a published figure only compares
with one measured the same way: the same label space (GBU's "2 H" has 1,509 classes, DGP's
"2-hops" 1,549, our ``hop1`` 1,548), the same tie rule (DGP's code counts a tie with the true class
as a miss), the same backbone pretraining and semantic space, the same averaging (GBU's per-class
top-1 is not flat hit@1). So every figure is packaged with those facts, read from the paper's own
text or table (never estimated; bar plots are left out), and every paper split name maps to one of
our lists or says why none stands for it.

The data, ``data/published_results/`` (sources and licence notes: ``data/PROVENANCE.md``):

* ``results.csv``: one figure a row (columns :data:`RESULT_COLUMNS`); ``value`` as printed;
* ``splits.csv``: one paper split a row (columns :data:`SPLIT_COLUMNS`), the name as printed, the
  class count the paper states, our list (``our_split``: a packaged published list or a split of a
  recipe under ``configs/``), how close it is (``match``) and why;
* ``references.bib``: one BibTeX entry per paper key.

The table is packaged data, so a malformed row is a bug: the reader refuses it in one line naming
the file, line and column. ``python -m imagenet_zsl.evaluation.published`` prints the "Published
results" section of docs/reproducing.md (the suite checks the page against it).
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.data import DATA_DIR, read_utf8
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.splits.named import PUBLISHED_SPLITS

RESULTS_DIR = DATA_DIR / "published_results"
RESULT_COLUMNS = (
    "paper",  # BibTeX key of the paper whose text or table the figure was read from
    "source",  # where in it: "Table 5", "§4.1"
    "page",  # the page, or "not in the text copy"
    "origin",  # BibTeX key of the paper the source quotes the figure from ("" = its own)
    "model",  # as printed
    "backbone",
    "pretraining",  # the backbone's pretraining data
    "semantic_space",
    "split",  # an id of splits.csv
    "setting",  # SETTINGS
    "metric",  # METRICS
    "averaging",  # AVERAGING
    "k",  # the K of hit@K (1: top-1)
    "hit_rule",  # HIT_RULES
    "label_space",  # classes ranked ("" = not stated)
    "value",  # as printed
    "plus_minus",  # the spread printed after it ("± 0.003" as "0.003"; "" = none)
    "unit",  # UNITS
    "note",
)
SPLIT_COLUMNS = (
    "id",  # what results.csv names
    "paper",  # BibTeX key of the paper that names the split
    "name",  # as printed there
    "classes",  # the class count the paper states ("" = none)
    "classes_source",  # where it states it
    "images_per_class",  # as stated ("" = not stated)
    "our_split",  # a packaged published list or a recipe split ("" = none)
    "defined_in",  # "packaged" or the recipe (configs/NAME.yaml) that builds our_split
    "match",  # MATCHES
    "why",
)
SETTINGS = ("ZSL", "GZSL")
#: hit@K: ZSL; U, S: GZSL hit@K on unseen / seen images; H: their harmonic mean; AUSUC: the area
#: under the seen-unseen curve of calibrated stacking (Chao et al.)
METRICS = ("hit@K", "U", "S", "H", "AUSUC")
#: per-image: flat hit@K; per-class: each class's hit rate averaged (Xian et al.'s per-class top-1)
AVERAGING = ("per-image", "per-class", "unstated")
#: strict: a tie with the true class is a miss; tie-fair: the expected credit under random tie-breaking
HIT_RULES = ("strict", "tie-fair", "unstated")
#: "%" (0-100) or "fraction" (0-1, AUSUC as Chao et al. print it)
UNITS = ("%", "fraction")
#: exact: our list holds the paper's classes; same-rule: built by the paper's rule, the classes
#: differ (``why`` says how); none: no list of ours stands for it (``why`` says why)
MATCHES = ("exact", "same-rule", "none")
PAGE_NOT_IN_COPY = "not in the text copy"
_VALUE = re.compile(r"[0-9]+(\.[0-9]+)?")
_DECIMAL = re.compile(r"[0-9]{1,9}")
_SPLIT_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_RECIPE = re.compile(r"configs/[A-Za-z0-9_.-]+\.yaml")
_BIB_ENTRY = re.compile(r"^@(\w+)\s*\{\s*([^,\s]+)\s*,(.*?)^\}", re.MULTILINE | re.DOTALL)
_BIB_FIELD = re.compile(r"^\s*(\w+)\s*=\s*\{(.*?)\},?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Reference:
    """One BibTeX entry of references.bib: its key, type and fields (braces kept as written)."""

    key: str
    kind: str
    fields: dict[str, str]

    @property
    def short(self) -> str:
        """The first author's surname and the year, e.g. "Xian et al. 2019"."""
        first = self.fields.get("author", self.key).split(" and ")[0]
        surname = first.split(",")[0].strip()
        more = " et al." if " and " in self.fields.get("author", "") else ""
        return f"{surname}{more} {self.fields.get('year', '')}".strip()


@dataclass(frozen=True)
class PaperSplit:
    """A split as a paper names it, and the list of ours that stands for it (or why none does)."""

    id: str
    paper: str
    name: str
    classes: int | None  # as the paper states it
    classes_source: str
    images_per_class: str  # as stated, e.g. "≈ 1756"
    our_split: str  # "" when match is "none"
    defined_in: str  # "packaged" (data/published_splits) or the recipe that builds our_split
    match: str
    why: str

    @property
    def packaged(self) -> bool:
        """Whether our_split is a packaged published list (``splits.named.PUBLISHED_SPLITS``)."""
        return self.our_split in PUBLISHED_SPLITS


@dataclass(frozen=True)
class PublishedResult:
    """One published figure with what a comparison needs: the label space, the tie rule, the
    backbone and its pretraining, the semantic space, the split (with its images per class and our
    list) and where it was read."""

    paper: str
    source: str
    page: str
    origin: str
    model: str
    backbone: str
    pretraining: str
    semantic_space: str
    split: PaperSplit
    setting: str
    metric: str
    averaging: str
    k: int
    hit_rule: str
    label_space: int | None
    value: str
    plus_minus: str
    unit: str
    note: str

    @property
    def number(self) -> float:
        """The value as printed, as a float (in its unit)."""
        return float(self.value)

    @property
    def percent(self) -> float:
        """The value in % (a fraction times 100), for sorting and plots; cite :attr:`value`."""
        return self.number * (100.0 if self.unit == "fraction" else 1.0)


class _Row:
    """One CSV row with its file and line, so every problem names both and the column."""

    def __init__(self, path: Path, line: int, cells: dict[str, str]) -> None:
        self.path, self.line, self.cells = path, line, cells

    def fail(self, column: str, problem: str) -> UserInputError:
        value = self.cells.get(column, "")
        return UserInputError(f"{self.path}:{self.line}: {column} {value!r}: {problem}")

    def text(self, column: str, required: bool = True) -> str:
        value = self.cells[column]
        if value != value.strip():
            raise self.fail(column, "leading or trailing blanks")
        if required and not value:
            raise self.fail(column, "empty")
        return value

    def choice(self, column: str, options: Sequence[str]) -> str:
        value = self.text(column)
        if value not in options:
            raise self.fail(column, f"not one of {', '.join(options)}")
        return value

    def integer(self, column: str, required: bool = True) -> int | None:
        value = self.text(column, required)
        if not value:
            return None
        if not _DECIMAL.fullmatch(value) or int(value) < 1:
            raise self.fail(column, "not a positive decimal integer")
        return int(value)

    def key(self, column: str, known: Mapping[str, object], what: str, required: bool = True) -> str:
        value = self.text(column, required)
        if value and value not in known:
            raise self.fail(column, f"no such {what} (known: {', '.join(sorted(known))})")
        return value


def _rows(path: Path, columns: Sequence[str]) -> Iterator[_Row]:
    """The data rows of a UTF-8 CSV whose header is exactly ``columns``."""
    path = regular_input_file(path, "published results table")
    text = read_utf8(path, "not UTF-8 text (byte {byte})")
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        header = next(reader, [])
        if tuple(header) != tuple(columns):
            raise UserInputError(f"{path}:1: header {header} is not {list(columns)}")
        for cells in reader:
            if len(cells) != len(columns):
                raise UserInputError(f"{path}:{reader.line_num}: {len(cells)} cells, expected {len(columns)}")
            yield _Row(path, reader.line_num, dict(zip(columns, cells, strict=True)))
    except csv.Error as err:
        raise UserInputError(f"{path}:{reader.line_num}: not CSV: {err}") from None


def read_references(path: Path) -> dict[str, Reference]:
    """The entries of a BibTeX file by key; a key given twice is one error line."""
    text = read_utf8(regular_input_file(path, "BibTeX file"), "not UTF-8 text (byte {byte})")
    found: dict[str, Reference] = {}
    for match in _BIB_ENTRY.finditer(text):
        kind, key, body = match.group(1).lower(), match.group(2), match.group(3)
        if key in found:
            line = text[: match.start()].count("\n") + 1
            raise UserInputError(f"{path}:{line}: BibTeX key {key!r} is given twice")
        found[key] = Reference(key, kind, dict(_BIB_FIELD.findall(body)))
    if not found:
        raise UserInputError(f"{path}: no BibTeX entry")
    return found


def _paper_split(row: _Row, references: dict[str, Reference]) -> PaperSplit:
    split_id = row.text("id")
    if not _SPLIT_ID.fullmatch(split_id):
        raise row.fail("id", "not lower-case words joined by '-'")
    match = row.choice("match", MATCHES)
    ours, defined_in = row.text("our_split", False), row.text("defined_in", False)
    if (match == "none") != (ours == "") or (ours == "") != (defined_in == ""):
        raise row.fail("our_split", "give our_split and defined_in exactly when match is not 'none'")
    if ours in PUBLISHED_SPLITS and defined_in != "packaged":
        raise row.fail("defined_in", f"{ours} is a packaged published list: expected 'packaged'")
    if ours and ours not in PUBLISHED_SPLITS and not _RECIPE.fullmatch(defined_in):
        raise row.fail("defined_in", "expected the recipe that builds it, configs/NAME.yaml")
    classes = row.integer("classes", required=False)
    listed = PUBLISHED_SPLITS[ours].n_classes if ours in PUBLISHED_SPLITS else None
    if match == "exact" and classes is not None and listed not in (None, classes):
        raise row.fail("classes", f"{ours} has {listed:,} classes, yet match is 'exact'")
    return PaperSplit(
        split_id,
        row.key("paper", references, "BibTeX key"),
        row.text("name"),
        classes,
        row.text("classes_source", required=classes is not None),
        row.text("images_per_class", False),
        ours,
        defined_in,
        match,
        row.text("why"),
    )


def read_paper_splits(path: Path, references: dict[str, Reference]) -> dict[str, PaperSplit]:
    """splits.csv by id; an id or a (paper, name) pair given twice is an error."""
    splits: dict[str, PaperSplit] = {}
    names: set[tuple[str, str]] = set()
    for row in _rows(path, SPLIT_COLUMNS):
        split = _paper_split(row, references)
        if split.id in splits or (split.paper, split.name) in names:
            raise row.fail("id", "this split (or the paper's name for it) is already listed")
        splits[split.id] = split
        names.add((split.paper, split.name))
    return splits


def _value(row: _Row, unit: str, metric: str) -> str:
    value = row.text("value")
    top = 100.0 if unit == "%" else 1.0
    for column in ("value", "plus_minus"):
        text = row.text(column, required=column == "value")
        if text and not _VALUE.fullmatch(text):
            raise row.fail(column, "not a decimal number as printed (digits, one optional '.')")
        if text and float(text) > top:
            raise row.fail(column, f"above {top:g} for unit {unit!r}")
    if unit == "fraction" and metric != "AUSUC":
        raise row.fail("unit", "only an AUSUC is printed as a fraction")
    return value


def _label_space(row: _Row, split: PaperSplit, setting: str, k: int) -> int | None:
    """The label space; under ZSL on an exact packaged list it is that list's size, or the note
    says why not."""
    size = row.integer("label_space", required=False)
    if size is not None and k > size:
        raise row.fail("k", f"K = {k} exceeds the label space of {size:,} classes")
    if setting == "ZSL" and split.match == "exact" and split.packaged and size is not None:
        listed = PUBLISHED_SPLITS[split.our_split].n_classes
        if size != listed and "label space" not in row.cells["note"]:
            problem = f"{split.our_split} has {listed:,} classes: fix it or say why in the note"
            raise row.fail("label_space", problem)
    return size


def _result(row: _Row, splits: dict[str, PaperSplit], references: dict[str, Reference]) -> PublishedResult:
    setting, metric = row.choice("setting", SETTINGS), row.choice("metric", METRICS)
    if (setting == "ZSL") != (metric == "hit@K"):
        raise row.fail("metric", "a ZSL figure is a hit@K; a GZSL figure is U, S, H or AUSUC")
    unit = row.choice("unit", UNITS)
    split = splits[row.key("split", splits, "split id of splits.csv")]
    k = row.integer("k")
    assert k is not None  # required
    return PublishedResult(
        paper=row.key("paper", references, "BibTeX key"),
        source=row.text("source"),
        page=row.text("page"),
        origin=row.key("origin", references, "BibTeX key", required=False),
        model=row.text("model"),
        backbone=row.text("backbone"),
        pretraining=row.text("pretraining"),
        semantic_space=row.text("semantic_space"),
        split=split,
        setting=setting,
        metric=metric,
        averaging=row.choice("averaging", AVERAGING),
        k=k,
        hit_rule=row.choice("hit_rule", HIT_RULES),
        label_space=_label_space(row, split, setting, k),
        value=_value(row, unit, metric),
        plus_minus=row.text("plus_minus", False),
        unit=unit,
        note=row.text("note", False),
    )


def read_results(
    path: Path, splits: dict[str, PaperSplit], references: dict[str, Reference]
) -> tuple[PublishedResult, ...]:
    """results.csv, every row checked; the same figure given twice is an error."""
    results: list[PublishedResult] = []
    seen: set[tuple[object, ...]] = set()
    for row in _rows(path, RESULT_COLUMNS):
        result = _result(row, splits, references)
        key = (result.paper, result.source, result.origin, result.model, result.semantic_space)
        key += (result.split.id, result.setting, result.metric, result.k)
        if key in seen:
            raise row.fail("value", "this figure (paper, source, model, split, metric, K) is already listed")
        seen.add(key)
        results.append(result)
    return tuple(results)


@dataclass(frozen=True)
class PublishedTable:
    """The three files of a published-results directory, read and checked together."""

    results: tuple[PublishedResult, ...]
    splits: dict[str, PaperSplit]
    references: dict[str, Reference]

    @classmethod
    def read(cls, directory: Path) -> PublishedTable:
        references = read_references(directory / "references.bib")
        splits = read_paper_splits(directory / "splits.csv", references)
        return cls(read_results(directory / "results.csv", splits, references), splits, references)


@functools.cache
def _packaged() -> PublishedTable:
    return PublishedTable.read(RESULTS_DIR)


def published_table(directory: str | Path | None = None) -> PublishedTable:
    """The packaged table (read once), or the one in ``directory``."""
    return _packaged() if directory is None else PublishedTable.read(Path(directory))


def load_published_results(directory: str | Path | None = None) -> tuple[PublishedResult, ...]:
    """Every packaged published figure, in file order (paper by paper, table by table)."""
    return published_table(directory).results


def paper_split(paper: str, name: str, directory: str | Path | None = None) -> PaperSplit:
    """What a paper's split name maps to: ``paper_split("xian2018zero", "2 H").our_split`` is
    ``"hop1"`` (match ``same-rule``: ``why`` says how the lists differ); a split with match
    ``none`` says in ``why`` why no list of ours stands for it. An unknown name is one error line
    listing the paper's names."""
    table = published_table(directory)
    for split in table.splits.values():
        if split.paper == paper and split.name == name:
            return split
    names = sorted(s.name for s in table.splits.values() if s.paper == paper)
    if not names:
        known = ", ".join(table.references)
        raise UserInputError(f"no published split of paper {paper!r}: known papers are {known}")
    raise UserInputError(f"{paper!r} names no split {name!r}: it names {', '.join(map(repr, names))}")


def bibtex_entries(keys: Sequence[str], directory: str | Path | None = None) -> str:
    """The BibTeX entries of ``keys`` as references.bib writes them (in the order given, each
    once), for the ``.bib`` file written beside a table that cites them. An unknown key is one
    error line."""
    path = (RESULTS_DIR if directory is None else Path(directory)) / "references.bib"
    text = read_utf8(regular_input_file(path, "BibTeX file"), "not UTF-8 text (byte {byte})")
    entries = {match.group(2): match.group(0) for match in _BIB_ENTRY.finditer(text)}
    unknown = [key for key in keys if key not in entries]
    if unknown:
        raise UserInputError(f"{path}: no BibTeX entry {', '.join(unknown)}")
    return "\n\n".join(entries[key] for key in dict.fromkeys(keys)) + "\n"
