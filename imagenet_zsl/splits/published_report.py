"""What ``splits show NAME`` reports: a published list's provenance and its difference from ours.

Why: a published list and our list of the same protocol (DGP's "2-hops" and our ``hop1``) are
compared class by class, live, on both class graphs, with each differing class's distance to the
nearest training class, so a reader sees which classes differ and the distance that explains it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import GRAPH_SOURCES, candidate_wnids, load_class_graph, training_wnids
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.named import DGP_JSON_SHA256, PUBLISHED_SPLITS, read_published_split

#: classes listed per side of a difference in the text report (all of them in --json)
SHOWN = 8


def our_list(hops: int | None, graph_source: str) -> list[str]:
    """Our list of a protocol on one graph: candidates within ``hops`` edges of a training class
    (``hop_split``'s rule), or every candidate (``hops=None``, the "all" protocol); sorted."""
    candidates = candidate_wnids()
    if hops is None:
        return candidates
    graph = load_class_graph(graph_source)
    dist = graph.nearest_distance(candidates, training_wnids())
    return sorted(w for w, d in zip(candidates, dist, strict=True) if d <= hops)


def _described(wnids: list[str], graph_source: str) -> list[dict[str, Any]]:
    """Each wnid with its first lemma and its distance to the nearest training class."""
    if not wnids:
        return []
    nouns = load_wordnet_nouns()
    dist = load_class_graph(graph_source).nearest_distance(wnids, training_wnids())
    rows = []
    for wnid, d in zip(wnids, dist, strict=True):
        name = nouns.lemmas[nouns.index[wnid]][0] if wnid in nouns else "?"
        rows.append({"wnid": wnid, "name": name, "distance": None if d == float("inf") else int(d)})
    return rows


def published_difference(name: str, graph_source: str) -> dict[str, Any]:
    """The published list NAME against ours on ``graph_source``: counts and the differing classes."""
    split = PUBLISHED_SPLITS[name]
    published = set(read_published_split(name))
    ours = set(our_list(split.hops, graph_source))
    return {
        "ours": split.ours,
        "graph": graph_source,
        "n_ours": len(ours),
        "only_published": _described(sorted(published - ours), graph_source),
        "only_ours": _described(sorted(ours - published), graph_source),
    }


def show_split(spec_path: Path, name: str | None) -> dict[str, Any]:
    """The ``splits show`` record: count, file, sha256, and for a published NAME its source,
    licence and difference from our list on both graphs."""
    wnids = read_published_split(name) if name else read_wnid_list(spec_path)
    record: dict[str, Any] = {
        "name": name or spec_path.stem,
        "n_classes": len(wnids),
        "file": str(spec_path),
        "sha256": hashlib.sha256(spec_path.read_bytes()).hexdigest(),
    }
    if name:
        split = PUBLISHED_SPLITS[name]
        record.update(
            source=split.source,
            source_sha256=DGP_JSON_SHA256,
            licence=split.licence,
            why=split.why,
            differences=[published_difference(name, source) for source in GRAPH_SOURCES],
        )
    return record


def _side(rows: list[dict[str, Any]]) -> str:
    shown = ", ".join(f"{r['wnid']} {r['name']} (d={r['distance']})" for r in rows[:SHOWN])
    return shown + (f", … {len(rows) - SHOWN} more" if len(rows) > SHOWN else "")


def format_show(record: dict[str, Any]) -> str:
    """The text form of a ``show_split`` record (d = distance to the nearest training class)."""
    lines = [f"{record['name']}: {record['n_classes']:,} classes", f"file:    {record['file']}"]
    lines.append(f"sha256:  {record['sha256']}")
    if "source" in record:
        lines.append(f"source:  {record['source']} (JSON sha256 {record['source_sha256']})")
        lines.append(f"licence: {record['licence']}")
        for diff in record["differences"]:
            plus, minus = diff["only_published"], diff["only_ours"]
            lines.append(
                f"vs our {diff['ours']} on the {diff['graph']} graph ({diff['n_ours']:,} classes): "
                f"{len(plus):,} only in {record['name']}, {len(minus):,} only in ours"
            )
            if plus:
                lines.append(f"  only in {record['name']}: {_side(plus)}")
            if minus:
                lines.append(f"  only in ours: {_side(minus)}")
        lines.append(f"why:     {record['why']}")
    return "\n".join(lines)
