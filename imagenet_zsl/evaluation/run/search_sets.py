"""Searching the image sets of a run: each set streamed shard by shard through the query source
and searched in its label spaces (:func:`search_set`), every set of the run (:func:`run_search`).

The next block of rows (after a shard's last block, the first block of the next shard to search)
is read, converted and checked in a background thread while the current one is searched
(:class:`~imagenet_zsl.evaluation.run.prefetch.BlockReader`): same blocks, same results, and a
block's error raised where reading it in line would have raised it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from imagenet_zsl import scoring as M
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.queries import QuerySource
from imagenet_zsl.evaluation.run import cache as cache_module
from imagenet_zsl.evaluation.run.cache import SearchCache, SetKey
from imagenet_zsl.evaluation.run.config import OWN_SPACE
from imagenet_zsl.evaluation.run.prefetch import BlockReader, Opened
from imagenet_zsl.evaluation.search import DEFAULT_BLOCK_ROWS, Search, TopKSearcher, device_rows, stage_rows
from imagenet_zsl.evaluation.search_index import squared_row_norms
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import FeatureBlock


@dataclass
class SetResult:
    """Search results of one image set: labels index its class list; ``lists[space]`` =
    (scores (n, m) float32, ids (n, m) int64 into that space's class list); ``ranks``: the exact
    :class:`~imagenet_zsl.scoring.TieRanks` of each true class in the set's own label space;
    ``tails[space]`` (n,): the classes of that space left out of each list that score exactly its
    last score (:meth:`~imagenet_zsl.evaluation.search.TopKSearcher.search_lists`; a space
    without an entry: not known)."""

    labels: np.ndarray
    rows: np.ndarray
    lists: dict[str, tuple[np.ndarray, np.ndarray]]
    ranks: M.TieRanks
    tails: dict[str, np.ndarray] = field(default_factory=dict)

    def take(self, keep: np.ndarray) -> SetResult:
        return SetResult(
            self.labels[keep],
            self.rows[keep],
            {s: (a[keep], b[keep]) for s, (a, b) in self.lists.items()},
            self.ranks.take(keep),
            {s: t[keep] for s, t in self.tails.items()},
        )


@dataclass
class SearchContext:
    """What every image set's search shares: the query source, the resumable shard cache, the
    rows read per block, whether to show a progress bar, and the search (``"exact"``, or
    ``"faiss"``: faiss's candidates first, the same results; :class:`~imagenet_zsl.evaluation.
    search.FaissCandidates`). The cache's keys leave the search out: both give the same bytes."""

    source: QuerySource
    cache: SearchCache
    block_rows: int = DEFAULT_BLOCK_ROWS
    progress: bool = True
    search: Search = "exact"
    #: reads the next block while the current one is searched (its thread ends with each set)
    reader: BlockReader = field(default_factory=BlockReader, repr=False, compare=False)


def search_set(
    name: str,
    fd: FeatureDir,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    kept_ids: np.ndarray | None = None,
) -> SetResult:
    """Stream a feature directory's rows of the wanted classes through the query source and search
    each label space.

    Memory: one block of ``context.block_rows`` rows and one score tile while searching; then the
    labels, row numbers and tie ranks (32 bytes per image) in memory, and the top-k lists
    (``n * m * 8`` bytes per space) memory-mapped from the cache directory when there is one.
    """
    parts: list[dict[str, np.ndarray]] = []  # only without a cache directory
    done: list[CachedPart] = []
    offset = 0
    set_key = SetKey.of(name, lookup, spaces, context.source, kept_ids)
    with (
        tqdm(
            total=fd.num_rows, desc=f"search {name}", unit="img", disable=not context.progress, leave=False
        ) as bar,
        _reading(context),
    ):
        for index, shard in enumerate(fd.shards):
            following = fd.shards[index + 1] if index + 1 < len(fd.shards) else None
            _expect(fd, following, set_key, lookup, spaces, context, kept_ids)
            key, cached, _ = _cached_shard(fd, shard, set_key, lookup, spaces, context, kept_ids)
            if context.cache.root is None:
                parts.append({**cached, "rows": cached["rows"] + offset})
            done.append(CachedPart(shard["name"], key, len(cached["labels"]), offset))
            offset += int(shard["rows"])
            bar.update(int(shard["rows"]))
    if context.cache.root is not None:
        return joined_from_cache(name, spaces, context.cache, done)
    return _joined(parts, spaces)


@dataclass(frozen=True)
class CachedPart:
    """One shard's entry in the cache, as a set's search joins it: its (shard name, key), the
    images it holds of the set, and the set's rows before the shard (added to its own row
    numbers)."""

    shard: str
    key: str
    count: int
    offset: int


def cache_shards(
    name: str,
    fd: FeatureDir,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    kept_ids: np.ndarray | None,
    owned: Callable[[int], bool],
) -> int:
    """Search the shards ``owned(index)`` of an image set into ``context.cache`` exactly as
    :func:`search_set` would (same keys, same bytes: a shard's entry depends on that shard alone)
    and return how many were searched: one process's share of a data-parallel search, or one
    shard just extracted (the fused path); :func:`search_set` over the same cache afterwards
    finds them done and only joins them."""
    set_key = SetKey.of(name, lookup, spaces, context.source, kept_ids)
    mine = [index for index in range(len(fd.shards)) if owned(index)]
    searched = 0
    with _reading(context):
        for index, following in zip(mine, [*mine[1:], None], strict=True):
            after = None if following is None else fd.shards[following]
            _expect(fd, after, set_key, lookup, spaces, context, kept_ids)
            _, _, now = _cached_shard(fd, fd.shards[index], set_key, lookup, spaces, context, kept_ids)
            searched += now
    return searched


@contextlib.contextmanager
def _reading(context: SearchContext) -> Iterator[None]:
    """One image set's search: its reader's background thread is waited for at the end."""
    try:
        yield
    finally:
        context.reader.close()


def _expect(
    fd: FeatureDir,
    shard: dict | None,
    set_key: SetKey,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    kept_ids: np.ndarray | None,
) -> None:
    """Tell the reader which shard comes next, when it will be searched (not found in a cache):
    its first block is then read while the current shard's last one is searched."""
    if shard is None or not _to_search(shard, set_key, spaces, context):
        context.reader.expect(None, None)
        return
    use_logits = _uses_logits(fd, context)
    device = _staging_device(spaces, context.source, use_logits)
    rows = _read_rows(fd, spaces, context)
    context.reader.expect(*_shard_reading(fd, shard["name"], lookup, kept_ids, rows, use_logits, device))


def _to_search(shard: dict, set_key: SetKey, spaces: dict[str, TopKSearcher], context: SearchContext) -> bool:
    """Whether :func:`_cached_shard` will search ``shard`` (by the cache files present: a wrong
    guess only costs or saves one block read ahead)."""
    name = set_key.name
    if context.cache.has(name, shard["name"]):
        return False
    shared = _shared_for(name)
    if shared is None:
        return True
    _, files = _shared_files(shard, set_key, spaces)
    return not all(shared.has(name, file) for file in files.values())


def _cached_shard(
    fd: FeatureDir,
    shard: dict,
    set_key: SetKey,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    kept_ids: np.ndarray | None,
) -> tuple[str, dict[str, np.ndarray], bool]:
    """One shard's result from ``context.cache``, or searched (through :func:`_with_shared`) and
    put there, its row numbers the shard's own (the caller adds the set's rows before it). Returns
    (cache key, result, whether it was searched now): the one step of :func:`search_set` and
    :func:`cache_shards`, so both write the same keys and bytes."""
    name, shard_name = set_key.name, shard["name"]
    key = cache_module.shard_key(set_key, shard)
    cached = context.cache.get(name, shard_name, key)
    if cached is not None:
        return key, cached, False
    use_logits = _uses_logits(fd, context)

    def search(todo: dict[str, TopKSearcher]) -> dict:
        return search_shard(fd, shard_name, lookup, todo, context, use_logits, OWN_SPACE[name], kept_ids)

    cached = _with_shared(name, shard, set_key, spaces, search)
    context.cache.put(name, shard_name, key, cached)
    return key, cached, True


def _with_shared(
    name: str,
    shard: dict,
    set_key: SetKey,
    spaces: dict[str, TopKSearcher],
    search: Callable[[dict[str, TopKSearcher]], dict],
) -> dict:
    """One shard searched by ``search(spaces)``. With a :func:`~imagenet_zsl.evaluation.run.cache.
    shared_search` open (``run``), the held-out seen and validation images' search in each label
    space comes from it, or goes into it (keyed per space by its content): a model's second split
    reads, encodes and searches its validation images not at all, and its seen images only in a
    label space of its own (with ``label_space: all`` not at all either)."""
    shared = _shared_for(name)
    if shared is None:
        return search(spaces)
    own = OWN_SPACE[name]
    keys, files = _shared_files(shard, set_key, spaces)
    found = {s: shared.get(name, files[s], keys[s]) for s in spaces}
    todo = {s: sp for s, sp in spaces.items() if found[s] is None}
    fresh = search(todo) if todo else {}
    for s in todo:
        found[s] = _space_part(fresh, s, s == own)
        shared.put(name, files[s], keys[s], found[s])
    return _merged(found, spaces, own)


def _uses_logits(fd: FeatureDir, context: SearchContext) -> bool:
    """Whether the query source reads the shards' logits (and they have them)."""
    return context.source.uses_logits and fd.has_logits


def _shared_for(name: str) -> SearchCache | None:
    """The shared search cache (``run``) for image set ``name``; None without one, and for the
    test images, which differ from split to split."""
    return None if name == "test" else cache_module.shared_cache()


def _shared_files(
    shard: dict, set_key: SetKey, spaces: dict[str, TopKSearcher]
) -> tuple[dict[str, str], dict[str, str]]:
    """Per label space: the shared cache's key of the shard's search and its file name."""
    own = OWN_SPACE[set_key.name]
    keys = {s: cache_module.space_key(set_key, shard, s, s == own) for s in spaces}
    return keys, {s: f"{shard['name']}.{s}.{keys[s][:16]}" for s in spaces}


#: the arrays of each label space's search of a shard: its lists and their tails
SPACE_FIELDS = ("scores", "ids", "tail")


def _space_part(out: dict[str, np.ndarray], space: str, own: bool) -> dict[str, np.ndarray]:
    """The arrays of one space's search of a shard (the tie ranks only in the set's own space)."""
    names = ["labels", "rows", *(f"{space}.{f}" for f in SPACE_FIELDS), *(["above", "tied"] if own else [])]
    return {f: out[f] for f in names}


def _merged(
    found: dict[str, dict[str, np.ndarray]], spaces: dict[str, TopKSearcher], own: str
) -> dict[str, np.ndarray]:
    """A shard's result from its per-space parts (labels and rows are the same in each)."""
    base = found[own]
    out = {"labels": base["labels"], "rows": base["rows"], "above": base["above"], "tied": base["tied"]}
    for s in spaces:
        out.update({f"{s}.{f}": found[s][f"{s}.{f}"] for f in SPACE_FIELDS})
    return out


def _set_result(fields: dict[str, np.ndarray], spaces: dict[str, TopKSearcher]) -> SetResult:
    return SetResult(
        fields["labels"].astype(np.int64, copy=False),
        fields["rows"].astype(np.int64, copy=False),
        {s: (fields[f"{s}.scores"], fields[f"{s}.ids"]) for s in spaces},
        M.TieRanks(fields["above"].astype(np.int64, copy=False), fields["tied"].astype(np.int64, copy=False)),
        {s: fields[f"{s}.tail"] for s in spaces},  # int32: 4 bytes per image and space
    )


def _field_specs(spaces: dict[str, TopKSearcher]) -> dict[str, tuple[tuple[int, ...], type]]:
    specs: dict[str, tuple[tuple[int, ...], type]] = {
        "labels": ((), np.int64),
        "rows": ((), np.int64),
        "above": ((), np.int64),
        "tied": ((), np.int64),
    }
    for s, sp in spaces.items():
        specs[f"{s}.scores"] = ((sp.k,), np.float32)
        specs[f"{s}.ids"] = ((sp.k,), np.int32)
        specs[f"{s}.tail"] = ((), np.int32)
    return specs


def _joined(parts: list[dict[str, np.ndarray]], spaces: dict[str, TopKSearcher]) -> SetResult:
    fields = {
        f: np.concatenate([p[f] for p in parts]) if parts else np.zeros((0, *shape), dtype)
        for f, (shape, dtype) in _field_specs(spaces).items()
    }
    return _set_result(fields, spaces)


def joined_from_cache(
    name: str, spaces: dict[str, TopKSearcher], cache: SearchCache, done: list[CachedPart]
) -> SetResult:
    """The set's arrays filled shard by shard from the cache (row numbers shifted by each shard's
    offset); the top-k lists and their tails as memory-mapped .npy files in the cache directory
    (so they need no heap memory)."""
    total = sum(part.count for part in done)
    fields: dict[str, np.ndarray] = {}
    for f, (shape, dtype) in _field_specs(spaces).items():
        if shape or f.endswith(".tail"):
            path = cache.root / f"{name}.{f}.npy"
            fields[f] = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(total, *shape))
        else:
            fields[f] = np.empty(total, dtype)
    start = 0
    for part in done:
        data = cache.get(name, part.shard, part.key)
        if data is None:  # removed under our feet
            raise UserInputError(f"{cache.root}: the search cache changed during the run; re-run the command")
        stop = start + part.count
        for f in fields:
            fields[f][start:stop] = data[f]
        fields["rows"][start:stop] += part.offset
        start = stop
        M.release_pages(*fields.values())  # written to the cache file, not kept resident
    for array in fields.values():
        if isinstance(array, np.memmap):
            array.flush()
    return _set_result(fields, spaces)


def search_shard(
    fd: FeatureDir,
    shard_name: str,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    use_logits: bool,
    own_space: str,
    kept_ids: np.ndarray | None = None,
) -> dict:
    """One shard's labels, row numbers, top-k lists in every space and the true classes' tie
    ranks in their own space (the unit of the cache). Reads only through :class:`FeatureDir`,
    by ``context.reader`` (the next block read in the background)."""
    device = _staging_device(spaces, context.source, use_logits)
    rows = _read_rows(fd, spaces, context)
    reading = _shard_reading(fd, shard_name, lookup, kept_ids, rows, use_logits, device)
    (target, keep), blocks = context.reader.open(*reading)
    out = {
        "labels": target[keep],
        "rows": keep.astype(np.int64),
        "above": np.empty(len(keep), np.int64),
        "tied": np.empty(len(keep), np.int64),
    }
    for s, sp in spaces.items():
        out[f"{s}.scores"] = np.empty((len(keep), sp.k), np.float32)
        out[f"{s}.ids"] = np.empty((len(keep), sp.k), np.int32)
        out[f"{s}.tail"] = np.empty(len(keep), np.int32)
    start = 0
    for block in blocks:
        done = slice(start, start + len(block[0].ids))
        queries, norms = _queries(fd, shard_name, block, context.source, device)
        for s, sp in spaces.items():
            labels = target[keep[done]] if s == own_space else None
            scores, ids, ranks, tail = sp.search_lists(
                queries, labels, norms, row_offset=done.start, search=context.search
            )
            out[f"{s}.scores"][done] = scores
            out[f"{s}.ids"][done] = ids
            out[f"{s}.tail"][done] = tail
            if ranks is not None:
                out["above"][done], out["tied"][done] = ranks.above, ranks.tied
        start = done.stop
        block = queries = norms = None  # dropped before the next is asked for: one block ahead at most
    return out


#: a block as the reader prepares it: (rows, their float64 squared norms, or None and the rows
#: staged for the device: :func:`~imagenet_zsl.evaluation.search.stage_rows`)
Prepared = tuple[FeatureBlock, np.ndarray | None, object | None]


#: a block read for the CPU's search holds at most this many float32 features (16 MB: 2,048 rows of
#: 2,048-d): with the block read ahead, the search's working set stays that of a plain loop over
#: one shard (issue 38: 32,768 rows of 2,048-d were 268 MB a block), whatever ``--block-rows``
#: allows; a block's cut changes no score (the search's promise), and smaller blocks measured no
#: slower
HOST_BLOCK_ELEMENTS = 1 << 22


def _read_rows(fd: FeatureDir, spaces: dict[str, TopKSearcher], context: SearchContext) -> int:
    """The rows read per block: ``context.block_rows`` (the user's bound), at most
    ``HOST_BLOCK_ELEMENTS`` values a block when every space searches on the CPU (a GPU search
    keeps large blocks: each is one upload and large GEMMs)."""
    if any(sp.torch_device is not None for sp in spaces.values()):
        return context.block_rows
    return max(1, min(context.block_rows, HOST_BLOCK_ELEMENTS // max(1, fd.dim)))


def _staging_device(spaces: dict[str, TopKSearcher], source: QuerySource, use_logits: bool) -> object | None:
    """The torch device the feature blocks go to as stored (float16), converted and checked
    there: when every space searches on that device and the features are the queries; else None
    (blocks are converted and checked on the host, as the numpy search and ``encode`` need)."""
    devices = {sp.torch_device for sp in spaces.values()}
    if len(devices) != 1 or not source.features_as_queries or use_logits:
        return None
    return devices.pop()


def _shard_reading(
    fd: FeatureDir,
    shard_name: str,
    lookup: np.ndarray,
    kept_ids: np.ndarray | None,
    block_rows: int,
    use_logits: bool,
    device: object | None,
) -> tuple[tuple, Callable[[], Opened]]:
    """(key, open) of a shard for the reader: ``open()`` reads its labels (and ids), picks the
    wanted rows and gives ((target, keep), prepared blocks, block count). The key names what the
    blocks depend on (the objects by identity: the closure keeps them alive)."""
    key = (id(fd), shard_name, id(lookup), id(kept_ids), block_rows, use_logits, str(device))

    def open_shard() -> Opened:
        target = lookup[fd.shard_labels(shard_name)]
        wanted = target >= 0
        if kept_ids is not None:
            wanted &= np.isin(fd.shard_ids(shard_name), kept_ids)
        keep = np.flatnonzero(wanted)
        if len(keep) == 0:
            return (target, keep), iter(()), 0
        # every row wanted (the usual case): contiguous slices, one fp16 -> fp32 pass per block
        rows = None if len(keep) == len(target) else keep
        count = -(-len(keep) // block_rows) if block_rows >= 1 else 1  # shard_blocks refuses < 1
        return (target, keep), _prepared(fd, shard_name, rows, block_rows, use_logits, device), count

    return key, open_shard


def _prepared(
    fd: FeatureDir,
    shard: str,
    rows: np.ndarray | None,
    block_rows: int,
    use_logits: bool,
    device: object | None,
) -> Iterator[Prepared]:
    """A shard's blocks ready to search (run by the reader's thread): on the host, float32 rows
    checked for NaN/Inf (their squared norms); for the device, float16 rows staged there."""
    dtype = np.float32 if device is None else np.float16
    for block in fd.shard_blocks(shard, rows, block_rows, with_logits=use_logits, dtype=dtype):
        if device is None:
            yield block, _check_rows(fd, shard, block.ids, block.features, "features"), None
        else:
            yield block, None, stage_rows(block.features, device)


def _queries(
    fd: FeatureDir, shard: str, prepared: Prepared, source: QuerySource, device: object | None
) -> tuple[object, np.ndarray]:
    """A prepared block's queries and their squared norms: the device's float32 rows (checked
    there), or the host's rows through ``source.encode`` (checked again when it changed them)."""
    block, norms, staged = prepared
    if staged is not None:
        rows, norms = device_rows(staged, device)
        if not np.isfinite(norms).all():
            raise _not_finite(fd, shard, block.ids, np.isfinite(norms), "features")
        return rows, norms
    queries = source.encode(block.features, block.logits)
    if queries is not block.features:  # prototypes in feature space: the rows already checked
        norms = _check_rows(fd, shard, block.ids, queries, "query vectors (model output)")
    return queries, norms


def _check_rows(fd: FeatureDir, shard: str, ids: np.ndarray, matrix: np.ndarray, what: str) -> np.ndarray:
    """Refuse rows holding NaN or Inf (one line naming the first image); else return the rows'
    squared norms, which the search's overflow check reuses. A row's float64 squared norm is
    finite exactly when the row is, so the common case reads the block once."""
    norms = squared_row_norms(matrix)
    if np.isfinite(norms).all():
        return norms
    raise _not_finite(fd, shard, ids, np.isfinite(matrix).all(axis=1), what)


def _not_finite(fd: FeatureDir, shard: str, ids: np.ndarray, finite: np.ndarray, what: str) -> UserInputError:
    """The one-line error for the rows not ``finite`` (bool (n,)) of a block."""
    bad = np.flatnonzero(~finite)
    return UserInputError(
        f"{fd.path}: {what} of {len(bad)} images in shard {shard} contain NaN or Inf "
        f"(first: {ids[bad[0]]}); re-extract them or drop those images"
    )
