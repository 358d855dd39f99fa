import numpy as np
import pytest

from imagenet_zsl.evaluation.hierarchy_errors import CATEGORIES, error_breakdown
from imagenet_zsl.hierarchy.graph import ClassGraph


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
