"""The ImageNet-21K class universe and the class graph built over it.

The graph (23,547 nodes) is derived from WordNet 3.0 and the packaged class lists once, then read
from a small cache file (``class-graph-*.npz`` in :func:`imagenet_zsl.paths.cache_dir`, keyed by the
sha256 of the WordNet files and of the packaged lists): a warm ``evaluate`` loads it in
milliseconds and never parses nor loads the WordNet noun table.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import zipfile
from pathlib import Path

import numpy as np

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.data import data_path, fall11_counts, ilsvrc2012_wnids, imagenet_isa_edges
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.wordnet import locate_wordnet, wordnet_digest
from imagenet_zsl.paths import cache_dir

log = logging.getLogger(__name__)
GRAPH_SOURCES = ("wordnet", "imagenet")
#: the layout of the class-graph cache file; a new one is a new file name
GRAPH_CACHE_VERSION = 1
#: the packaged files the universe and the ImageNet graph are read from (part of the cache key)
UNIVERSE_FILES = ("fall11_image_counts.tsv", "ilsvrc2012_wnids.txt")


def universe_wnids() -> list[str]:
    """fall11's 21,841 synsets plus the one ILSVRC-2012 class outside it: 21,842 classes."""
    counts = fall11_counts()
    return list(counts) + [w for w in ilsvrc2012_wnids() if w not in counts]


def training_wnids() -> list[str]:
    """The 1,000 ILSVRC-2012 classes (devkit order): the seen classes of every ImageNet split."""
    return list(ilsvrc2012_wnids())


def candidate_wnids() -> list[str]:
    """The 20,842 fall11 synsets that are not ILSVRC-2012 classes: zero-shot candidates (sorted)."""
    train = set(ilsvrc2012_wnids())
    return sorted(w for w in fall11_counts() if w not in train)


def _ancestor_closure(edges: list[tuple[str, str]], seeds: list[str]) -> set[str]:
    parents: dict[str, list[str]] = {}
    for parent, child in edges:
        parents.setdefault(child, []).append(parent)
    keep, stack = set(seeds), list(seeds)
    while stack:
        for parent in parents.get(stack.pop(), ()):
            if parent not in keep:
                keep.add(parent)
                stack.append(parent)
    return keep


@functools.cache
def wordnet_key() -> str:
    """sha256 of the WordNet files (:func:`~imagenet_zsl.hierarchy.wordnet.wordnet_digest`), once per
    process: the key of every cache derived from WordNet."""
    return wordnet_digest(locate_wordnet())


def derived_key(kind: str, *parts: str, files: tuple[str, ...] = UNIVERSE_FILES) -> str:
    """sha256 naming a cache derived from WordNet and the packaged class lists: ``kind``, ``parts``,
    the WordNet files' digest and the bytes of the packaged ``files``."""
    digest = hashlib.sha256("|".join((kind, *parts, wordnet_key())).encode())
    for name in files:
        digest.update(data_path(name).read_bytes())
    return digest.hexdigest()


@functools.cache
def load_class_graph(source: str = "wordnet", include_instances: bool = False) -> ClassGraph:
    """The is-a DAG induced on the 21,842 classes and all their ancestors, from the cache file
    when it is there and matches (else built by :func:`build_class_graph` and cached).

    source="wordnet": WordNet 3.0 noun hypernyms (instance hypernyms only if asked: ImageNet
    holds a few instance synsets, which are otherwise roots of their own).
    source="imagenet": ImageNet's released is-a tree (with its synthetic ``fall11`` root and
    ``fa11misc`` catch-all); the 29 fall11 synsets missing from it hang under their WordNet
    hypernyms.
    """
    if source not in GRAPH_SOURCES:
        raise ValueError(f"graph source must be one of {GRAPH_SOURCES}, got {source!r}")
    name = source + ("+instances" if include_instances else "")
    files = UNIVERSE_FILES + (("imagenet_isa_edges.tsv",) if source == "imagenet" else ())
    key = derived_key(f"class-graph-v{GRAPH_CACHE_VERSION}", name, files=files)
    path = cache_dir() / f"class-graph-{name}-v{GRAPH_CACHE_VERSION}-{key[:16]}.npz"
    graph = _read_graph(path, key, name) if path.exists() else None
    if graph is None:
        graph = build_class_graph(source, include_instances)
        buffer = io.BytesIO()
        np.savez(
            buffer,
            key=np.asarray(key),
            wnids=np.asarray(graph.wnids),
            parents=graph.edge_parents.astype(np.int32),
            children=graph.edge_children.astype(np.int32),
        )
        write_cache(path, buffer.getvalue())
    return graph


def write_cache(path: Path, data: bytes) -> None:
    """Write a derived cache file atomically; a cache directory that cannot be written costs the
    next run the rebuild (a warning), never this run its result."""
    try:
        atomic_write_bytes(path, data)
    except OSError as err:
        log.warning("cache file %s not written (%s): it is rebuilt next time", path, err)


def _read_graph(path: Path, key: str, name: str) -> ClassGraph | None:
    """The cached graph, or None (with a warning) when the file is unreadable or not this key's."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["key"]) != key:
                return None
            return ClassGraph(data["wnids"].tolist(), data["parents"], data["children"], source=name)
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
        log.warning("ignoring unreadable class-graph cache %s (%s): rebuilding it", path, err)
        return None


def build_class_graph(source: str = "wordnet", include_instances: bool = False) -> ClassGraph:
    """The graph :func:`load_class_graph` caches, built from the WordNet noun table (its first
    load parses WordNet) and the packaged lists."""
    nouns = load_wordnet_nouns()
    universe = universe_wnids()
    wn_edges = nouns.edges(include_instances=include_instances)
    if source == "wordnet":
        edges = wn_edges
    else:
        edges = imagenet_isa_edges()
        covered = {c for _, c in edges} | {p for p, _ in edges}
        missing = [w for w in universe if w not in covered]
        wn_keep = _ancestor_closure(wn_edges, missing)
        edges = edges + [(p, c) for p, c in wn_edges if c in wn_keep]
        # WordNet's root joins ImageNet's synthetic root so the graph stays connected
        edges.append(("fall11", nouns.wnids[0]))
    nodes = _ancestor_closure(edges, universe)
    order = sorted(nodes)
    index = {w: i for i, w in enumerate(order)}
    kept = sorted({(p, c) for p, c in edges if p in nodes and c in nodes})
    parents = np.array([index[p] for p, _ in kept], dtype=np.int64)
    children = np.array([index[c] for _, c in kept], dtype=np.int64)
    name = source + ("+instances" if include_instances else "")
    return ClassGraph(order, parents, children, source=name)


def resolve_graph(spec: str | Path | ClassGraph | None) -> ClassGraph | None:
    """The one way to turn a user's graph choice into a ClassGraph.

    ``None``/``"none"`` → None; a ClassGraph → itself; ``"wordnet"``/``"imagenet"`` (optionally
    ``"wordnet+instances"``) → the packaged graph; ``"auto"`` → WordNet, or None with a warning
    when WordNet is not installed; anything else is a ``parent<TAB>child`` edge file.
    """
    if spec is None or isinstance(spec, ClassGraph):
        return spec
    name = str(spec)
    if name == "none":
        return None
    if name == "auto":
        try:
            return resolve_graph("wordnet")
        except UserInputError as err:
            log.warning("no class graph: %s (or pass --graph FILE)", err)
            return None
    base, _, extra = name.partition("+")
    if base in GRAPH_SOURCES and extra in ("", "instances"):
        return load_class_graph(base, include_instances=extra == "instances")
    path = Path(name)
    if not path.is_file():
        raise UserInputError(
            f"graph {name!r}: use {', '.join(GRAPH_SOURCES)}, none, or a parent<TAB>child edge file"
        )
    edges = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise UserInputError(f"{path}:{line_no}: expected 'parent<TAB>child'")
        edges.append((parts[0].strip(), parts[1].strip()))
    if not edges:
        raise UserInputError(f"{path}: the edge file holds no edges")
    graph = ClassGraph.from_edges(edges, source=path.name)
    try:
        graph.ancestor_keys(np.arange(len(graph)))
    except ValueError as err:  # the graph's own message names a node on the cycle
        raise UserInputError(f"{path}: {err}; an is-a graph must be acyclic") from None
    return graph
