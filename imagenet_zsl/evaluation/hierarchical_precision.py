"""Hierarchical precision@K (hP@K), the second ImageNet zero-shot metric of DeViSE (Frome et al.
2013, NIPS, §4 and the supplementary material's Algorithm 1) and ConSE (Norouzi et al. 2014,
ICLR, which reports it with the same definition), computed from the stored top-k lists.

Our reading of Frome et al.'s definition. For an image whose true class is ``c`` and a given K,
the correct set ``H_K(c)`` is grown by radius: start at R = 0; at each R add the classes of the
label space whose hop distance to ``c`` in the WordNet is-a graph, taken as undirected (a step up
to a hypernym or down to a hyponym is one hop; a sibling is two), is at most R; stop at the first
R at which the set holds at least K classes. The whole last ring is kept, so ``H_K(c)`` may hold
more than K classes. Hops pass through every node of the graph, also through nodes that are not
in the label space. hP@K = |top-K ∩ H_K(c)| / K, averaged over images (per image, as flat hit@K;
the count-as-miss images of a run are in the denominator with no credit). ``H_1(c) = {c}``, so
hP@1 is flat hit@1.

Edge cases the paper does not meet: when the connected part of the label space holds fewer than
K classes, ``H_K(c)`` is all of it, and when the label space itself holds C < K classes the
top-K is C predictions and hP@K is over C; a true class that is not a node of the graph has
``H_K(c) = {c}``. Ties: the flat headline's rule, the expected value under uniform random
tie-breaking (:mod:`imagenet_zsl.scoring.hierarchical`).

Cost: one breadth-first search per test class, stopped at the radius of the largest K (a few
hops), and one sorted-key lookup per listed class, ``SORT_BLOCK`` images at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.scoring import TieRanks, release_pages
from imagenet_zsl.scoring.hierarchical import hp_credit
from imagenet_zsl.scoring.ranks import sort_block

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

DEFINITION = (
    "hP@K (Frome et al. 2013, DeViSE, supplementary Algorithm 1; Norouzi et al. 2014, ConSE): "
    "|top-K ∩ H_K| / K per image, averaged over images; H_K: the label-space classes within R "
    "undirected is-a hops of the true class, R grown from 0 until H_K holds at least K classes "
    "(the whole last ring kept); over min(K, C) predictions in a space of C classes; hP@1 = "
    "hit@1; ties: expected value under uniform random "
    "tie-breaking"
)


@dataclass(frozen=True)
class CorrectSets:
    """The correct sets of the test classes for each K, as sorted keys.

    ``keys`` (P,) int64 sorted ``class * n_space + member`` over every (class, member) pair found
    within the largest K's radius; ``hops`` (P,) the member's distance; ``radius[k]`` (n_classes,)
    the radius of ``H_k`` of each class; ``size[k]`` (n_classes,) ``|H_k|``.
    """

    keys: np.ndarray
    hops: np.ndarray
    radius: dict[int, np.ndarray]
    size: dict[int, np.ndarray]
    n_space: int

    def member(self, labels: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
        """(B, m) bool: ``ids[i, j]`` is in ``H_k(labels[i])`` (padding -1 never is)."""
        labels = np.asarray(labels, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        query = labels[:, None] * self.n_space + ids
        if len(self.keys) == 0:
            return np.zeros(ids.shape, bool)
        pos = np.clip(np.searchsorted(self.keys, query), 0, len(self.keys) - 1)
        found = (self.keys[pos] == query) & (ids >= 0)
        return found & (self.hops[pos] <= self.radius[k][labels][:, None])


def _rings(adj: Any, node: int, space_of: np.ndarray, need: int, visited: np.ndarray) -> list[np.ndarray]:
    """Label-space indices at hop distance 0, 1, 2, ... of ``node`` in the undirected adjacency
    ``adj``, until ``need`` are found or the component is exhausted. ``visited`` (all False on
    entry, all False again on return) is the scratch mark of each graph node."""
    frontier = np.array([node], dtype=np.int64)
    touched = [frontier]
    visited[frontier] = True
    rings: list[np.ndarray] = []
    found = 0
    while len(frontier):
        ring = space_of[frontier]
        ring = np.sort(ring[ring >= 0])
        rings.append(ring)
        found += len(ring)
        if found >= need:
            break
        nxt = np.unique(adj[frontier].indices)
        frontier = nxt[~visited[nxt]]
        visited[frontier] = True
        touched.append(frontier)
    visited[np.concatenate(touched)] = False
    return rings


def correct_sets(
    graph: ClassGraph, space_wnids: Sequence[str], classes: Sequence[int], ks: Sequence[int]
) -> CorrectSets:
    """``H_k`` of each test class (``classes``: indices into ``space_wnids``) for each K."""
    ks = sorted({int(k) for k in ks})
    n_space = len(space_wnids)
    space_of = np.full(len(graph), -1, dtype=np.int64)
    nodes = np.array([graph.index.get(w, -1) for w in space_wnids], dtype=np.int64)
    space_of[nodes[nodes >= 0]] = np.flatnonzero(nodes >= 0)
    n_classes = max([n_space, *[int(c) + 1 for c in classes]])
    radius = {k: np.zeros(n_classes, np.int64) for k in ks}
    size = {k: np.ones(n_classes, np.int64) for k in ks}
    keys, hops = [], []
    adj, visited = graph.adjacency, np.zeros(len(graph), dtype=bool)
    for c in sorted({int(c) for c in classes}):
        node = nodes[c] if c < n_space else -1
        rings = [np.array([c])] if node < 0 else _rings(adj, int(node), space_of, ks[-1], visited)
        counts = np.cumsum([len(r) for r in rings])
        for k in ks:
            r = int(min(np.searchsorted(counts, k), len(rings) - 1))
            radius[k][c], size[k][c] = r, counts[r]
        for r, ring in enumerate(rings):
            keys.append(c * n_space + ring)
            hops.append(np.full(len(ring), r, np.int64))
    all_keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    all_hops = np.concatenate(hops) if hops else np.zeros(0, np.int64)
    order = np.argsort(all_keys, kind="stable")
    return CorrectSets(all_keys[order], all_hops[order], radius, size, n_space)


def hierarchical_precision(
    graph: ClassGraph,
    space_wnids: Sequence[str],
    labels: np.ndarray,
    lists: tuple[np.ndarray, np.ndarray],
    ks: Sequence[int],
    ranks: TieRanks | None = None,
    misses: int = 0,
) -> dict[str, Any]:
    """metrics.json's ``hierarchical_precision`` block: hP@K per K over the searched images
    (``labels`` (N,), ``lists`` = (scores, ids) (N, m), memory maps welcome) and ``misses``
    count-as-miss images (no credit, in the denominator)."""
    scores, ids = lists
    labels = np.asarray(labels, dtype=np.int64)
    ks = sorted({int(k) for k in ks})
    sets = correct_sets(graph, space_wnids, np.unique(labels), ks)
    complete = ids.shape[1] >= len(space_wnids)
    credits = {k: np.zeros(len(labels)) for k in ks}
    block = sort_block()
    for lo in range(0, len(labels), block):
        rows = slice(lo, lo + block)
        part = None if ranks is None else TieRanks(ranks.above[rows], ranks.tied[rows])
        b_ids, b_scores, b_labels = np.asarray(ids[rows]), np.asarray(scores[rows]), labels[rows]
        for k in ks:
            member = sets.member(b_labels, b_ids, k)
            credit = hp_credit(b_ids, b_scores, member, b_labels, k, ranks=part, complete=complete)
            credits[k][rows] = credit
        release_pages(ids, scores)  # read once: not kept resident
    images = len(labels) + int(misses)
    present = np.unique(labels)
    return {
        "definition": DEFINITION,
        "graph": graph.source,
        "images": images,
        # one sum over the (N,) credits: the same bits whatever the block size
        "flat": {str(k): (float(credits[k].sum()) / images if images else float("nan")) for k in ks},
        "mean_correct_set_size": {str(k): float(sets.size[k][present].mean()) for k in ks},
    }
