"""Split files: plain text, one wnid a line, sorted (DGP style) — read with clear errors."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.io import atomic_write_text

WNID_RE = re.compile(r"^n\d{8}$")


def read_wnid_list(path: str | Path) -> list[str]:
    """wnids of a list file in file order — the one reader of every wnid list (splits,
    --classes, --seen-classes, include/exclude lists).

    Accepts a UTF-8 BOM, CRLF line ends, blank lines and '#' comments; extra columns after the
    wnid are ignored. Raises UserInputError naming the file and line of a malformed wnid
    (``dog``, ``N01443537``), a duplicate, or a byte that is not UTF-8.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(
            f"{path}: wnid list not found" + (" (it is a directory)" if path.is_dir() else "")
        )
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line_no = data[: err.start].count(b"\n") + 1
        raise UserInputError(
            f"{path}:{line_no}: invalid UTF-8 byte 0x{data[err.start]:02x}; save the list as UTF-8 text"
        ) from None
    wnids: list[str] = []
    seen: dict[str, int] = {}
    for line_no, raw in enumerate(text.splitlines(), 1):
        token = raw.split("#", 1)[0].strip()
        if not token:
            continue
        token = token.split()[0]
        if not WNID_RE.match(token):
            raise UserInputError(
                f"{path}:{line_no}: {token!r} is not a wnid (expected 'n' + 8 digits, e.g. n02084071)"
            )
        if token in seen:
            raise UserInputError(f"{path}:{line_no}: {token} already listed on line {seen[token]}")
        seen[token] = line_no
        wnids.append(token)
    return wnids


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
