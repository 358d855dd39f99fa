"""Reading ahead (issue 27): the next block is read and checked in a background thread while the
current one is searched; the torch path stages float16 blocks on its device. Same blocks, same
results byte for byte, the same errors at the same point."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import torch_search
from imagenet_zsl.evaluation.queries import PrototypeFile
from imagenet_zsl.evaluation.run import search_sets
from imagenet_zsl.evaluation.run.cache import SearchCache
from imagenet_zsl.evaluation.run.prefetch import BlockReader
from imagenet_zsl.evaluation.run.search_sets import SearchContext, search_set, search_shard
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.semantics.class_vectors import ClassVectors

WNIDS = [f"n{i:08d}" for i in range(12)]


def _feature_dir(path, rows=(10, 9, 11), dim=5, seed=0, bad=()):
    """Shards of integer-valued float16 features (exact scores: ties everywhere); ``bad``:
    (shard, row, value) entries planted."""
    rng = np.random.default_rng(seed)
    path.mkdir()
    records = []
    for index, n in enumerate(rows):
        labels = rng.integers(0, len(WNIDS), n)
        features = rng.integers(-2, 3, (n, dim)).astype(np.float16)
        for shard, row, value in bad:
            if shard == index:
                features[row, 1] = value
                labels[row] = row % 8  # a searched class
        ids = [f"{WNIDS[label]}/{index}_{row}.JPEG" for row, label in enumerate(labels)]
        records.append(write_shard(path, shard_name(0, index), features, labels, ids))
    write_manifest(path, {"classes": WNIDS, "dim": dim, "shards": records})
    return FeatureDir(path)


def _reader_blocks(reader, fd, shard, block_rows, record):
    """(key, open) of one shard for ``reader``: its plain blocks, each noting the thread it was
    read in."""

    def blocks():
        for block in fd.shard_blocks(shard, None, block_rows):
            record.append((shard, threading.get_ident()))
            yield block

    count = -(-fd.rows_of(shard) // block_rows)
    return (shard,), lambda: (shard, blocks(), count)


def test_the_reader_gives_the_plain_blocks_reading_the_next_one_in_its_thread(tmp_path):
    fd = _feature_dir(tmp_path / "f")
    plain = [b for name in fd.shard_names() for b in fd.shard_blocks(name, None, 4)]
    reader, record, got = BlockReader(), [], []
    names = fd.shard_names()
    try:
        for index, name in enumerate(names):
            following = names[index + 1] if index + 1 < len(names) else None
            reader.expect(*(_reader_blocks(reader, fd, following, 4, record) if following else (None, None)))
            header, blocks = reader.open(*_reader_blocks(reader, fd, name, 4, []))
            assert header == name
            for block in blocks:
                got.append(block)
                block = None
    finally:
        reader.close()
    assert len(got) == len(plain) == 9
    for a, b in zip(got, plain, strict=True):
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.ids, b.ids)
    main = threading.get_ident()
    # every block but the very first was read ahead, in the reader's thread
    assert all(thread != main for _, thread in record)
    assert [shard for shard, _ in record] == [names[1]] * 3 + [names[2]] * 3


def test_a_block_error_is_raised_when_that_block_is_asked_for():
    """A failing block is read ahead while the one before is used; its error comes when the
    caller asks for it, after everything before it, never earlier."""

    def blocks():
        yield "a"
        yield "b"
        raise UserInputError("block 3 is corrupted")

    reader, used = BlockReader(), []
    try:
        _, handed = reader.open(("s",), lambda: (None, blocks(), 3))
        with pytest.raises(UserInputError, match="block 3 is corrupted"):
            for block in handed:
                used.append(block)
    finally:
        reader.close()
    assert used == ["a", "b"]


def test_a_guess_not_taken_drops_its_error_and_a_taken_one_raises_it(tmp_path):
    fd = _feature_dir(tmp_path / "f")
    victim = fd.path / f"{fd.shard_names()[1]}.features.npy"
    victim.write_bytes(victim.read_bytes()[:-2] + b"\x00\x7e")  # same size, sha256 differs
    with pytest.raises(UserInputError) as plain:
        next(fd.shard_blocks(fd.shard_names()[1], None, 4))
    reader = BlockReader()
    try:
        # expected, read ahead (and failing) in the background, then not opened: nothing raised
        reader.expect(*_reader_blocks(reader, fd, fd.shard_names()[1], 4, []))
        _, blocks = reader.open(*_reader_blocks(reader, fd, fd.shard_names()[0], 4, []))
        assert len(list(blocks)) == 3
        _, blocks = reader.open(*_reader_blocks(reader, fd, fd.shard_names()[2], 4, []))
        assert len(list(blocks)) == 3
        # expected and opened: its error, the plain reader's line, raised at its first block
        reader.expect(*_reader_blocks(reader, fd, fd.shard_names()[1], 4, []))
        _, blocks = reader.open(*_reader_blocks(reader, fd, fd.shard_names()[0], 4, []))
        assert len(list(blocks)) == 3
        _, blocks = reader.open(*_reader_blocks(reader, fd, fd.shard_names()[1], 4, []))
        with pytest.raises(UserInputError) as ahead:
            next(blocks)
    finally:
        reader.close()
    assert str(ahead.value) == str(plain.value) and "sha256 does not match" in str(ahead.value)


def test_float16_blocks_are_views_of_the_stored_rows(tmp_path):
    fd = _feature_dir(tmp_path / "f")
    name = fd.shard_names()[0]
    stored = np.load(fd.path / f"{name}.features.npy")
    half = list(fd.shard_blocks(name, None, 4, dtype=np.float16))
    single = list(fd.shard_blocks(name, None, 4))
    assert [b.features.dtype for b in half] == [np.float16] * 3
    np.testing.assert_array_equal(np.concatenate([b.features for b in half]), stored)
    for a, b in zip(half, single, strict=True):
        np.testing.assert_array_equal(a.features.astype(np.float32), b.features)


def _spaces(fd, tmp_path, torch_kernel, l2=False):
    rng = np.random.default_rng(1)
    prototypes = rng.integers(-1, 2, (8, fd.dim)).astype(np.float32)
    prototypes[6:] = prototypes[:2]  # identical prototypes: exact ties at different columns
    path = tmp_path / f"protos-{torch_kernel}-{l2}.npz"
    ClassVectors(WNIDS[:8], prototypes).save(path)
    source = PrototypeFile(path, l2=l2)
    spaces = {
        "unseen": TopKSearcher(source.prototypes(WNIDS[:8]), 3, device="cpu", torch_kernel=torch_kernel),
        "seen": TopKSearcher(source.prototypes(WNIDS[:5]), 2, device="cpu", torch_kernel=torch_kernel),
    }
    lookup = np.array([*range(8), -1, -1, -1, -1])  # the last 4 classes are not searched
    return source, spaces, lookup


@pytest.mark.parametrize("route", ["staged", "uploaded"])
@pytest.mark.parametrize("block_rows", [3, 4, 64])
def test_the_torch_path_searches_shards_as_the_numpy_path_does(tmp_path, monkeypatch, block_rows, route):
    """The torch path (the GPU's code, run on the CPU) with tiles of 2 rows, pipelined: float16
    blocks staged on its device and converted and checked there, or float32 host blocks uploaded
    (as after a model's ``encode``): the numpy path's bytes (integer data: exact scores)."""
    fd = _feature_dir(tmp_path / "f")
    results = {}
    for torch_kernel in (False, True):
        source, spaces, lookup = _spaces(fd, tmp_path, torch_kernel)
        monkeypatch.setattr(torch_search, "DEVICE_TILE_ELEMENTS", 2 * 8)  # 2 rows per tile
        if route == "uploaded":
            monkeypatch.setattr(search_sets, "_staging_device", lambda *args: None)
        context = SearchContext(source, SearchCache(None), block_rows, progress=False)
        try:
            results[torch_kernel] = [
                search_shard(fd, name, lookup, spaces, context, False, "unseen") for name in fd.shard_names()
            ]
        finally:
            context.reader.close()
    for numpy_out, torch_out in zip(results[False], results[True], strict=True):
        assert sorted(numpy_out) == sorted(torch_out)
        for field, array in numpy_out.items():
            assert array.dtype == torch_out[field].dtype
            assert array.tobytes() == torch_out[field].tobytes(), field
    tied = np.concatenate([out["tied"] for out in results[False]])
    assert tied.max() > 0  # the data do tie


def test_only_features_scored_as_they_are_go_to_the_device_as_stored(tmp_path):
    fd = _feature_dir(tmp_path / "f")
    for torch_kernel, l2 in [(False, False), (True, False), (True, True)]:
        source, spaces, _ = _spaces(fd, tmp_path, torch_kernel, l2)
        device = search_sets._staging_device(spaces, source, False)
        assert (device is not None) == (torch_kernel and not l2)
        assert search_sets._staging_device(spaces, source, True) is None  # logits: encoded on the host


#: (shard, row, value) planted: one row; rows in two blocks; two rows in one block; the last shard
BAD_ROWS = [
    [(1, 4, np.nan)],
    [(1, 7, np.inf), (1, 2, -np.inf)],
    [(1, 6, np.inf), (1, 5, np.nan)],
    [(2, 10, np.nan)],
]


@pytest.mark.parametrize("bad", BAD_ROWS)
@pytest.mark.parametrize("torch_kernel", [False, True])
def test_nan_or_inf_rows_are_refused_with_the_same_line_after_the_same_shards(tmp_path, bad, torch_kernel):
    """Both paths raise the plain reader's line, and only once every earlier shard is done (they
    are in the cache): the shard read ahead does not fail early."""
    fd = _feature_dir(tmp_path / "f", bad=bad)
    source, spaces, lookup = _spaces(fd, tmp_path, torch_kernel)
    cache = SearchCache(tmp_path / "cache")
    context = SearchContext(source, cache, 4, progress=False)
    shard = fd.shard_names()[bad[0][0]]
    first = min(row for _, row, _ in bad)
    in_block = [row for _, row, _ in bad if row // 4 == first // 4]  # the first failing block's
    ids = fd.shard_ids(shard)
    expected = (
        f"{fd.path}: features of {len(in_block)} images in shard {shard} contain NaN or Inf "
        f"(first: {ids[first]}); re-extract them or drop those images"
    )
    with pytest.raises(UserInputError) as err:
        search_set("test", fd, lookup, spaces, context)
    assert str(err.value) == expected
    done = sorted(p.name for p in (tmp_path / "cache").glob("test-*.npz"))
    assert done == [f"test-{name}.npz" for name in fd.shard_names()[: bad[0][0]]]


def test_cached_shards_are_not_read_ahead(tmp_path, monkeypatch):
    """Resuming from the cache reads no block of a cached shard, ahead or not."""
    fd = _feature_dir(tmp_path / "f")
    source, spaces, lookup = _spaces(fd, tmp_path, False)
    context = SearchContext(source, SearchCache(tmp_path / "cache"), 4, progress=False)
    first = search_set("test", fd, lookup, spaces, context)
    read = []
    real = FeatureDir.shard_blocks

    def counting(self, shard, *args, **kwargs):
        read.append(shard)
        return real(self, shard, *args, **kwargs)

    monkeypatch.setattr(FeatureDir, "shard_blocks", counting)
    (tmp_path / "cache" / f"test-{fd.shard_names()[1]}.npz").unlink()
    again = search_set("test", fd, lookup, spaces, context)
    assert read == [fd.shard_names()[1]]
    for space in spaces:
        for a, b in zip(first.lists[space], again.lists[space], strict=True):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first.ranks.tied, again.ranks.tied)
