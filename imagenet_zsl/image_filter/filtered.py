"""Readers of a filter run's outputs, apart from the code that writes them: the split builder's
``image_quality`` pool filter (:func:`class_verdicts`) and ``imagenet-zsl evaluate --kept-images``
(:func:`kept_image_ids`) read a run without loading the classifiers, the tables' writer or its plot.

Both tables are CSV files a user may hand over or edit, so they are read as strict UTF-8 by the
``csv`` module in strict mode: a byte that is not UTF-8, an unbalanced quote, a row with another
number of fields than the header, a malformed verdict or class name (a wnid, or a class name of a
toy feature directory: :func:`~imagenet_zsl.features.shard_checks.class_name_problem`) or a class
listed twice is one line naming ``file:line``; a FIFO or device is refused before it is opened.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from imagenet_zsl.data import read_utf8
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.shard_checks import class_name_problem
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.paths import regular_input_file

#: a value quoted in an error is cut here: a line of a binary file must not flood the terminal
_SHOWN = 60


def _output_file(path: str | Path, name: str) -> Path:
    """``path`` itself, or ``path / name`` when it is a filter output directory (verified against
    its manifest first); must be a regular file (a FIFO would block the reader)."""
    path = Path(path)
    if path.is_dir():
        read_manifest_verified(path, OUTPUT_FORMAT, rerun="re-run 'imagenet-zsl images filter'")
        path = path / name
    return regular_input_file(path, f"{name} of 'imagenet-zsl images filter' (run it first)")


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of the CSV file ``path``: first its header, which must name each of
    ``required`` once, then every non-blank row, each with the header's number of fields. Each
    problem is one line naming ``path:line``."""
    expected = f"expected a CSV file written by 'imagenet-zsl images filter' (columns {', '.join(required)})"
    text = read_utf8(path, f"not UTF-8 text (byte {{byte}}); {expected}")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    width, start = 0, 1  # start: where the next row begins (a quoted field may span lines)
    try:
        for row in reader:
            if row and not width:
                width = len(_check_header(path, start, row, required, expected))
            elif row and len(row) != width:
                raise UserInputError(
                    f"{path}:{start}: {len(row)} fields, the header has {width}: {row!r:.{_SHOWN}}"
                )
            if row:
                yield start, row
            start = reader.line_num + 1
    except csv.Error as err:
        if "unexpected end of data" in str(err):
            raise UserInputError(f"{path}:{start}: a quote opened on this line is never closed") from None
        raise UserInputError(f"{path}:{reader.line_num}: not a CSV row ({err}); {expected}") from None
    if not width:
        raise UserInputError(f"{path}: empty; {expected}")


def _check_header(
    path: Path, line: int, header: list[str], required: tuple[str, ...], expected: str
) -> list[str]:
    """The header, once it names every ``required`` column and no column twice."""
    missing = [c for c in required if c not in header]
    if missing:
        raise UserInputError(f"{path}:{line}: missing column(s) {', '.join(missing)}; {expected}")
    seen: set[str] = set()
    twice = next((c for c in header if c in seen or seen.add(c)), None)  # linear in the header
    if twice is not None:
        raise UserInputError(f"{path}:{line}: column {twice!r:.{_SHOWN}} appears twice in the header")
    return header


def class_verdicts(path: str | Path) -> dict[str, bool]:
    """wnid → kept, for every class a filter run judged (its ``classes.csv``; ``path`` is the
    file or the run's output directory). A class absent from the result was never judged."""
    path = _output_file(path, "classes.csv")
    rows = _csv_rows(path, ("wnid", "kept"))
    header = next(rows)[1]
    at_wnid, at_kept = header.index("wnid"), header.index("kept")
    verdicts: dict[str, bool] = {}
    for line, row in rows:
        wnid, kept = row[at_wnid], row[at_kept]
        problem = class_name_problem(wnid)  # the rule of the feature directories the filter read
        if problem:
            raise UserInputError(f"{path}:{line}: {problem}")
        if kept not in ("true", "false"):
            raise UserInputError(
                f"{path}:{line}: {wnid}: 'kept' must be true or false, got {kept!r:.{_SHOWN}}"
            )
        if wnid in verdicts:
            raise UserInputError(f"{path}:{line}: {wnid} is listed twice; a class has one verdict")
        verdicts[wnid] = kept == "true"
    return verdicts


def kept_image_ids(path: str | Path) -> set[str]:
    """Image ids a filter run kept (its ``kept.csv``; ``path`` is the file or the run's output
    directory), for evaluating only kept images."""
    path = _output_file(path, "kept.csv")
    rows = _csv_rows(path, ("image_id",))
    at = next(rows)[1].index("image_id")
    kept = set()
    for line, row in rows:
        if not row[at]:
            raise UserInputError(f"{path}:{line}: empty image_id")
        kept.add(row[at])
    return kept
