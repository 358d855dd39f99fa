import numpy as np
import pytest

from imagenet_zsl.evaluation.hierarchy_errors import (
    CATEGORIES,
    _categories,
    error_breakdown,
    expected_error_breakdown,
    gzsl_error_breakdowns,
    top1_shares,
)
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.scoring import TieRanks, calibrated_topk, gzsl_from_scores


@pytest.fixture
def animals() -> ClassGraph:
    # entity -> animal -> dog -> {dalmatian, poodle}; animal -> cat; entity -> plant -> tree;
    # "puppy" has two parents (dog and young) to exercise a DAG
    return ClassGraph.from_edges(
        [
            ("entity", "animal"),
            ("animal", "dog"),
            ("dog", "dalmatian"),
            ("dog", "poodle"),
            ("animal", "cat"),
            ("entity", "plant"),
            ("plant", "tree"),
            ("dog", "puppy"),
            ("entity", "young"),
            ("young", "puppy"),
        ]
    )


def test_breakdown_on_a_hand_made_graph(animals):
    classes = ["animal", "dog", "dalmatian", "poodle", "cat", "tree", "ghost", "young", "puppy"]
    c = {w: i for i, w in enumerate(classes)}
    pairs = [  # (true, predicted) -> expected category
        ("dalmatian", "dalmatian", "correct"),
        ("dalmatian", "dog", "parent"),
        ("dog", "dalmatian", "child"),
        ("dalmatian", "animal", "ancestor"),
        ("animal", "poodle", "descendant"),
        ("poodle", "dalmatian", "unrelated"),  # siblings
        ("cat", "tree", "unrelated"),
        ("ghost", "dog", "not_in_graph"),
        ("puppy", "young", "parent"),  # second parent of a DAG node
        ("young", "dog", "unrelated"),
    ]
    labels = np.array([c[t] for t, _, _ in pairs])
    preds = np.array([c[p] for _, p, _ in pairs])
    result = error_breakdown(animals, classes, labels, preds)
    assert [CATEGORIES[i] for i in result.category] == [e for _, _, e in pairs]
    assert result.counts == {
        "correct": 1,
        "parent": 2,
        "child": 1,
        "ancestor": 1,
        "descendant": 1,
        "unrelated": 3,
        "not_in_graph": 1,
    }
    assert result.strict == pytest.approx(1 / 10)
    assert result.lower_bound == pytest.approx((1 + 2 + 1) / 10)  # + parents, ancestors
    assert result.upper_bound == pytest.approx((1 + 2 + 1 + 1 + 1) / 10)  # + children, descendants
    shares = result.error_shares
    assert shares["unrelated"] == pytest.approx(3 / 9)
    assert sum(shares.values()) == pytest.approx(1.0)
    as_dict = result.to_dict()
    assert as_dict["semantic_upper_bound"] == pytest.approx(0.6)


def test_expected_breakdown_splits_a_tied_top1_uniformly(animals):
    classes = ["animal", "dog", "dalmatian", "poodle", "cat", "tree"]
    c = {w: i for i, w in enumerate(classes)}
    ids = np.array(
        [
            [c["dalmatian"], c["dog"], c["cat"]],  # 0: dalmatian alone on top: correct
            [c["dog"], c["dalmatian"], c["animal"]],  # 1: dalmatian tied with dog, animal below
            [c["poodle"], c["dog"], c["tree"]],  # 2: poodle, dog and tree tied, dalmatian unlisted
            [c["cat"], c["tree"], c["dog"]],  # 3: the true class (dalmatian) tied with all three
        ]
    )
    scores = np.array([[0.9, 0.5, 0.1], [0.7, 0.7, 0.2], [0.4, 0.4, 0.4], [0.3, 0.3, 0.3]])
    labels = np.full(4, c["dalmatian"])
    result = expected_error_breakdown(animals, classes, labels, ids, scores)
    # image 3 without tie ranks: only the listed classes are known, 1/3 each
    expected = {
        "correct": 1 + 1 / 2,
        "parent": 1 / 2 + 1 / 3 + 1 / 3,
        "unrelated": 1 / 3 + 1 / 3 + 1 / 3 + 1 / 3,  # poodle (sibling), tree, cat, tree
        "child": 0.0,
        "ancestor": 0.0,
        "descendant": 0.0,
        "not_in_graph": 0.0,
    }
    assert result.counts == pytest.approx(expected)
    assert result.total == 4 and sum(result.counts.values()) == pytest.approx(4)
    assert result.strict == pytest.approx((1 + 1 / 2) / 4)
    assert result.to_dict()["tie_rule"] == "expected"
    # with the search's tie ranks: image 3's true class is tied first with 3 others (t = 3), image 2's
    # true class is below (above = 3); the expected top-1 is then the expected hit@1
    ranks = TieRanks(np.array([0, 0, 3, 0]), np.array([0, 1, 0, 3]))
    result = expected_error_breakdown(animals, classes, labels, ids, scores, ranks)
    assert result.counts["correct"] == pytest.approx(1 + 1 / 2 + 1 / 4)
    assert result.strict == pytest.approx(np.mean(ranks.credit(1)))
    assert result.counts["parent"] == pytest.approx(1 / 2 + 1 / 3 + 1 / 4)
    assert result.counts["unrelated"] == pytest.approx(1 / 3 + 1 / 3 + 1 / 4 + 1 / 4)


def test_expected_breakdown_equals_the_strict_one_without_ties(animals):
    classes = ["animal", "dog", "dalmatian", "poodle", "cat", "tree"]
    ids = np.array([[2, 1], [1, 0], [4, 5], [3, 2]])
    scores = np.array([[0.9, 0.1], [0.8, 0.3], [0.5, 0.4], [0.6, 0.2]])
    labels = np.array([2, 2, 0, 2])
    strict = error_breakdown(animals, classes, labels, ids[:, 0])
    expected = expected_error_breakdown(animals, classes, labels, ids, scores)
    assert expected.counts == pytest.approx(strict.counts)
    assert expected.error_shares == pytest.approx(strict.error_shares)


def _breakdowns_in_one_piece(graph, classes, gz, gamma):
    """The breakdowns as computed on whole arrays: calibrated_topk, then one expected breakdown
    per image group."""
    scores, ids = calibrated_topk(gz, gamma, gz.m, block=10**6)
    masks = {"all": np.ones(len(gz.labels), bool), "unseen_images": ~gz.seen_images}
    masks["seen_images"] = gz.seen_images
    return {
        part: expected_error_breakdown(graph, classes, gz.labels[mask], ids[mask], scores[mask]).to_dict()
        for part, mask in masks.items()
    }


def test_gzsl_breakdowns_on_a_hand_made_case(animals):
    # joint space: unseen classes dalmatian (0), poodle (1); seen classes dog (2), tree (3)
    classes = ["dalmatian", "poodle", "dog", "tree"]
    seen_mask = np.array([False, False, True, True])
    scores = np.array(
        [
            [5, 1, 4, 0],  # dalmatian image: correct at γ = 0 and γ = 2
            [1, 3, 4, 0],  # poodle image: dog (parent) wins at γ = 0; poodle at γ = 2
            [2, 0, 2, 1],  # dog image: tie dog/dalmatian (child) at γ = 0; dalmatian at γ = 2
        ],
        np.float32,
    )
    gz = gzsl_from_scores(scores, np.array([0, 1, 2]), seen_mask, m=2)
    direct = gzsl_error_breakdowns(animals, classes, gz, 0.0, block=2)
    assert direct["all"].counts["correct"] == 1.5
    assert direct["all"].counts["parent"] == 1.0
    assert direct["all"].counts["child"] == 0.5
    assert direct["unseen_images"].to_dict()["counts"]["correct"] == 1.0
    assert direct["seen_images"].total == 1 and direct["seen_images"].strict == 0.5
    calibrated = gzsl_error_breakdowns(animals, classes, gz, 2.0, block=1)
    assert calibrated["unseen_images"].strict == 1.0
    assert calibrated["seen_images"].counts["child"] == 1.0
    assert calibrated["all"].lower_bound == pytest.approx(2 / 3)


def test_gzsl_breakdowns_do_not_depend_on_the_block_size(animals):
    classes = ["animal", "dog", "dalmatian", "poodle", "cat", "tree", "ghost", "young", "puppy"]
    seen_mask = np.zeros(len(classes), bool)
    seen_mask[[1, 4, 8]] = True
    rng = np.random.default_rng(3)
    n = 301
    scores = rng.integers(0, 5, size=(n, len(classes))).astype(np.float32) / 4  # many ties
    gz = gzsl_from_scores(scores, rng.integers(0, len(classes), n), seen_mask, m=4)
    for gamma in (0.0, 0.25, -0.5):
        reference = _breakdowns_in_one_piece(animals, classes, gz, gamma)
        for block in (1, 3, 10**6):
            streamed = gzsl_error_breakdowns(animals, classes, gz, gamma, block=block)
            # bit for bit, not approximately
            assert {part: b.to_dict() for part, b in streamed.items()} == reference


def _zsl_breakdown_in_one_piece(graph, classes, labels, ids, scores, ranks=None) -> dict[str, float]:
    """The expected counts as one pass over all images: every prediction, then one bincount."""
    image, prediction, weight = top1_shares(ids, scores, labels, ranks)
    category = _categories(graph, classes, np.asarray(labels)[image], prediction)
    counts = np.bincount(category, weights=weight, minlength=len(CATEGORIES))
    return {name: float(c) for name, c in zip(CATEGORIES, counts, strict=True)}


def test_zsl_breakdown_streamed_equals_one_pass_with_ties_across_blocks(animals):
    classes = ["animal", "dog", "dalmatian", "poodle", "cat", "tree"]
    # rows 1-3 repeat one three-way tie (1/3 weights summed across block boundaries); row 4's true
    # class is tied first past the list (its share comes from the tie ranks)
    ids = np.array([[2, 1, 4], [3, 1, 5], [3, 1, 5], [3, 1, 5], [0, 4, 5], [1, 0, 2]])
    scores = np.array([[9, 1, 0], [4, 4, 4], [4, 4, 4], [4, 4, 4], [2, 2, 2], [5, 3, 3]], np.float32)
    labels = np.array([2, 2, 2, 2, 2, 1])
    ranks = TieRanks(np.array([0, 3, 3, 3, 0, 0]), np.array([0, 0, 0, 0, 3, 0]))
    for r in (None, ranks):
        whole = _zsl_breakdown_in_one_piece(animals, classes, labels, ids, scores, r)
        for block in (1, 2, 4, 10**6):
            streamed = expected_error_breakdown(animals, classes, labels, ids, scores, r, block=block)
            assert streamed.counts == whole  # bit for bit
    # by hand, with the tie ranks: image 0 correct; images 1-3: poodle (sibling), dog (parent),
    # tree, 1/3 each; image 4: true class 1/4, animal (ancestor) 1/4, cat and tree 1/4 each
    counts = expected_error_breakdown(animals, classes, labels, ids, scores, ranks, block=2).counts
    assert counts["correct"] == pytest.approx(1 + 1 / 4 + 1)
    assert counts["parent"] == pytest.approx(3 / 3)
    assert counts["ancestor"] == pytest.approx(1 / 4)
    assert counts["unrelated"] == pytest.approx(2 * 3 / 3 + 2 / 4)
