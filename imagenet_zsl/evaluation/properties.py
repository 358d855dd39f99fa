"""Class properties joined to per-class accuracy, to plot accuracy against them.

Hascoet et al. (2019, Figs. 3, 5, 9) relate a class's zero-shot accuracy to its structural ratio
(how close it sits to training classes in WordNet), its population (images in ImageNet-21K) and
how frequent its name is in text. Each column is optional: a value that cannot be computed here
(class not in the graph, WordNet not installed, no training classes known) is NaN, never a guess,
so evaluation also works with a hand-made graph.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.semantics.frequency import class_label_frequencies
from imagenet_zsl.splits.structure import structural_ratios

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

log = logging.getLogger(__name__)

#: the property columns, in table order
PROPERTY_COLUMNS = ("population", "structural_ratio", "label_frequency", "depth")


def populations(wnids: Sequence[str], counts: dict[str, int] | None = None) -> np.ndarray:
    """Images per class in fall11 (ImageNet-21K); NaN for classes not listed."""
    if counts is None:
        counts = fall11_counts()
    return np.array([counts.get(w, np.nan) for w in wnids], dtype=np.float64)


def structural_ratio_column(
    graph: ClassGraph | None, wnids: Sequence[str], seen_wnids: Sequence[str] | None
) -> np.ndarray:
    """The split package's structural ratio of each class, or NaN where it cannot be computed."""
    nan = np.full(len(wnids), np.nan)
    if graph is None or not seen_wnids:
        return nan
    in_graph = [w in graph for w in wnids]
    seen_in_graph = [w for w in seen_wnids if w in graph]
    if not any(in_graph) or not seen_in_graph:
        return nan
    test = [w for w, ok in zip(wnids, in_graph, strict=True) if ok]
    try:
        ratios = np.asarray(structural_ratios(graph, test, seen_in_graph), dtype=np.float64)
    except Exception as err:  # a property column must never sink the evaluation
        log.warning("structural ratio not computed (%s): left NaN", err)
        return nan
    out = nan.copy()
    out[np.flatnonzero(in_graph)] = ratios
    return out


def label_frequencies(wnids: Sequence[str]) -> np.ndarray:
    """wordfreq Zipf frequency of each class's first WordNet lemma; NaN without WordNet or wordfreq
    (:func:`~imagenet_zsl.semantics.frequency.class_label_frequencies`: cached for the ImageNet
    classes)."""
    try:
        return class_label_frequencies(list(wnids))
    except Exception as err:  # WordNet not installed, or wordfreq missing
        log.warning("label frequency left NaN (%s)", str(err).splitlines()[0] if str(err) else err)
        return np.full(len(wnids), np.nan)


def property_columns(
    wnids: Sequence[str],
    graph: ClassGraph | None = None,
    seen_wnids: Sequence[str] | None = None,
    counts: dict[str, int] | None = None,
    label_frequency: bool = True,
    test_wnids: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """The :data:`PROPERTY_COLUMNS` of ``wnids``, row for row: (len(wnids),) float64 each.

    The structural ratio is computed for ``test_wnids`` (default: all ``wnids``) as one test set
    against ``seen_wnids``; other rows (e.g. seen classes in GZSL) get NaN.
    """
    test_wnids = list(wnids) if test_wnids is None else list(test_wnids)
    ratio = dict(zip(test_wnids, structural_ratio_column(graph, test_wnids, seen_wnids), strict=True))
    depth = np.full(len(wnids), np.nan)
    if graph is not None:
        present = [i for i, w in enumerate(wnids) if w in graph]
        if present:
            depth[present] = graph.depths[graph.indices([wnids[i] for i in present])]
    return {
        "population": populations(wnids, counts),
        "structural_ratio": np.array([ratio.get(w, np.nan) for w in wnids], dtype=np.float64),
        "label_frequency": (label_frequencies(wnids) if label_frequency else np.full(len(wnids), np.nan)),
        "depth": depth,
    }
