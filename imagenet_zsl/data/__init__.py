"""Packaged reference data: the ImageNet-21K class universe and the xlsa17 class-level files.

See PROVENANCE.md beside this file for where each file comes from.
"""

from __future__ import annotations

import functools
from pathlib import Path

from imagenet_zsl.errors import UserInputError

DATA_DIR = Path(__file__).resolve().parent


def data_path(name: str) -> Path:
    """Path of a packaged data file, e.g. ``data_path("fall11_image_counts.tsv")``."""
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"packaged data file missing: {path} (reinstall imagenet-zsl)")
    return path


def read_wnid_counts(path: str | Path) -> dict[str, int]:
    """``wnid<TAB>num_images`` TSV (header line optional) → ordered dict; clear errors on bad rows."""
    counts: dict[str, int] = {}
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line.startswith("#") or (line_no == 1 and line.startswith("wnid")):
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[1].strip().isdigit():
                raise UserInputError(f"{path}:{line_no}: expected 'wnid<TAB>count', got {line[:60]!r}")
            counts[parts[0].strip()] = int(parts[1])
    return counts


@functools.cache
def fall11_counts() -> dict[str, int]:
    """The 21,841 fall11 synsets with their image counts, in file order."""
    return read_wnid_counts(data_path("fall11_image_counts.tsv"))


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
