"""The label space of a zero-shot evaluation: the classes a test image is ranked against.

Why: in the papers' hop and "All" protocols the label space is the split's classes (or every
ImageNet-21K class that is not a training class), whatever subset of the test images a user
holds. Classes without test images stay in the label space as distractors; metrics are computed
over the test images. ``--label-space split|all|FILE`` (and the ``label_space`` key of a ``run``
recipe) choose it; this module is the one place that turns that choice into a class list.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.universe import universe_wnids
from imagenet_zsl.splits.io import read_wnid_list

#: the named label spaces; anything else is a wnid list file
NAMED_LABEL_SPACES = ("split", "all")


def check_label_space_spec(spec: str, where: str) -> None:
    """Fail early (before any work) on a FILE spec that does not exist."""
    if spec in NAMED_LABEL_SPACES:
        return
    if not Path(spec).is_file():
        raise UserInputError(
            f"{where}: label space {spec!r} is neither 'split', 'all' nor an existing wnid list file"
        )


def resolve_label_space(
    spec: str, split_wnids: Sequence[str], seen_wnids: Sequence[str], where: str = "--label-space"
) -> list[str]:
    """The label space, sorted: ``split`` → the split's classes; ``all`` → the 21,842-class
    ImageNet universe (plus any split class outside it) less the seen classes; FILE → its wnids,
    which must include every split class (a test class outside the label space could never be
    predicted). Seen classes are never part of a zero-shot label space."""
    seen = set(seen_wnids)
    if spec == "split":
        classes = set(split_wnids)
    elif spec == "all":
        classes = (set(universe_wnids()) | set(split_wnids)) - seen
    else:
        check_label_space_spec(spec, where)
        listed = read_wnid_list(spec)
        missing = sorted(set(split_wnids) - set(listed))
        if missing:
            raise UserInputError(
                f"{spec}: the label space lacks {len(missing)} of the split's classes ({preview(missing)}); "
                "a label space must hold every test class"
            )
        classes = set(listed) - seen
    overlap = sorted(set(split_wnids) & seen)
    if overlap:
        raise UserInputError(
            f"{where}: {len(overlap)} split classes are seen (training) classes: {preview(overlap)}"
        )
    return sorted(classes)
