"""``imagenet-zsl splits factor CONFIG --factor F --bins B --size N --out DIR``.

CONFIG is a split config (``configs/default.yaml`` works as is: its ``splits:`` list is ignored
here) with an optional ``factor:`` section::

    graph: {source: wordnet, include_instances: false}
    train: ilsvrc2012            # or a wnid list
    counts: fall11               # or a 'wnid<TAB>count' TSV
    factor:
      pool:                      # the candidate pool: splits.pool filters, in order
        - {filter: not_training}
        - {filter: min_images, min: 50}
        - {filter: connected}
        - {filter: not_related_to_training}
      labels: null               # a labels config (configs/labels.yaml) for frequency and meaning
      seed: 0
      require_vector: glove-6b-50d  # keep only classes with a class vector (null: no such filter)
      ratio_tolerance: 0.05      # match every bin's split-level R to the bins' median ± this (null: off)

``require_vector`` appends ``{filter: has_vector, vectors: ...}`` to the pool (unless the pool
already has a ``has_vector`` step): a class a word-vector model cannot score would otherwise be
dropped at evaluation time, silently unbalancing its bin. ``ratio_tolerance``: matching each
class's own r(c) against the pool does not fix the split's R against the training classes
(which depends on the other classes of the split), and accuracy is very sensitive to R
(Hascoet Fig. 9); after matched sampling a deterministic swap step (``factors.match_split_ratio``)
replaces members by their covariate neighbours in the same bin until each bin's R is within the
tolerance of the median of the bins' R (not for the ``ratio`` factor, which moves R on purpose).

Writes DIR/<factor>_<bin>.txt (bin 1 = lowest values), classes.csv (every picked class with its
five factors), report.md (the balance table) and manifest.json. See ``analysis.factors``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp
from pydantic import Field

from imagenet_zsl.analysis.factors import (
    FACTORS,
    balance_table,
    covariates,
    factor_bins,
    match_split_ratio,
    matched_sample,
    split_ratio,
    standardized_differences,
)
from imagenet_zsl.analysis.properties import label_properties
from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.config import Config, load_config
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import candidate_wnids, resolve_graph
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.semantics.word_vectors import DEFAULT_VECTORS
from imagenet_zsl.splits.build import resolve_counts, resolve_train
from imagenet_zsl.splits.io import write_wnid_list
from imagenet_zsl.splits.pool import PoolContext, run_pool
from imagenet_zsl.splits.structure import structural_ratio, structural_ratios, structure_stats

log = logging.getLogger(__name__)

#: 2: written by manifests.write_manifest (bins, size and seed under "parameters", the config file under
#: "inputs", "files"); a reader refuses v1
FORMAT = "imagenet-zsl/factor-splits-v2"
TOOL = "imagenet-zsl splits factor"
DEFAULT_POOL = (
    {"filter": "not_training"},
    {"filter": "min_images", "min": 50},
    {"filter": "connected"},
    {"filter": "not_related_to_training"},
)


class GraphSection(Config):
    source: Literal["wordnet", "imagenet"] = "wordnet"
    include_instances: bool = False


class FactorSection(Config):
    pool: list[dict[str, Any]] = Field(default_factory=lambda: [dict(s) for s in DEFAULT_POOL])
    labels: str | None = None
    seed: int = 0
    require_vector: str | None = DEFAULT_VECTORS
    ratio_tolerance: float | None = Field(default=0.05, ge=0)


class FactorSplitConfig(Config):
    """A split config's ``graph``/``train``/``counts`` plus the ``factor`` section."""

    graph: GraphSection = GraphSection()
    train: str = "ilsvrc2012"
    counts: str = "fall11"
    #: a ``splits build`` config's own list: accepted so that configs/default.yaml works, unused
    splits: list[Any] | None = None
    factor: FactorSection = FactorSection()


def factor_values(
    pool: list[str], graph: ClassGraph, train: list[str], counts: dict[str, int], labels: str | None
) -> pd.DataFrame:
    """One row per pool class: wnid, label and the five ``FACTORS``."""
    props = label_properties(pool, labels)
    ratios = np.asarray(structural_ratios(graph, pool, train), dtype=np.float64)
    finite = np.isfinite(ratios)
    ratios[~finite] = ratios[finite].max() if finite.any() else 0.0
    return pd.DataFrame(
        {
            "wnid": pool,
            "label": props["label"].to_numpy(),
            "frequency": props["zipf"].to_numpy(dtype=np.float64),
            "meaning": props["primary"].to_numpy(dtype=np.float64),
            "population": np.log10(1.0 + np.asarray([counts.get(w, 0) for w in pool], dtype=np.float64)),
            "ratio": ratios,
            "depth": graph.depths[graph.indices(pool)].astype(np.float64),
        }
    )


def relation_matrix(graph: ClassGraph, wnids: list[str]) -> sp.csr_matrix:
    """(n, n) boolean: ancestor or descendant among ``wnids``."""
    idx = graph.indices(wnids)
    rel = (graph.ancestor_matrix[idx][:, idx] + graph.descendant_matrix[idx][:, idx]).tocsr()
    rel.data[:] = 1
    rel.setdiag(0)
    rel.eliminate_zeros()
    return rel.astype(bool).tocsr()


#: each member's nearest same-bin classes (covariate space) that may replace it in the R step
RATIO_NEIGHBOURS = 2
#: pairwise distances beyond this are capped during the R search (the reported R is exact)
RATIO_DISTANCE_LIMIT = 12


def pool_steps(section: FactorSection) -> list[dict[str, Any]]:
    """The pool filters, with the class-vector requirement appended (see the module docstring)."""
    steps = [dict(s) for s in section.pool]
    if section.require_vector and not any(s.get("filter") == "has_vector" for s in steps):
        steps.append({"filter": "has_vector", "vectors": section.require_vector})
    return steps


def _neighbours(x: np.ndarray, bin_of: np.ndarray, members: np.ndarray, used: np.ndarray, b: int) -> list:
    """For each member, its RATIO_NEIGHBOURS nearest unused pool classes of bin ``b``."""
    options = np.flatnonzero((bin_of == b) & ~used)
    out = []
    for i in members:
        distance = ((x[options] - x[i]) ** 2).sum(axis=1)
        out.append(options[np.argsort(distance, kind="stable")[:RATIO_NEIGHBOURS]])
    return out


def match_ratios(
    members: list[np.ndarray], ctx: dict[str, Any], tolerance: float
) -> tuple[list[np.ndarray], float]:
    """Bring every bin's split-level R within ``tolerance`` of the bins' median (module docstring).

    ``ctx``: graph, train, table (pool factor table), x (covariates), bin_of, related. Returns the
    members and the target R.
    """
    graph, table = ctx["graph"], ctx["table"]
    wnids = table["wnid"].tolist()
    to_train_all = graph.distances_from(ctx["train"])[graph.indices(wnids)]
    ratios = [structural_ratio(graph, [wnids[i] for i in m], ctx["train"]) for m in members]
    target = float(np.median(ratios))
    used = np.zeros(len(wnids), dtype=bool)
    used[np.concatenate(members)] = True
    out = []
    for b, m in enumerate(members):
        if abs(ratios[b] - target) <= tolerance:
            out.append(m)
            continue
        neighbours = _neighbours(ctx["x"], ctx["bin_of"], m, used, b)
        nodes = np.unique(np.concatenate([m, *neighbours]))
        local = {int(g): k for k, g in enumerate(nodes)}
        dist = graph.pairwise_distances([wnids[i] for i in nodes], limit=RATIO_DISTANCE_LIMIT)
        dist = np.minimum(dist.astype(np.float64), RATIO_DISTANCE_LIMIT + 1)
        related = ctx["related"][nodes][:, nodes].tocsr()
        picked = match_split_ratio(
            to_train_all[nodes],
            dist,
            np.asarray([local[int(i)] for i in m]),
            [np.asarray([local[int(j)] for j in c]) for c in neighbours],
            related,
            target,
            tolerance,
        )
        new = nodes[picked]
        used[m] = False
        used[new] = True
        out.append(new)
        log.info(
            "factor bin %d: R %.3f -> %.3f (target %.3f)",
            b + 1,
            ratios[b],
            split_ratio(to_train_all[new], dist[np.ix_(picked, picked)]),
            target,
        )
    return out, target


def build_factor_splits(
    config_path: str | Path, factor: str, bins: int, size: int
) -> tuple[pd.DataFrame, list[np.ndarray], dict[str, Any]]:
    """Pool, factor values and the matched splits (pure: writes nothing)."""
    if factor not in FACTORS:
        raise UserInputError(f"--factor must be one of {', '.join(FACTORS)}, got {factor!r}")
    if size < 1:
        raise UserInputError(f"--size must be >= 1, got {size}")
    factor_bins(np.zeros(0), factor, bins)  # checks --bins before any long work
    cfg = load_config(config_path, FactorSplitConfig)
    graph = resolve_graph(cfg.graph.source + ("+instances" if cfg.graph.include_instances else ""))
    train = resolve_train(cfg.train, f"{config_path}: train")
    counts = resolve_counts(cfg.counts)
    ctx = PoolContext(graph=graph, train=train, counts=counts)
    candidates = [w for w in candidate_wnids() if w in graph]
    pool, steps = run_pool(candidates, pool_steps(cfg.factor), ctx, where=f"{config_path}: factor.pool")
    if not pool:
        raise UserInputError(f"{config_path}: factor.pool keeps no class")
    table = factor_values(pool, graph, train, counts, cfg.factor.labels)
    bin_of = factor_bins(table[factor].to_numpy(), factor, bins, cfg.factor.seed)
    x, related = covariates(table, factor), relation_matrix(graph, pool)
    members = matched_sample(x, bin_of, size, cfg.factor.seed, related)
    tolerance = cfg.factor.ratio_tolerance if factor != "ratio" else None
    target = None
    if tolerance is not None:
        match_ctx = {"graph": graph, "train": train, "table": table, "x": x, "bin_of": bin_of}
        members, target = match_ratios(members, {**match_ctx, "related": related}, tolerance)
    info = {
        "config": cfg.as_dict(),
        "pool": [
            {"filter": s.filter, "params": s.params, "before": s.before, "after": s.after} for s in steps
        ],
        "ratio_matching": {"tolerance": tolerance, "target": target},
        "graph": graph,
        "train": train,
    }
    return table, members, info


def split_name(factor: str, b: int) -> str:
    return f"{factor}_{b + 1}"


def render_report(factor: str, table: pd.DataFrame, members: list[np.ndarray], manifest: dict) -> str:
    """report.md: what moves, what is held, and the balance table."""
    lines = [
        f"# Factor splits: {factor}",
        "",
        f"{len(members)} test splits of {len(members[0])} classes; {factor} ({FACTORS[factor]}) moves "
        "from bin to bin, the other factors are matched (nearest neighbour in z-scored factor space, "
        f"seed {manifest['parameters']['seed']}). Pool: {len(table):,} classes.",
        "",
        "| split | " + " | ".join(FACTORS) + " | R | flaws within | flaws with train |",
        "|---|" + "---:|" * (len(FACTORS) + 3),
    ]
    balance = balance_table(table, members)
    for b, row in balance.iterrows():
        split = manifest["splits"][split_name(factor, int(b))]
        values = " | ".join(f"{row[f]:.3f}" for f in FACTORS)
        lines.append(
            f"| {split_name(factor, int(b))} | {values} | {split['ratio']:.3f} | "
            f"{split['pairs_within']} | {split['pairs_with_train']} |"
        )
    lines += ["", "Largest gap between two bins' means, in pool standard deviations:", ""]
    for name, gap in manifest["max_standardized_gap"].items():
        lines.append(f"- {name}: {gap:.3f}")
    lines += [
        "",
        "Factors: " + "; ".join(f"**{k}** = {v}" for k, v in FACTORS.items()) + ".",
        "R is each split's own structural ratio against the training classes (exact, WordNet distances).",
        _ratio_sentence(factor, members, manifest),
        _pool_sentence(manifest),
        "",
    ]
    return "\n".join(lines)


def _ratio_sentence(factor: str, members: list[np.ndarray], manifest: dict) -> str:
    matching = manifest.get("ratio_matching") or {}
    if factor == "ratio":
        return "R is the factor here, so it is not matched across bins."
    if matching.get("tolerance") is None:
        return "R is NOT matched across bins (factor.ratio_tolerance: null): compare bins with care."
    ratios = [manifest["splits"][split_name(factor, b)]["ratio"] for b in range(len(members))]
    inside = all(abs(r - matching["target"]) <= matching["tolerance"] + 1e-9 for r in ratios)
    return (
        f"R is matched across bins: target {matching['target']:.3f} (the bins' median after matched "
        f"sampling) ± {matching['tolerance']:.3f}; R ranges {min(ratios):.3f}–{max(ratios):.3f}"
        + ("." if inside else "; NOT every bin reached the tolerance (no swap brought it closer).")
    )


def _pool_sentence(manifest: dict) -> str:
    vector = manifest["config"]["factor"].get("require_vector")
    if not vector:
        return "The pool does not require a class vector: a word-vector model may skip some classes."
    return f"Every pool class has a class vector ({vector}; factor.require_vector), so no bin loses classes."


def write_factor_splits(config_path: str | Path, factor: str, bins: int, size: int, out: str | Path) -> dict:
    """Build and write the factor splits; returns the manifest."""
    table, members, info = build_factor_splits(config_path, factor, bins, size)
    graph, train = info.pop("graph"), info.pop("train")
    splits: dict[str, Any] = {}
    with atomic_directory(out, tool=TOOL, inputs=[config_path]) as tmp:
        picked = []
        for b, idx in enumerate(members):
            name = split_name(factor, b)
            wnids = sorted(table["wnid"].iloc[idx])
            path = write_wnid_list(tmp / f"{name}.txt", wnids)
            stats = structure_stats(graph, wnids, train)
            values = table.iloc[idx]
            splits[name] = {
                "file": path.name,
                "sha256": sha256_file(path),
                "bin": b + 1,
                "classes": len(wnids),
                "factor_range": [float(values[factor].min()), float(values[factor].max())],
                "means": {f: float(values[f].mean()) for f in FACTORS},
                "ratio": stats.structural_ratio,
                "pairs_within": stats.pairs_within,
                "pairs_with_train": stats.pairs_with_train,
            }
            picked.append(values.assign(split=name))
        classes = pd.concat(picked)[["split", "wnid", "label", *FACTORS]]
        atomic_write_text(
            tmp / "classes.csv", classes.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        )
        fields = {
            "factor": factor,
            "factors": FACTORS,
            "pool_classes": len(table),
            "config": info["config"],
            "pool": info["pool"],
            "ratio_matching": info["ratio_matching"],
            "max_standardized_gap": standardized_differences(table, members, factor),
            "splits": splits,
        }
        parameters = {"bins": bins, "size": size, "seed": info["config"]["factor"]["seed"]}
        report = render_report(factor, table, members, {"parameters": parameters, **fields})
        atomic_write_text(tmp / "report.md", report)
        manifest = write_manifest(
            tmp,
            format=FORMAT,
            tool=TOOL,
            inputs={"config": file_record(config_path)},
            parameters=parameters,
            fields=fields,
        )
    return manifest
