"""One built split as ``splits build`` hands it to the manifest and the report.

Its own module so that :mod:`imagenet_zsl.splits.build` (which makes it) and
:mod:`imagenet_zsl.splits.report` (which shows it) both import it, and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagenet_zsl.splits.pool import PoolStep
from imagenet_zsl.splits.structure import mean_ratio


@dataclass
class BuiltSplit:
    """A split's classes, per-class structural ratios, flaws, image count and how it was chosen."""

    name: str
    kind: str
    params: dict[str, Any]
    wnids: list[str]
    ratios: np.ndarray
    pairs_within: int
    pairs_with_train: int
    n_images: int
    pool_steps: list[PoolStep] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """R: the mean of the finite per-class ratios (NaN when none is finite)."""
        return mean_ratio(self.ratios)

    @property
    def consistent(self) -> bool:
        """Hascoet's structural consistency: no is-a pair inside the split or with training."""
        return self.pairs_within == 0 and self.pairs_with_train == 0
