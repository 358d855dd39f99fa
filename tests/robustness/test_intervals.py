"""Issue #44 §2: a single test image (or too few classes to resample) printed a zero-width 95% CI
and a "significant" verdict in the `run` summary. No interval and no verdict can be read from one
class: the bootstrap gives none and says why, and the summary shows neither a zero-width interval
nor a significant difference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from imagenet_zsl.batch.summary import summary_rows
from imagenet_zsl.scoring import bootstrap


def _cell(out: Path, model: str, labels: list[int], above: list[int]) -> dict:
    """A finished cell of split hop1 with its stored true-class ranks (what the bootstrap reads)."""
    run = f"cells/{model}__hop1"
    topk = out / run / "topk"
    topk.mkdir(parents=True)
    metrics = {"zsl": {"flat": {"1": float(np.mean(np.asarray(above) == 0))}}}
    (out / run / "metrics.json").write_text(json.dumps(metrics))
    for name, values in (("labels", labels), ("true_above", above), ("true_tied", [0] * len(labels))):
        np.save(topk / f"test.{name}.npy", np.asarray(values, dtype=np.int32))
    (topk / "classes.json").write_text(json.dumps({"unseen": ["n0", "n1", "n2"], "count_as_miss": {}}))
    classes = {"in_split": 3, "evaluated": 3, "excluded": []}
    return {"model": model, "split": "hop1", "run": run, "classes": classes, "status": "ok", "error": None}


def test_a_single_test_image_prints_no_zero_width_interval_and_no_verdict(tmp_path: Path):
    # one test image: model "right" ranks its class first, model "wrong" does not
    records = [_cell(tmp_path, "right", [1], [0]), _cell(tmp_path, "wrong", [1], [4])]
    rows = summary_rows(tmp_path, records, [1], gzsl=False)
    for row in rows:  # was [100.00, 100.00] and "none" (every difference "significant")
        assert row["hit@1 95% CI"] == row["n.s. vs"] == "n/a (1 class)"
    # the bootstrap itself: no interval, no verdict, and why
    boot = bootstrap.paired_bootstrap(np.array([[1.0], [0.0]]), np.array([1]))
    assert np.isnan(boot.low).all() and boot.verdict(0, 1) == boot.verdict(1, 0) == "n/a"
    least = bootstrap.MIN_CLASSES
    assert (
        boot.why_not(0)
        == f"1 test class (1 images): too few to resample (an interval needs at least {least} classes)"
    )


def test_three_classes_are_too_few_to_resample(tmp_path: Path):
    """Three classes of two images each: 10 distinct resamples; the old percentile interval of the
    model right on every image was [100.00, 100.00] and the pair "significant"."""
    labels = [0, 0, 1, 1, 2, 2]
    records = [_cell(tmp_path, "right", labels, [0] * 6), _cell(tmp_path, "wrong", labels, [3] * 6)]
    rows = summary_rows(tmp_path, records, [1], gzsl=False)
    assert [(r["hit@1 95% CI"], r["n.s. vs"]) for r in rows] == [("n/a (3 classes)", "n/a (3 classes)")] * 2
    boot = bootstrap.paired_bootstrap(np.array([[2.0, 2, 2], [0, 0, 0]]), np.array([2, 2, 2]))
    assert boot.verdict(0, 1) == "n/a" and "3 test classes (6 images): too few to resample" in boot.reason
