"""The label space of a zero-shot evaluation: the classes a test image is ranked against.

Why: in the papers' hop and "All" protocols the label space is the split's classes (or every
ImageNet-21K class that is not a training class), whatever subset of the test images a user
holds. Classes without test images stay in the label space as distractors; metrics are computed
over the test images. ``--label-space split|all|FILE`` (and the ``label_space`` key of a ``run``
recipe) choose it; this module is the one place that turns that choice into a class list.

The classes kept out of every zero-shot label space are decided here too
(:func:`training_classes`): a class that any model of the evaluation was trained on, that the
backbone's head classifies, or that plays a seen class in GZSL, whatever held-out images or
calibration classes exist. ``evaluate``, ``run`` and ``predict`` all call it, so they agree.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.universe import universe_wnids
from imagenet_zsl.splits.io import read_wnid_list

#: the named label spaces; anything else is a wnid list file
NAMED_LABEL_SPACES = ("split", "all")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingClasses:
    """The classes no zero-shot label space may hold: ``wnids`` (sorted) and ``source``, the names
    of the sets that contributed classes (a set adding nothing new is not named, so the same
    classes read the same whichever sets a mode has)."""

    wnids: list[str]
    source: str

    def __len__(self) -> int:
        return len(self.wnids)


def training_classes(
    parts: Sequence[tuple[str, Sequence[str] | None]], fallback: Sequence[str] = ()
) -> TrainingClasses:
    """The union of the named class sets ``parts`` ((name, wnids or None) in order of authority:
    the models' training classes, the backbone head's classes, the GZSL seen classes); when they
    are all empty, ``fallback`` (ILSVRC-2012's 1,000 classes) named as such."""
    union: set[str] = set()
    names = []
    for name, wnids in parts:
        new = set(wnids or ()) - union
        if new:
            union |= new
            names.append(name)
    if not union and fallback:
        return TrainingClasses(sorted(set(fallback)), "ILSVRC-2012 classes (none recorded)")
    return TrainingClasses(sorted(union), " + ".join(names) if names else "none")


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
    predicted). Seen classes are never part of a zero-shot label space: listed ones leave a FILE's
    space with one warning line that counts them (never silently)."""
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
        dropped = sorted(set(listed) & seen)
        if dropped:
            log.warning(
                "%s: %d listed classes are training classes and leave the zero-shot label space: %s",
                spec,
                len(dropped),
                preview(dropped),
            )
    overlap = sorted(set(split_wnids) & seen)
    if overlap:
        raise UserInputError(
            f"{where}: {len(overlap)} split classes are seen (training) classes: {preview(overlap)}; "
            "a zero-shot test class is never a training class: drop them from the split"
        )
    return sorted(classes)
