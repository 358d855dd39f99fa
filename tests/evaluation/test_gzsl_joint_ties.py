"""A seen class tied with an unseen class after calibration is a tie of the joint ranking (issue #33
review): direct stacking (γ = 0) and any γ on a breakpoint share the image, hand-computed and
against a brute-force joint ranking over integer scores (which tie)."""

import numpy as np
import pytest

from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.scoring import (
    GZSLLists,
    GZSLTopK,
    TieRanks,
    choose_gamma,
    gzsl_accuracies,
    gzsl_class_rates,
    gzsl_from_scores,
    gzsl_metrics,
    image_credit,
    seen_unseen_curve,
    tail_ties,
)

UNSEEN2_SEEN2 = np.array([False, False, True, True])


def test_reviewer_repro_a_cross_tie_is_half_a_hit_on_each_side():
    # classes 0, 1 unseen, 2, 3 seen; classes 0 and 2 both score 1.0; one image of 0, one of 2
    scores = np.array([[1.0, 0.0, 1.0, 0.0]] * 2)
    gz = gzsl_from_scores(scores, np.array([0, 2]), UNSEEN2_SEEN2, m=2)
    assert gzsl_accuracies(gz, 1, 0.0, False, "expected") == {"seen": 0.5, "unseen": 0.5, "H": 0.5}
    assert gzsl_accuracies(gz, 1, 0.0, False, "strict") == {"seen": 0.0, "unseen": 0.0, "H": 0.0}
    metrics = gzsl_metrics(gz, [1])
    assert metrics["flat"][1]["seen"] == metrics["per_class"][1]["unseen"] == 0.5
    assert metrics["flat_strict"][1]["H"] == 0.0
    rates = gzsl_class_rates(gz, 1)
    assert rates[[0, 2]].tolist() == [0.5, 0.5] and np.isnan(rates[[1, 3]]).all()


def test_two_seen_classes_tied_with_the_true_class_give_a_third_not_a_half():
    # unseen image of class 0 scores 1 for itself and both seen classes: a three-way joint tie
    scores = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    gz = gzsl_from_scores(scores, np.array([0, 3]), UNSEEN2_SEEN2, m=4)
    assert image_credit(gz, 1, 0.0).tolist() == [1 / 3, 1.0]
    assert image_credit(gz, 2, 0.0).tolist() == [2 / 3, 1.0]
    assert image_credit(gz, 3, 0.0).tolist() == [1.0, 1.0]
    # the average of the left and right limits of the curve would say 1/2
    curve = seen_unseen_curve(gz, 1, per_class=False)
    left = curve.unseen[np.searchsorted(curve.breakpoints, 0.0)]
    right = curve.unseen[np.searchsorted(curve.breakpoints, 0.0, side="right")]
    assert (left + right) / 2 == 0.5
    assert image_credit(gz, 1, 0.0, "strict").tolist() == [0.0, 1.0]


def test_own_space_ties_and_cross_ties_together():
    # classes 0, 1 unseen, 2, 3, 4 seen; the unseen image (class 0) ties unseen class 1 (own
    # space), seen class 2 is above it and seen class 3 tied: r = 1, t = 2 in the joint space
    seen_mask = np.array([False, False, True, True, True])
    scores = np.array([[2.0, 2.0, 3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    gz = gzsl_from_scores(scores, np.array([0, 4]), seen_mask, m=5)
    assert gz.own_ranks.above.tolist() == [0, 0] and gz.own_ranks.tied.tolist() == [1, 0]
    assert [image_credit(gz, k, 0.0)[0] for k in (1, 2, 3, 4)] == [0.0, 1 / 3, 2 / 3, 1.0]
    # strict: hit iff r + t = 3 < k
    assert [image_credit(gz, k, 0.0, "strict")[0] for k in (1, 2, 3, 4)] == [0, 0, 0, 1]
    # γ = 1: class 2 (3 - 1 = 2) now ties too, class 3 (1) falls below: r = 0, t = 2
    assert [image_credit(gz, k, 1.0)[0] for k in (1, 2, 3)] == [1 / 3, 2 / 3, 1.0]


def test_tie_group_running_past_the_other_list_is_counted_whole():
    """Issue #45: scores (seen | unseen) [2, 2, 3, 3 | 0, 2], the true class the unseen one scoring
    2, K = 3: two seen classes above, two tied (a tie of three): credit (3 - 2) / 3 = 1/3, whether
    the seen list holds all four seen classes (m = 4) or more (m = 6). The old rule gave 0 at m = 4."""
    seen_mask = np.array([False, False, True, True, True, True])
    scores = np.array([[0, 2, 2, 2, 3, 3]], np.float32)
    for m in (4, 6):
        gz = gzsl_from_scores(scores, np.array([1]), seen_mask, m=m)
        assert image_credit(gz, 3, 0.0).tolist() == [1 / 3]
        assert image_credit(gz, 3, 0.0, "strict").tolist() == [0.0]  # r + t = 4 >= 3
    # m = 2, K = 1 (both listed seen classes tie the true score, one more beyond): 1 / (1 + 3)
    scores = np.array([[1.0, 0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0, 0.0]], np.float32)
    five = np.array([False, False, True, True, True])
    gz = gzsl_from_scores(scores, np.array([0, 3]), five, m=2)
    assert gz.parts[0].seen_tail.tolist() == [1, 1]  # one seen class left out ties each list's last
    assert image_credit(gz, 1, 0.0).tolist() == [0.25, 1.0]


def test_a_tie_group_past_a_list_without_its_tail_stays_a_miss():
    """Lists written without their tails (older run directories): the lists cannot see how far a
    tie group reaching the end of a partial list runs, and the image is a miss, as before; a list
    holding its whole space needs no tail."""
    scores = np.array([[1.0, 0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0, 0.0]], np.float32)
    five = np.array([False, False, True, True, True])
    full = gzsl_from_scores(scores, np.array([0, 3]), five, m=2)
    part = full.parts[0]
    unknown = GZSLTopK.from_parts(
        [GZSLLists(part.seen_scores, part.seen_ids, part.unseen_scores, part.unseen_ids)],
        full.labels,
        five,
        full.own_ranks,
    )
    assert image_credit(unknown, 1, 0.0).tolist() == [0.0, 1.0]
    # two unseen classes and m = 2: the unseen list is whole, a seen image's tie group is counted
    scores = np.array([[1.0, 1.0, 1.0, 0.0, 0.0]], np.float32)
    whole = gzsl_from_scores(scores, np.array([2]), five, m=2)
    part = whole.parts[0]
    no_tails = GZSLTopK.from_parts(
        [GZSLLists(part.seen_scores, part.seen_ids, part.unseen_scores, part.unseen_ids)],
        whole.labels,
        five,
        whole.own_ranks,
    )
    assert image_credit(no_tails, 1, 0.0).tolist() == image_credit(whole, 1, 0.0).tolist() == [1 / 3]


def _brute_credit(scores, labels, seen_mask, k, gamma, rule):
    """Credit from the whole joint ranking after subtracting γ from the seen columns."""
    joint = scores.astype(np.float64) - gamma * seen_mask
    true = joint[np.arange(len(labels)), labels][:, None]
    above = (joint > true).sum(axis=1)
    tied = (joint == true).sum(axis=1) - 1
    if rule == "strict":
        return (above + tied < k).astype(float), above + tied
    return np.clip((k - above) / (tied + 1.0), 0.0, 1.0), above + tied


@pytest.mark.parametrize("seed", range(4))
def test_brute_force_joint_ranking_on_integer_scores(seed):
    rng = np.random.default_rng(seed)
    n, c = 80, 9
    seen_mask = np.zeros(c, bool)
    seen_mask[rng.choice(c, 4, replace=False)] = True
    scores = rng.integers(0, 4, (n, c)).astype(np.float32)
    labels = rng.integers(0, c, n)
    full = gzsl_from_scores(scores, labels, seen_mask, m=c)  # every class listed: never blind
    short = gzsl_from_scores(scores, labels, seen_mask, m=3)
    weight = np.where(seen_mask[labels], 1 / seen_mask[labels].sum(), 1 / (~seen_mask[labels]).sum())
    for gamma in (0.0, 1.0, -2.0, 0.5):  # integers sit on breakpoints, 0.5 between them
        for rule in ("expected", "strict"):
            for k in (1, 2, 4):
                want, joint_rank = _brute_credit(scores, labels, seen_mask, k, gamma, rule)
                np.testing.assert_allclose(image_credit(full, k, gamma, rule), want, rtol=0, atol=1e-15)
                acc = gzsl_accuracies(full, k, gamma, False, rule)
                assert acc["seen"] == pytest.approx(np.sum((weight * want)[seen_mask[labels]]))
                assert acc["unseen"] == pytest.approx(np.sum((weight * want)[~seen_mask[labels]]))
                if k < 3:  # the top-3 lists and their tails decide every image exactly
                    got = image_credit(short, k, gamma, rule)
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", range(3))
def test_stored_lists_with_tails_give_the_full_rows_credit(seed):
    """Brute force (issue #45): random integer scores in 0..3 (ties everywhere), the stored top-m
    lists with their tails against the credit of the full joint score rows, for K = 1..5, every
    m from K + 1 to the larger space's size, γ on and off the breakpoints, both rules."""
    rng = np.random.default_rng(100 + seed)
    n, c = 120, 11
    seen_mask = np.zeros(c, bool)
    seen_mask[rng.choice(c, 5, replace=False)] = True  # 5 seen, 6 unseen classes
    scores = rng.integers(0, 4, (n, c)).astype(np.float32)
    labels = rng.integers(0, c, n)
    for k in range(1, 6):
        for m in range(k + 1, 7):
            gz = gzsl_from_scores(scores, labels, seen_mask, m=m)
            # the own-space ranks judged from the lists and their tails (true_ranks' tail_ties):
            # exact wherever the true class is in its own list (outside it its score is unknown)
            derived = GZSLTopK.from_parts(gz.parts, labels, seen_mask, None)
            own_ids = np.where(seen_mask[labels][:, None], gz.seen_ids, gz.unseen_ids)
            listed = (own_ids == labels[:, None]).any(axis=1)
            for gamma in (0.0, 1.0, -1.0, 0.5):
                for rule in ("expected", "strict"):
                    want, _ = _brute_credit(scores, labels, seen_mask, k, gamma, rule)
                    where = f"k={k} m={m} γ={gamma}"
                    got = image_credit(gz, k, gamma, rule)
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15, err_msg=where)
                    got = image_credit(derived, k, gamma, rule)[listed]
                    np.testing.assert_allclose(got, want[listed], rtol=0, atol=1e-15, err_msg=where)


@pytest.mark.parametrize("seed", range(3))
def test_area_and_chosen_gamma_are_off_the_breakpoints(seed):
    """AUSUC reads only the open intervals' values, and those equal the exact joint accuracies at
    any γ inside them; the chosen γ is inside an interval, never on a breakpoint."""
    rng = np.random.default_rng(seed)
    n, c = 60, 8
    seen_mask = np.r_[np.zeros(4, bool), np.ones(4, bool)]
    scores = rng.integers(0, 5, (n, c)).astype(np.float32)
    gz = gzsl_from_scores(scores, rng.integers(0, c, n), seen_mask, m=c)
    for per_class in (True, False):
        curve = seen_unseen_curve(gz, 1, per_class)
        b = curve.breakpoints
        inside = np.r_[b[0] - 1, (b[:-1] + b[1:]) / 2, b[-1] + 1]
        for j, gamma in enumerate(inside):
            acc = gzsl_accuracies(gz, 1, float(gamma), per_class)
            assert acc["seen"] == pytest.approx(curve.seen[j]) and acc["unseen"] == pytest.approx(
                curve.unseen[j]
            )
        gamma, _ = choose_gamma(curve)
        assert gamma not in set(b.tolist())


def test_flat_and_per_class_h_choose_different_gammas():
    """γ is chosen by the averaging of the H the tables print (flat): here the two disagree.

    Unseen class 0: one image, a hit iff γ > 1; unseen class 1: four images, hits iff γ > 3. Seen
    classes 2, 3, 4: one image each, hits iff γ < 4, 2, 2. Over the intervals (−inf, 1), (1, 2),
    (2, 3), (3, 4), (4, inf): S = 1, 1, 1/3, 1/3, 0 (either averaging); flat U = 0, 1/5, 1/5, 1, 1
    and flat H peaks at 1/2 in (3, 4); per-class U = 0, 1/2, 1/2, 1, 1 and per-class H peaks at
    2/3 in (1, 2).
    """
    low = -10.0
    scores = np.array(
        [[0, low, 1, low, low]]  # class 0: θ = 1 - 0
        + [[low, 0, 3, low, low]] * 4  # class 1: θ = 3 - 0
        + [[0, low, 4, low, low], [0, low, low, 2, low], [0, low, low, low, 2]]  # φ = 4, 2, 2
    )
    labels = np.array([0, 1, 1, 1, 1, 2, 3, 4])
    gz = gzsl_from_scores(scores, labels, np.array([False, False, True, True, True]), m=2)
    assert choose_gamma(gz, k=1, per_class=False) == (3.5, pytest.approx(0.5))
    assert choose_gamma(gz, k=1, per_class=True) == (1.5, pytest.approx(2 / 3))


@pytest.mark.parametrize(
    ("torch_kernel", "search"),
    [(False, "exact"), (True, "exact"), (False, "faiss")],
    ids=["numpy", "torch", "faiss"],
)
def test_the_search_stores_each_lists_tail(torch_kernel, search):
    """The search's lists carry their tails (the unlisted classes tied with a list's last score),
    from both backends and faiss's candidates; GZSL from the searched lists then gives the credit
    of the full joint score rows. Small integer vectors: exact scores, ties everywhere."""
    rng = np.random.default_rng(7)
    queries = rng.integers(-1, 2, (200, 2)).astype(np.float32)
    unseen = rng.integers(-1, 2, (9, 2)).astype(np.float32)
    seen = rng.integers(-1, 2, (7, 2)).astype(np.float32)
    labels = rng.integers(0, 16, 200)  # joint: unseen 0..8, seen 9..15
    seen_mask = np.r_[np.zeros(9, bool), np.ones(7, bool)]
    m = 4
    lists, own_above, own_tied = {}, np.zeros(200, np.int64), np.zeros(200, np.int64)
    for name, prototypes, space_labels in (
        ("seen", seen, np.where(seen_mask[labels], labels - 9, -1)),
        ("unseen", unseen, np.where(seen_mask[labels], -1, labels)),
    ):
        searcher = TopKSearcher(prototypes, m, device="cpu", torch_kernel=torch_kernel)
        scores, ids, ranks, tail = searcher.search_lists(queries, space_labels, search=search)
        np.testing.assert_array_equal(tail, tail_ties(queries @ prototypes.T, scores))
        assert tail.any()  # the case is exercised
        mine = space_labels >= 0
        own_above[mine], own_tied[mine] = ranks.above[mine], ranks.tied[mine]
        lists[name] = (scores, ids, tail)
    s_scores, s_ids, s_tail = lists["seen"]
    u_scores, u_ids, u_tail = lists["unseen"]
    gz = GZSLTopK.from_parts(
        [GZSLLists(s_scores, s_ids, u_scores, u_ids, seen_offset=9, seen_tail=s_tail, unseen_tail=u_tail)],
        labels,
        seen_mask,
        TieRanks(own_above, own_tied),
    )
    full = queries @ np.vstack([unseen, seen]).T
    for k in (1, 2, 3):
        for gamma in (0.0, 1.0, 0.5):
            for rule in ("expected", "strict"):
                want, _ = _brute_credit(full, labels, seen_mask, k, gamma, rule)
                np.testing.assert_allclose(image_credit(gz, k, gamma, rule), want, rtol=0, atol=1e-15)
