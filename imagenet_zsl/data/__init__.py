"""Packaged reference data: the ImageNet-21K class universe and the xlsa17 class-level files.

See PROVENANCE.md beside this file for where each file comes from.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file

DATA_DIR = Path(__file__).resolve().parent
_WNID = re.compile(r"n[0-9]{8}")
#: ASCII digits only (str.isdigit() accepts '²'), at most 18 (int64; int() refuses 4,300)
_DECIMAL = re.compile(r"[0-9]{1,18}")
#: a counts table with nothing but an optional ``wnid...`` header and ``wnid<TAB>count`` rows: read
#: without the row-by-row checks (which then find nothing to name); any other shape takes them
_PLAIN_COUNTS = re.compile(r"(?:wnid[\t -~]*\n)?(?:n[0-9]{8}\t[0-9]{1,18}\n)*(?:n[0-9]{8}\t[0-9]{1,18})?")


def data_path(name: str) -> Path:
    """Path of a packaged data file, e.g. ``data_path("fall11_image_counts.tsv")``."""
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"packaged data file missing: {path} (reinstall imagenet-zsl)")
    return path


def read_utf8(path: Path, problem: str) -> str:
    """The text of ``path`` (a UTF-8 BOM dropped), or one line naming the file and the line of the
    first byte that is not UTF-8, so a bad byte is never a traceback: ``problem`` is the message
    after ``PATH:LINE: `` with ``{byte}`` for that byte (``0x..``)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line_no = data[: err.start].count(b"\n") + 1
        raise UserInputError(
            f"{path}:{line_no}: " + problem.format(byte=f"0x{data[err.start]:02x}")
        ) from None


def read_wnid_counts(path: str | Path, checked: bool = True) -> dict[str, int]:
    """``wnid<TAB>num_images`` TSV (header line optional) → ordered dict. A FIFO or device, bytes
    that are not UTF-8, a row that is not a wnid and a decimal count, or a wnid listed twice is
    one line naming the file and line. ``checked=False`` skips the rows' check (8 ms at 21,841
    rows) for the packaged table, which the suite checks."""
    path = regular_input_file(path, "counts table")
    text = read_utf8(path, "not UTF-8 text (byte {byte}); a counts table is 'wnid<TAB>count' lines")
    if not checked or _PLAIN_COUNTS.fullmatch(text):  # the usual file, checked by one regex
        words = (text.split("\n", 1)[1] if text.startswith("wnid") else text).split()
        counts = dict(zip(words[0::2], map(int, words[1::2]), strict=True))
        if 2 * len(counts) == len(words):  # else a wnid listed twice: the checks below name it
            return counts
    counts = {}
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or (line_no == 1 and line.startswith("wnid")):
            continue
        parts = [part.strip() for part in line.split("\t")]
        if len(parts) != 2 or not _WNID.fullmatch(parts[0]) or not _DECIMAL.fullmatch(parts[1]):
            raise UserInputError(f"{path}:{line_no}: expected 'wnid<TAB>count', got {line[:60]!r}")
        if parts[0] in counts:
            raise UserInputError(f"{path}:{line_no}: {parts[0]} is listed twice")
        counts[parts[0]] = int(parts[1])
    return counts


@functools.cache
def fall11_counts() -> dict[str, int]:
    """The 21,841 fall11 synsets with their image counts, in file order; every ``evaluate`` reads
    them for the population column, so the packaged table's rows are not checked each time (the
    suite checks that it reads as a user's table would)."""
    return read_wnid_counts(data_path("fall11_image_counts.tsv"), checked=False)


@functools.cache
def ilsvrc2012_wnids() -> tuple[str, ...]:
    """The 1,000 ILSVRC-2012 training classes in devkit ILSVRC2012_ID order."""
    lines = data_path("ilsvrc2012_wnids.txt").read_text().split()
    return tuple(lines)


def imagenet_isa_edges() -> list[tuple[str, str]]:
    """ImageNet's released is-a edges (parent, child), incl. the synthetic fall11/fa11misc nodes."""
    edges = []
    for line in data_path("imagenet_isa_edges.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            parent, child = line.split("\t")
            edges.append((parent, child))
    return edges


def xlsa17_root() -> Path:
    """Folder holding the packaged APY, AWA1, AWA2, CUB and SUN class-level files."""
    return DATA_DIR / "xlsa17"
