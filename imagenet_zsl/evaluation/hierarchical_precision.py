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
top-K is C predictions and hP@K is over C. A true class that is not a node of the graph has no
correct set: its images are left out of hP@K (not scored as if the class had no relatives), and
the block records how many classes and images were left out and which classes (a warning says
so). Ties: the flat headline's rule, the expected value under uniform random tie-breaking
(:mod:`imagenet_zsl.scoring.hierarchical`).

Cost: one breadth-first search from all test classes at once (a block of them per vectorised
step, each stopped at the radius of the largest K: a few hops), and one sorted-key lookup per
listed class, ``SORT_BLOCK`` images at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.hierarchy.graph import expand_rows, sorted_unique
from imagenet_zsl.scoring import TieRanks, release_pages
from imagenet_zsl.scoring.hierarchical import hp_credit
from imagenet_zsl.scoring.ranks import hit_ks, sort_block

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

log = logging.getLogger("imagenet_zsl.evaluation.run")
#: (sources x graph nodes) visited marks of one breadth-first block: 16 MB of bools
VISITED_ELEMENTS = 1 << 24

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
    the radius of ``H_k`` of each class; ``size[k]`` (n_classes,) ``|H_k|`` (0: no correct set);
    ``in_graph`` (n_classes,) whether the class is a node of the graph (only those have one).
    """

    keys: np.ndarray
    hops: np.ndarray
    radius: dict[int, np.ndarray]
    size: dict[int, np.ndarray]
    n_space: int
    in_graph: np.ndarray

    def member(self, labels: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
        """(B, m) bool: ``ids[i, j]`` is in ``H_k(labels[i])`` (padding -1 never is)."""
        return self.within(self.hop_of(labels, ids), labels, k)

    def hop_of(self, labels: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """(B, m) int64 hops from ``labels[i]`` to ``ids[i, j]`` where that pair is in the largest
        K's correct set, else -1 (one binary search per listed class, whatever the number of K)."""
        labels = np.asarray(labels, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        if len(self.keys) == 0:
            return np.full(ids.shape, -1, np.int64)
        query = labels[:, None] * self.n_space + ids
        pos = np.minimum(np.searchsorted(self.keys, query), len(self.keys) - 1)
        return np.where((self.keys[pos] == query) & (ids >= 0), self.hops[pos], -1)

    def within(self, hops: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
        """(B, m) bool: a pair :meth:`hop_of` found lies within ``H_k``'s radius."""
        return (hops >= 0) & (hops <= self.radius[k][np.asarray(labels, dtype=np.int64)][:, None])


@dataclass
class _Rings:
    """One breadth-first block's findings: (P,) source position, label-space member and hop of
    every label-space class met; ``counts`` (H, B) members met per hop and source; ``levels``
    (B,) rings per source (its non-empty frontiers)."""

    source: np.ndarray
    member: np.ndarray
    hop: np.ndarray
    counts: np.ndarray
    levels: np.ndarray


def _block_rings(
    neighbours: tuple[np.ndarray, np.ndarray],
    starts: np.ndarray,
    space_of: np.ndarray,
    need: int,
    visited: np.ndarray,
) -> _Rings:
    """Rings 0, 1, 2, ... around each of ``starts`` (B graph nodes) in the undirected graph, all
    sources a step at a time, each stopped once ``need`` label-space classes are found or its
    component is exhausted. ``visited`` (>= B, n) bool scratch, all False on entry and on return."""
    indptr, indices = neighbours
    n, b = len(space_of), len(starts)
    marks = visited.reshape(-1)  # flat: (source, node) -> source * n + node
    owner, frontier = np.arange(b, dtype=np.int64), np.asarray(starts, dtype=np.int64)
    touched = [owner * n + frontier]
    marks[touched[0]] = True
    found, levels = np.zeros(b, np.int64), np.zeros(b, np.int64)
    parts: list[tuple[np.ndarray, np.ndarray, int]] = []
    counts = []
    while len(frontier):
        member = space_of[frontier]
        inspace = member >= 0
        parts.append((owner[inspace], member[inspace], len(counts)))
        counts.append(np.bincount(owner[inspace], minlength=b))
        found += counts[-1]
        levels[owner] = len(counts)
        go = found[owner] < need
        owner, reached = expand_rows(indptr, indices, owner[go], frontier[go])
        keys = owner * n + reached
        keys = sorted_unique(keys[~marks[keys]])  # most steps lead back: drop them before sorting
        marks[keys] = True
        touched.append(keys)
        owner, frontier = keys // n, keys % n
    for keys in touched:
        marks[keys] = False
    return _Rings(
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([np.full(len(p[0]), p[2], np.int64) for p in parts]),
        np.array(counts).reshape(len(counts), b),
        levels,
    )


def correct_sets(
    graph: ClassGraph, space_wnids: Sequence[str], classes: Sequence[int], ks: Sequence[int]
) -> CorrectSets:
    """``H_k`` of each test class (``classes``: indices into ``space_wnids``) for each K; a class
    that is not a node of the graph gets none (``in_graph`` False, size 0)."""
    ks = hit_ks(ks)
    n_space = len(space_wnids)
    space_of = np.full(len(graph), -1, dtype=np.int64)
    nodes = np.array([graph.index.get(w, -1) for w in space_wnids], dtype=np.int64)
    space_of[nodes[nodes >= 0]] = np.flatnonzero(nodes >= 0)
    n_classes = max([n_space, *[int(c) + 1 for c in classes]])
    radius = {k: np.zeros(n_classes, np.int64) for k in ks}
    size = {k: np.zeros(n_classes, np.int64) for k in ks}
    in_graph = np.zeros(n_classes, bool)
    wanted = sorted_unique(np.asarray(classes, dtype=np.int64))
    wanted = wanted[wanted < n_space]
    wanted = wanted[nodes[wanted] >= 0]
    in_graph[wanted] = True
    keys, hops = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    block = max(1, VISITED_ELEMENTS // max(len(graph), 1))
    visited = np.zeros((min(block, len(wanted)), len(graph)), dtype=bool)
    # hops between space classes never leave the part of the graph that joins them
    neighbours = graph.neighbours_between(nodes[nodes >= 0])
    for lo in range(0, len(wanted), block):
        cls = wanted[lo : lo + block]
        rings = _block_rings(neighbours, nodes[cls], space_of, ks[-1], visited)
        cum = np.cumsum(rings.counts, axis=0)
        for k in ks:
            reach = cum >= k
            r = np.where(reach.any(axis=0), np.argmax(reach, axis=0), rings.levels - 1)
            radius[k][cls] = r
            size[k][cls] = cum[r, np.arange(len(cls))]
        keys.append(cls[rings.source] * n_space + rings.member)
        hops.append(rings.hop)
    all_keys, all_hops = np.concatenate(keys), np.concatenate(hops)
    order = np.argsort(all_keys, kind="stable")
    return CorrectSets(all_keys[order], all_hops[order], radius, size, n_space, in_graph)


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
    count-as-miss images (no credit, in the denominator). Images of a class that is not a node of
    the graph are left out (``not_in_graph``: their classes, wnids and images, with a warning)."""
    scores, ids = lists
    labels = np.asarray(labels, dtype=np.int64)
    ks = hit_ks(ks)
    present = sorted_unique(labels)
    sets = correct_sets(graph, space_wnids, present, ks)
    complete = ids.shape[1] >= len(space_wnids)
    credits = {k: np.zeros(len(labels)) for k in ks}
    block = sort_block()
    for lo in range(0, len(labels), block):
        rows = slice(lo, lo + block)
        part = None if ranks is None else TieRanks(ranks.above[rows], ranks.tied[rows])
        b_ids, b_scores, b_labels = np.asarray(ids[rows]), np.asarray(scores[rows]), labels[rows]
        hops = sets.hop_of(b_labels, b_ids)
        for k in ks:
            member = sets.within(hops, b_labels, k)
            credit = hp_credit(b_ids, b_scores, member, b_labels, k, ranks=part, complete=complete)
            credits[k][rows] = credit
        release_pages(ids, scores)  # read once: not kept resident
    scored = sets.in_graph[labels]
    images = int(scored.sum()) + int(misses)
    scored_classes = present[sets.in_graph[present]]
    block_out = {
        "definition": DEFINITION,
        "graph": graph.source,
        "images": images,
        # one sum over the (N,) credits: the same bits whatever the block size
        "flat": {str(k): (float(credits[k][scored].sum()) / images if images else float("nan")) for k in ks},
        "mean_correct_set_size": {
            str(k): (float(sets.size[k][scored_classes].mean()) if len(scored_classes) else float("nan"))
            for k in ks
        },
    }
    left = present[~sets.in_graph[present]]
    if len(left):
        wnids = sorted(space_wnids[c] if c < len(space_wnids) else str(c) for c in left.tolist())
        block_out["not_in_graph"] = {"classes": len(wnids), "images": int((~scored).sum()), "wnids": wnids}
        log.warning(
            "hP@K: %d test classes are not nodes of the %s graph; their %d images are left out of "
            "hP@K (listed in metrics.json): %s",
            len(wnids),
            graph.source,
            block_out["not_in_graph"]["images"],
            ", ".join(wnids[:5]) + (", ..." if len(wnids) > 5 else ""),
        )
    return block_out
