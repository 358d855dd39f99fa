"""The cheaper paths of ``evaluate`` (issue 27) give what the paths they replaced gave, bit for bit:
per_class.csv without pandas, the tie ranks row by row, the prototypes' duplicate check on their
first columns, the fused finiteness check and the prototype digest hashed in place."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.run.table import ClassTable, _spearman
from imagenet_zsl.evaluation.search import TopKSearcher, prototypes_digest
from imagenet_zsl.evaluation.search_index import squared_row_norms, unique_rows
from imagenet_zsl.scoring import true_ranks


def _tricky_table(rng: np.random.Generator, n: int) -> dict:
    floats = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
    floats[rng.random(n) < 0.2] = np.nan
    floats[: min(n, 4)] = [np.inf, -np.inf, -0.0, 1e-300][: min(n, 4)]
    digits = rng.integers(0, 8, n)
    words = np.array(["n00000001", "a,b", 'say "hi"', "", "two\nlines", "tab\there", "é"], dtype=object)
    return {
        "wnid": [str(w) for w in rng.choice(words, n)],
        "images": np.r_[rng.integers(0, 2_000_000, n), []],  # float64, as without --gzsl
        "count": rng.integers(-5, 10**12, n),
        "flag": [bool(b) for b in rng.random(n) < 0.5],
        "hit@1": rng.random(n),
        "float32": rng.standard_normal(n).astype(np.float32),
        "tricky": floats,
        "all_nan": np.full(n, np.nan),
        "rounding": np.array([round(float(v), int(d)) for v, d in zip(rng.random(n), digits, strict=True)]),
    }


@pytest.mark.parametrize("seed", range(5))
def test_class_table_csv_has_the_bytes_pandas_writes(seed):
    rng = np.random.default_rng(seed)
    columns = _tricky_table(rng, int(rng.integers(0, 60)))
    expected = pd.DataFrame(columns).to_csv(index=False, float_format="%.6g")
    assert ClassTable(columns).to_csv() == expected


def test_class_table_with_one_empty_text_column_matches_pandas():
    columns = {"wnid": ["", "n1", ""]}
    assert ClassTable(columns).to_csv() == pd.DataFrame(columns).to_csv(index=False, float_format="%.6g")


def _spearman_with_pandas(table: pd.DataFrame, ks: list[int]) -> dict:
    """The table's Spearman block as computed before per_class.csv stopped using pandas."""
    spearman = {}
    unseen_rows = table[table["role"] == "unseen"]
    for prop in ("structural_ratio", "population", "label_frequency", "depth"):
        pair = unseen_rows[["hit@1" if 1 in ks else f"hit@{ks[0]}", prop]]
        pair = pair.replace([np.inf, -np.inf], np.nan).dropna()
        if len(pair) >= 3 and pair[prop].nunique() > 1 and pair.iloc[:, 0].nunique() > 1:
            rho = pair.iloc[:, 0].rank().corr(pair[prop].rank())
            spearman[prop] = {"rho": float(rho), "classes": int(len(pair))}
    return spearman


@pytest.mark.parametrize("seed", range(8))
def test_spearman_block_equals_the_pandas_one(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    ks = [2, 5] if seed % 3 == 0 else [1, 5]

    def column(levels: int) -> np.ndarray:
        values = rng.integers(0, levels, n).astype(np.float64) / 4  # ties
        values[rng.random(n) < 0.15] = np.nan
        values[rng.random(n) < 0.05] = np.inf
        return values

    columns = {
        "wnid": [f"n{i:08d}" for i in range(n)],
        "role": [str(r) for r in rng.choice(["unseen", "seen"], n, p=[0.8, 0.2])],
        f"hit@{ks[0]}": column(5),
        "structural_ratio": column(6),
        "population": column(2),
        "label_frequency": np.full(n, np.nan),
        "depth": column(1 + seed),
    }
    assert _spearman(columns, ks) == _spearman_with_pandas(pd.DataFrame(columns), ks)


@pytest.mark.parametrize("seed", range(6))
def test_true_ranks_row_by_row_equal_the_whole_tile_counts(seed):
    """The one true-rank function as the search calls it (labels -1: a class outside the tile's
    columns) against whole-matrix counts by hand."""
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(1, 50 if seed % 2 else 400)), int(rng.integers(1, 300))
    scores = rng.integers(-3, 4, (n, c)).astype(np.float32)  # ties everywhere
    labels = rng.integers(-1, c, n)
    true = scores[np.arange(n), np.maximum(labels, 0)]
    above = np.where(labels >= 0, (scores > true[:, None]).sum(axis=1), c)
    tied = np.where(labels >= 0, (scores == true[:, None]).sum(axis=1) - 1, 0)
    got = true_ranks(labels, scores=scores, checked=True)  # the search's call, one tile
    got_above, got_tied = got.above, got.tied
    assert got_above.dtype == np.int64 and got_tied.dtype == np.int64
    np.testing.assert_array_equal(got_above, above)
    np.testing.assert_array_equal(got_tied, tied)


def test_unique_rows_decides_on_the_whole_row_when_the_first_columns_repeat():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((6, 12)).astype(np.float32)
    rows[:, :8] = rows[0, :8]  # the first columns cannot tell the rows apart
    same, group = unique_rows(rows)
    assert same is rows and group is None
    rows[4] = rows[1]
    rows[5] = rows[1] * np.float32(-0.0) + rows[1]  # equal values; zeros would be -0.0 or 0.0
    unique, group = unique_rows(rows)
    np.testing.assert_array_equal(unique, rows[:4])
    np.testing.assert_array_equal(group, [0, 1, 2, 3, 1, 1])
    zeros = np.zeros((3, 12), np.float32)
    zeros[1] = -0.0
    unique, group = unique_rows(zeros)
    assert len(unique) == 1 and group.tolist() == [0, 0, 0]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_prototypes_with_nan_or_inf_are_refused_with_the_same_line(bad):
    prototypes = np.ones((5, 4), np.float32)
    prototypes[3, 2] = bad
    prototypes[4, 0] = bad
    with pytest.raises(UserInputError, match=r"^prototypes: 2 rows contain NaN or Inf \(first: row 3\)"):
        TopKSearcher(prototypes, 2)


def test_prototype_digest_is_the_sha256_of_the_bytes_in_any_layout():
    matrix = np.arange(24, dtype=np.float32).reshape(4, 6)
    expected = hashlib.sha256(matrix.tobytes()).hexdigest()
    assert prototypes_digest(matrix) == expected
    assert prototypes_digest(np.asfortranarray(matrix)) == expected
    readonly = matrix.copy()
    readonly.flags.writeable = False
    assert prototypes_digest(readonly) == expected


@pytest.mark.parametrize("threads", [2, 3])
def test_product_is_cut_into_calls_of_one_shape_whatever_the_threads(threads, monkeypatch):
    """The CPU search computes each tile's product in single-threaded GEMM calls of one shape,
    (PRODUCT_ROWS, E) x (E, PRODUCT_CLASSES), the last class block and the chunks of queries that
    do not fill one zero-padded (:class:`imagenet_zsl.evaluation.numpy_search.Product`), shared among
    BLAS-many Python threads: the same calls whatever the threads and the blocks, so lists, scores
    and tie ranks are the bits of the one-thread search of the whole (the promise of issue 35)."""
    from imagenet_zsl.evaluation import numpy_search

    rng = np.random.default_rng(threads)
    prototypes = rng.standard_normal((3 * numpy_search.PRODUCT_CLASSES + 78, 24)).astype(np.float32)
    prototypes[5] = prototypes[2]  # identical prototypes: scored once, tied
    queries = rng.standard_normal((numpy_search.PRODUCT_ROWS + 75, 24)).astype(np.float32)
    labels = rng.integers(-1, len(prototypes), len(queries))
    # room for 100 rows a tile: a tile still holds one whole chunk (fewer rows would compute the
    # chunk's padded product once per tile)
    monkeypatch.setattr(numpy_search, "TILE_ELEMENTS", len(prototypes) * 100)
    assert TopKSearcher(prototypes, 7, device="cpu").index.tile_rows() == numpy_search.PRODUCT_ROWS
    shapes = []
    real = numpy_search._matmul_into

    def spy(q, p, out):
        shapes.append((q.shape, p.shape, out.shape))
        return real(q, p, out)

    monkeypatch.setattr(numpy_search, "_matmul_into", spy)
    monkeypatch.setattr(numpy_search, "_blas_threads", lambda: 1)
    expected = TopKSearcher(prototypes, 7, device="cpu").search_ranked(queries, labels)
    rows, classes = numpy_search.PRODUCT_ROWS, numpy_search.PRODUCT_CLASSES
    shape = ((rows, 24), (classes, 24), (rows, classes))
    assert len(shapes) == 2 * 4 and set(shapes) == {shape}  # 2 chunks x 4 class blocks
    shapes.clear()
    monkeypatch.setattr(numpy_search, "_blas_threads", lambda: threads)
    searcher = TopKSearcher(prototypes, 7, device="cpu")
    # blocks of 100 rows: chunk 0 cut 6 times, each part padded at its place in the chunk
    parts = [
        searcher.search_ranked(queries[s : s + 100], labels[s : s + 100], row_offset=s)
        for s in range(0, len(queries), 100)
    ]
    assert len(shapes) == (6 + 1) * 4 and set(shapes) == {shape}
    got = [np.concatenate([part[i] for part in parts]) for i in (0, 1)]
    for a, b in zip(got, expected[:2], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.concatenate([p[2].above for p in parts]), expected[2].above)
    np.testing.assert_array_equal(np.concatenate([p[2].tied for p in parts]), expected[2].tied)
    brute = queries.astype(np.float64) @ prototypes.T.astype(np.float64)
    np.testing.assert_allclose(got[0], -np.sort(-brute, axis=1)[:, :7], rtol=1e-5, atol=1e-5)


def test_squared_row_norms_are_float32_sums_and_finite_exactly_when_the_row_is():
    """Ordinary rows are summed in float32 (a fifth of a float64 sum's CPU), then widened; rows whose
    float32 sum is not finite are summed again in float64: finite rows past float32's range get
    their finite float64 norm, rows with NaN or Inf stay NaN or Inf (the finiteness check reads
    the norms alone)."""
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((6, 2048)).astype(np.float32)
    rows[2, :3] = [3e19, -2e19, 1.0]  # finite, but 3e19 squared is past float32's 3.4e38
    rows[3, 7] = np.nan
    rows[4, 0] = -np.inf
    norms = squared_row_norms(rows)
    assert norms.dtype == np.float64
    ordinary = [0, 1, 5]
    np.testing.assert_array_equal(norms[ordinary], np.einsum("ij,ij->i", rows[ordinary], rows[ordinary]))
    exact = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
    np.testing.assert_allclose(norms[ordinary], exact[ordinary], rtol=2048 * 2.0**-24)
    assert norms[2] == exact[2] and np.isfinite(norms[2]) and norms[2] > 1.3e39
    assert np.isnan(norms[3]) and norms[4] == np.inf


@pytest.mark.parametrize("classes", [7, 300, 5000])
def test_selection_partitions_a_bounded_number_of_scores_at_a_time(classes, monkeypatch):
    """``largest`` hands ``argpartition`` whole rows, at most SELECT_ELEMENTS scores a call (one row
    when a row holds more): its int64 temporary stays in a core's cache (issue 46; 64 rows of 21,842
    classes were 11 MB a thread). Each row's ``take`` largest are found exactly (distinct scores)."""
    from imagenet_zsl.evaluation import numpy_search

    monkeypatch.setattr(numpy_search, "SELECT_ELEMENTS", 1000)
    rng = np.random.default_rng(classes)
    scores = rng.permutation(40 * classes).reshape(40, classes).astype(np.float32)
    asked = []
    real = np.argpartition

    def spy(a, kth, axis):
        asked.append(a.shape)
        return real(a, kth, axis=axis)

    monkeypatch.setattr(numpy_search.np, "argpartition", spy)
    take = min(5, classes)
    got = numpy_search.largest(scores, take)
    monkeypatch.undo()
    rows = max(1, 1000 // classes)
    assert [shape[0] for shape in asked] == [rows] * (40 // rows) + ([40 % rows] if 40 % rows else [])
    expected = np.sort(np.argsort(-scores, axis=1)[:, :take], axis=1)
    np.testing.assert_array_equal(np.sort(got, axis=1), expected)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, None])
def test_feature_rows_are_refused_exactly_when_not_finite(bad, tmp_path):
    """The shard check reads a block once (its float64 squared norms, reused by the overflow
    check): the largest finite float32 values pass, NaN and Inf are refused naming the image."""
    from imagenet_zsl.evaluation.run.search_sets import _check_rows

    class Dir:
        path = tmp_path

    rows = np.full((4, 3), np.finfo(np.float32).max, np.float32)
    rows[0] = -rows[0]
    ids = np.array([f"n00000001/{i}.JPEG" for i in range(4)])
    if bad is None:
        norms = _check_rows(Dir(), "s0", ids, rows, "features")
        np.testing.assert_array_equal(norms, np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
        assert np.isfinite(norms).all()
        return
    rows[2, 1] = bad
    expected = r"features of 1 images in shard s0 contain NaN or Inf \(first: n00000001/2\.JPEG\)"
    with pytest.raises(UserInputError, match=expected):
        _check_rows(Dir(), "s0", ids, rows, "features")


def test_cpu_blocks_and_tiles_are_bounded_and_change_no_byte(tmp_path, monkeypatch):
    """Issue 38: on the CPU a block read holds at most HOST_BLOCK_ELEMENTS features whatever
    --block-rows allows, and a tile's rows are a multiple of the product's chunk; the files are
    those of one block and one tile."""
    from imagenet_zsl.evaluation import numpy_search
    from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate, search_sets
    from imagenet_zsl.features.feature_dir import FeatureDir
    from imagenet_zsl.semantics.class_vectors import ClassVectors
    from tests.evaluation.evaluation_fixtures import write_feature_dir

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 40, 300)
    wnids = [f"n{i:08d}" for i in range(40)]
    features = write_feature_dir(
        tmp_path / "f", labels, rng.standard_normal((300, 6)).astype(np.float32), 140, wnids
    )
    ClassVectors(wnids, rng.standard_normal((40, 6)).astype(np.float32)).save(tmp_path / "p.npz")
    (tmp_path / "split.txt").write_text("\n".join(wnids) + "\n")
    asked = []
    real = FeatureDir.shard_blocks

    def spy(self, shard, rows, block_rows, **kwargs):
        asked.append(block_rows)
        return real(self, shard, rows, block_rows, **kwargs)

    monkeypatch.setattr(FeatureDir, "shard_blocks", spy)

    def run(name: str) -> dict:
        out = tmp_path / name
        cfg = EvaluationConfig(
            features=features,
            split=tmp_path / "split.txt",
            out=out,
            prototypes=tmp_path / "p.npz",
            ks=[1, 5],
            graph="none",
            label_frequency=False,
            plots=False,
            device="cpu",
            block_rows=10**6,
        )
        evaluate(cfg, progress=False)
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.npy"))}

    whole = run("whole")
    assert set(asked) == {search_sets.HOST_BLOCK_ELEMENTS // 6}  # not the million rows allowed
    asked.clear()
    monkeypatch.setattr(search_sets, "HOST_BLOCK_ELEMENTS", 6 * 25)  # 25 rows a block
    monkeypatch.setattr(numpy_search, "TILE_ELEMENTS", 40 * 7)  # 7-row tiles
    monkeypatch.setattr(numpy_search, "PRODUCT_ROWS", 3)
    assert TopKSearcher(np.eye(40, 6, dtype=np.float32), 2, device="cpu").index.tile_rows() == 6
    assert run("cut") == whole and "topk/test.unseen.ids.npy" in whole
    assert set(asked) == {25}


def test_label_frequencies_from_the_cache_are_wordfreq_of_the_first_lemma(tmp_path, monkeypatch):
    """Issue 46: the label-frequency column of the ImageNet classes comes from a cache file; its
    values are wordfreq's Zipf frequency of each class's first WordNet lemma, looked up directly
    (two ImageNet classes, a WordNet noun outside ImageNet, a wnid WordNet lacks: NaN)."""
    import wordfreq

    from imagenet_zsl.evaluation.properties import label_frequencies
    from imagenet_zsl.semantics import frequency

    monkeypatch.setattr(frequency, "cache_dir", lambda: tmp_path)  # the WordNet table's stays warm
    frequency.universe_label_frequencies.cache_clear()
    try:
        wnids = ["n02084071", "n02121808", "n00001740", "n99999999"]  # dog, domestic cat, entity
        got = label_frequencies(wnids)
        expected = [wordfreq.zipf_frequency(w, "en") for w in ("dog", "domestic cat", "entity")]
        assert got[:3].tolist() == expected and np.isnan(got[3])
        assert "n00001740" not in frequency.universe_label_frequencies()  # looked up, not cached
        (path,) = tmp_path.glob("label-frequency-v*.npz")
        with np.load(path) as data:
            cached = dict(zip(data["wnids"].tolist(), data["zipf"].tolist(), strict=True))
        assert len(cached) == 21_842 and cached["n02084071"] == got[0]
    finally:
        frequency.universe_label_frequencies.cache_clear()
