"""Fixtures for evaluation tests: a tiny benchmark on disk and a hand-made class graph."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM, SEEN, TEST, VAL, one_hot, write_feature_dir


@pytest.fixture
def graph() -> ClassGraph:
    """n00000001 is the parent of n00000000; n00000002 its child; n00000003 unrelated."""
    edges = [
        ("root", "n00000001"),
        ("n00000001", "n00000000"),
        ("n00000000", "n00000002"),
        ("root", "n00000003"),
        ("n00000003", "n00000004"),
        ("n00000003", "n00000005"),
    ]
    edges += [("root", w) for w in VAL + SEEN]
    return ClassGraph.from_edges(edges)


@pytest.fixture
def bench(tmp_path) -> dict:
    """One-hot prototypes; every image equals its class's prototype except one planted error.

    Test images: 3 per test class (18); image 0 (class n00000000) looks like n00000001 (its
    parent). Val images: 2 per val class. Seen images: 3 per seen class.
    """
    test_labels = np.repeat(np.arange(6), 3)
    test_features = one_hot(test_labels)
    test_features[0] = one_hot(np.array([1]))[0]
    val_labels = np.repeat([6, 7], 2)
    all_labels = np.r_[test_labels, val_labels]
    all_features = np.vstack([test_features, one_hot(val_labels)])
    seen_labels = np.repeat([8, 9], 3)
    root = tmp_path / "bench"
    features = write_feature_dir(root / "features", all_labels, all_features)
    seen = write_feature_dir(root / "seen", seen_labels, one_hot(seen_labels), shard_rows=4)
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(root / "protos.npz")
    for name, wnids in (("split", TEST), ("val", VAL), ("seen_classes", SEEN)):
        (root / f"{name}.txt").write_text("\n".join(wnids) + "\n")
    return {
        "root": root,
        "features": features,
        "seen": seen,
        "protos": root / "protos.npz",
        "split": root / "split.txt",
        "val": root / "val.txt",
        "seen_classes": root / "seen_classes.txt",
    }
