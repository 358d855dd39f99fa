"""Scoring while extracting (issue 38 §1): a run whose test images are a store and a backbone
(:mod:`~imagenet_zsl.batch.scored_test_images`) extracts them once, and each shard, as it leaves the
backbone (float16, exactly as a feature shard stores it), is searched for every pending cell into
the cell's resumable search cache (:func:`~imagenet_zsl.evaluation.run.search_sets.cache_shards`,
the same keys and bytes as a search of the finished directory: a cached shard's row numbers are
its own, the set's offsets are added when the shards are joined). Only the shard's labels, ids
and record are written (:mod:`~imagenet_zsl.features.scored_shards`); then each cell's
``evaluate`` finds every shard searched and only joins them, as after a data-parallel search. So
a cell is the bytes of extract-then-evaluate on the same images, but for the test features' path
and manifest sha256 in its metrics.json, and no test feature reaches the disk.

Under torchrun every rank extracts and scores its own block of the shards (:func:`~imagenet_zsl.
features.distributed.shard_range`, as ``extract`` splits them: no shard needs another finished
first), the last rank to finish writes the scored directory's manifest, and after a barrier the
cells are spread over the ranks as usual. Which rank scored a shard changes no byte of a cell.

Resumable: a shard's record is written after every cell cached it, so a killed run extracts and
scores again only the unfinished shards, with any number of processes (finished shards are
recognised by their global index); a cell that lacks a finished shard (a model added to the
recipe) makes the extraction start over (rank 0 decides, before any rank extracts)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from imagenet_zsl.batch.cells import PendingCell, RunContext, cell_config
from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import cell_name
from imagenet_zsl.batch.ranks import Ranks
from imagenet_zsl.evaluation.run import EvaluationInputs, check_inputs
from imagenet_zsl.evaluation.run.cache import SearchCache, SetKey, run_cache_root, shard_key
from imagenet_zsl.evaluation.run.search_sets import SearchContext, cache_shards
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.extract import run_extraction
from imagenet_zsl.features.scored_dir import ShardView
from imagenet_zsl.features.scored_shards import ShardOutputs, ShardSink
from imagenet_zsl.features.shard_files import finished_shard
from imagenet_zsl.manifests import read_manifest


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


def score_while_extracting(
    context: RunContext, todo: list[PendingCell], ranks: Ranks, echo: Callable[[str], None]
) -> int:
    """Extract the run's test images and search each shard for every cell of ``todo``, this rank
    its share of the shards (see the module docstring); returns the number of cells searched for
    (0: nothing to do). Every rank calls it; it returns on each once every shard is scored. The
    extraction goes on from the one planning began in this process (its backbone built once)."""
    scored = context.features.scored
    if scored is None:
        return 0
    try:
        cells = _fused_cells(context, todo, echo)
        if not cells:
            return 0
        if not ranks.first(lambda: _to_extract(scored.scored, cells, echo)):
            return len(cells)
        names = ", ".join(c.name for c in cells)
        echo(f"test images: extracting and scoring for {len(cells)} cells ({names})")
        run_extraction(scored.config, _sink(scored.scored, cells), scored.held)
    finally:
        scored.held.take()  # planning's backbone, used or not, is let go
    ranks.barrier()  # every rank's shards scored, the manifest written by the last to finish
    return len(cells)


def _fused_cells(
    context: RunContext, todo: list[PendingCell], echo: Callable[[str], None]
) -> list[FusedCell]:
    """The search of every cell of ``todo`` that can be built (a cell that cannot is said and
    left to its ``evaluate``, which meets the same error and records it)."""
    cells = []
    for model, split, _, _ in todo:
        try:
            cells.append(fused_cell(context, model, split))
        except Exception as err:  # isolated: the cell's evaluate meets the same error and records it
            stop_on_fatal(err, context.plan.out / "cells" / cell_name(model, split))
            echo(f"cell {cell_name(model, split)}: not scored while extracting: {one_line(err)}")
    return cells


def _to_extract(scored: Path, cells: list[FusedCell], echo: Callable[[str], None]) -> bool:
    """Whether the test images are (still) to be extracted (rank 0's decision, before any rank
    extracts): not when the scored directory is complete and every cell cached every shard; a
    cell lacking a finished shard empties the directory (every shard is extracted again)."""
    records = finished_records(scored)
    if all(cell.has(record) for cell in cells for record in records):
        return read_manifest(scored) is None
    echo(f"test images: some cells lack finished shards of {scored}: extracting again")
    shutil.rmtree(scored)
    return True


def _sink(scored: Path, cells: list[FusedCell]) -> ShardSink:
    """Search one finished shard for every cell: its cache entries depend on that shard alone, so
    shards may come in any order, from any rank."""

    def score(outputs: ShardOutputs) -> None:
        view = ShardView(scored, outputs)
        for cell in cells:
            inp = cell.inputs
            cache_shards("test", view, inp.test_lookup, cell.spaces, cell.context, inp.kept_ids, _every)

    return score


def _every(index: int) -> bool:
    """Every shard of a :class:`ShardView` (it holds one) is searched."""
    return True
