"""Pretraining leakage of a split: which of its test classes a backbone saw as labels in pretraining.

A "zero-shot" class that was a pretraining label is not zero-shot. For a split and a label set
(``in1k``, ``in12k``, ``in21k-p``, ``in22k``, ... or a wnid-list file; see
:mod:`imagenet_zsl.splits.pretraining`) this reports the share of test classes in the set and the
share of test images (by image counts) that belong to those classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagenet_zsl.splits.pretraining import label_set

#: the label sets the split report tabulates
REPORT_LABEL_SETS = ("in1k", "in12k", "in21k-p", "in22k")
#: timm's ImageNet-21K-P winter21 list (MIIL's processed 10,450 classes of the winter21 release)
WINTER21_SET = "in21k-p-w21"


@dataclass(frozen=True)
class Leakage:
    """Counts of a split's classes and images that a label set contains."""

    label_set: str
    n_classes: int
    seen_classes: int
    n_images: int
    seen_images: int

    @property
    def class_share(self) -> float:
        return self.seen_classes / self.n_classes if self.n_classes else 0.0

    @property
    def image_share(self) -> float:
        return self.seen_images / self.n_images if self.n_images else 0.0

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "label_set": self.label_set,
            "n_classes": self.n_classes,
            "seen_classes": self.seen_classes,
            "class_share": round(self.class_share, 6),
            "n_images": self.n_images,
            "seen_images": self.seen_images,
            "image_share": round(self.image_share, 6),
        }


def split_leakage(wnids: Sequence[str], name: str, counts: Mapping[str, int]) -> Leakage:
    """Leakage of the test classes ``wnids`` into the label set ``name`` (or wnid-list file)."""
    seen = label_set(name)
    hit = [w for w in wnids if w in seen]
    return Leakage(
        label_set=name,
        n_classes=len(wnids),
        seen_classes=len(hit),
        n_images=sum(counts.get(w, 0) for w in wnids),
        seen_images=sum(counts.get(w, 0) for w in hit),
    )


def absent_from(wnids: Sequence[str], name: str = WINTER21_SET) -> list[str]:
    """The classes of ``wnids`` not in the label set ``name`` (sorted)."""
    present = label_set(name)
    return sorted(w for w in wnids if w not in present)
