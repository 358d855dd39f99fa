"""Hascoet et al.'s structural analysis of a test set: flaws, consistency, structural ratio.

For a test class c with training set C_tr and test set C_te:
    r(c) = d(c, C_tr) / d(c, C_te \\ {c})        R(C_te) = mean_c r(c)
with d the undirected is-a distance to the nearest member of the set. A high R means the
test classes lie closer to each other than to any training class — the hard, honest case.
A set is *structurally consistent* when no test class is an ancestor or descendant of another
test class or of a training class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from imagenet_zsl.hierarchy.graph import ClassGraph


def structural_ratios(graph: ClassGraph, test: Sequence[str], train: Sequence[str]) -> np.ndarray:
    """(len(test),) r(c) per test class: inf where no training class is reachable (a disconnected
    graph), 0 where no other test class is (d(c, ∅) = inf, so a lone class counts as easy), NaN
    where neither is."""
    to_train = graph.nearest_distance(test, train)
    to_test = graph.nearest_other_distance(test)
    with np.errstate(divide="ignore", invalid="ignore"):
        return to_train / to_test


def finite_ratios(ratios: np.ndarray) -> np.ndarray:
    """The per-class ratios R is made of: an r(c) that is not finite (inf: no path to a training
    class on a disconnected graph; NaN: neither a training nor another test class reachable) is
    left out, never averaged. A class with no other test class reachable has r = 0 and stays."""
    return ratios[np.isfinite(ratios)]


def mean_ratio(ratios: np.ndarray) -> float:
    """R from per-class ratios: the mean of the finite ones (NaN when none is finite)."""
    finite = finite_ratios(ratios)
    return float(finite.mean()) if len(finite) else float("nan")


def exact_ratio_sum(graph: ClassGraph, test: Sequence[str], train: Sequence[str]) -> Fraction:
    """N R of ``test`` as an exact fraction (hop counts are whole numbers), with the terms of
    :func:`structural_ratios`: r = 0 where no other test class is reachable, left out of the mean
    where no training class is. The optimiser's tie rule needs it exactly: N R times a scale of up to
    10^9 in floats is off by more than any tolerance."""
    to_train = graph.nearest_distance(test, train)
    to_test = graph.nearest_other_distance(test)
    ratios = [
        Fraction(int(a), int(b)) if math.isfinite(b) else Fraction(0)
        for a, b in zip(to_train.tolist(), to_test.tolist(), strict=True)
        if math.isfinite(a)
    ]
    return sum(ratios, Fraction(0)) * len(test) / len(ratios) if ratios else Fraction(0)


def structural_ratio(graph: ClassGraph, test: Sequence[str], train: Sequence[str]) -> float:
    """R(C_te): mean of the finite per-class ratios (NaN when none is finite; a one-class set has
    r = 0, so R = 0)."""
    return mean_ratio(structural_ratios(graph, test, train))


@dataclass
class StructureStats:
    n_classes: int
    structural_ratio: float
    pairs_within: int
    pairs_with_train: int

    @property
    def consistent(self) -> bool:
        return self.pairs_within == 0 and self.pairs_with_train == 0


def structure_stats(graph: ClassGraph, test: Sequence[str], train: Sequence[str]) -> StructureStats:
    """Ratio plus Hascoet's structural flaws: ancestor/descendant pairs inside and with train."""
    return StructureStats(
        n_classes=len(test),
        structural_ratio=structural_ratio(graph, test, train),
        pairs_within=len(graph.related_pairs(test)),
        pairs_with_train=len(graph.related_pairs(test, train)),
    )
