import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.search import TopKSearcher, topk_inner_product
from imagenet_zsl.scoring import topk_from_scores


def brute_force(queries, prototypes, k):
    """Full score matrix, stable sort: descending score, ties by ascending class index."""
    scores = queries.astype(np.float64) @ prototypes.T.astype(np.float64)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


@pytest.mark.parametrize("seed", range(6))
def test_faiss_topk_equals_brute_force_with_many_ties(seed):
    # small integer vectors: scores are exact in float32 and ties are everywhere
    rng = np.random.default_rng(seed)
    n, c, e = int(rng.integers(1, 200)), int(rng.integers(2, 80)), int(rng.integers(1, 5))
    queries = rng.integers(-2, 3, (n, e)).astype(np.float32)
    prototypes = rng.integers(-2, 3, (c, e)).astype(np.float32)
    k = int(rng.integers(1, min(c, 25) + 1))
    scores, ids = topk_inner_product(queries, prototypes, k, block_rows=33)
    ref_scores, ref_ids = brute_force(queries, prototypes, k)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(scores, ref_scores.astype(np.float32))


def test_random_real_data_matches_brute_force():
    rng = np.random.default_rng(7)
    queries = rng.standard_normal((300, 64), dtype=np.float32)
    prototypes = rng.standard_normal((500, 64), dtype=np.float32)
    scores, ids = topk_inner_product(queries, prototypes, 21, block_rows=128)
    ref_scores, ref_ids = brute_force(queries, prototypes, 21)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-4)


def test_tie_order_and_boundary_keep_smallest_ids():
    queries = np.ones((25, 2), np.float32)
    prototypes = np.ones((8, 2), np.float32)  # eight classes, all tied
    prototypes[5] = 2.0  # one clear winner
    scores, ids = topk_inner_product(queries, prototypes, 3)
    assert ids.tolist() == [[5, 0, 1]] * 25
    assert scores.tolist() == [[4.0, 2.0, 2.0]] * 25


def test_k_larger_than_classes_is_padded():
    queries = np.array([[1.0, 0.0]], np.float32)
    prototypes = np.array([[0.0, 1.0], [2.0, 0.0]], np.float32)
    scores, ids = topk_inner_product(queries, prototypes, 4)
    assert ids.tolist() == [[1, 0, -1, -1]]
    assert scores[0, :2].tolist() == [2.0, 0.0] and np.isneginf(scores[0, 2:]).all()
    s2, i2 = topk_from_scores(queries @ prototypes.T, 4)
    np.testing.assert_array_equal(i2, ids)
    np.testing.assert_array_equal(s2, scores)


def test_bad_input_is_reported_clearly():
    prototypes = np.eye(3, dtype=np.float32)
    with pytest.raises(UserInputError, match="query dimension 4 differs from prototype dimension 3"):
        topk_inner_product(np.zeros((2, 4), np.float32), prototypes, 1)
    bad = np.zeros((3, 3), np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(UserInputError, match="NaN or Inf.*row 2"):
        topk_inner_product(bad, prototypes, 1)
    with pytest.raises(UserInputError, match="prototypes"):
        TopKSearcher(np.full((2, 3), np.inf, np.float32), 1)
    with pytest.raises(UserInputError, match="empty"):
        TopKSearcher(np.zeros((0, 3), np.float32), 1)
