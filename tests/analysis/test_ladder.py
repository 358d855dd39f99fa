"""The correction ladder's arithmetic on hand-made runs (numbers worked out by hand below)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.ladder import STEPS, ClassFlags, cell_ladder, corrected_ranks, related_keys
from imagenet_zsl.analysis.runs import RunCell, read_cells
from imagenet_zsl.cli import main
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM, TEST, one_hot, write_feature_dir
from tests.toy import TOY_EDGES

# split classes a3, a31, b1, b11: related (parent-child) pairs a3-a31 and b1-b11
SPLIT = ["a3", "a31", "b1", "b11"]
LABELS = np.array([0, 1, 2, 3, 2])
IDS = np.array([[0, 1, 2], [0, 1, 3], [0, 1, 3], [3, 2, 0], [2, 0, 1]])
SCORES = np.array([[0.9, 0.5, 0.1], [0.9, 0.8, 0.1], [0.9, 0.8, 0.7], [0.5, 0.5, 0.1], [0.9, 0.3, 0.2]])


def toy_cell() -> RunCell:
    metrics = {"model": {"name": "toy"}, "inputs": {"split": {"name": "s"}}}
    return RunCell(Path("toy"), metrics, SPLIT, LABELS, IDS, SCORES.astype(np.float32), np.arange(5))


def test_evaluated_step_is_the_evaluation_tie_rule() -> None:
    cell = toy_cell()
    ranks, _, _ = corrected_ranks(cell, np.ones(4, bool))
    assert ranks.tolist() == M.true_rank(IDS, LABELS, SCORES).tolist() == [0, 1, 3, 1, 0]


def test_related_predictions_count() -> None:
    cell = toy_cell()
    related = related_keys(ClassGraph.from_edges(TOY_EDGES), SPLIT)
    ranks, _, found = corrected_ranks(cell, np.ones(4, bool), related)
    assert ranks.tolist() == [0, 0, 2, 0, 0]
    assert found.all()


def test_ladder_arithmetic() -> None:
    cell = toy_cell()
    related = related_keys(ClassGraph.from_edges(TOY_EDGES), SPLIT)
    flags = ClassFlags(
        rare=np.array([False, True, False, False]),  # a31 rare
        secondary=np.array([False, False, False, False]),
        images=np.array([500, 1000, 1000, 100]),  # b11 has few images
    )
    kept = np.array([True, True, True, True, False])
    rows = {r["step"]: r for r in cell_ladder(cell, related, flags, kept, ks=(1, 2), min_images=301)}
    expect = {
        # step: (classes, images, hit@1, hit@2, per-class hit@1, undetermined@2)
        "evaluated": (4, 5, 2 / 5, 4 / 5, (1 + 0 + 0.5 + 0) / 4, 0),
        "structure": (4, 5, 4 / 5, 4 / 5, (1 + 1 + 0.5 + 1) / 4, 0),
        "rare_labels": (3, 4, 3 / 4, 1.0, (1 + 0.5 + 1) / 3, 0),
        "secondary_meaning": (3, 4, 3 / 4, 1.0, (1 + 0.5 + 1) / 3, 0),
        # b11 leaves the label space: image 2's list keeps only a3 (above b1), b1 unlisted
        "few_images": (2, 3, 2 / 3, 2 / 3, (1 + 0.5) / 2, 1),
        "ambiguous_images": (2, 2, 1 / 2, 1 / 2, (1 + 0) / 2, 1),
    }
    assert list(rows) == list(expect)
    for step, (classes, images, h1, h2, pc1, und2) in expect.items():
        row = rows[step]
        got = (row["classes"], row["images"], row["hit@1"], row["hit@2"], row["per_class_hit@1"])
        assert got == pytest.approx((classes, images, h1, h2, pc1)), step
        assert row["undetermined@2"] == und2, step


def test_ladder_without_filter_has_five_steps() -> None:
    cell = toy_cell()
    flags = ClassFlags(np.zeros(4, bool), np.zeros(4, bool), np.full(4, 1000))
    rows = cell_ladder(cell, related_keys(ClassGraph.from_edges(TOY_EDGES), SPLIT), flags, None, (1,))
    assert [r["step"] for r in rows][-1] == "few_images" and len(rows) == 5
    assert rows[0]["hit@1"] == rows[-1]["hit@1"] - (4 / 5 - 2 / 5)


@pytest.fixture
def finished_run(tmp_path):
    """`imagenet-zsl evaluate` on 6 one-hot classes; image 0 (n00000000) looks like its parent."""
    labels = np.repeat(np.arange(6), 2)
    features = one_hot(labels)
    features[0] = one_hot(np.array([1]))[0]
    feats = write_feature_dir(tmp_path / "features", labels, features)
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(tmp_path / "protos.npz")
    (tmp_path / "split.txt").write_text("\n".join(TEST) + "\n")
    edges = tmp_path / "edges.tsv"
    edges.write_text("root\tn00000001\nn00000001\tn00000000\nroot\tn00000003\nroot\tn00000002\n")
    run = tmp_path / "run"
    argv = ["evaluate", "--features", feats, "--split", tmp_path / "split.txt", "--prototypes"]
    argv += [tmp_path / "protos.npz", "--out", run, "--graph", edges, "--no-plots", "--no-label-frequency"]
    assert main([str(a) for a in argv]) == 0
    return tmp_path, run, edges


def test_ladder_command_on_an_evaluated_run(finished_run, capsys) -> None:
    tmp_path, run, edges = finished_run
    labels = pd.DataFrame(
        {
            "wnid": TEST,
            "label": list("abcdef"),
            "label_zipf": [3.0] * 6,
            "label_rare": [False, False, True, False, False, False],  # n00000002 rare
            "is_primary": [True] * 5 + [False],  # n00000005 secondary
            "primary_confidence": [1.0] * 6,
        }
    )
    labels.to_csv(tmp_path / "classes.csv", index=False)
    (tmp_path / "counts.tsv").write_text("".join(f"{w}\t{500 if w != 'n00000004' else 3}\n" for w in TEST))
    (tmp_path / "filter").mkdir()
    (tmp_path / "filter" / "kept.csv").write_text("image_id\nn00000001/2.JPEG\nn00000001/3.JPEG\n")
    out = tmp_path / "ladder"
    argv = ["analyze", "ladder", run, "--labels", tmp_path / "classes.csv", "--graph", edges]
    argv += ["--counts", tmp_path / "counts.tsv", "--filter", tmp_path / "filter", "--out", out]
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    printed = capsys.readouterr().out
    assert "| evaluated |" in printed and "ladder.png" in printed
    table = pd.read_csv(out / "ladder.csv")
    assert table["step"].tolist() == [s for s, _ in STEPS]
    flat = json.loads((run / "metrics.json").read_text())["zsl"]["flat"]
    assert table["hit@1"][0] == pytest.approx(flat["1"])  # 11 of 12
    assert table["hit@1"].tolist() == pytest.approx([11 / 12, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert table["classes"].tolist() == [6, 6, 5, 4, 3, 1]
    assert table["images"].tolist() == [12, 12, 10, 8, 6, 2]
    assert json.loads((out / "manifest.json").read_text())["tool"] == "imagenet-zsl analyze ladder"
    assert len(read_cells(run)) == 1
