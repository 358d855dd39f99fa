"""The hierarchy's per-class metrics stay what they claim to be: the structural ratio column of a run
does not move when GZSL is turned on (issue 45 §1), and a test class that is not a node of the graph
is left out of hP@K with a count, never scored as a class without relatives (issue 44 §2)."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.evaluation.hierarchical_precision import hierarchical_precision
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import write_feature_dir

#   root ─┬─ A ─┬─ a1, a2 (test)
#         │     └─ s1     (training)
#         └─ B ─┬─ b1     (test)
#               └─ s2     (training, and the only GZSL seen class)
ROOT, A, B = "n00000020", "n00000021", "n00000022"
A1, A2, B1 = "n00000001", "n00000002", "n00000003"
S1, S2 = "n00000011", "n00000012"
CLASSES = [A1, A2, B1, S1, S2]
EDGES = [(ROOT, A), (ROOT, B), (A, A1), (A, A2), (A, S1), (B, B1), (B, S2)]


def _write_case(root: Path) -> dict[str, Path]:
    """Two test images per test class (a1: one right, one like a2; a2: right; b1: both like a1),
    two seen images of s2, one-hot prototypes of every class, the split and the training list."""
    eye = np.eye(len(CLASSES), dtype=np.float32)
    labels = np.repeat([0, 1, 2], 2)
    looks = np.array([0, 1, 1, 1, 0, 0])
    features = write_feature_dir(root / "test", labels, eye[looks], classes=CLASSES)
    seen = write_feature_dir(root / "seen", np.array([4, 4]), eye[[4, 4]], classes=CLASSES)
    ClassVectors(CLASSES, eye).save(root / "protos.npz")
    (root / "split.txt").write_text(f"{A1}\n{A2}\n{B1}\n")
    (root / "training.txt").write_text(f"{S1}\n{S2}\n")
    return {"features": features, "seen": seen, "protos": root / "protos.npz"}


def _run(root: Path, paths: dict[str, Path], name: str, gzsl: bool) -> tuple[list[dict], dict]:
    cfg = EvaluationConfig(
        features=paths["features"],
        split=root / "split.txt",
        out=root / name,
        prototypes=paths["protos"],
        ks=[1, 2],
        label_frequency=False,
        plots=False,
        gzsl=gzsl,
        seen_features=paths["seen"] if gzsl else None,
        training_classes=root / "training.txt",
    )
    metrics = evaluate(cfg, graph=ClassGraph.from_edges(EDGES), progress=False)
    with open(root / name / "per_class.csv", newline="") as handle:
        return list(csv.DictReader(handle)), metrics


def test_the_structural_ratio_column_is_the_same_with_and_without_gzsl(tmp_path):
    """R's training set is the run's training classes {s1, s2}, not the GZSL seen set {s2}.
    By hand: a1 is 2 hops from s1 and from a2: r = 2/2 = 1; a2 likewise; b1 is 2 hops from s2 and
    4 from a1: r = 0.5. With {s2} as the training set a1 would get 4/2 = 2."""
    paths = _write_case(tmp_path)
    zsl_rows, zsl = _run(tmp_path, paths, "zsl", gzsl=False)
    gzsl_rows, gzsl = _run(tmp_path, paths, "gzsl", gzsl=True)
    ratios = {row["wnid"]: float(row["structural_ratio"]) for row in zsl_rows}
    assert ratios == {A1: 1.0, A2: 1.0, B1: 0.5}
    unseen = [row for row in gzsl_rows if row["role"] == "unseen"]
    assert [{k: v for k, v in row.items() if not k.startswith("gzsl_")} for row in unseen] == zsl_rows
    assert gzsl["class_properties"] == zsl["class_properties"]
    assert zsl["class_properties"]["spearman_hit1"]["structural_ratio"]["classes"] == 3


#   root ─┬─ a ─┬─ a1
#         │     └─ a2
#         └─ b ── b1        "zz" is a class of the label space but not a node of the graph
TREE = [("root", "a"), ("a", "a1"), ("a", "a2"), ("root", "b"), ("b", "b1")]


def test_hp_leaves_out_the_images_of_a_class_outside_the_graph_and_counts_them(caplog):
    """Space [a1, a2, b1, zz]; two images of a1 with top-2 (a2, a1) and (a2, b1), one of zz with
    top-2 (zz, a1). By hand: H1(a1) = {a1}, H2(a1) = {a1, a2} (a2 at 2 hops, b1 at 4): hP@1 is
    0 and 0, hP@2 is 2/2 and 1/2. zz has no correct set: its image is left out, so hP@1 = 0 and
    hP@2 = 0.75 over 2 images; scored as if H_K(zz) = {zz} it would add 1 and 1/2 (1/3, 2/3)."""
    space = ["a1", "a2", "b1", "zz"]
    ids = np.array([[1, 0, 2], [1, 2, 0], [3, 0, 1]])
    scores = np.array([[3.0, 2, 1], [3.0, 2, 1], [3.0, 2, 1]])
    labels = np.array([0, 0, 3])
    with caplog.at_level(logging.WARNING):
        block = hierarchical_precision(ClassGraph.from_edges(TREE), space, labels, (scores, ids), [1, 2])
    assert block["images"] == 2
    assert block["flat"] == pytest.approx({"1": 0.0, "2": 0.75})
    assert block["not_in_graph"] == {"classes": 1, "images": 1, "wnids": ["zz"]}
    assert block["mean_correct_set_size"] == {"1": 1.0, "2": 2.0}
    assert "1 test classes are not nodes" in caplog.text and "zz" in caplog.text


def test_evaluate_records_the_test_classes_hp_left_out(tmp_path, caplog):
    """End to end: the graph lacks b1; its two images leave hP@K (recorded in metrics.json and
    said in report.md), the other four are scored; the error breakdown still counts b1's images
    as not_in_graph."""
    paths = _write_case(tmp_path)
    graph = ClassGraph.from_edges([e for e in EDGES if B1 not in e])
    cfg = EvaluationConfig(
        features=paths["features"],
        split=tmp_path / "split.txt",
        out=tmp_path / "run",
        prototypes=paths["protos"],
        ks=[1, 2],
        label_frequency=False,
        plots=False,
    )
    with caplog.at_level(logging.WARNING):
        metrics = evaluate(cfg, graph=graph, progress=False)
    hp = metrics["hierarchical_precision"]
    assert hp["not_in_graph"] == {"classes": 1, "images": 2, "wnids": [B1]}
    assert hp["images"] == 4
    # hP@1 = hit@1 over a1's and a2's images: a1 1 of 2, a2 2 of 2
    assert hp["flat"]["1"] == pytest.approx(3 / 4)
    assert metrics["hierarchy"]["counts"]["not_in_graph"] == 2
    report = (tmp_path / "run" / "report.md").read_text()
    assert "1 test classes (2 images) are not nodes of the graph" in report
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["hierarchical_precision"] == hp
