"""Hop splits (Frome et al.; Xian et al.): candidates within k is-a edges of a training class.

Naming caveat (Hascoet et al., CVPR 2019): the literature's "2-hops" and "3-hops" test sets are
named one hop higher than the true graph distance of their classes to the training set. Here
``hopK`` means exactly what it says: undirected is-a distance <= K from the nearest training
class. The literature's "2-hops" corresponds to our ``hop1`` and its "3-hops" to our ``hop2``
(``LITERATURE_NAMES``).
"""

from __future__ import annotations

from collections.abc import Sequence

from imagenet_zsl.hierarchy.graph import ClassGraph

LITERATURE_NAMES = {"hop1": "2-hops", "hop2": "3-hops", "hop3": "4-hops"}


def hop_split(graph: ClassGraph, candidates: Sequence[str], train: Sequence[str], k: int) -> list[str]:
    """Sorted candidates whose undirected distance to the nearest training class is <= k."""
    dist = graph.nearest_distance(candidates, train)
    return sorted(w for w, d in zip(candidates, dist, strict=True) if d <= k)
