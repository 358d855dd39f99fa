"""Build every split a config asks for: files, manifest and report, all or nothing.

Config schema (YAML, validated strictly by :mod:`imagenet_zsl.splits.config`; see configs/default.yaml)::

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
        optimizer: exact                # or local_search (the heuristic, no bound)
        optimiser: {levels: 3, time_limit: 120, shortlist_factor: 2.0}   # exact's knobs
        include: null                   # wnid file: classes that must be chosen
        exclude: null                   # wnid file: classes removed from the pool
        max_branch_share: null          # e.g. 0.3: at most 30% of classes per WordNet branch
        branch_quota: {}                # e.g. {noun.animal: 100}

Candidates are always the fall11 synsets minus the training classes (20,842 for ILSVRC-2012).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import canonical_json
from imagenet_zsl.checksums import sha256_bytes
from imagenet_zsl.config import read_yaml
from imagenet_zsl.data import fall11_counts, read_wnid_counts
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import resolve_graph, training_wnids
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.safe_output import atomic_directory, check_out_dir
from imagenet_zsl.splits.benchmark import ExactOptions, select_max_ratio, solver_named
from imagenet_zsl.splits.built import BuiltSplit
from imagenet_zsl.splits.config import (
    AllSplit,
    BenchmarkSplit,
    HopsSplit,
    ListSplit,
    PopulationSplit,
    SplitsConfig,
    SplitSpec,
    StoreConfig,
    load_splits_config,
)
from imagenet_zsl.splits.hops import LITERATURE_NAMES, hop_split
from imagenet_zsl.splits.io import check_noun_synsets, read_wnid_list, write_wnid_list
from imagenet_zsl.splits.leakage import REPORT_LABEL_SETS, WINTER21_SET, absent_from, split_leakage
from imagenet_zsl.splits.local_search import LocalSearchOptions
from imagenet_zsl.splits.pool import PoolContext, PoolStep, run_pool, store_counts
from imagenet_zsl.splits.population import population_split
from imagenet_zsl.splits.problem import BenchmarkSolution, Constraints
from imagenet_zsl.splits.report import write_report
from imagenet_zsl.splits.structure import finite_ratios, structural_ratios

log = logging.getLogger(__name__)
BUILD_TOOL = "imagenet-zsl splits build"
#: manifest format of a split directory (v2: one manifest writer, every file hashed)
SPLITS_FORMAT = "imagenet-zsl/splits-v2"


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


def config_graph(config: SplitsConfig) -> ClassGraph:
    """The packaged class graph a config's ``graph: {source, include_instances}`` names."""
    return resolve_graph(config.graph.source + ("+instances" if config.graph.include_instances else ""))


def lexname_branches(wnids: list[str]) -> dict[str, str]:
    """Top-level WordNet branch of each class: its lexicographer file (noun.animal, ...)."""
    nouns = load_wordnet_nouns()
    return {w: nouns.lexnames[nouns.index[w]] for w in wnids if w in nouns}


def build_split(
    spec: SplitSpec,
    ctx: PoolContext,
    candidates: list[str],
    where: str,
    progress: bool = True,
    params: dict[str, Any] | None = None,
    store: list[dict[str, Any]] | None = None,
) -> BuiltSplit:
    """One split from its validated config entry (pure: writes nothing).

    ``ctx`` holds the graph, training classes and counts; splits built with the same ``ctx``
    share their pool filters' work (benchmarks with the same pool compute it once).
    ``params`` is what the manifest records (the entry as written, less name and kind).
    ``store``: pool steps (``held_by_store``) that restrict the candidates, and a list split's
    classes, to the classes an image store holds: the same rule on the held classes.
    """
    graph, train, counts = ctx.graph, ctx.train, ctx.counts
    if params is None:
        params = {
            k: v for k, v in spec.model_dump(exclude_defaults=True).items() if k not in ("name", "kind")
        }
    details: dict[str, Any] = {}
    steps: list[PoolStep] = []
    if store:
        candidates, steps = run_pool(candidates, store, ctx, where=f"{where}: store")
        where = f"{where} (on the store's classes)"
    if isinstance(spec, HopsSplit):
        wnids = hop_split(graph, candidates, train, spec.k)
        if f"hop{spec.k}" in LITERATURE_NAMES:
            details["literature_name"] = LITERATURE_NAMES[f"hop{spec.k}"]
    elif isinstance(spec, AllSplit):
        wnids = sorted(candidates)
    elif isinstance(spec, PopulationSplit):
        wnids = population_split(candidates, counts, spec.n, spec.most)
    elif isinstance(spec, ListSplit):
        wnids = sorted(read_wnid_list(spec.path))
        if store:
            wnids, steps = run_pool(wnids, store, ctx, where=where)
    else:
        wnids, pool_steps, details = _benchmark(spec, ctx, candidates, where, progress)
        steps += pool_steps
    if not wnids:
        raise UserInputError(f"{where}: split {spec.name!r} came out empty")
    return BuiltSplit(
        name=spec.name,
        kind=spec.kind,
        params=params,
        wnids=wnids,
        ratios=structural_ratios(graph, wnids, train),
        pairs_within=len(graph.related_pairs(wnids)),
        pairs_with_train=len(graph.related_pairs(wnids, train)),
        n_images=sum(counts.get(w, 0) for w in wnids),
        pool_steps=steps,
        details=details,
    )


def store_steps(store: StoreConfig | None) -> list[dict[str, Any]] | None:
    """The pool step restricting a recipe to the classes an image store holds (None: no store)."""
    if store is None:
        return None
    return [{"filter": "held_by_store", "counts": store.counts, "min": store.min_images}]


def build_on_store(
    spec: SplitSpec,
    ctx: PoolContext,
    candidates: list[str],
    where: str,
    progress: bool,
    params: dict[str, Any],
    store: list[dict[str, Any]],
) -> BuiltSplit:
    """A split's structurally closest complete replacement on a store: the same rule on the held
    classes (``store``: the ``held_by_store`` step). Returns the replacement; its ``details``
    record the original (built on every candidate: classes, R, fall11 images, how many of its
    classes the store holds) and the replacement's images on the store, classes dropped and added."""
    original = build_split(spec, ctx, candidates, where, progress, params)
    replacement = build_split(spec, ctx, candidates, where, progress, params, store)
    held_of_original, _ = run_pool(original.wnids, store, ctx, where=f"{where}: store")
    on_store = store_counts(ctx, store[0]["counts"])
    before, after = set(original.wnids), set(replacement.wnids)
    replacement.details["original"] = {
        "n_classes": len(original.wnids),
        "held": len(held_of_original),
        "structural_ratio": round(original.ratio, 6),
        "n_images_fall11": original.n_images,
        "consistent": original.consistent,
        "sha256": sha256_bytes("".join(f"{w}\n" for w in sorted(original.wnids)).encode()),
    }
    replacement.details["on_store"] = {
        "images": sum(on_store.get(w, 0) for w in replacement.wnids),
        "dropped": len(before - after),
        "added": len(after - before),
    }
    return replacement


def benchmark_pool(
    spec: BenchmarkSplit,
    ctx: PoolContext,
    candidates: list[str],
    where: str,
) -> tuple[list[str], list[PoolStep]]:
    """The candidate pool of a benchmark split: its filters, then its ``exclude`` list.

    Memoised in ``ctx.cache`` by (filters, exclude, candidates): splits that share a pool share it.
    """
    key = (
        "splits.benchmark_pool",
        canonical_json([spec.pool, spec.exclude]),
        sha256_bytes("\n".join(candidates).encode()),
    )
    if key not in ctx.cache:
        ctx.cache[key] = _benchmark_pool(spec, ctx, candidates, where)
    pool, steps = ctx.cache[key]
    return list(pool), list(steps)


def _benchmark_pool(
    spec: BenchmarkSplit, ctx: PoolContext, candidates: list[str], where: str
) -> tuple[list[str], list[PoolStep]]:
    pool, steps = run_pool(candidates, spec.pool, ctx, where=f"{where}.pool")
    if spec.exclude:
        banned = set(read_wnid_list(spec.exclude))
        kept = [w for w in pool if w not in banned]
        steps.append(PoolStep("exclude", {"path": spec.exclude}, len(pool), len(kept)))
        pool = kept
    if not pool:
        raise UserInputError(
            f"{where}: the candidate pool is empty after the filters "
            f"({', '.join(f'{s.filter}: {s.after}' for s in steps)})"
        )
    return pool, steps


def select_for(
    spec: BenchmarkSplit,
    graph: ClassGraph,
    train: list[str],
    pool: list[str],
    progress: bool = False,
    **overrides: Any,
) -> BenchmarkSolution:
    """Run the configured optimiser on ``pool`` (``overrides`` replace spec fields: ``size``,
    ``max_branch_share``, ``optimizer``)."""
    values = {
        "size": spec.size,
        "max_branch_share": spec.max_branch_share,
        "optimizer": spec.optimizer,
        **overrides,
    }
    opts = spec.optimiser
    solver = solver_named(
        values["optimizer"],
        ExactOptions(levels=opts.levels, time_limit=opts.time_limit, shortlist_factor=opts.shortlist_factor),
        LocalSearchOptions(
            seed=spec.seed,
            shortlist_factors=tuple(opts.shortlist_factors),
            max_passes=opts.max_passes,
            horizon=opts.horizon,
            progress=progress,
        ),
    )
    constraints = Constraints(
        branch_of=lexname_branches(pool),
        branch_quota=dict(spec.branch_quota) or None,
        max_branch_share=values["max_branch_share"],
        include=tuple(read_wnid_list(spec.include)) if spec.include else (),
    )
    return select_max_ratio(graph, pool, train, int(values["size"]), constraints, solver)


def _benchmark(
    spec: BenchmarkSplit,
    ctx: PoolContext,
    candidates: list[str],
    where: str,
    progress: bool,
) -> tuple[list[str], list[PoolStep], dict[str, Any]]:
    pool, steps = benchmark_pool(spec, ctx, candidates, where)
    solution = select_for(spec, ctx.graph, ctx.train, pool, progress)
    return solution.wnids, steps, {"pool_size": len(pool), **solution_details(solution)}


def solution_details(solution: BenchmarkSolution) -> dict[str, Any]:
    """What a split's manifest record says about the optimiser (rounded for stable bytes)."""
    gap = solution.gap
    details: dict[str, Any] = {
        "dropped_related_to_train": solution.dropped_related_to_train,
        "optimizer": solution.optimizer,
        "status": solution.status,
        "upper_bound": None if solution.upper_bound is None else round(solution.upper_bound, 6),
        "gap": None if gap is None else round(gap, 6),
        "shortlist": solution.shortlist,
        "branches": solution.branch_counts,
    }
    if solution.optimizer == "exact":
        details["rounds"] = solution.rounds
        details["refined_levels"] = solution.refined_levels
        details["tie_break"] = solution.tie_break
    else:
        details.update(
            greedy_ratio=round(solution.greedy_ratio, 6), swaps=solution.swaps, passes=solution.passes
        )
    return details


def input_files(config: SplitsConfig) -> list[str]:
    """Every file a recipe reads: training list, counts, the store's counts, list splits,
    include/exclude, the files pool steps name (``path``, ``counts``)."""
    files = [spec for spec in (config.train, config.counts) if spec not in ("ilsvrc2012", "fall11")]
    if config.store is not None:
        files.append(config.store.counts)
    for spec in config.splits:
        if isinstance(spec, ListSplit):
            files.append(spec.path)
        if isinstance(spec, BenchmarkSplit):
            files += [p for p in (spec.include, spec.exclude) if p]
            files += [
                str(step[key])
                for step in spec.pool
                for key in ("path", "counts")
                if isinstance(step.get(key), str)
            ]
    return files


def _ratio_summary(ratios: np.ndarray) -> dict[str, float]:
    finite = finite_ratios(ratios)
    if not len(finite):
        return {}
    q = np.quantile(finite, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {k: round(float(v), 6) for k, v in zip(("min", "q25", "median", "q75", "max"), q, strict=True)}


def build_splits(
    config_path: str | Path,
    out_dir: str | Path,
    progress: bool = True,
    store: StoreConfig | None = None,
) -> list[BuiltSplit]:
    """Build all splits of a config into ``out_dir`` (atomic: all files appear at once or none).

    ``store`` (``--store-counts``) replaces the recipe's ``store:``: every split is then built on
    the classes that store holds, its original's size and R beside it."""
    config_path = Path(config_path)
    config = load_splits_config(config_path)
    raw = read_yaml(config_path)  # the recipe as written: each split's parameters, the manifest's
    if store is not None:
        config = config.model_copy(update={"store": store})
        raw = {**raw, "store": store.model_dump()}
    recipe_files = [Path(p) for p in input_files(config)]
    inputs = [config_path, *recipe_files]
    check_out_dir(out_dir, BUILD_TOOL, inputs, own_files=True)  # refuse a harmful --out before any work
    started = time.perf_counter()
    ctx, candidates = _recipe_context(config, config_path)
    built = _build_all(config, config_path, raw, ctx, candidates, progress)
    with atomic_directory(out_dir, tool=BUILD_TOOL, inputs=inputs) as tmp:
        _write_build(tmp, (config_path, raw, recipe_files), built, ctx, candidates, config.store)
    log.info("built %d splits in %.1f s -> %s", len(built), time.perf_counter() - started, out_dir)
    return built


def _recipe_context(config: SplitsConfig, config_path: Path) -> tuple[PoolContext, list[str]]:
    """The graph, training classes and counts a recipe names, and its candidates (the fall11
    synsets that are not training classes)."""
    train = resolve_train(config.train, str(config_path))
    check_noun_synsets(train, f"{config_path}: train")
    counts = resolve_counts(config.counts)
    graph = config_graph(config)
    train_set = set(train)
    candidates = sorted(w for w in fall11_counts() if w not in train_set)
    return PoolContext(graph, train, counts), candidates


def _build_all(
    config: SplitsConfig,
    config_path: Path,
    raw: dict[str, Any],
    ctx: PoolContext,
    candidates: list[str],
    progress: bool,
) -> list[BuiltSplit]:
    """Every split of the recipe, in order; a split overlapping the training classes is an error."""
    train_set = set(ctx.train)
    store = store_steps(config.store)
    built: list[BuiltSplit] = []
    for i, spec in enumerate(config.splits):
        where = f"{config_path}: splits[{i}]"
        params = {k: v for k, v in raw["splits"][i].items() if k not in ("name", "kind")}
        if store:
            split = build_on_store(spec, ctx, candidates, where, progress, params, store)
        else:
            split = build_split(spec, ctx, candidates, where, progress, params)
        overlap = sorted(set(split.wnids) & train_set)
        if overlap:
            raise UserInputError(
                f"{where}: split {split.name!r} overlaps the training classes: {preview(overlap)}"
            )
        log.info("split %-10s %6d classes  R=%.3f", split.name, len(split.wnids), split.ratio)
        built.append(split)
    return built


def split_record(split: BuiltSplit, counts: dict[str, int]) -> dict[str, Any]:
    """A split's entry in the manifest's ``splits``: parameters, R, flaws, pool, optimiser, leakage."""
    return {
        "file": f"{split.name}.txt",
        "sha256": sha256_bytes("".join(f"{w}\n" for w in sorted(split.wnids)).encode()),
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
        "leakage": {name: split_leakage(split.wnids, name, counts).as_dict() for name in REPORT_LABEL_SETS},
        "absent_from_in21k_p_winter21": absent_from(split.wnids, WINTER21_SET),
    }


def _write_build(
    tmp: Path,
    recipe: tuple[Path, dict[str, Any], list[Path]],
    built: list[BuiltSplit],
    ctx: PoolContext,
    candidates: list[str],
    store: StoreConfig | None = None,
) -> None:
    """The split lists, report.md and its plot, then the manifest hashing all of them. ``recipe``:
    the config file, its YAML as written and the files it names; ``store``: the store the splits
    were built on (None: every fall11 candidate)."""
    config_path, raw, recipe_files = recipe
    graph, train = ctx.graph, ctx.train
    for split in built:
        write_wnid_list(tmp / f"{split.name}.txt", split.wnids)
    config_record = {**file_record(config_path), "path": config_path.name}
    inputs = {"config": config_record, "recipe_files": [file_record(p) for p in recipe_files]}
    fields = {
        "graph": {
            "source": graph.source,
            "nodes": len(graph),
            "edges": int(graph.child_to_parent.nnz),
            "wordnet_version": "3.0",
            "wordnet_sha256": load_wordnet_nouns().digest,
        },
        "training": {
            "n_classes": len(train),
            "sha256": sha256_bytes("".join(f"{w}\n" for w in sorted(train)).encode()),
        },
        "n_candidates": len(candidates),
        "splits": {split.name: split_record(split, ctx.counts) for split in built},
    }
    if store is not None:
        held, _ = run_pool(candidates, store_steps(store) or [], ctx)
        fields["store"] = {
            "counts": store.counts,
            "min_images": store.min_images,
            "candidates_held": len(held),
        }
    write_report(tmp, built, {"inputs": inputs, **fields})
    write_manifest(
        tmp,
        format=SPLITS_FORMAT,
        tool=BUILD_TOOL,
        inputs=inputs,
        parameters=raw,
        fields=fields,
    )
