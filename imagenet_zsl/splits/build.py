"""Build every split a config asks for: files, manifest and report, all or nothing.

Config schema (YAML; see configs/default.yaml)::

    graph: {source: wordnet, include_instances: false}   # or source: imagenet
    train: ilsvrc2012            # or a path to a wnid list
    counts: fall11               # or a path to a 'wnid<TAB>count' TSV (imagenet-zsl images count)
    splits:
      - {name: hop1, kind: hops, k: 1}
      - {name: all, kind: all}
      - {name: mp500, kind: population, n: 500, most: true}
      - name: benchmark
        kind: benchmark
        size: 500
        seed: 0
        pool: [{filter: not_training}, {filter: min_images, min: 301}]
        optimiser: {shortlist_factors: [1.5, 2, 3], max_passes: 4, horizon: 10}
        max_branch_share: null          # e.g. 0.3: at most 30% of classes per WordNet branch
        branch_quota: {}                # e.g. {noun.animal: 100}

Candidates are always the fall11 synsets minus the training classes (20,842 for ILSVRC-2012).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from imagenet_zsl import __version__
from imagenet_zsl.data import fall11_counts, read_wnid_counts
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import GRAPH_SOURCES, resolve_graph, training_wnids
from imagenet_zsl.io import (
    atomic_directory,
    atomic_write_json,
    sha256_bytes,
    sha256_file,
    software_versions,
)
from imagenet_zsl.splits.benchmark import select_max_ratio
from imagenet_zsl.splits.hops import LITERATURE_NAMES, hop_split
from imagenet_zsl.splits.io import check_noun_synsets, read_wnid_list, write_wnid_list
from imagenet_zsl.splits.pool import PoolContext, PoolStep, run_pool
from imagenet_zsl.splits.population import population_split
from imagenet_zsl.splits.report import write_report
from imagenet_zsl.splits.structure import structural_ratios

log = logging.getLogger(__name__)
KINDS = ("hops", "all", "population", "benchmark", "list")


@dataclass
class BuiltSplit:
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
        finite = self.ratios[np.isfinite(self.ratios)]
        return float(finite.mean()) if len(finite) else float("nan")

    @property
    def consistent(self) -> bool:
        return self.pairs_within == 0 and self.pairs_with_train == 0


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise UserInputError(f"{path}: config not found")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise UserInputError(f"{path}: invalid YAML ({err})") from err
    if not isinstance(config, dict) or not isinstance(config.get("splits"), list):
        raise UserInputError(f"{path}: a split config needs a 'splits:' list")
    names = [s.get("name") for s in config["splits"] if isinstance(s, dict)]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserInputError(f"{path}: split names must be unique, repeated: {', '.join(map(str, dup))}")
    return config


def resolve_train(spec: Any, where: str) -> list[str]:
    if spec in (None, "ilsvrc2012"):
        return training_wnids()
    wnids = read_wnid_list(spec)
    if not wnids:
        raise UserInputError(f"{where}: training list {spec} is empty")
    return wnids


def resolve_counts(spec: Any) -> dict[str, int]:
    if spec in (None, "fall11"):
        return fall11_counts()
    return read_wnid_counts(spec)


def _config_graph(config: dict[str, Any]) -> ClassGraph:
    """The packaged class graph a config's ``graph: {source, include_instances}`` names."""
    graph_cfg = config.get("graph") or {}
    source = graph_cfg.get("source", "wordnet")
    if source not in GRAPH_SOURCES:
        raise UserInputError(f"graph.source must be one of {', '.join(GRAPH_SOURCES)}, got {source!r}")
    return resolve_graph(source + ("+instances" if graph_cfg.get("include_instances", False) else ""))


def lexname_branches(wnids: list[str]) -> dict[str, str]:
    """Top-level WordNet branch of each class: its lexicographer file (noun.animal, ...)."""
    nouns = load_wordnet_nouns()
    return {w: nouns.lexnames[nouns.index[w]] for w in wnids if w in nouns}


def build_split(
    spec: dict[str, Any],
    graph: ClassGraph,
    train: list[str],
    candidates: list[str],
    counts: dict[str, int],
    where: str,
    progress: bool = True,
) -> BuiltSplit:
    """One split from its config entry (pure: writes nothing)."""
    name, kind = spec.get("name"), spec.get("kind")
    if not name or kind not in KINDS:
        raise UserInputError(f"{where}: each split needs a name and a kind in {KINDS}, got {spec}")
    params = {k: v for k, v in spec.items() if k not in ("name", "kind")}
    details: dict[str, Any] = {}
    steps: list[PoolStep] = []
    if kind == "hops":
        k = int(params.get("k", 1))
        wnids = hop_split(graph, candidates, train, k)
        if f"hop{k}" in LITERATURE_NAMES:
            details["literature_name"] = LITERATURE_NAMES[f"hop{k}"]
    elif kind == "all":
        wnids = sorted(candidates)
    elif kind == "population":
        wnids = population_split(candidates, counts, int(params["n"]), bool(params.get("most", True)))
    elif kind == "list":
        wnids = sorted(read_wnid_list(params["path"]))
    else:
        ctx = PoolContext(graph, train, counts)
        pool, steps = run_pool(candidates, params.get("pool", []), ctx, where=f"{where}.pool")
        if not pool:
            raise UserInputError(
                f"{where}: the candidate pool is empty after the filters "
                f"({', '.join(f'{s.filter}: {s.after}' for s in steps)})"
            )
        branches = lexname_branches(pool)
        selection = select_max_ratio(
            graph,
            pool,
            train,
            int(params.get("size", 500)),
            seed=int(params.get("seed", 0)),
            branch_of=branches,
            branch_quota=params.get("branch_quota") or None,
            max_branch_share=params.get("max_branch_share"),
            progress=progress,
            **(params.get("optimiser") or {}),
        )
        wnids = selection.wnids
        details = {
            "pool_size": len(pool),
            "dropped_related_to_train": selection.dropped_related_to_train,
            "greedy_ratio": round(selection.greedy_ratio, 6),
            "swaps": selection.swaps,
            "passes": selection.passes,
            "shortlist": selection.shortlist,
            "branches": selection.branch_counts,
        }
    if not wnids:
        raise UserInputError(f"{where}: split {name!r} came out empty")
    return BuiltSplit(
        name=name,
        kind=kind,
        params=params,
        wnids=wnids,
        ratios=structural_ratios(graph, wnids, train),
        pairs_within=len(graph.related_pairs(wnids)),
        pairs_with_train=len(graph.related_pairs(wnids, train)),
        n_images=sum(counts.get(w, 0) for w in wnids),
        pool_steps=steps,
        details=details,
    )


def _ratio_summary(ratios: np.ndarray) -> dict[str, float]:
    finite = ratios[np.isfinite(ratios)]
    if not len(finite):
        return {}
    q = np.quantile(finite, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {k: round(float(v), 6) for k, v in zip(("min", "q25", "median", "q75", "max"), q, strict=True)}


def build_splits(config_path: str | Path, out_dir: str | Path, progress: bool = True) -> list[BuiltSplit]:
    """Build all splits of a config into ``out_dir`` (atomic: all files appear at once or none)."""
    config_path = Path(config_path)
    config = load_config(config_path)
    train = resolve_train(config.get("train"), str(config_path))
    check_noun_synsets(train, f"{config_path}: train")
    counts = resolve_counts(config.get("counts"))
    graph = _config_graph(config)
    train_set = set(train)
    candidates = sorted(w for w in fall11_counts() if w not in train_set)
    built: list[BuiltSplit] = []
    started = time.perf_counter()
    for i, spec in enumerate(config["splits"]):
        where = f"{config_path}: splits[{i}]"
        if not isinstance(spec, dict):
            raise UserInputError(f"{where}: expected a mapping, got {spec!r}")
        split = build_split(spec, graph, train, candidates, counts, where, progress)
        overlap = sorted(set(split.wnids) & train_set)
        if overlap:
            raise UserInputError(
                f"{where}: split {split.name!r} overlaps the training classes: {preview(overlap)}"
            )
        log.info("split %-10s %6d classes  R=%.3f", split.name, len(split.wnids), split.ratio)
        built.append(split)
    nouns = load_wordnet_nouns()
    with atomic_directory(out_dir, tool="imagenet-zsl splits build") as tmp:
        records = {}
        for split in built:
            path = write_wnid_list(tmp / f"{split.name}.txt", split.wnids)
            records[split.name] = {
                "file": path.name,
                "sha256": sha256_file(path),
                "kind": split.kind,
                "parameters": split.params,
                "n_classes": len(split.wnids),
                "n_images_fall11": split.n_images,
                "structural_ratio": round(split.ratio, 6),
                "ratio_distribution": _ratio_summary(split.ratios),
                "pairs_within": split.pairs_within,
                "pairs_with_train": split.pairs_with_train,
                "consistent": split.consistent,
                "pool": [
                    {"filter": s.filter, "parameters": s.params, "before": s.before, "after": s.after}
                    for s in split.pool_steps
                ],
                **split.details,
            }
        manifest = {
            "format": "imagenet-zsl/splits-v1",
            "tool": "imagenet-zsl splits build",
            "version": __version__,
            "config": {
                "name": config_path.name,
                "sha256": sha256_bytes(config_path.read_bytes()),
                "content": config,
            },
            "graph": {
                "source": graph.source,
                "nodes": len(graph),
                "edges": int(graph.child_to_parent.nnz),
                "wordnet_version": "3.0",
                "wordnet_sha256": nouns.digest,
            },
            "training": {
                "n_classes": len(train),
                "sha256": sha256_bytes("".join(f"{w}\n" for w in sorted(train)).encode()),
            },
            "n_candidates": len(candidates),
            "software": {k: v for k, v in software_versions().items() if k != "python"},
            "splits": records,
        }
        write_report(tmp, built, manifest)
        atomic_write_json(tmp / "manifest.json", manifest)
    log.info("built %d splits in %.1f s -> %s", len(built), time.perf_counter() - started, out_dir)
    return built
