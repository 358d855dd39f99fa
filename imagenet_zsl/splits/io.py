"""Split files: plain text, one wnid a line, sorted (DGP style) — read with clear errors."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.data import read_utf8
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.paths import regular_input_file

WNID_RE = re.compile(r"^n\d{8}$")
#: a wnid inside other text (a second class on the line, or classes joined by commas)
WNID_IN_TEXT = re.compile(r"(?<![0-9A-Za-z])n\d{8}(?![0-9])")


def read_wnid_list(path: str | Path) -> list[str]:
    """wnids of a list file in file order — the one reader of every wnid list (splits,
    --classes, --seen-classes, include/exclude lists).

    Accepts a UTF-8 BOM, CRLF line ends, blank lines and '#' comments; extra columns after the
    wnid (a name, a count) are ignored, but a line holding a second wnid is an error: a list
    written on one line (``n01440764 n01443537``, or comma-separated) would otherwise be read
    as its first class only. Raises UserInputError naming the file and line of a malformed wnid
    (``dog``, ``N01443537``), a duplicate, or a byte that is not UTF-8; a path that is not a
    regular file (a FIFO would block) is refused before it is opened. Linear in the file size.
    """
    path = regular_input_file(path, "wnid list")
    text = read_utf8(path, "invalid UTF-8 byte {byte}; save the list as UTF-8 text")
    wnids: list[str] = []
    seen: dict[str, int] = {}
    for line_no, raw in enumerate(text.splitlines(), 1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        token, *rest = content.split(None, 1)
        if not WNID_RE.match(token) or (rest and WNID_IN_TEXT.search(rest[0])):
            raise UserInputError(f"{path}:{line_no}: {_bad_line(token, content)}")
        if token in seen:
            raise UserInputError(f"{path}:{line_no}: {token} already listed on line {seen[token]}")
        seen[token] = line_no
        wnids.append(token)
    return wnids


def _bad_line(token: str, content: str) -> str:
    """Why a list line is refused: a wnid list is one wnid a line."""
    found = WNID_IN_TEXT.findall(content)
    if len(found) > 1:
        return (
            f"the line holds {len(found)} wnids ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}); "
            "write one wnid a line"
        )
    shown = token if len(token) <= 60 else token[:57] + "..."
    return f"{shown!r} is not a wnid (expected 'n' + 8 digits, e.g. n02084071)"


def write_wnid_list(path: str | Path, wnids: Iterable[str]) -> Path:
    """Sorted, one wnid a line, trailing newline (byte-identical for the same set)."""
    return atomic_write_text(path, "".join(f"{w}\n" for w in sorted(wnids)))


def check_noun_synsets(wnids: Iterable[str], where: str) -> None:
    """Every wnid must be a WordNet 3.0 noun synset; name the offenders otherwise."""
    nouns = load_wordnet_nouns()
    unknown = [w for w in wnids if w not in nouns]
    if unknown:
        raise UserInputError(
            f"{where}: {len(unknown)} wnids are not WordNet 3.0 noun synsets: {preview(unknown)}"
        )
