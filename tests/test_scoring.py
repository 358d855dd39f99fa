"""Metrics against values worked out by hand on tiny cases."""

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.scoring import (
    GZSLTopK,
    TieRanks,
    ausuc,
    calibrated_topk,
    choose_gamma,
    gzsl_accuracies,
    gzsl_entries,
    gzsl_from_scores,
    gzsl_metrics,
    gzsl_thresholds,
    harmonic_mean,
    hit_at_k,
    metrics_from_scores,
    seen_unseen_curve,
    sort_topk,
    true_ranks,
)

# ------------------------------------------------------------------ ZSL
# image 0: true class 0 listed first alone                    -> rank 0
# image 1: true class 1 listed first but tied with class 0   -> rank 1 (tie counts against)
# image 2: true class 2 not in the list                      -> rank 3 (= m)
# image 3: true class 0 tied with class 1 behind class 2     -> rank 2
IDS = np.array([[0, 1, 2], [1, 0, 2], [0, 1, 3], [2, 0, 1]])
SCORES = np.array([[3, 2, 1], [3, 3, 1], [5, 4, 3], [4, 2, 2]], np.float32)
LABELS = np.array([0, 1, 2, 0])


def test_true_rank_counts_ties_against_the_model():
    assert true_ranks(LABELS, topk_ids=IDS, topk_scores=SCORES).strict.tolist() == [0, 1, 3, 2]
    # without scores the list order is the ranking
    assert true_ranks(LABELS, topk_ids=IDS).strict.tolist() == [0, 0, 3, 1]


def test_flat_and_per_class_hit_at_k_by_hand():
    strict = {"tie_rule": "strict"}
    assert hit_at_k(IDS, LABELS, [1, 2], topk_scores=SCORES, **strict) == {1: 0.25, 2: 0.5}
    # classes: 0 -> images 0, 3; 1 -> image 1; 2 -> image 2
    per_class = hit_at_k(IDS, LABELS, [1, 2], topk_scores=SCORES, per_class=True, **strict)
    assert per_class[1] == pytest.approx((0.5 + 0 + 0) / 3)
    assert per_class[2] == pytest.approx((0.5 + 1 + 0) / 3)
    # classes without images do not dilute the mean
    assert hit_at_k(IDS, LABELS, [2], num_classes=10, topk_scores=SCORES, per_class=True, **strict)[
        2
    ] == pytest.approx(0.5)
    # the per-class rates themselves (NaN: no image), from ranks as well as from top-k lists
    rates = hit_at_k(
        true_ranks(LABELS, topk_ids=IDS, topk_scores=SCORES).strict,
        LABELS,
        [2],
        num_classes=4,
        per_class=True,
        average=False,
    )[2]
    np.testing.assert_array_equal(rates, [0.5, 1.0, 0.0, np.nan])
    assert hit_at_k(true_ranks(LABELS, topk_ids=IDS, topk_scores=SCORES).strict, LABELS, [1, 2]) == {
        1: 0.25,
        2: 0.5,
    }


def test_expected_hit_at_k_by_hand():
    # (r, t) per image: (0, 0), (0, 1), absent, (1, 1)
    ranks = true_ranks(LABELS, topk_ids=IDS, topk_scores=SCORES)
    assert ranks.above.tolist() == [0, 0, 3, 1] and ranks.tied.tolist() == [0, 1, 0, 1]
    # hit@1 credits 1, 1/2, 0, 0; hit@2 credits 1, 1, 0, (2-1)/2
    assert hit_at_k(IDS, LABELS, [1, 2], topk_scores=SCORES) == {1: 0.375, 2: 0.625}
    per_class = hit_at_k(IDS, LABELS, [1, 2], topk_scores=SCORES, per_class=True)
    assert per_class[1] == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert per_class[2] == pytest.approx((0.75 + 1 + 0) / 3)
    # the credit formula min(1, max(0, (K - r) / (t + 1))) on its own
    r = TieRanks(np.array([0, 0, 2, 1, 5]), np.array([0, 3, 4, 9, 0]))
    np.testing.assert_allclose(r.credit(1), [1, 1 / 4, 0, 0, 0])
    np.testing.assert_allclose(r.credit(3), [1, 3 / 4, 1 / 5, 2 / 10, 0])
    np.testing.assert_allclose(r.credit(3, "strict"), [1, 0, 0, 0, 0])


def test_all_equal_scores_give_chance_not_zero():
    scores = np.zeros((4, 5), np.float32)
    labels = np.array([0, 1, 2, 4])
    out = metrics_from_scores(scores, labels, ks=[1, 2])
    assert out["flat"] == {1: pytest.approx(0.2), 2: pytest.approx(0.4)}
    assert out["flat_strict"] == {1: 0.0, 2: 0.0}
    assert out["per_class"][1] == pytest.approx(0.2)


def test_tail_ties_extend_the_tie_group():
    # true class 2 tied with the last listed class and 3 more unlisted classes: t = 1 + 3
    ids = np.array([[0, 2, 1]])
    scores = np.array([[5, 1, 1]], np.float32)
    ranks = true_ranks(np.array([2]), topk_ids=ids, topk_scores=scores, tail_ties=np.array([3]))
    assert (ranks.above.tolist(), ranks.tied.tolist()) == ([1], [4])
    assert ranks.credit(2) == pytest.approx([1 / 5])


def test_tail_ties_join_only_a_true_class_tied_with_the_lists_last_score():
    """Rule (true_ranks' ``tail_ties``): the unlisted classes tied with a list's last score join
    the true class's tie group only when the true class scores exactly that last score; a true
    class above the end keeps its own tie count."""
    ids = np.array([[0, 2, 1], [2, 0, 1], [0, 1, 3]])
    scores = np.array([[5, 1, 1], [5, 1, 1], [5, 4, 1]], np.float32)
    ranks = true_ranks(np.array([2, 2, 2]), topk_ids=ids, topk_scores=scores, tail_ties=np.array([3, 3, 3]))
    # image 0: at the end, 1 listed + 3 unlisted tied; image 1: first, alone; image 2: not listed
    assert ranks.above.tolist() == [1, 0, 3] and ranks.tied.tolist() == [4, 0, 0]
    assert ranks.credit(2).tolist() == [pytest.approx(1 / 5), 1.0, 0.0]


def test_nan_true_score_is_never_a_hit_and_inf_is_an_error():
    assert hit_at_k(
        true_ranks(np.array([0]), scores=np.array([[np.nan, 9, 9]])).strict, np.array([0]), [1]
    ) == {1: 0.0}
    out = metrics_from_scores(np.array([[np.nan, 9, 9], [1, np.nan, 0]], np.float32), np.array([0, 0]))
    # image 1: the NaN of another class ranks below the true class
    assert out["flat"] == {1: 0.5} and out["flat_strict"] == {1: 0.5}
    with pytest.raises(UserInputError, match="overflow to inf"):
        metrics_from_scores(np.array([[np.inf, 1, 0]], np.float32), np.array([1]))
    with pytest.raises(UserInputError, match="overflow to inf"):
        hit_at_k(IDS, LABELS, [1], topk_scores=np.where(SCORES == 5, np.inf, SCORES))


def test_metrics_from_scores_with_every_class_seen_is_a_clear_error():
    with pytest.raises(UserInputError, match="3 of 3 classes as seen"):
        metrics_from_scores(np.eye(3, dtype=np.float32), np.arange(3), seen_mask=np.ones(3, bool))


def test_k_equal_to_list_length_needs_one_more_result():
    # true class at the last place: a class outside the list could tie with it
    with pytest.raises(UserInputError, match="top-4"):
        hit_at_k(IDS, LABELS, [3], topk_scores=SCORES)
    # ... unless the list holds the whole label space
    assert hit_at_k(IDS, LABELS, [3], topk_scores=SCORES, num_classes=3)[3] == 0.75


def test_ranks_from_full_scores():
    scores = np.array([[1, 1, 0], [0, 2, 2], [3, 1, 2]], np.float32)
    assert true_ranks(np.array([0, 2, 0]), scores=scores).strict.tolist() == [1, 1, 0]
    out = metrics_from_scores(scores, np.array([0, 2, 0]), ks=[1, 2])
    assert out["flat_strict"] == {1: pytest.approx(1 / 3), 2: 1.0}
    assert out["per_class_strict"] == {1: pytest.approx(0.25), 2: 1.0}  # class 0: 1/2, class 2: 0
    # expected rule: images 0 and 1 tie for the top place with one class -> 1/2 each at hit@1
    assert out["flat"] == {1: pytest.approx((0.5 + 0.5 + 1) / 3), 2: 1.0}
    assert out["per_class"] == {1: pytest.approx(((0.5 + 1) / 2 + 0.5) / 2), 2: 1.0}


def test_harmonic_mean():
    assert harmonic_mean(0.5, 1.0) == pytest.approx(2 / 3)
    assert harmonic_mean(0.0, 0.0) == 0.0
    assert harmonic_mean(0.0, 0.7) == 0.0


def test_labels_outside_label_space_and_empty_input():
    with pytest.raises(UserInputError, match="outside the label space"):
        hit_at_k(IDS, np.array([0, 1, 2, 7]), [1], num_classes=5)
    with pytest.raises(UserInputError, match="no images"):
        hit_at_k(np.zeros((0, 3), int), np.zeros(0, int), [1])


# ------------------------------------------------------------------ GZSL
# joint classes: 0, 1 unseen; 2, 3 seen. Full scores per image [u0, u1, s2, s3]:
FULL = np.array(
    [
        [5, 3, 6, 2],  # A, class 0: unseen rank 0; best seen 6, 2nd seen 2
        [1, 4, 3, 5],  # B, class 1: unseen rank 0; best seen 5, 2nd seen 3
        [4, 1, 7, 3],  # C, class 2: seen rank 0; best unseen 4, 2nd unseen 1
        [2, 6, 1, 4],  # D, class 3: seen rank 0; best unseen 6, 2nd unseen 2
    ],
    np.float32,
)
GZ_LABELS = np.array([0, 1, 2, 3])
SEEN_MASK = np.array([False, False, True, True])


def gz_example() -> GZSLTopK:
    return gzsl_from_scores(FULL, GZ_LABELS, SEEN_MASK, m=3)


def test_thresholds_by_hand():
    gz = gz_example()
    # hit@1: A iff γ > 6-5, B iff γ > 5-4, C iff γ < 7-4, D iff γ < 4-6
    assert gzsl_thresholds(gz, 1).tolist() == [1, 1, 3, -2]
    # hit@2: A iff γ > 2-5, B iff γ > 3-4, C iff γ < 7-1, D iff γ < 4-2
    assert gzsl_thresholds(gz, 2).tolist() == [-3, -1, 6, 2]


def test_direct_stacking_and_harmonic_mean():
    gz = gz_example()
    # γ = 0, hit@1: A, B lose to a seen class; C wins; D loses to u1
    assert gzsl_accuracies(gz, 1, 0.0, per_class=True) == {"seen": 0.5, "unseen": 0.0, "H": 0.0}
    # γ = 2: A (seen best 4 < 5) and B (3 < 4) now win, C still wins (5 > 4)
    assert gzsl_accuracies(gz, 1, 2.0, per_class=True) == {
        "seen": 0.5,
        "unseen": 1.0,
        "H": pytest.approx(2 / 3),
    }
    # γ exactly at a breakpoint: A's calibrated seen score 6-1 = 5 ties its true score 5, B's 5-1 = 4
    # ties its 4: each a two-way joint tie, half a hit under the expected rule, a miss under strict
    assert gzsl_accuracies(gz, 1, 1.0, per_class=True)["unseen"] == 0.5
    assert gzsl_accuracies(gz, 1, 1.0, per_class=True, tie_rule="strict")["unseen"] == 0.0


def test_seen_unseen_curve_and_ausuc_by_hand():
    gz = gz_example()
    curve = seen_unseen_curve(gz, 1)
    assert curve.breakpoints.tolist() == [-2, 1, 3]
    # intervals (-inf,-2), (-2,1), (1,3), (3,inf)
    assert curve.unseen.tolist() == [0, 0, 1, 1]
    assert curve.seen.tolist() == [1, 0.5, 0.5, 0]
    # points (0,1) (0,.5) (1,.5) (1,0): area = 1 * 0.5
    assert curve.ausuc == pytest.approx(0.5)
    assert ausuc(gz, 1) == pytest.approx(0.5)
    # hit@2: seen 1 while unseen climbs 0 -> .5 -> 1, then seen falls: area 1
    assert seen_unseen_curve(gz, 2).unseen.tolist() == [0, 0.5, 1, 1, 1]
    assert ausuc(gz, 2) == pytest.approx(1.0)


def test_choose_gamma_maximises_h_on_validation():
    gamma, h = choose_gamma(gz_example(), k=1)
    # best interval (1, 3): H = 2 * 0.5 * 1 / 1.5; γ = its midpoint
    assert gamma == 2.0
    assert h == pytest.approx(2 / 3)


def test_choose_gamma_keeps_zero_when_calibration_does_not_help():
    scores = np.array([[3, 0, 1], [0, 3, 1], [0, 1, 3]], np.float32)  # everything right at γ=0
    gz = gzsl_from_scores(scores, np.array([0, 1, 2]), np.array([False, False, True]), m=2)
    gamma, h = choose_gamma(gz)
    assert gamma == 0.0 and h == 1.0


def test_calibration_changes_the_top_k_set():
    gz = gz_example()
    # image B (true u1): at γ = 0 the top-2 is {s3, u1}; at γ = 5 seen classes drop out
    _, ids0 = calibrated_topk(gz, 0.0, 2)
    _, ids5 = calibrated_topk(gz, 5.0, 2)
    assert ids0[1].tolist() == [3, 1]
    assert ids5[1].tolist() == [1, 0]
    # and the metric agrees: D is a hit@2 at γ=0 (its u1=6, s3=4, u0=2 -> rank 1) but not at γ=3
    assert gzsl_accuracies(gz, 2, 0.0, per_class=False)["seen"] == 1.0
    assert gzsl_accuracies(gz, 2, 3.0, per_class=False)["seen"] == 0.5


def test_per_class_versus_flat_gzsl():
    # unseen class 0 has two images (one hit, one miss), class 1 one hit; seen all hits
    scores = np.array([[3, 0, 1], [0, 3, 1], [0, 3, 1], [0, 1, 3]], np.float32)
    gz = gzsl_from_scores(scores, np.array([0, 1, 0, 2]), np.array([False, False, True]), m=2)
    per_class = gzsl_accuracies(gz, 1, 0.0, per_class=True)
    flat = gzsl_accuracies(gz, 1, 0.0, per_class=False)
    assert per_class["unseen"] == pytest.approx((0.5 + 1) / 2)
    assert flat["unseen"] == pytest.approx(2 / 3)
    out = gzsl_metrics(gz, [1], gamma=0.5)
    assert out["per_class"][1]["unseen"] == pytest.approx(0.75)
    assert out["flat"][1]["seen"] == 1.0
    assert out["calibrated"]["gamma"] == 0.5


@pytest.mark.parametrize("tie_rule", ["strict", "expected"])
@pytest.mark.parametrize("seed", range(4))
def test_exact_curve_matches_recomputing_every_gamma(seed, tie_rule):
    """Between (and, for the strict rule, at) every breakpoint the curve equals a brute-force
    re-ranking of the calibrated full score matrix under the same tie rule."""
    rng = np.random.default_rng(seed)
    n, c = 40, 9
    scores = rng.integers(0, 5, (n, c)).astype(np.float32)
    seen_mask = np.zeros(c, bool)
    seen_mask[:4] = True
    labels = np.r_[rng.integers(0, 4, n // 2), rng.integers(4, c, n - n // 2)]
    k = 2
    gz = gzsl_from_scores(scores, labels, seen_mask, m=k + 1)
    curve = seen_unseen_curve(gz, k, per_class=True, tie_rule=tie_rule)
    b = curve.breakpoints
    between = np.r_[(b[1:] + b[:-1]) / 2, b[0] - 1, b[-1] + 1]
    # at a breakpoint a seen and an unseen class tie across spaces: only the strict rule is exact there
    gammas = np.r_[b, between] if tie_rule == "strict" else between
    for gamma in gammas:
        hit = true_ranks(labels, scores=scores.astype(np.float64) - gamma * seen_mask).credit(k, tie_rule)
        seen_img = seen_mask[labels]

        def mean_per_class(group, hit=hit):
            return np.mean([hit[group & (labels == cl)].mean() for cl in np.unique(labels[group])])

        expected = (mean_per_class(seen_img), mean_per_class(~seen_img))
        assert curve.at(gamma) == pytest.approx(expected)
        assert gzsl_accuracies(gz, k, gamma, True, tie_rule)["seen"] == pytest.approx(expected[0])
    for j in range(len(b) + 1):
        lo, hi = curve.interval(j)
        gamma = (lo + hi) / 2 if np.isfinite(lo + hi) else (hi - 1 if np.isfinite(hi) else lo + 1)
        assert curve.at(gamma) == pytest.approx((curve.seen[j], curve.unseen[j]))


def test_gzsl_needs_both_kinds_of_images():
    gz = gzsl_from_scores(FULL[:2], GZ_LABELS[:2], SEEN_MASK, m=2)
    with pytest.raises(UserInputError, match="both seen and unseen"):
        gzsl_metrics(gz, [1])


def test_sort_topk_sorts_descending_with_ties_by_id_and_padding_last():
    scores = np.array([[1.0, 3.0, 3.0, 9.0], [2.0, 2.0, 5.0, 0.0]], np.float32)
    ids = np.array([[4, 7, 2, -1], [6, 1, 3, 0]])
    top, order = sort_topk(scores, ids, block=1)
    assert order.tolist() == [[2, 7, 4, -1], [3, 1, 6, 0]]
    assert top.tolist() == [[3.0, 3.0, 1.0, -np.inf], [5.0, 2.0, 2.0, 0.0]]


def test_block_size_does_not_change_sorted_or_calibrated_lists():
    rng = np.random.default_rng(7)
    n, c = 200, 9
    seen_mask = np.zeros(c, bool)
    seen_mask[:3] = True  # m = 5 > 3 seen classes: the seen lists end in padding
    scores = rng.integers(0, 4, size=(n, c)).astype(np.float32) / 2  # many ties
    gz = gzsl_from_scores(scores, rng.integers(0, c, n), seen_mask, m=5)
    assert (gz.seen_ids == -1).any()
    for gamma in (0.0, 0.5, -1.25):
        whole = calibrated_topk(gz, gamma, 5, block=10**6)
        for block in (1, 3, 64):
            part = calibrated_topk(gz, gamma, 5, block=block)
            assert all(np.array_equal(a, b) for a, b in zip(whole, part, strict=True))
            assert part[0].dtype == np.float64 and part[1].dtype == np.int64
    ids = np.hstack([gz.seen_ids, gz.unseen_ids])
    raw = np.hstack([gz.seen_scores, gz.unseen_scores])
    whole = sort_topk(raw, ids, block=10**6)
    part = sort_topk(raw, ids, block=3)
    assert all(np.array_equal(a, b) for a, b in zip(whole, part, strict=True))
    with pytest.raises(ValueError, match="block"):
        sort_topk(raw, ids, block=0)


def test_gzsl_entries_by_hand_one_per_position_of_the_tie_group():
    # unseen classes 0-3, seen 4-5; hit@3, m = 4
    scores = np.array(
        [
            [5, 3, 3, 3, 4, 1],  # true 1 (unseen): r = 1, t = 2 -> positions 1 and 2 (3 is past k)
            [1, 0, 0, 0, 2, 0],  # true 4 (seen): r = 0, t = 0 -> one entry
            [0, 1, 1, 1, 0, 0],  # true 0 (unseen): r = 3 -> never a hit@3, no entry
        ],
        np.float32,
    )
    gz = gzsl_from_scores(scores, np.array([1, 4, 0]), np.arange(6) >= 4, m=4)
    rows, theta, fraction = gzsl_entries(gz, 3, "expected")
    assert rows.tolist() == [0, 0, 1]
    # position 1: one seen class may stay above, the 2nd seen score 1 must drop below 3: γ > -2;
    # position 2: no seen class above: 4 - γ < 3, γ > 1; seen image: 3rd unseen score 0 < 2 - γ
    assert theta.tolist() == [-2.0, 1.0, 2.0]
    assert fraction.tolist() == [1 / 3, 1 / 3, 1.0]


def test_gzsl_lists_are_checked_and_ranked_block_by_block(monkeypatch):
    import imagenet_zsl.scoring.ranks as scoring

    rng = np.random.default_rng(11)
    scores = rng.integers(0, 3, size=(50, 8)).astype(np.float32)
    seen_mask = np.arange(8) < 3
    gz = gzsl_from_scores(scores, rng.integers(0, 8, 50), seen_mask, m=4)
    lists = (gz.seen_scores, gz.seen_ids, gz.unseen_scores, gz.unseen_ids, gz.labels, seen_mask)
    whole = GZSLTopK(*lists).own_ranks
    monkeypatch.setattr(scoring, "SORT_BLOCK", 3)
    blocked = GZSLTopK(*lists).own_ranks
    assert np.array_equal(whole.above, blocked.above) and np.array_equal(whole.tied, blocked.tied)
    # judged from the lists: the same as the exact ranks wherever the true class is listed
    listed = whole.above < 4
    assert listed.any() and np.array_equal(whole.above[listed], gz.own_ranks.above[listed])
    bad = gz.seen_ids.copy()
    bad[49, 0] = 5  # an unseen class in the seen list, in the last block
    with pytest.raises(ValueError, match="seen_ids hold classes outside"):
        GZSLTopK(gz.seen_scores, bad, gz.unseen_scores, gz.unseen_ids, gz.labels, seen_mask)


def test_true_ranks_takes_exactly_one_source():
    with pytest.raises(ValueError, match="either scores or topk_ids"):
        true_ranks(LABELS)
    with pytest.raises(ValueError, match="either scores or topk_ids"):
        true_ranks(LABELS, scores=np.zeros((4, 4)), topk_ids=IDS)


def test_strict_rule_is_dgp_rule_at_every_k():
    """DGP's evaluate_imagenet counts ``rks = (table >= gth).sum(1)`` (the true class itself
    included) and a hit@k when ``rks <= k``: our strict rule, for every K."""
    # hand case: each image's true class ties with one other class for first place
    scores = np.array([[3.0, 3.0, 1.0], [2.0, 5.0, 5.0]])
    labels = np.array([0, 1])
    ranks = true_ranks(labels, scores=scores)
    assert hit_at_k(ranks, labels, [1, 2, 3], tie_rule="strict") == {1: 0.0, 2: 1.0, 3: 1.0}
    assert hit_at_k(ranks, labels, [1, 2, 3]) == {1: 0.5, 2: 1.0, 3: 1.0}
    # brute force on many ties
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, (200, 9)).astype(float)
    labels = rng.integers(0, 9, 200)
    rks = (scores >= scores[np.arange(200), labels][:, None]).sum(axis=1)
    ks = list(range(1, 10))
    got = hit_at_k(true_ranks(labels, scores=scores), labels, ks, tie_rule="strict")
    assert got == {k: pytest.approx(np.mean(rks <= k)) for k in ks}
