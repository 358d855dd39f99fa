"""One self-describing JSON record per (backbone, model, split), as CLIP_benchmark writes them
(#47 §2): the protocol in it, and ``report`` merging records of many runs and machines into one
table; the same row twice is reported once, or refused when its numbers differ."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.evaluation.report import report_rows
from imagenet_zsl.evaluation.result_records import RESULT_FORMAT, result_file_name, result_record
from imagenet_zsl.evaluation.run.verify import load_metrics
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM
from tests.evaluation.test_report import run_cli


@pytest.fixture
def two_runs(bench, tmp_path) -> tuple[Path, Path]:
    """The bench scored by its own prototypes (17/18 right) and by prototypes with test classes
    2 and 3 swapped (their 6 images wrong: 11/18)."""
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[[2, 3]] = matrix[[3, 2]]
    ClassVectors(CLASSES, matrix).save(tmp_path / "swapped.npz")
    run_cli(bench, tmp_path / "good", bench["protos"])
    run_cli(bench, tmp_path / "bad", tmp_path / "swapped.npz")
    return tmp_path / "good", tmp_path / "bad"


def _write(path: Path, record: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_a_run_is_one_record_with_its_protocol(two_runs):
    good, _ = two_runs
    metrics = load_metrics(good)
    record = result_record(metrics)
    assert record["format"] == RESULT_FORMAT and (record["model"], record["split"]) == ("protos", "split")
    protocol = record["protocol"]
    assert protocol["label_space"] == {
        "name": "split",
        "size": 6,
        "full": 6,
        "without_vector": 0,
        "missing_semantics": None,
        "text": "split 6",
    }
    assert protocol["hit_rule"]["headline"] == "expected" and "r + t < K" in protocol["hit_rule"]["strict"]
    assert protocol["ks"] == [1, 2] and protocol["images"] == 18
    assert protocol["classes"] == {"in_split": 6, "evaluated": 6, "with_test_images": 6, "count_as_miss": 0}
    assert protocol["seed"] == {"bootstrap": 0} and protocol["gzsl"] is None
    assert protocol["software"]["numpy"] == np.__version__
    identity = metrics["provenance"]["features"]["identity"]
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    assert protocol["features"]["identity_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert protocol["features"]["weights_sha256"] == identity.get("weights_sha256")
    assert protocol["split"]["sha256"] == metrics["inputs"]["split"]["sha256"]
    assert record["metrics"]["hit@1"] == pytest.approx(17 / 18)
    assert record["metrics"]["strict hit@2"] == pytest.approx(17 / 18)
    assert result_file_name(record) == "unknown__protos__split.json"
    assert result_file_name(record, "vit b/16") == "vit-b-16__protos__split.json"


def test_report_merges_records_of_many_runs_and_machines(two_runs, tmp_path, capsys):
    good, bad = two_runs
    first = result_record(load_metrics(good))
    second = result_record(load_metrics(bad))
    machine_a = _write(tmp_path / "a" / "results" / "unknown__protos__split.json", first)
    _write(tmp_path / "b" / "unknown__swapped__split.json", second)
    # machine b ran protos too, under other package versions: the same row, the same numbers
    again = {**first, "protocol": {**first["protocol"], "software": {"numpy": "0.0"}}}
    _write(tmp_path / "b" / "unknown__protos__split.json", again)
    rows, notes = report_rows([tmp_path / "a", tmp_path / "b"])
    assert [(r["model"], r["hit@1"]) for r in rows] == [("protos", 17 / 18), ("swapped", 11 / 18)]
    assert len(notes) == 1 and "protos on split (unknown) given twice, reported once" in notes[0]
    out = tmp_path / "merged.md"
    assert main(["report", str(machine_a), str(tmp_path / "b"), "--out", str(out)]) == 0
    md = out.read_text()
    assert "| protos | split | split 6 | **94.44** |" in md and "| swapped | split | split 6 | 61.11 |" in md
    assert "given twice, reported once" in md
    # a record and the run directory it came from: one row as well
    rows, _ = report_rows([good, machine_a])
    assert len(rows) == 1


def test_the_same_row_with_other_numbers_is_refused_naming_both(two_runs, tmp_path, capsys):
    good, _ = two_runs
    record = result_record(load_metrics(good))
    one = _write(tmp_path / "a" / "protos.json", record)
    other = {**record, "metrics": {**record["metrics"], "hit@1": 0.5}}
    two = _write(tmp_path / "b" / "protos.json", other)
    assert main(["report", str(one), str(two), "--out", str(tmp_path / "t.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {two} and {one}: the same row (protos on split")
    assert "different results (hit@1: 0.9444444444444444 vs 0.5)" in err and len(err.splitlines()) == 1


def test_a_file_that_is_not_a_record_is_one_line(tmp_path, capsys):
    other = _write(tmp_path / "other.json", {"format": "imagenet-zsl/run-cell-v1"})
    assert main(["report", str(other), "--out", str(tmp_path / "t.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {other}: not a result record (format 'imagenet-zsl/run-cell-v1'")
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "t.md")]) == 2
    assert "no metrics.json and no result records" in capsys.readouterr().err


def test_the_label_space_of_an_evaluate_run_is_named_with_its_size():
    """evaluate --label-space all with a word-vector model: the classes without a vector left the
    space (metrics.json's ``without_prototype``): All 20,842 less 1,917 is printed All−vec 18,925."""
    from imagenet_zsl.evaluation.result_records import label_space_of

    block = {"spec": "all", "classes_in_label_space": 18925, "without_prototype": {"classes": 1917}}
    space = label_space_of({"label_space": block})
    assert (space["full"], space["size"], space["text"]) == (20842, 18925, "All−vec 18,925")
    kept = label_space_of({"label_space": {**block, "without_prototype": {"classes": 0}}})
    assert kept["text"] == "All 18,925"
    listed = label_space_of({"label_space": {"spec": "/x/my_space.txt", "classes_in_label_space": 1200}})
    assert listed["text"] == "my_space 1,200"
    given = {"name": "all", "full": 20842, "size": 20842, "without_vector": 1917, "missing_semantics": "keep"}
    assert label_space_of({}, given)["text"] == "All 20,842"  # run's keep: the literature's 20,842
