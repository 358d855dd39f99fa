"""``keep_without_prototype`` (``run``'s ``missing_semantics: keep``; review of #45 §2): classes the
model has no prototype for stay in the label space as classes it never predicts. metrics.json
counts them (the record's size, 20,842 for All), the search ranks the others, and every hit@K is
the one of the space without them (a class never predicted never outranks one)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import imagenet_zsl.splits.label_space as label_space
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.evaluation.run import classes as classes_module
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM, SEEN, TEST, VAL


def test_kept_classes_count_in_the_space_and_change_no_rank(bench, tmp_path, monkeypatch):
    # the universe: the 10 toy classes and n00000099, which has no prototype; seen: SEEN
    monkeypatch.setattr(label_space, "universe_wnids", lambda: [*CLASSES, "n00000099"])
    monkeypatch.setattr(classes_module, "training_wnids", lambda: list(SEEN))
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(tmp_path / "p.npz")
    runs = {}
    for keep in (False, True):
        cfg = EvaluationConfig(
            features=bench["features"],
            split=bench["split"],
            out=tmp_path / f"keep_{keep}",
            prototypes=tmp_path / "p.npz",
            ks=[1, 2, 5],
            label_frequency=False,
            plots=False,
            label_space="all",
            count_as_miss=[TEST[5]],
            keep_without_prototype=keep,
        )
        runs[keep] = evaluate(cfg, graph="none", progress=False)
    left, kept = runs[False], runs[True]
    # by hand: the space is TEST + VAL + n00000099 = 9 classes. Left out: n00000099 (no prototype)
    # and TEST[5] (a miss) are not in it: 7. Kept: all 9, two of them never predicted
    assert left["label_space"]["classes_in_label_space"] == left["zsl"]["classes_in_label_space"] == 7
    assert kept["label_space"]["classes_in_label_space"] == kept["zsl"]["classes_in_label_space"] == 9
    assert kept["label_space"]["without_prototype"] == {
        "classes": 1,
        "wnids": ["n00000099"],
        "kept_never_predicted": True,
    }
    assert "kept_never_predicted" not in left["label_space"]["without_prototype"]
    # distractors without test images: VAL's 2, and n00000099 when kept
    assert left["label_space"]["distractors_without_test_images"] == 2
    assert kept["label_space"]["distractors_without_test_images"] == 3
    # the same ranks: 18 images, TEST[5]'s 3 and the planted one miss at hit@1
    for block in ("flat", "flat_strict", "per_class"):
        assert kept["zsl"][block] == left["zsl"][block]
    assert kept["zsl"]["flat"]["1"] == pytest.approx(14 / 18)
    # the top-k lists hold only the classes the model can predict
    listed = json.loads((tmp_path / "keep_True" / "topk" / "classes.json").read_text())["unseen"]
    assert listed == TEST[:5] + VAL
    report = (tmp_path / "keep_True" / "report.md").read_text()
    assert "stayed in the label space, never predicted (no prototype): 1 classes" in report
