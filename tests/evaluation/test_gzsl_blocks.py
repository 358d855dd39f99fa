"""GZSL lists in parts and blocks: the same figures, bit for bit, as one whole-array pass; the
search's lists are shared, never copied; narrow per-image dtypes."""

import numpy as np
import pytest

import imagenet_zsl.scoring.gzsl_lists as gzsl_lists
import imagenet_zsl.scoring.ranks as ranks
from imagenet_zsl.evaluation.run.gzsl import build_gzsl
from imagenet_zsl.evaluation.run.search_sets import SetResult
from imagenet_zsl.scoring import (
    GZSLLists,
    GZSLTopK,
    TieRanks,
    calibrated_topk,
    choose_gamma,
    gzsl_class_rates,
    gzsl_entries,
    gzsl_from_scores,
    gzsl_metrics,
    seen_unseen_curve,
)

# unseen classes 0, 1; seen classes 2, 3; hit@1 with m = 2. Images 0/1 and 3/4 are identical, so
# their thresholds tie across every block boundary of blocks of 1 (and of the parts below).
TIED = np.array(
    [
        [3, 1, 2, 0],  # class 0: θ = 2 - 3 = -1 (hit iff γ > -1)
        [3, 1, 2, 0],  # class 0: the same
        [1, 1, 0, 0],  # class 1, tied with class 0 (r 0, t 1): θ = 0 - 1 = -1, weight 1/2
        [0, 2, 1, 1],  # class 2, tied with class 3: φ = 1 - 2 = -1 (hit iff γ < -1), weight 1/2
        [0, 2, 1, 1],  # class 3, tied with class 2: the same
    ],
    np.float32,
)
TIED_LABELS = np.array([0, 0, 1, 2, 3])
TIED_SEEN = np.array([False, False, True, True])


def _in_parts(gz: GZSLTopK, cuts: list[int]) -> GZSLTopK:
    """``gz`` as parts cut at ``cuts``, seen ids in the seen space plus an offset, int32 ids, the
    lists' tails cut with them."""
    offset = int(np.flatnonzero(gz.seen_mask)[0])
    seen_ids = np.where(gz.seen_ids >= 0, gz.seen_ids - offset, -1).astype(np.int32)
    seen_tail = np.concatenate([p.seen_tail for p in gz.parts]).astype(np.int32)
    unseen_tail = np.concatenate([p.unseen_tail for p in gz.parts]).astype(np.int32)
    bounds = [0, *cuts, len(gz.labels)]
    parts = [
        GZSLLists(
            gz.seen_scores[lo:hi],
            seen_ids[lo:hi],
            gz.unseen_scores[lo:hi],
            gz.unseen_ids[lo:hi].astype(np.int32),
            seen_offset=offset,
            seen_tail=seen_tail[lo:hi],
            unseen_tail=unseen_tail[lo:hi],
        )  # fmt: skip
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return GZSLTopK.from_parts(parts, gz.labels.astype(np.int64), gz.seen_mask, gz.own_ranks)


def _everything(gz: GZSLTopK, ks: list[int]) -> dict:
    """Every figure computed from the lists, as plain values (arrays as lists, floats exact)."""
    out: dict = {"metrics": gzsl_metrics(gz, ks, gamma=0.5), "gamma": choose_gamma(gz, k=1)}
    for k in ks:
        for rule in ("expected", "strict"):
            out[k, rule, "entries"] = [a.tolist() for a in gzsl_entries(gz, k, rule)]
            curve = seen_unseen_curve(gz, k, True, rule)
            out[k, rule, "curve"] = [curve.breakpoints.tolist(), curve.seen.tolist(), curve.unseen.tolist()]
        out[k, "rates"] = gzsl_class_rates(gz, k, 0.25).tolist()
    out["merged"] = [a.tolist() for a in calibrated_topk(gz, -0.5, 2 * gz.m, block=10**6)]
    return out


def test_tied_thresholds_across_blocks_by_hand(monkeypatch):
    gz = gzsl_from_scores(TIED, TIED_LABELS, TIED_SEEN, m=2)
    whole = _everything(gz, [1])
    curve = seen_unseen_curve(gz, 1)
    assert curve.breakpoints.tolist() == [-1.0]
    # per class: unseen (class 0: 1, class 1: 1/2) only above -1; seen (1/2 each) only below
    assert curve.seen.tolist() == [0.5, 0.0] and curve.unseen.tolist() == [0.0, 0.75]
    assert curve.ausuc == 0.75 * 0.5 / 2
    assert whole[1, "expected", "entries"] == [[0, 1, 2, 3, 4], [-1.0] * 5, [1.0, 1.0, 0.5, 0.5, 0.5]]
    for block in (1, 2, 3):
        monkeypatch.setattr(ranks, "SORT_BLOCK", block)
        assert _everything(gz, [1]) == whole
        for cuts in ([1], [1, 3], [2, 3, 4]):
            assert _everything(_in_parts(gz, cuts), [1]) == whole


@pytest.mark.parametrize("seed", range(3))
def test_blocks_and_parts_equal_one_pass_on_tie_heavy_lists(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n, c = 60, 9
    seen_mask = np.zeros(c, bool)
    seen_mask[6:] = True  # 3 seen classes, m = 4: the seen lists end in padding
    scores = rng.integers(0, 3, (n, c)).astype(np.float32) / 2  # ties everywhere
    gz = gzsl_from_scores(scores, rng.integers(0, c, n), seen_mask, m=4)
    whole = _everything(gz, [1, 2, 3])
    for block in (1, 7):
        monkeypatch.setattr(ranks, "SORT_BLOCK", block)
        assert _everything(gz, [1, 2, 3]) == whole
        assert _everything(_in_parts(gz, [13, 14, 40]), [1, 2, 3]) == whole


def test_lists_are_shared_and_per_image_arrays_narrow():
    gz = gzsl_from_scores(TIED, TIED_LABELS, TIED_SEEN, m=2)
    parts = _in_parts(gz, [2])
    assert parts.labels.dtype == np.int16 and parts.own_ranks.above.dtype == np.int32
    assert parts.own_ranks.tied.dtype == np.int32
    assert all(np.shares_memory(p.seen_scores, gz.seen_scores) for p in parts.parts)  # views
    assert parts.seen_ids.tolist() == gz.seen_ids.tolist()  # joint ids, shifted on reading
    assert gzsl_lists.index_dtype(32_767) == np.int16 and gzsl_lists.index_dtype(32_768) == np.int32
    with pytest.raises(ValueError, match="seen_ids hold classes outside"):
        bad = parts.parts[1]
        GZSLTopK.from_parts(
            [parts.parts[0], GZSLLists(bad.seen_scores, bad.seen_ids, bad.unseen_scores, bad.unseen_ids, 0)],
            parts.labels,
            parts.seen_mask,
            parts.own_ranks,
        )


def _set(labels, seen, unseen, above, tied) -> SetResult:
    lists = {"seen": (seen[0], seen[1]), "unseen": (unseen[0], unseen[1])}
    return SetResult(
        np.asarray(labels), np.arange(len(labels)), lists, TieRanks(np.array(above), np.array(tied))
    )


def test_build_gzsl_shares_the_search_lists():
    # 2 unseen classes, 2 seen classes (seen ids 0, 1 in the seen space -> joint 2, 3)
    f32, i32 = np.float32, np.int32
    test = _set(
        [1, 0],
        (np.array([[2, 0], [3, 1]], f32), np.array([[1, 0], [0, 1]], i32)),
        (np.array([[5, 4], [1, 0]], f32), np.array([[1, 0], [0, 1]], i32)),
        [0, 0],
        [0, 0],
    )
    misses = _set(
        [2],
        (np.full((1, 2), -np.inf, f32), np.full((1, 2), -1, i32)),
        (np.full((1, 2), -np.inf, f32), np.full((1, 2), -1, i32)),
        [2],
        [0],
    )
    seen = _set(
        [1],
        (np.array([[6, 2]], f32), np.array([[1, 0]], i32)),
        (np.array([[7, 0]], f32), np.array([[0, 1]], i32)),
        [0],
        [0],
    )
    gz = build_gzsl((test, misses), seen, 3, 2, "unseen")
    assert gz.labels.tolist() == [1, 0, 2, 4] and gz.labels.dtype == np.int16
    assert gz.own_ranks.above.tolist() == [0, 0, 2, 0] and gz.own_ranks.above.dtype == np.int32
    assert np.shares_memory(gz.parts[0].seen_ids, test.lists["seen"][1])
    assert np.shares_memory(gz.parts[2].unseen_scores, seen.lists["unseen"][0])
    assert gz.seen_ids.tolist() == [[4, 3], [3, 4], [-1, -1], [4, 3]]
    # γ = 0 hit@1: image 0 (5 > 2) and image 1 (1 < 3: miss); the seen image (6 < 7: miss)
    assert gzsl_class_rates(gz, 1).tolist()[:2] == [0.0, 1.0]
    assert gzsl_class_rates(gz, 1).tolist()[4] == 0.0


def test_breakpoint_index_by_hand_and_as_np_unique():
    from imagenet_zsl.scoring.gzsl import _breakpoint_index

    theta = np.array([2.0, -0.0, np.inf, -1.0, 0.0, np.nan, 2.0, -np.inf, -0.0])
    breakpoints, index = _breakpoint_index(theta)
    assert breakpoints.tolist() == [-1.0, 0.0, 2.0]
    assert index.tolist() == [2, 1, 0, 0, 1, 0, 2, 0, 1]  # 0 where not finite
    finite = np.isfinite(theta)
    unique, inverse = np.unique(theta[finite], return_inverse=True)
    assert breakpoints.tobytes() == unique.tobytes()  # the same zero (0.0 or -0.0) is kept
    assert index[finite].tolist() == inverse.tolist()
