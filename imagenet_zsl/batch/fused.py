"""Scoring while extracting (issue 38 §1): a run whose test images are a store and a backbone
(:mod:`~imagenet_zsl.batch.test_images`) extracts them once, and each shard, as it leaves the
backbone (float16, exactly as a feature shard stores it), is searched for every pending cell into
the cell's resumable search cache (:func:`~imagenet_zsl.evaluation.run.search_sets.cache_shards`,
the same keys and row offsets as a search of the finished directory). Only the shard's labels, ids
and record are written (:mod:`~imagenet_zsl.features.scored_shards`); then each cell's ``evaluate``
finds every shard searched and only joins them, as after a data-parallel search. So a cell is the
bytes of extract-then-evaluate on the same images, but for the test features' path and manifest
sha256 in its metrics.json, and no test feature reaches the disk.

Resumable: a shard's record is written after every cell cached it, so a killed run extracts and
scores again only the unfinished shards; a cell that lacks a finished shard (a model added to the
recipe) makes the extraction start over. One process: under torchrun the fused pass runs on
rank 0 (the others wait), the cells are then spread as usual."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from imagenet_zsl.batch.cells import PendingCell, RunContext, cell_config
from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import ScoredTest, cell_name
from imagenet_zsl.evaluation.run import EvaluationInputs, check_inputs
from imagenet_zsl.evaluation.run.cache import SearchCache, SetKey, run_cache_root, shard_key
from imagenet_zsl.evaluation.run.search_sets import SearchContext, cache_shards
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.extract import run_extraction
from imagenet_zsl.features.scored_dir import ShardView
from imagenet_zsl.features.scored_shards import ShardOutputs
from imagenet_zsl.features.shard_files import finished_shard
from imagenet_zsl.io import read_manifest


@dataclass
class FusedCell:
    """One pending cell's search of the test images: its inputs (built on the planned directory:
    the same label spaces, lookup and query source as on the scored one), spaces and cache."""

    name: str
    inputs: EvaluationInputs
    spaces: dict[str, TopKSearcher]
    context: SearchContext

    def set_key(self) -> SetKey:
        inp = self.inputs
        return SetKey.of("test", inp.test_lookup, self.spaces, inp.source, inp.kept_ids)

    def has(self, record: dict) -> bool:
        """Whether the shard of ``record`` is in this cell's cache under its key."""
        key = shard_key(self.set_key(), record)
        return self.context.cache.get("test", record["name"], key) is not None


def fused_cell(context: RunContext, model: str, split: str) -> FusedCell:
    """The cell's search, as ``evaluate`` will make it (the cache of its run directory)."""
    plan = context.plan
    cfg = cell_config(plan, context.features, model, split, context.classes[model][split])
    planned_features = replace(context.features, scored=None)  # its test: the planned directory
    planned = cell_config(plan, planned_features, model, split, context.classes[model][split])
    inp = check_inputs(planned)
    spaces = {s: inp.spaces[s] for s in ("unseen", "seen") if s in inp.spaces}
    search = SearchContext(inp.source, SearchCache(run_cache_root(Path(cfg.out))), cfg.block_rows, False)
    return FusedCell(cell_name(model, split), inp, spaces, search)


def finished_records(scored: Path) -> list[dict]:
    """The records of the scored directory's finished shards, in shard order."""
    done = dist.finished_shards(scored)
    records = [finished_shard(scored, names[0]) for _, names in sorted(done.items())]
    return [r for r in records if r is not None]


def score_while_extracting(context: RunContext, todo: list[PendingCell], echo: Callable[[str], None]) -> int:
    """Extract the run's test images and search each shard for every cell of ``todo`` (see the
    module docstring); returns the number of cells it searched for (0: nothing to do)."""
    scored = context.features.scored
    if scored is None or not todo:
        return 0
    cells = []
    for model, split, _, _ in todo:
        try:
            cells.append(fused_cell(context, model, split))
        except Exception as err:  # isolated: the cell's evaluate meets the same error and records it
            stop_on_fatal(err, context.plan.out / "cells" / cell_name(model, split))
            echo(f"cell {cell_name(model, split)}: not scored while extracting: {one_line(err)}")
    if not cells:
        return 0
    records = finished_records(scored.scored)
    complete = read_manifest(scored.scored) is not None
    if all(cell.has(record) for cell in cells for record in records):
        if complete:
            return len(cells)
    else:
        echo(f"test images: some cells lack finished shards of {scored.scored}: extracting again")
        shutil.rmtree(scored.scored)
    echo(f"test images: extracting and scoring for {len(cells)} cells ({', '.join(c.name for c in cells)})")
    run_extraction(scored.config, _sink(scored, cells))
    return len(cells)


def _sink(scored: ScoredTest, cells: list[FusedCell]) -> Callable[[ShardOutputs], None]:
    """Search one finished shard for every cell, at the row offset of the shards before it (the
    finished ones found on disk at the start, then each shard as it is scored: shards come in
    order in one process)."""
    known = {_index(r["name"]): r for r in finished_records(scored.scored)}

    def score(outputs: ShardOutputs) -> None:
        index = _index(outputs.name)
        before = [known[g] for g in range(index) if g in known]
        if len(before) != index:  # a shard before it is unfinished (another process's): no offset
            raise RuntimeError(
                f"{scored.scored}: shard {outputs.name} is scored before the shards ahead of it"
            )
        view = ShardView(scored.scored, before, outputs)
        for cell in cells:
            inp = cell.inputs
            cache_shards(
                "test", view, inp.test_lookup, cell.spaces, cell.context, inp.kept_ids, lambda i: i == index
            )
        known[index] = view.shards[-1]

    return score


def _index(shard: str) -> int:
    """The global index of shard ``r000-s000042`` (42)."""
    return int(shard.rsplit("-s", 1)[1])
