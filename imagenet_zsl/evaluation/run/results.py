"""Every image set of a run searched in its label spaces: :class:`SearchResults` from
:func:`run_search` (the count-as-miss images added as misses by :func:`miss_set`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.run.config import calibration_rows
from imagenet_zsl.evaluation.run.search_sets import SearchContext, SetResult, search_set

if TYPE_CHECKING:
    from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs


@dataclass(frozen=True)
class SearchResults:
    """The top-k lists of every image set of a run (``None``: the set is not used)."""

    test: SetResult
    seen: SetResult | None = None
    val: SetResult | None = None
    val_seen: SetResult | None = None
    #: the test images of the count-as-miss classes (never searched): labels ``len(space) + j``,
    #: empty lists, true class outside every list (``above = m``); None without such images
    misses: SetResult | None = None

    def sets(self) -> list[tuple[str, SetResult | None]]:
        return [("test", self.test), ("seen", self.seen), ("val", self.val), ("val_seen", self.val_seen)]


def miss_set(inp: EvaluationInputs, like: SetResult) -> SetResult | None:
    """The count-as-miss images as a :class:`SetResult` shaped like ``like`` (the searched test
    set): ids -1 and scores -inf in every space, ``above = m`` (outside the list: a miss at every
    K under both tie rules and at every calibration γ), rows -1 (never read)."""
    counts = inp.miss_counts
    if counts is None or int(counts.sum()) == 0:
        return None
    labels = np.repeat(len(inp.space_wnids) + np.arange(len(counts), dtype=np.int64), counts)
    n = len(labels)
    lists = {
        space: (np.full((n, ids.shape[1]), -np.inf, np.float32), np.full((n, ids.shape[1]), -1, ids.dtype))
        for space, (_, ids) in like.lists.items()
    }
    ranks = M.TieRanks(np.full(n, inp.m, np.int64), np.zeros(n, np.int64))
    return SetResult(labels, np.full(n, -1, np.int64), lists, ranks)


def run_search(inp: EvaluationInputs, context: SearchContext) -> SearchResults:
    """Search every image set of the run in its label spaces (resumable through the cache)."""
    cfg, spaces, sets = inp.cfg, inp.spaces, inp.sets
    test_spaces = {s: spaces[s] for s in ("unseen", "seen") if s in spaces}
    test = search_set("test", inp.fd, inp.test_lookup, test_spaces, context, kept_ids=inp.kept_ids)
    misses = miss_set(inp, test)
    if not cfg.gzsl:
        return SearchResults(test, misses=misses)
    seen_spaces = dict(test_spaces)
    if sets.val_wnids is not None and sets.val_seen_fd is None:
        seen_spaces["val_unseen"] = spaces["val_unseen"]
    seen = search_set("seen", sets.seen_fd, sets.seen_lookup, seen_spaces, context)
    if sets.val_wnids is None:
        return SearchResults(test, seen, misses=misses)
    val_spaces = {"seen": spaces["seen"], "val_unseen": spaces["val_unseen"]}
    val = search_set("val", sets.val_fd, sets.val_lookup, val_spaces, context)
    if sets.val_seen_fd is not None:
        val_seen = search_set("val_seen", sets.val_seen_fd, sets.val_seen_lookup, val_spaces, context)
        return SearchResults(test, seen, val, val_seen, misses)
    seen, val_seen = _hold_out_seen(inp, seen)
    return SearchResults(test, seen, val, val_seen, misses)


def _hold_out_seen(inp: EvaluationInputs, seen: SetResult) -> tuple[SetResult, SetResult]:
    """A seeded ``--val-seen-fraction`` of the seen images (by feature row), held out for
    validation: (seen test images, validation seen images)."""
    held = calibration_rows(inp.sets.seen_fd.num_rows, inp.cfg.val_seen_fraction, inp.cfg.seed)
    val_seen = seen.take(held[seen.rows])
    seen = seen.take(~held[seen.rows])
    if len(seen.labels) == 0 or len(val_seen.labels) == 0:
        raise UserInputError(
            "--val-seen-fraction leaves no seen images for test or "
            "validation; change it or pass --val-seen-features"
        )
    return seen, val_seen
