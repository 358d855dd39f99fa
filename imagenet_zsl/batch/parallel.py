"""A split too large for one process (recipe ``data_parallel: [SPLIT]``), scored data-parallel
under torchrun: for each of its cells every rank searches its share of the split's test-feature
shards (shard *i* by rank *i* mod N) into the cell's resumable search cache, then one rank runs
``evaluate``, which finds every shard searched and only joins them. The top-k lists are the
shards' lists in shard order, and every count, hit@K, GZSL curve and γ is computed from them by
that one process, so the merge is exact: the cell is the same bytes as a one-process one (with
the same BLAS thread count, on which the scores' last bits depend)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagenet_zsl.batch.cells import PendingCell, RunContext, cell_config, evaluate_cells
from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import RunResult, cell_name
from imagenet_zsl.batch.ranks import Ranks
from imagenet_zsl.evaluation.run import EvaluationConfig, check_inputs
from imagenet_zsl.evaluation.run.cache import SearchCache, run_cache_root
from imagenet_zsl.evaluation.run.search_sets import SearchContext, cache_shards


def search_test_share(cfg: EvaluationConfig, rank: int, world: int) -> int:
    """Search this rank's shards of the cell's test images (in the label spaces ``evaluate``
    searches them in) into the cell's search cache; returns how many it searched."""
    inp = check_inputs(cfg)
    spaces = {s: inp.spaces[s] for s in ("unseen", "seen") if s in inp.spaces}
    context = SearchContext(inp.source, SearchCache(run_cache_root(Path(cfg.out))), cfg.block_rows, False)
    return cache_shards(
        "test", inp.fd, inp.test_lookup, spaces, context, inp.kept_ids, lambda i: i % world == rank
    )


def evaluate_data_parallel(
    context: RunContext,
    todo: list[PendingCell],
    ranks: Ranks,
    result: RunResult,
    echo: Callable[[str], None],
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every rank searches its share of each cell's test shards; after a barrier the cell's rank
    (cells round-robin) evaluates it, the others go on to the next cell. Returns this rank's
    records. A rank failing its share only says so: the evaluating rank searches what is left
    and records the cell's error as any cell's."""
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for index, cell in enumerate(todo):
        model, split = cell[0], cell[1]
        name = cell_name(model, split)
        cfg = cell_config(context.plan, context.features, model, split, context.classes[model][split])
        try:
            searched = search_test_share(cfg, ranks.rank, ranks.world)
            echo(f"cell {name}: searched {searched} test shards (data-parallel)")
        except Exception as err:  # the evaluating rank searches it again and reports any error
            stop_on_fatal(err, Path(cfg.out))
            echo(f"cell {name}: this rank's test shards were not searched: {one_line(err)}")
        ranks.barrier()
        if index % ranks.world == ranks.rank:
            records.update(evaluate_cells(context, [cell], result, False, echo))
    return records
