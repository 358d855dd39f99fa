"""Per class of one evaluated run: its hit@K and the classes it is most often mistaken for, with
their WordNet distance, read from the run's stored top-k lists (``report --html``'s per-class view).

Why: a table says how often a model fails; a reader sees *where* it fails in the hierarchy from
the classes each test class is taken for: a sibling two is-a edges away is a near miss, a class
ten edges away a real confusion. The lists are the run's own (``topk/``), so the page shows what
the metrics counted, not a recomputation.

Inputs (a run directory of ``evaluate``, or a cell of ``run``): ``per_class.csv`` (each test
class's images and tie-fair hit@K), ``topk/classes.json`` (``unseen``: the label space),
``topk/test.labels.npy`` ((n,) the true class of each test image, an index into ``unseen``) and
``topk/test.unseen.ids.npy`` ((n, k) the ranked classes, indices into ``unseen``, -1 padding). An
image is mistaken for its top-ranked class when that is not its own; the classes a test class is
most often mistaken for are counted over its images, the few most frequent kept (ties: the class
ranked first in the label space). Distances: undirected is-a hops on the run's class graph
(``--graph`` of its evaluation), up to :data:`DISTANCE_LIMIT`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import column_ks
from imagenet_zsl.evaluation.run.verify import METRICS_NAME, verify_run_directory
from imagenet_zsl.hierarchy.graph import ClassGraph

log = logging.getLogger(__name__)

#: the most frequent confusions kept per class
TOP_CONFUSIONS = 3
#: is-a hops searched between a class and its confusions (further: "more than" this). On WordNet a
#: dog is 5 hops from a bird or a fish and 12 from a car; 8 keeps a 20,000-class run's worst case
#: (every confusion far) at about 7 s of CPU
DISTANCE_LIMIT = 8
#: a distance not known: a class outside the graph, or further than DISTANCE_LIMIT
FAR = -1
#: sources searched together (one sparse frontier row each)
_BLOCK = 256


@dataclass(frozen=True)
class ClassView:
    """One run's per-class view.

    ``wnids``: every class the view names (the test classes, then their confusions);
    ``rows``: one per test class with images: (index into ``wnids``, images, hit@K per ``ks``
    (fractions), its confusions as (index into ``wnids``, images taken for it, hops or FAR)),
    in per_class.csv's order."""

    ks: list[int]
    wnids: list[str]
    rows: list[tuple[int, int, list[float], list[tuple[int, int, int]]]]
    graph: str  # the graph the distances are measured on ("none": no distances)


def _array(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise UserInputError(f"{path}: not a readable .npy array ({err})") from None


def _per_class(path: Path) -> tuple[list[int], list[tuple[str, int, list[float]]]]:
    """(the K, (wnid, images, hit@K ...) of every test class with images) of per_class.csv."""
    try:
        reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))
        header = list(reader.fieldnames or [])
        ks = column_ks(header)
        rows = []
        for line in reader:
            if line.get("role", "unseen") != "unseen" or int(line["images"] or 0) <= 0:
                continue
            hits = [float(line[f"hit@{k}"]) if line[f"hit@{k}"] else float("nan") for k in ks]
            rows.append((line["wnid"], int(line["images"]), hits))
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: not a per-class table of 'imagenet-zsl evaluate' ({err})") from None
    return ks, rows


def top_confusions(
    labels: np.ndarray, top1: np.ndarray, n_classes: int, top: int = TOP_CONFUSIONS
) -> dict[int, list[tuple[int, int]]]:
    """{true class: [(class taken for it, images), ...]} over the images whose top-ranked class
    (``top1``, (n,); -1: none) is not their own (``labels``, (n,)): the ``top`` most frequent per
    class, by count then by class index."""
    wrong = (top1 >= 0) & (top1 != labels)
    pairs, counts = np.unique(labels[wrong] * n_classes + top1[wrong], return_counts=True)
    order = np.lexsort((pairs % n_classes, -counts, pairs // n_classes))
    found: dict[int, list[tuple[int, int]]] = {}
    for pair, count in zip(pairs[order].tolist(), counts[order].tolist(), strict=True):
        kept = found.setdefault(pair // n_classes, [])
        if len(kept) < top:
            kept.append((pair % n_classes, count))
    return found


def pair_distances(graph: ClassGraph, pairs: list[tuple[str, str]], limit: int = DISTANCE_LIMIT) -> list[int]:
    """The undirected is-a hops of each (a, b) pair; :data:`FAR` beyond ``limit`` or outside the
    graph. One breadth-first search per block of sources, as sparse products, each source dropped
    as soon as its last target is reached (confusions are mostly a few hops apart: the search
    rarely runs to ``limit``)."""
    out = [FAR] * len(pairs)
    by_source: dict[str, list[int]] = {}
    for i, (a, b) in enumerate(pairs):
        if a in graph and b in graph:
            by_source.setdefault(a, []).append(i)
    sources = list(by_source)
    adjacency = graph.adjacency.astype(np.int32)
    for start in range(0, len(sources), _BLOCK):
        block = sources[start : start + _BLOCK]
        wanted = [graph.indices([pairs[i][1] for i in by_source[s]]) for s in block]
        found = _block_hops(adjacency, graph.indices(block), wanted, limit)
        for source, targets, hops in zip(block, wanted, found, strict=True):
            at = dict(zip(targets.tolist(), hops.tolist(), strict=True))
            for i, target in zip(by_source[source], targets.tolist(), strict=True):
                out[i] = at[target]
    return out


def _block_hops(
    adjacency: Any, sources: np.ndarray, wanted: list[np.ndarray], limit: int
) -> list[np.ndarray]:
    """Per source (node indices), the hops to each of its ``wanted`` nodes (FAR beyond ``limit``):
    a breadth-first search of all sources at once, frontiers as the rows of a sparse matrix, a
    source's row dropped once its targets are reached."""
    n, k = adjacency.shape[0], len(sources)
    hops = [np.full(len(w), FAR, dtype=np.int64) for w in wanted]
    counts = np.array([len(w) for w in wanted])
    target_rows = np.repeat(np.arange(k), counts)
    targets = sp.csr_matrix(
        (np.ones(len(target_rows), dtype=np.int32), (target_rows, np.concatenate(wanted))), shape=(k, n)
    )
    targets.data[:] = 1  # a target listed twice for a source is one target
    left = np.diff(targets.indptr)
    rows = np.arange(k)  # the sources still searching, in frontier order
    frontier = sp.csr_matrix((np.ones(k, dtype=np.int32), (rows, sources)), shape=(k, n))
    seen = frontier.copy()
    for distance in range(limit + 1):
        hit = frontier.multiply(targets[rows]).tocoo()
        for row, node in zip(rows[hit.row].tolist(), hit.col.tolist(), strict=True):
            hops[row][wanted[row] == node] = distance
        np.subtract.at(left, rows[hit.row], 1)
        keep = left[rows] > 0
        if distance == limit or not keep.any():
            break
        rows, frontier, seen = rows[keep], frontier[keep], seen[keep]
        step = frontier @ adjacency
        step.data[:] = 1
        frontier = step - step.multiply(seen)
        frontier.eliminate_zeros()
        seen = seen + frontier
    return hops


def read_class_view(run_dir: str | Path, graph: ClassGraph | None, top: int = TOP_CONFUSIONS) -> ClassView:
    """The per-class view of a run directory (verified first, its top-k lists hashed: they are
    read); ``graph``: the class graph of the distances (None: no distances)."""
    run_dir = Path(run_dir)
    verify_run_directory(run_dir, hash_topk=True)
    topk = run_dir / "topk"
    try:
        space = json.loads((topk / "classes.json").read_text(encoding="utf-8"))["unseen"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserInputError(f"{topk / 'classes.json'}: no 'unseen' class list ({err})") from None
    labels = _array(topk / "test.labels.npy").astype(np.int64)
    ids = _array(topk / "test.unseen.ids.npy")
    if (
        ids.ndim != 2
        or len(ids) != len(labels)
        or (len(labels) and not 0 <= labels.min() <= labels.max() < len(space))
    ):
        raise UserInputError(
            f"{topk}: test.labels.npy and test.unseen.ids.npy disagree with the {len(space)} classes"
        )
    top1 = ids[:, 0].astype(np.int64) if ids.shape[1] else np.full(len(labels), -1)
    confused = top_confusions(labels, top1, len(space), top)
    ks, table = _per_class(run_dir / "per_class.csv")
    position = {w: i for i, w in enumerate(space)}
    wnids = [w for w, _, _ in table]
    named = {w: i for i, w in enumerate(wnids)}
    rows = []
    pairs: list[tuple[str, str]] = []
    for index, (wnid, images, hits) in enumerate(table):
        mistaken = []
        for other, count in confused.get(position.get(wnid, -1), []):
            name = str(space[other])
            if name not in named:
                named[name] = len(wnids)
                wnids.append(name)
            mistaken.append((named[name], count, FAR))
            pairs.append((wnid, name))
        rows.append((index, images, hits, mistaken))
    if graph is not None and pairs:
        hops = iter(pair_distances(graph, pairs))
        rows = [(i, n, h, [(j, c, next(hops)) for j, c, _ in m]) for i, n, h, m in rows]
    return ClassView(ks, wnids, rows, "none" if graph is None else graph_name(run_dir))


def graph_name(run_dir: Path) -> str:
    """The class graph a run was evaluated with (metrics.json's ``parameters.graph``; "none")."""
    try:
        metrics = json.loads((run_dir / METRICS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "none"
    return str((metrics.get("parameters") or {}).get("graph") or "none")


def view_json(view: ClassView, names: dict[str, str], title: str) -> dict[str, Any]:
    """The compact JSON of a view for the page: class names beside the wnids, hit@K rounded to
    4 decimals (the table's 2 decimals in %)."""
    return {
        "title": title,
        "ks": view.ks,
        "graph": view.graph,
        "limit": DISTANCE_LIMIT,
        "wnids": view.wnids,
        "names": [names.get(w, "") for w in view.wnids],
        "rows": [
            [i, n, [None if h != h else round(h, 4) for h in hits], [list(m) for m in mistaken]]
            for i, n, hits, mistaken in view.rows
        ],
    }
