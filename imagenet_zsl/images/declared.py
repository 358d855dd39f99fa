"""What a store declares it holds, against what it holds: a store that is incomplete.

A damaged shard is one source's problem (counted in its ledger entry, never fatal). A store that
lacks whole sources, or holds fewer images than its own metadata declares, is incomplete:

- a numbered series with a gap (``s-0002.tar``, ``s-0004.tar``: ``s-0003.tar`` is missing), or
  a ``-of-N`` series (``train-00000-of-00004.parquet``) without all N files. Numbers missing
  before the first file of a series are not seen (a subset of shards ``0100..0199`` is allowed);
- ``nshards.txt`` (CLIP_benchmark's webdataset layout): fewer shards than it declares;
- ``_info.json`` (timm's webdataset datasets): a listed shard absent, or a shard holding fewer
  samples than its ``shard_lengths`` entry;
- the dataset card (``README.md``, ``dataset_info.splits[].num_examples``): a split holding fewer
  images than declared (a split's sources are those whose path names it: ``train-…``, ``…-validation-…``).

A shortfall in sources that the ledger records as damaged is explained by the damage (a note,
not a finding). :func:`incomplete_store` returns the findings; ``open_store`` refuses an
incomplete store unless ``allow_incomplete`` (``--allow-incomplete``), which records them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.metadata import card_configs, parse_json, read_dataset_card, read_small_file, shown

#: a numbered source: stem, number, an optional ``-of-N`` total, the suffix
NUMBERED_RE = re.compile(
    r"(?P<stem>.*?)(?P<num>[0-9]{1,9})(?P<total>-of-[0-9]{1,9})?(?P<suffix>\.(?:tar|parquet))"
)
NSHARDS_FILE = "nshards.txt"
INFO_FILE = "_info.json"
#: brace ranges of shard names (``s-{0000..0099}.tar``), as webdataset writes them
BRACE_RE = re.compile(r"\{([0-9]{1,9})\.\.([0-9]{1,9})\}")


def _finding(kind: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "detail": detail, **extra}


def series_gaps(sources: Iterable[str]) -> list[dict[str, Any]]:
    """Files missing from numbered series of ``sources`` (relative names). A group of names that
    differ only in their number is a series when it declares a ``-of-N`` total, starts at 0 or 1,
    or its numbers are zero-padded to one width; its gaps (and for ``-of-N``, every number below
    N) are findings."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for name in sources:
        match = NUMBERED_RE.fullmatch(name)
        if match is not None:
            key = (match["stem"], match["total"] or "", match["suffix"])
            groups.setdefault(key, []).append(match["num"])
    findings = []
    for (stem, total, suffix), numbers in sorted(groups.items()):
        values = sorted(int(n) for n in numbers)
        widths = {len(n) for n in numbers}
        width = widths.pop() if len(widths) == 1 else 0
        padded = width > 1 and any(n.startswith("0") for n in numbers)
        if total:
            wanted = range(int(total.removeprefix("-of-")))
        elif len(values) > 1 and (values[0] <= 1 or padded):
            wanted = range(values[0], values[-1] + 1)
        else:
            continue
        missing = sorted(set(wanted) - set(values))
        if missing:
            names = [f"{stem}{m:0{width}d}{total}{suffix}" for m in missing]
            findings.append(
                _finding(
                    "gap",
                    f"{names[0]} is missing from the numbered series {stem}*{total}{suffix} "
                    f"({len(missing)} missing, {len(values)} present)",
                    missing=names[:20],
                )
            )
    return findings


def _brace_expand(name: str) -> list[str]:
    """The names a brace range ``{0000..0099}`` stands for (one range; none: the name itself)."""
    match = BRACE_RE.search(name)
    if match is None:
        return [name]
    first, last = match.group(1), match.group(2)
    width = len(first) if first.startswith("0") else 0
    if int(last) - int(first) > 1_000_000:
        raise UserInputError(f"{name!r}: a brace range of more than a million shards")
    head, tail = name[: match.start()], name[match.end() :]
    return [f"{head}{n:0{width}d}{tail}" for n in range(int(first), int(last) + 1)]


def _nshards(folder: Path, images: dict[str, int]) -> list[dict[str, Any]]:
    path = folder / NSHARDS_FILE
    if not path.exists() and not path.is_symlink():
        return []
    text = read_small_file(path, "shard count file").decode("utf-8", "replace").strip()
    if re.fullmatch(r"[0-9]{1,9}", text) is None:
        raise UserInputError(f"{path}: holds {shown(text[:40])}, not a number of shards")
    declared = int(text)
    if len(images) < declared:
        return [
            _finding(
                "declared-shards",
                f"{path} declares {declared:,} shards, the store holds {len(images):,}",
                declared=declared,
                found=len(images),
            )
        ]
    return []


def _info_splits(path: Path) -> dict[str, Any]:
    info = parse_json(read_small_file(path, "dataset info file"), str(path))
    splits = info.get("splits") if isinstance(info, dict) else None
    if not isinstance(splits, dict):
        raise UserInputError(f"{path}: no 'splits' mapping; not a webdataset info file")
    return splits


def _info_lengths(path: Path, name: str, split: Any) -> list[tuple[str, int | None]]:
    """(shard name, declared samples or None) of one split of ``_info.json``."""
    files = split.get("filenames") if isinstance(split, dict) else None
    lengths = split.get("shard_lengths") if isinstance(split, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise UserInputError(f"{path}: split {shown(name)} has no 'filenames' list")
    names = [n for f in files for n in _brace_expand(f)]
    if lengths is None:
        return [(n, None) for n in names]
    if (
        not isinstance(lengths, list)
        or len(lengths) != len(names)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths)
    ):
        raise UserInputError(
            f"{path}: split {shown(name)}: 'shard_lengths' must be one count (an integer >= 0) per file"
        )
    return list(zip(names, lengths, strict=True))


def _info(folder: Path, images: dict[str, int], damaged: set[str]) -> list[dict[str, Any]]:
    path = folder / INFO_FILE
    if not path.exists() and not path.is_symlink():
        return []
    findings = []
    for name, split in _info_splits(path).items():
        for shard, declared in _info_lengths(path, name, split):
            if shard not in images:
                findings.append(
                    _finding(
                        "declared-shard", f"{shard} is listed in {path} (split {name}) but not in the store"
                    )
                )
            elif declared is not None and images[shard] < declared and shard not in damaged:
                findings.append(
                    _finding(
                        "declared-samples",
                        f"{shard} holds {images[shard]:,} samples, {path} declares {declared:,}",
                        declared=declared,
                        found=images[shard],
                    )
                )
    return findings


def _split_sources(split: str, images: dict[str, int]) -> list[str]:
    token = re.compile(rf"(?:^|[-_./]){re.escape(split.lower())}(?:[-_./]|$)")
    return [name for name in images if token.search(name.lower())]


def _card(folder: Path, images: dict[str, int], damaged: set[str]) -> list[dict[str, Any]]:
    front, card = read_dataset_card(folder)
    configs = [c for c in card_configs(front) if isinstance(c.get("splits"), list)]
    if len(configs) != 1:
        return []  # no splits, or several configurations: which one the store is cannot be told
    declared = {
        s["name"]: s["num_examples"]
        for s in configs[0]["splits"]
        if isinstance(s, dict)
        and isinstance(s.get("name"), str)
        and isinstance(s.get("num_examples"), int)
        and not isinstance(s.get("num_examples"), bool)
    }
    parts = {name: _split_sources(name, images) for name in declared}
    if not any(parts.values()):  # no source names a split: the store is all of them
        parts = {"(all splits)": list(images)}
        declared = {"(all splits)": sum(declared.values())}
    findings = []
    for name, sources in parts.items():
        found = sum(images[s] for s in sources)
        if found < declared[name] and not damaged & set(sources):
            findings.append(
                _finding(
                    "declared-split",
                    f"split {name}: {card} declares {declared[name]:,} images, the store holds {found:,}",
                    declared=declared[name],
                    found=found,
                )
            )
    return findings


def incomplete_store(root: Path, layout: str, ledger: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the store at ``root`` lacks of what it declares (see the module docstring): one record
    per finding, ``{"kind", "detail", ...}``; empty when nothing is missing."""
    if root.is_file() or layout not in ("wds", "parquet"):
        return []
    images = {entry["source"]: entry["images"] for entry in ledger}
    damaged = {entry["source"] for entry in ledger if entry["damage"]}
    findings = series_gaps(images)
    if layout == "wds":
        findings += _nshards(root, images) + _info(root, images, damaged)
    return findings + _card(root, images, damaged)
