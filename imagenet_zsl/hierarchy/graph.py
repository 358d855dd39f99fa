"""ClassGraph: the is-a DAG over the ImageNet-21K classes and their ancestors.

Two representations of the same edges. The queries ``evaluate`` makes (breadth-first distances,
depths, the structural ratio, ancestor sets of given classes, the neighbours for hP@K) run on
plain numpy CSR arrays built in the constructor: one vectorised step per level of the graph, never
a Python loop over classes, and no scipy import (0.2 s of a command's start-up). The scipy.sparse
matrices (``child_to_parent``, ``ancestor_matrix``, ``adjacency``, ...) the split optimiser and the
graph models use are built on first access.

Distances are undirected shortest-path lengths (number of is-a edges) — the distance Hascoet et
al. use for hop splits and the structural ratio.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview

if TYPE_CHECKING:
    import scipy.sparse as sp

#: sources per breadth-first block in :meth:`ClassGraph.hop_distances` (bounds the frontier's memory)
HOP_BLOCK = 1024


class ClassGraph:
    """Directed is-a graph (edges parent → child) with fast ancestry and distance queries.

    Node order is ``wnids``; ``index`` maps a wnid to its row in every matrix.
    """

    def __init__(
        self, wnids: Sequence[str], parents: np.ndarray, children: np.ndarray, source: str = "custom"
    ):
        self.wnids: list[str] = list(wnids)
        self.index: dict[str, int] = {w: i for i, w in enumerate(self.wnids)}
        if len(self.index) != len(self.wnids):
            raise ValueError("duplicate nodes in ClassGraph")
        n = len(self.wnids)
        for name, ends in (("parents", parents), ("children", children)):
            ends = np.asarray(ends)
            if len(ends) and (ends.min() < 0 or ends.max() >= n):
                raise ValueError(f"ClassGraph: {name} index out of range for {n} nodes")
        # each edge once, sorted by (child, parent): the CSR order of child_to_parent
        keys = sorted_unique(np.asarray(children, dtype=np.int64) * n + np.asarray(parents, dtype=np.int64))
        #: (E,) child and parent node of each distinct edge parent → child, sorted by (child, parent)
        self.edge_children, self.edge_parents = (keys // n, keys % n) if n else (keys, keys)
        #: (E,) sorted ``child * n + parent`` of every edge: one ``searchsorted`` finds a pair
        self.edge_keys = keys
        self.source = source

    @functools.cached_property
    def child_to_parent(self) -> sp.csr_matrix:
        """int8 (n, n) sparse: ``[c, p] = 1`` for each edge p → c."""
        import scipy.sparse as sp  # deferred: 0.2 s to import; evaluate's queries need no matrix

        n = len(self)
        ones = np.ones(len(self.edge_keys), dtype=np.int8)
        return sp.csr_matrix((ones, (self.edge_children, self.edge_parents)), shape=(n, n))

    @functools.cached_property
    def parent_to_child(self) -> sp.csr_matrix:
        """int8 (n, n) sparse: ``[p, c] = 1`` for each edge p → c."""
        return self.child_to_parent.T.tocsr()

    @functools.cached_property
    def up(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR arrays (indptr (n+1,), indices (E,)) of each node's parents."""
        return _csr(self.edge_children, self.edge_parents, len(self))

    @functools.cached_property
    def down(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR arrays (indptr (n+1,), indices (E,)) of each node's children."""
        return _csr(self.edge_parents, self.edge_children, len(self))

    @functools.cached_property
    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR arrays (indptr (n+1,), indices) of each node's neighbours in the undirected graph
        (parents and children, each once, sorted)."""
        n = len(self)
        a = np.r_[self.edge_children, self.edge_parents]
        b = np.r_[self.edge_parents, self.edge_children]
        keys = sorted_unique(a * n + b)
        return _csr(keys // n, keys % n, n) if n else _csr(keys, keys, n)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_edges(
        cls, edges: Iterable[tuple[str, str]], nodes: Iterable[str] | None = None, source: str = "custom"
    ) -> ClassGraph:
        """Graph from (parent, child) pairs; ``nodes`` adds isolated nodes and fixes the order."""
        edges = list(edges)
        order: dict[str, None] = dict.fromkeys(nodes or ())
        for parent, child in edges:
            order.setdefault(parent)
            order.setdefault(child)
        wnids = list(order)
        index = {w: i for i, w in enumerate(wnids)}
        parents = np.array([index[p] for p, _ in edges], dtype=np.int64)
        children = np.array([index[c] for _, c in edges], dtype=np.int64)
        return cls(wnids, parents, children, source=source)

    # ----------------------------------------------------------------- basic lookups
    def __len__(self) -> int:
        return len(self.wnids)

    def __contains__(self, wnid: str) -> bool:
        return wnid in self.index

    def indices(self, wnids: Iterable[str], what: str = "wnids") -> np.ndarray:
        """Row indices of ``wnids``; a clear error lists any that are not nodes of this graph."""
        wnids = list(wnids)
        missing = [w for w in wnids if w not in self.index]
        if missing:
            raise UserInputError(
                f"{len(missing)} {what} are not nodes of the {self.source} class graph: {preview(missing)}"
            )
        return np.fromiter((self.index[w] for w in wnids), dtype=np.int64, count=len(wnids))

    def parents(self, wnid: str) -> list[str]:
        indptr, indices = self.up
        node = self.index[wnid]
        return [self.wnids[j] for j in indices[indptr[node] : indptr[node + 1]]]

    def children(self, wnid: str) -> list[str]:
        indptr, indices = self.down
        node = self.index[wnid]
        return [self.wnids[j] for j in indices[indptr[node] : indptr[node + 1]]]

    @property
    def roots(self) -> list[str]:
        has_parent = np.diff(self.up[0]) > 0
        return [w for w, p in zip(self.wnids, has_parent, strict=True) if not p]

    # ----------------------------------------------------------------- ancestry
    @functools.cached_property
    def ancestor_matrix(self) -> sp.csr_matrix:
        """Bool (n, n): ``[i, j]`` is True iff node j is a proper ancestor of node i.

        Transitive closure by repeated sparse products (one per level of depth).
        """
        step = self.child_to_parent.astype(bool).tocsr()
        closure = step.copy()
        frontier = step
        for _ in range(len(self)):
            frontier = (frontier @ step).astype(bool)
            grown = (closure + frontier).astype(bool).tocsr()
            if grown.nnz == closure.nnz:
                break
            closure = grown
        else:  # pragma: no cover - only for cyclic input
            raise ValueError("class graph has a cycle")
        if closure.diagonal().any():
            raise ValueError("class graph has a cycle")
        closure.sort_indices()
        return closure

    @functools.cached_property
    def descendant_matrix(self) -> sp.csr_matrix:
        """Bool (n, n): ``[i, j]`` is True iff node j is a proper descendant of node i."""
        return self.ancestor_matrix.T.tocsr()

    def neighbours_between(self, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:attr:`neighbours` without the nodes that lie on no path between two of ``keep`` (node
        indices): non-``keep`` leaves stripped until none is left, so every distance between two
        kept nodes is the same, and a search among a few classes of a large graph does not walk
        the branches that hold none of them (a 1,000-class label space of the 23,547-node graph:
        about 8x fewer steps)."""
        indptr, indices = self.neighbours
        n = len(self)
        degree = np.diff(indptr)
        kept = np.zeros(n, dtype=bool)
        kept[np.asarray(keep, dtype=np.int64)] = True
        alive = np.ones(n, dtype=bool)
        drop = np.flatnonzero(~kept & (degree <= 1))
        while len(drop):
            alive[drop] = False
            _, reached = expand_rows(indptr, indices, drop, drop)
            reached = reached[alive[reached]]
            degree = degree - np.bincount(reached, minlength=n)
            touched = sorted_unique(reached)
            drop = touched[~kept[touched] & (degree[touched] <= 1)]
        rows = np.repeat(np.arange(n), np.diff(indptr))
        live = alive[rows] & alive[indices]
        pruned = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[live], minlength=n), out=pruned[1:])
        return pruned, indices[live]

    def ancestor_keys(self, nodes: np.ndarray) -> np.ndarray:
        """Sorted distinct int64 ``node * n + ancestor`` of every proper ancestor of each of
        ``nodes`` (node indices): one upward step per level for all of them at once, so the cost is
        the size of their ancestor sets, not of the whole closure. A cycle met on the way up is a
        ValueError."""
        n = len(self)
        indptr, indices = self.up
        owner = frontier = sorted_unique(np.asarray(nodes, dtype=np.int64))
        found = []
        for _ in range(n + 1):
            owner, reached = expand_rows(indptr, indices, owner, frontier)
            if len(reached) == 0:
                break
            keys = sorted_unique(owner * n + reached)  # a pair met again later is kept once below
            owner, frontier = keys // n, keys % n
            loop = np.flatnonzero(owner == frontier)
            if len(loop):
                raise ValueError(f"class graph has a cycle through {self.wnids[frontier[loop[0]]]}")
            found.append(keys)
        else:  # a path of more than n steps up goes round a cycle
            raise ValueError("class graph has a cycle")
        return sorted_unique(np.concatenate(found)) if found else np.zeros(0, np.int64)

    def ancestors(self, wnid: str) -> set[str]:
        row = self.ancestor_matrix[self.index[wnid]]
        return {self.wnids[j] for j in row.indices}

    def descendants(self, wnid: str) -> set[str]:
        row = self.descendant_matrix[self.index[wnid]]
        return {self.wnids[j] for j in row.indices}

    def is_ancestor(self, ancestor: str, node: str) -> bool:
        """True iff ``ancestor`` is a proper ancestor of ``node``."""
        return bool(self.ancestor_matrix[self.index[node], self.index[ancestor]])

    def related_pairs(self, a: Sequence[str], b: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """(ancestor, descendant) pairs with one in ``a`` and the other in ``b`` (or both in ``a``).

        Hascoet et al.'s "structural flaws": within a test set (b=None) or between test and train.
        """
        ia = self.indices(a)
        ib = ia if b is None else self.indices(b)
        anc = self.ancestor_matrix
        pairs = set()
        # rows: descendants in one set, columns: ancestors in the other
        for rows, cols in ((ia, ib), (ib, ia)) if b is not None else ((ia, ia),):
            sub = anc[rows][:, cols].tocoo()
            pairs.update(
                (self.wnids[cols[j]], self.wnids[rows[i]]) for i, j in zip(sub.row, sub.col, strict=True)
            )
        return sorted(pairs)

    # ----------------------------------------------------------------- distances
    @functools.cached_property
    def adjacency(self) -> sp.csr_matrix:
        """Undirected adjacency (n, n), int8, symmetric."""
        adj = (self.child_to_parent + self.parent_to_child).astype(bool).astype(np.int8)
        return adj.tocsr()

    @functools.cached_property
    def _hop_adjacency(self) -> sp.csr_matrix:
        """The adjacency as int32 (n, n): a frontier's products count neighbours past int8's range."""
        return self.adjacency.astype(np.int32)

    def hop_distances(self, sources: np.ndarray, targets: np.ndarray, limit: int) -> np.ndarray:
        """(len(sources), len(targets)) uint8 hop distances between node indices, 255 beyond
        ``limit``: one breadth-first search for a block of sources at once, as sparse products;
        8x faster than a Dijkstra per source when the limit is a few hops."""
        import scipy.sparse as sp  # deferred: 0.1 s to import, and `evaluate --graph none` builds no graph

        adjacency = self._hop_adjacency
        out = np.full((len(sources), len(targets)), 255, dtype=np.uint8)
        column = np.full(adjacency.shape[0], -1, dtype=np.int64)
        column[targets] = np.arange(len(targets))
        for start in range(0, len(sources), HOP_BLOCK):
            block = sources[start : start + HOP_BLOCK]
            shape = (len(block), adjacency.shape[0])
            frontier = sp.csr_matrix(
                (np.ones(len(block), dtype=np.int32), (np.arange(len(block)), block)), shape=shape
            )
            seen = frontier.copy()
            for hops in range(limit + 1):
                found = frontier.tocoo()
                hit = column[found.col] >= 0
                out[start + found.row[hit], column[found.col[hit]]] = hops
                if hops == limit:
                    break
                reach = frontier @ adjacency
                reach.data[:] = 1  # path counts: only reachability matters
                frontier = reach - reach.multiply(seen)
                frontier.eliminate_zeros()
                if frontier.nnz == 0:
                    break
                seen = seen + frontier
        return out

    @functools.cached_property
    def _edge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(2E,) both ends of every undirected edge, each direction once."""
        indptr, indices = self.neighbours
        return np.repeat(np.arange(len(self)), np.diff(indptr)), indices

    def distances_from(self, sources: Iterable[str]) -> np.ndarray:
        """(n,) float: undirected distance of every node to its nearest source (inf: unreachable)."""
        idx = self.indices(sources, "sources")
        return _as_float(_bfs(*self.neighbours, idx)[0])

    def _voronoi(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n,) float distance of every node to its nearest member of ``idx`` and (n,) that member
        (a node index; -1: unreachable)."""
        dist, nearest = _bfs(*self.neighbours, idx)
        return _as_float(dist), nearest

    def nearest_distance(self, wnids: Sequence[str], targets: Iterable[str]) -> np.ndarray:
        """(len(wnids),) distance of each of ``wnids`` to the nearest member of ``targets``."""
        return self.distances_from(targets)[self.indices(wnids)]

    def nearest_other_distance(self, members: Sequence[str]) -> np.ndarray:
        """(len(members),) distance of each member to the nearest *other* member.

        One multi-source BFS assigns every node to its nearest member (a graph Voronoi
        partition); the nearest other member of s is then reached through an edge (u, v)
        leaving s's cell, at length d(u) + 1 + d(v). Exact, and O(edges) instead of one BFS
        per member.
        """
        idx = self.indices(members, "members")
        out = np.full(len(idx), np.inf)
        if len(idx) < 2:
            return out
        dist, nearest = self._voronoi(idx)
        u, v = self._edge_arrays
        cell_u, cell_v = nearest[u], nearest[v]
        crossing = (cell_u >= 0) & (cell_v >= 0) & (cell_u != cell_v)
        length = dist[u[crossing]] + 1 + dist[v[crossing]]
        best = np.full(len(self), np.inf)
        np.minimum.at(best, cell_u[crossing], length)
        out[:] = best[idx]
        # a member listed twice is at distance 0 from "another" member
        _, first, counts = np.unique(idx, return_index=True, return_counts=True)
        if (counts > 1).any():
            dup = np.isin(idx, idx[first[counts > 1]])
            out[dup] = 0
        return out

    def distance(self, a: str, b: str) -> float:
        """Undirected shortest-path length between two nodes (inf if disconnected)."""
        return float(self.distances_from([a])[self.index[b]])

    def pairwise_distances(
        self, wnids: Sequence[str], block: int = 256, dtype: type = np.uint8, limit: float | None = None
    ) -> np.ndarray:
        """(m, m) distances among ``wnids``; unreachable (or beyond ``limit``) → dtype's max.

        With ``limit`` each BFS stops at that radius, which is ~5-50x faster on this graph.
        """
        idx = self.indices(wnids)
        m = len(idx)
        out = np.empty((m, m), dtype=dtype)
        cap = np.iinfo(dtype).max
        weights = self.adjacency.astype(np.float64)
        radius = np.inf if limit is None else float(limit) + 0.5
        for start in range(0, m, block):
            rows = _dijkstra(weights, directed=False, indices=idx[start : start + block], limit=radius)[
                :, idx
            ]
            rows[~np.isfinite(rows)] = cap
            out[start : start + block] = np.minimum(rows, cap).astype(dtype)
        return out

    @functools.cached_property
    def depths(self) -> np.ndarray:
        """(n,) float length of the shortest is-a path from a root down to each node."""
        roots = np.flatnonzero(np.diff(self.up[0]) == 0)
        return _as_float(_bfs(*self.down, roots)[0])

    def depth(self, wnid: str) -> int:
        return int(self.depths[self.index[wnid]])


def _dijkstra(*args: Any, **kwargs: Any) -> Any:
    """``scipy.sparse.csgraph.dijkstra``: csgraph is imported by the first distance query."""
    from scipy.sparse import csgraph  # deferred: 0.1 s more than scipy.sparse, only for distances

    return csgraph.dijkstra(*args, **kwargs)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-d array, sorted: ``np.unique`` by a sort (numpy 2's hash-based
    ``np.unique`` of int64 keys is ~50x slower on the graph's pair keys)."""
    values = np.sort(np.asarray(values).ravel())
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def _csr(rows: np.ndarray, cols: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays (indptr (n+1,), indices) of the pairs (rows[i], cols[i]), sorted by (row, col)."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    order = np.lexsort((cols, rows))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols[order]


def expand_rows(
    indptr: np.ndarray, indices: np.ndarray, owner: np.ndarray, frontier: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every (owner, neighbour) pair of the CSR rows ``frontier``: (P,) owners, (P,) neighbours."""
    starts = indptr[frontier]
    counts = indptr[frontier + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # position j of row i: starts[i] + j, as one arange shifted per row
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return np.repeat(owner, counts), indices[np.arange(total) + shift]


def _sorted_member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(len(keys),) bool: each key is in ``sorted_keys`` (sorted int64)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys


def _bfs(indptr: np.ndarray, indices: np.ndarray, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multi-source breadth-first search over CSR rows: (n,) int64 hop count of every node to its
    nearest source (-1: unreachable) and (n,) that source's node index (-1: unreachable; between
    sources at the same distance, one of them). One vectorised step per level."""
    n = len(indptr) - 1
    dist = np.full(n, -1, dtype=np.int64)
    nearest = np.full(n, -1, dtype=np.int64)
    frontier = sorted_unique(np.asarray(sources, dtype=np.int64))
    dist[frontier], nearest[frontier] = 0, frontier
    level = 0
    while len(frontier):
        level += 1
        owner, reached = expand_rows(indptr, indices, nearest[frontier], frontier)
        new = dist[reached] < 0
        order = np.argsort(reached[new], kind="stable")
        reached, owner = reached[new][order], owner[new][order]
        first = np.r_[True, reached[1:] != reached[:-1]] if len(reached) else np.zeros(0, bool)
        frontier = reached[first]
        dist[frontier], nearest[frontier] = level, owner[first]
    return dist, nearest


def _as_float(dist: np.ndarray) -> np.ndarray:
    """Hop counts as float64 with inf where unreachable (-1), as scipy's csgraph gives them."""
    out = dist.astype(np.float64)
    out[dist < 0] = np.inf
    return out
