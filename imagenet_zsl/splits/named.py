"""The literature's class lists by name, and the one resolver of a split name.

Why: published ImageNet ZSL numbers (GCNZ, DGP, SGCN and their successors) are measured on the
lists of DGP's ``materials/imagenet-testsets.json`` (yinboc/DGP, MIT licence), which differ from
our WordNet 3.0 hop rule (``hop1`` 1,548 vs "2-hops" 1,549; ``hop2`` 5,989 vs "3-hops" 7,860).
A researcher comparing with those numbers needs the exact classes, so they ship as packaged
split files (``data/published_splits/NAME.txt``: sorted wnids, one a line) and every command
that takes a split name (``run``'s ``splits:``, ``evaluate --split``) resolves them through
``resolve_split``. Hascoet et al.'s GOZ list is not shipped: its repository (TristHas/GOZ)
carries no licence, so it may not be redistributed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.data import DATA_DIR
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.splits.io import read_wnid_list

PUBLISHED_DIR = DATA_DIR / "published_splits"
_DGP = "yinboc/DGP materials/imagenet-testsets.json"
_DGP_COMMIT = "b497ebba0f43b21a77059c7fc3eb4e5d599c5679"
_DGP_LICENCE = "MIT (Copyright (c) 2019 Yinbo Chen; full text in data/published_splits/DGP-LICENSE.txt)"
#: sha256 of the whole JSON file the three DGP lists were copied from (at _DGP_COMMIT)
DGP_JSON_SHA256 = "3014729204d93f21ff8503a723585ae16131b2825df71e1633fa804f7cab433c"
_ANIMAL = (
    "animal.n.01 (n00015388) is in DGP's list though it is 3 is-a edges from the nearest "
    "ILSVRC-2012 class on both WordNet 3.0 and ImageNet's released tree"
)


@dataclass(frozen=True)
class PublishedSplit:
    """A packaged published class list: where it comes from and how it relates to ours."""

    name: str
    key: str  # the key of the source JSON
    n_classes: int
    sha256: str  # of the packaged file (sorted wnids, one a line, trailing newline)
    ours: str  # our list of the same protocol: hop1, hop2 or all
    hops: int | None  # its hop distance (None: every candidate)
    why: str  # why it differs from ours, found by comparing distances on both graphs

    @property
    def path(self) -> Path:
        return PUBLISHED_DIR / f"{self.name}.txt"

    @property
    def source(self) -> str:
        return f"github.com/{_DGP.split(' ')[0]} @ {_DGP_COMMIT[:12]}: {_DGP.split(' ')[1]}['{self.key}']"

    @property
    def licence(self) -> str:
        return _DGP_LICENCE


PUBLISHED_SPLITS: dict[str, PublishedSplit] = {
    split.name: split
    for split in (
        PublishedSplit(
            "dgp-2hops",
            "2-hops",
            1549,
            "a3bb6cee13e4f5a5bb90f07e3df85082d08632e8ce17258f824f637260f65145",
            "hop1",
            1,
            f"all 1,548 hop1 classes plus one: {_ANIMAL}.",
        ),
        PublishedSplit(
            "dgp-3hops",
            "3-hops",
            7860,
            "274cc8a1abb383b656995e5a99cc6a07624dbcab57dc3156b1d5de2cbf0425bb",
            "hop2",
            2,
            "DGP's 3-hops follows ImageNet's released is-a tree (structure_released.xml), not WordNet "
            "3.0: our hop2 on '--graph imagenet' has 7,824 classes, 7,817 of them in dgp-3hops; the "
            "other 43 dgp-3hops classes are animal.n.01 and 42 of its 45 children (3 or 4 edges away "
            "on both graphs; the other 3 children are within 2 anyway): DGP's lists treat animal.n.01 "
            "as 1 edge from a training class, as in dgp-2hops. 7 classes 2 edges away on both graphs "
            "are missing from it (the JSON gives no reason).",
        ),
        PublishedSplit(
            "dgp-all",
            "all",
            20842,
            "eec3b875c06c1e8bc5f46aee9c8ddefff4fc008dbe975eea4ca07768b889d6b5",
            "all",
            None,
            "identical to ours: the 20,842 fall11 synsets that are not ILSVRC-2012 classes.",
        ),
    )
}


def published_split(name: str) -> PublishedSplit:
    """The published split NAME; one line naming the known names otherwise."""
    if name not in PUBLISHED_SPLITS:
        raise UserInputError(f"unknown published split {name!r}: known are {', '.join(PUBLISHED_SPLITS)}")
    return PUBLISHED_SPLITS[name]


def read_published_split(name: str) -> list[str]:
    """The wnids of a packaged published split, checked against its recorded sha256 and count."""
    split = published_split(name)
    if not split.path.is_file():
        raise UserInputError(f"{split.path}: packaged split file missing: reinstall imagenet-zsl")
    digest = hashlib.sha256(split.path.read_bytes()).hexdigest()
    if digest != split.sha256:
        raise UserInputError(
            f"{split.path}: sha256 {digest[:12]}… is not the published {split.sha256[:12]}…: "
            "the packaged file was edited; reinstall imagenet-zsl"
        )
    wnids = read_wnid_list(split.path)
    if len(wnids) != split.n_classes:  # pragma: no cover - the sha256 already pins the content
        raise UserInputError(f"{split.path}: {len(wnids)} classes, expected {split.n_classes}")
    return wnids


def _missing_hint(path: Path) -> str:
    """What writes a missing split file: ``splits factor`` for ``.../factor-NAME/NAME_B.txt``
    (configs/demo.yaml's label-frequency splits, ``make demo`` step 5), else ``splits build``."""
    factor = path.parent.name.removeprefix("factor-")
    if path.parent.name.startswith("factor-") and path.stem.startswith(f"{factor}_"):
        return (
            f"write it first with 'imagenet-zsl splits factor configs/default.yaml --factor {factor} "
            f"--bins 3 --size 30 --out {path.parent}' (as 'make demo' does), or drop it from the splits"
        )
    return "fix the path, or build the split with 'imagenet-zsl splits build'"


def _published_or_conflict(spec: str, files: list[Path], where: str) -> Path:
    """A published name wins only over a file with the same classes; a different file is an error,
    never a silent choice between two class lists."""
    split = published_split(spec)
    packaged = set(read_published_split(spec))
    for path in files:
        if set(read_wnid_list(path)) != packaged:
            raise UserInputError(
                f"split {spec!r} is ambiguous ({where}): it names the published {split.key!r} list of "
                f"DGP and {path}, which holds other classes; rename {path} (or give it as ./{path})"
            )
    return split.path


def resolve_split(spec: str | Path, splits_dir: str | Path | None, where: str) -> Path:
    """The wnid file of a split spec: a path (an existing file, or one with ``/`` or ``.txt``), a
    published name (``dgp-2hops``, ``dgp-3hops``, ``dgp-all``), or a committed name
    (``splits_dir/NAME.txt``).

    Precedence: a published name that is also ``splits_dir/NAME.txt`` (or a file NAME) is allowed
    only when both hold the same classes (then the packaged file is used); otherwise it is an
    error, so a run never evaluates on one of two different lists by accident.
    """
    text = str(spec)
    path = Path(text)
    if (path.exists() and not path.is_dir()) or (path.is_symlink() and not path.exists()):
        regular_input_file(path, f"split file ({where})")  # a FIFO or link loop is named, not "not found"
    looks_like_path = "/" in text or text.endswith(".txt")
    committed = Path(splits_dir) / f"{text}.txt" if splits_dir is not None and not looks_like_path else None
    if text in PUBLISHED_SPLITS:
        files = [p for p in (path, committed) if p is not None and p.is_file()]
        return _published_or_conflict(text, files, where)
    if path.is_file():
        return path
    if looks_like_path:
        raise UserInputError(f"split file {text} not found ({where}): {_missing_hint(path)}")
    if committed is None or not committed.is_file():
        place = f"neither a file nor {committed}" if committed is not None else "not a file"
        raise UserInputError(
            f"split {text!r} not found ({where}): {place}, nor a published split "
            f"({', '.join(PUBLISHED_SPLITS)}); build it with 'imagenet-zsl splits build'"
        )
    return committed
