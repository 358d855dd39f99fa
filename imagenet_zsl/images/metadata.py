"""The untrusted metadata of image stores, read strictly: wnids by full match, JSON within Python's
stack, class-index files one wnid a line, dataset cards through the project's one budgeted YAML
load (:func:`imagenet_zsl.config.load_yaml_text`).

Every reader here gives a result or one :class:`~imagenet_zsl.errors.UserInputError` line naming
the file (and line, shard or key): never another exception, never a hang (the property-based tests
in ``tests/robustness/test_store_fuzz.py`` feed them random and mutated bytes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from imagenet_zsl.config import BudgetedLoader, load_yaml_text
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file

#: a wnid, matched with ``fullmatch``: ``n`` and eight ASCII digits, nothing before or after (a
#: trailing newline, which ``^n\d{8}$`` lets through, is not part of a wnid)
WNID = re.compile(r"n[0-9]{8}")
#: the largest metadata file read whole (class-index file, dataset card, ``_info.json``)
MAX_METADATA_BYTES = 64 << 20


def is_wnid(value: Any) -> bool:
    """True for a string that is exactly one wnid."""
    return isinstance(value, str) and WNID.fullmatch(value) is not None


def shown(value: Any, limit: int = 40) -> str:
    """``repr`` of a value quoted in an error, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_json(data: bytes | str, where: str) -> Any:
    """The JSON value of ``data``; invalid JSON, a nesting deeper than Python's stack allows (the
    C decoder raises RecursionError) or a number too long to read is one line naming ``where``."""
    try:
        return json.loads(data)
    except RecursionError:
        raise UserInputError(f"{where}: JSON nested too deeply to be metadata") from None
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError
        raise UserInputError(f"{where}: not valid JSON ({str(err)[:80]})") from None


def read_small_file(path: Path, what: str) -> bytes:
    """The bytes of a metadata file, after the one regular-file check, at most
    :data:`MAX_METADATA_BYTES`."""
    regular_input_file(path, what)
    with open(path, "rb") as handle:
        data = handle.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise UserInputError(f"{path}: a {what} over {MAX_METADATA_BYTES >> 20} MiB; is it the right file?")
    return data


def read_class_index_file(path: Path) -> list[str]:
    """The wnids of a class-index file (line i = class i): one wnid a line, nothing else on it,
    each wnid once, no blank line before the last wnid. Anything else is one line naming
    ``file:line`` (a line holding two wnids would shift every later class by one)."""
    data = read_small_file(path, "class-index file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserInputError(f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        wnid = line.strip()
        if not wnid:
            raise UserInputError(f"{path}:{number}: a blank line inside the class list (line i is class i-1)")
        if not is_wnid(wnid):
            raise UserInputError(f"{path}:{number}: {shown(wnid)} is not one wnid; expected one wnid a line")
        if wnid in seen:
            raise UserInputError(
                f"{path}:{number}: {wnid} is listed again (first on line {seen[wnid]}); two classes "
                "cannot be one wnid"
            )
        seen[wnid] = number
    if not lines:
        raise UserInputError(f"{path}: the class-index file lists no wnid")
    return [line.strip() for line in lines]


def card_front_matter(text: str) -> str | None:
    """The YAML header of a dataset card (between a first line ``---`` and the next line
    ``---``), or None when the card has none."""
    lines = text.splitlines()
    if not lines or lines[0].rstrip() != "---":
        return None
    for number, line in enumerate(lines[1:], 1):
        if line.rstrip() == "---":
            return "\n".join(lines[1:number])
    return "\n".join(lines[1:])  # unclosed: YAML reads it whole, its mistakes are named


def read_dataset_card(folder: Path) -> tuple[dict[str, Any] | None, Path]:
    """The YAML header of ``folder/README.md`` (a Hugging Face dataset card) as a mapping, and the
    card's path; (None, path) when there is no card or no header. Read through the budgeted YAML
    load: an alias bomb or a 50,000-deep header is one line naming the card."""
    card = folder / "README.md"
    if not card.exists() and not card.is_symlink():
        return None, card
    text = read_small_file(card, "dataset card").decode("utf-8", errors="replace")
    header = card_front_matter(text)
    if header is None:
        return None, card
    front = load_yaml_text(header, card, "dataset card", BudgetedLoader)
    if front is None:
        return None, card
    if not isinstance(front, dict):
        raise UserInputError(f"{card}: the dataset card's YAML header is not a mapping")
    return front, card


def card_configs(front: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ``dataset_info`` entries of a card's header (one per configuration), as mappings."""
    infos = (front or {}).get("dataset_info")
    items = infos if isinstance(infos, list) else [infos]
    return [info for info in items if isinstance(info, dict)]
