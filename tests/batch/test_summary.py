"""The run summary on hand-made cells: its columns (the paper table by default, every column in the
CSV), the "seen in pretraining" column and its warning, the hit@1 intervals and their notes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from imagenet_zsl.batch.summary import pretraining_warnings, render_summary, summary_rows, summary_tables
from imagenet_zsl.scoring import bootstrap


def to_markdown(rows, notes=(), columns="all") -> str:
    return render_summary(rows, notes, columns)[0]


def to_csv(rows) -> str:
    return render_summary(rows)[1]


def to_latex(rows, columns="all") -> str:
    return render_summary(rows, (), columns)[2]


def _cell(out: Path, model: str, split: str, pretraining: dict | None) -> dict:
    run = f"cells/{model}__{split}"
    metrics: dict = {"zsl": {"flat": {"1": 0.25}, "per_class": {"1": 0.2}, "flat_strict": {"1": 0.1}}}
    if pretraining is not None:
        metrics["pretraining"] = pretraining
    (out / run).mkdir(parents=True)
    (out / run / "metrics.json").write_text(json.dumps(metrics))
    classes = {"in_split": 4, "evaluated": 4, "excluded": []}
    return {"model": model, "split": split, "run": run, "classes": classes, "status": "ok", "error": None}


def test_seen_in_pretraining_column_and_warning(tmp_path: Path):
    records = [
        _cell(tmp_path, "a", "hop1", {"test_classes_seen": 3, "note": "in1k"}),
        _cell(tmp_path, "a", "benchmark", {"test_classes_seen": 0, "note": "in1k"}),
        _cell(tmp_path, "b", "hop1", None),
        _cell(tmp_path, "c", "hop1", {"test_classes_seen": "unknown (web data)", "note": "clip"}),
    ]
    records.append({**records[0], "model": "d", "status": "failed", "error": "boom"})
    rows = summary_rows(tmp_path, records, [1], gzsl=False)
    assert [r["seen in pretraining"] for r in rows] == ["3", "0", "unknown", "unknown (web data)", "–"]
    table = to_markdown(rows)
    # a, b and c tie on hop1: each value is the split's best (bold); a failed row is never the best
    assert (
        "| unknown | a | hop1 | – | – | 4/4 | **25.00** | – | **20.00** | **10.00** | – | 3 | ok |" in table
    )
    assert (
        "| unknown | b | hop1 | – | – | 4/4 | **25.00** | – | **20.00** | **10.00** | – | unknown | ok |"
        in table
    )
    assert "| unknown | d | hop1 | – | – | 4/4 | – | – | – | – | – | – | failed: boom |" in table
    warning, web = pretraining_warnings(rows)  # none for 0, for unrecorded, for a failed cell
    assert warning.startswith("a on hop1: 3 test classes were labels of the backbone's pretraining")
    assert web == "c on hop1: test classes seen in pretraining: unknown (web data)"
    assert "seen in pretraining" in to_csv(rows).splitlines()[0]
    assert r"seen in pretraining & status \\" in to_latex(rows) and r"{c}{failed}" in to_latex(rows)
    # the paper table (the default) has no such column: the warning says it


def test_provenance_columns_count_as_miss_and_the_legend(tmp_path: Path):
    record = _cell(tmp_path, "a", "hop1", None)
    record["provenance"] = {
        "backbone": "resnet50 @1a2b3c4d",
        "class_vectors": "glove-6b-50d",
        "feature_override": {"allowed": True, "model a": "vit @99999999"},
    }
    record["classes"] = {"in_split": 4, "evaluated": 4, "excluded": [], "missed": ["n1", "n2"]}
    rows = summary_rows(tmp_path, [record], [1], gzsl=False)
    assert rows[0]["backbone"] == "resnet50 @1a2b3c4d (MISMATCH ALLOWED: model fitted on vit @99999999)"
    assert rows[0]["class vectors"] == "glove-6b-50d" and rows[0]["classes"] == "4/4 +2 missed"
    table = to_markdown(rows, ["first note", "second note"])
    assert table.endswith("\n- first note\n- second note\n")
    assert "| resnet50 @1a2b3c4d (MISMATCH ALLOWED: model fitted on vit @99999999) | a | hop1 |" in table
    header = [line for line in to_latex(rows).splitlines() if not line.startswith(("%", "\\"))][0]
    assert header.startswith("Backbone & Model & Split & Class vectors & Label space & Classes & hit@1")


def test_strict_hit_at_every_k_in_the_csv_and_hp_columns(tmp_path: Path):
    record = _cell(tmp_path, "a", "hop1", None)
    metrics = {
        "zsl": {
            "flat": {"1": 0.5, "2": 0.75},
            "per_class": {"1": 0.4},
            "flat_strict": {"1": 0.25, "2": 0.5},
        },
        "hierarchical_precision": {"flat": {"1": 0.5, "2": 0.625}},
    }
    (tmp_path / record["run"] / "metrics.json").write_text(json.dumps(metrics))
    rows = summary_rows(tmp_path, [record], [1, 2], gzsl=False)
    header = to_csv(rows).splitlines()[0].split(",")
    assert header[6:13] == [
        "hit@1",
        "hit@2",
        "hit@1 95% CI",
        "per-class hit@1",
        "strict hit@1",
        "strict hit@2",
        "hP@2",
    ]
    assert to_csv(rows).splitlines()[1].split(",")[6:13] == [
        "50.0",
        "75.0",
        "–",
        "40.0",
        "25.0",
        "50.0",
        "62.5",
    ]
    paper = to_markdown(rows, columns=None)  # the paper table: no strict or hP column
    assert paper.startswith("| model | split | label space | hit@1 [95% CI] | hit@2 |\n")
    assert "strict hit@" not in to_latex(rows, columns=None).split("\\begin{tabular}")[1]
    strict = to_markdown(rows, columns="paper,strict")
    assert strict.startswith(
        "| model | split | label space | hit@1 [95% CI] | hit@2 | strict hit@1 | strict hit@2 |"
    )


def test_gzsl_columns_are_per_image_as_chao_et_al_score_imagenet(tmp_path: Path):
    record = _cell(tmp_path, "a", "hop1", None)
    point = {"seen": 0.8, "unseen": 0.2, "H": 0.32, "ausuc": 0.1}
    metrics = {
        "zsl": {"flat": {"1": 0.5}, "per_class": {"1": 0.4}, "flat_strict": {"1": 0.25}},
        "gzsl": {
            "flat": {"1": point},
            "per_class": {"1": {"seen": 0.6, "unseen": 0.4, "H": 0.48, "ausuc": 0.2}},
            "calibration": {"k": 1, "test": {"flat": {"1": {"H": 0.5}}, "per_class": {"1": {"H": 0.45}}}},
        },
    }
    (tmp_path / record["run"] / "metrics.json").write_text(json.dumps(metrics))
    row = summary_rows(tmp_path, [record], [1], gzsl=True)[0]
    assert (row["GZSL U"], row["GZSL S"], row["GZSL H"], row["AUSUC (per image)"]) == (0.2, 0.8, 0.32, 0.1)
    assert row["calibrated H"] == 0.5 and row["calibrated H (per class)"] == 0.45
    assert (row["GZSL U (per class)"], row["AUSUC (per class)"]) == (0.4, 0.2)
    paper = to_markdown([row], columns=None)
    assert paper.startswith("| model | split | label space | hit@1 [95% CI] | GZSL U | GZSL S | GZSL H |\n")
    assert "| a | hop1 | – | 50.00 | 20.00 | 80.00 | 32.00 |" in paper
    assert "(per class)" not in paper.splitlines()[0] and "AUSUC (per class)" in to_csv([row])


def _topk(out: Path, record: dict, labels, above, tied, misses=None, classes: int = 3) -> None:
    """A cell's stored true-class ranks (what the bootstrap reads) and label space."""
    topk = out / record["run"] / "topk"
    topk.mkdir()
    for name, values in (("labels", labels), ("true_above", above), ("true_tied", tied)):
        np.save(topk / f"test.{name}.npy", np.asarray(values, dtype=np.int32))
    space = {"unseen": [f"n{i}" for i in range(classes)], "count_as_miss": misses or {}}
    (topk / "classes.json").write_text(json.dumps(space))
    metrics = json.loads((out / record["run"] / "metrics.json").read_text())
    metrics["label_space"] = {
        "spec": "split",
        "classes_in_label_space": classes,
        "classes_with_test_images": classes,
    }
    (out / record["run"] / "metrics.json").write_text(json.dumps(metrics))


def test_bootstrap_interval_and_not_significant_pairs(tmp_path: Path):
    # 12 classes of 2 images; good (and twin, the same scores) miss both images of class 11
    labels = np.repeat(np.arange(12), 2).tolist()
    good, wrong = [0] * 22 + [5, 5], [5] * 24
    records = [_cell(tmp_path, m, "hop1", None) for m in ("good", "twin", "bad")]
    _topk(tmp_path, records[0], labels, good, [0] * 24, classes=12)
    _topk(tmp_path, records[1], labels, good, [0] * 24, classes=12)  # the same scores as good
    _topk(tmp_path, records[2], labels, wrong, [0] * 24, classes=12)
    other = _cell(tmp_path, "good", "hop2", None)  # another split: never paired with hop1
    _topk(tmp_path, other, [0, 0, 1, 1, 2, 2], [0, 0, 0, 0, 0, 1], [0] * 6)
    rows = summary_rows(tmp_path, [*records, other], [1], gzsl=False)
    # good: 22/24; a resample without class 11 scores 1 (probability (11/12)^12 = 0.35), one with
    # it k times 1 - k/12 (BCa reaches into that long lower tail); bad misses every image: nothing
    # varies, no (zero-width) interval
    rows, _, notes = summary_tables(tmp_path, [*records, other], [1], gzsl=False)
    low, high = (float(v) for v in rows[0]["hit@1 95% CI"].strip("[]").split(", "))
    assert 50.0 <= low < 100 * 22 / 24 < high == 100.0 and rows[1]["hit@1 95% CI"] == rows[0]["hit@1 95% CI"]
    assert rows[2]["hit@1 95% CI"] == "n/a (no spread)"  # bad misses every image: nothing varies
    assert [r["n.s. vs"] for r in rows[:3]] == ["twin", "good", "none"]
    assert rows[0]["label space"] == "split 12"
    # hop2: 3 classes are too few to resample: no interval (and no other model to compare with)
    assert rows[3]["hit@1 95% CI"] == "n/a (3 classes)" and rows[3]["n.s. vs"] == "–"
    assert notes[0].startswith("hop1, bad: no hit@1 interval: every resample scores 0.0000")
    assert notes[1].startswith("hop2: no hit@1 interval: 3 test classes (6 images): too few to resample")
    # fewer than 100 classes (hop1's 12; hop2 has no interval at all): the bootstrap's caveat, once
    assert notes[2:] == ["hop1: " + bootstrap.FEW_CLASSES_NOTE]
    table = to_markdown(rows, notes)
    assert (
        "| hit@1 95% CI | per-class hit@1 |" in table
        and "| n.s. vs | seen in pretraining | status |" in table
    )
    assert f"hit@1 95% CI: {bootstrap.INTERVAL_TEXT}" in table and "percentile" not in table
    paper = to_markdown(rows, notes, columns=None)  # hit@1 from metrics.json (0.25 in every cell)
    assert "| good | hop1 | split 12 | **25.00** [" in paper
    assert "| bad | hop1 | split 12 | **25.00** |" in paper  # no interval: the value alone, the note says why
    assert r"hit@1 95\% CI & per-class hit@1" in to_latex(rows)


def test_count_as_miss_images_enter_the_bootstrap_without_credit(tmp_path: Path):
    record = _cell(tmp_path, "a", "hop1", None)
    _topk(tmp_path, record, list(range(11)), [0] * 11, [0] * 11, misses={"n99": 3}, classes=11)
    row = summary_rows(tmp_path, [record], [1], gzsl=False)[0]
    low, high = (float(v) for v in row["hit@1 95% CI"].strip("[]").split(", "))
    # 12 classes, each of 1 image (right) except n99 (3 images, wrong): the point estimate is
    # 11/14; without n99 every class would be right and nothing would vary (no interval)
    assert 0.0 <= low < 100 * 11 / 14 < high <= 100.0


def _plot_rows(splits: int, models: tuple[str, ...]) -> list[dict]:
    rows = []
    for s in range(splits):
        for i, model in enumerate(models):
            hits = {f"hit@{k}": min(1.0, 0.1 * (i + 1) * k**0.5) for k in (1, 2, 5, 10, 20)}
            if s == 2 and i == 1:
                hits["hit@20"] = None  # a value the cell lacks: a gap, not 0
            rows.append({"model": model, "split": f"split{s}", "status": "ok", **hits})
    rows[1]["status"] = "failed: boom"  # ESZSL fails on split0: the others keep their colours
    return rows


def test_hit_at_k_plot_one_colour_per_model_in_a_grid_with_the_legend_outside(tmp_path: Path):
    from imagenet_zsl.batch.summary import hit_at_k_figure, plot_hit_at_k

    models = ("trivial", "eszsl", "conse")
    rows = _plot_rows(8, models)
    fig = hit_at_k_figure(rows, [1, 2, 5, 10, 20])
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 9 and len(axes) == 8  # 3 x 3 grid, the last panel hidden
    assert len({round(ax.get_position().x0, 3) for ax in axes}) == 3  # three columns
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == list(models)
    texts = [t.get_text() for t in legend.get_texts()]
    handle_colour = {m: h.get_color() for m, h in zip(texts, legend.legend_handles, strict=True)}
    assert all(ax.get_legend() is None for ax in axes)
    # split0 has 2 lines (eszsl failed): its first two lines are trivial's and conse's colours
    first = axes[0].get_lines()
    assert [line.get_color() for line in first] == [handle_colour["trivial"], handle_colour["conse"]]
    for ax in axes[1:]:
        assert [line.get_color() for line in ax.get_lines()] == [handle_colour[m] for m in models]
    assert np.isnan(axes[2].get_lines()[1].get_ydata()[-1])
    # the legend lies right of every panel
    fig.canvas.draw()
    legend_box = legend.get_window_extent()
    assert all(ax.get_window_extent().x1 <= legend_box.x0 for ax in axes)
    four = hit_at_k_figure(_plot_rows(4, models), [1, 2, 5, 10, 20])
    assert len(four.axes) == 4 and len({round(ax.get_position().x0, 3) for ax in four.axes}) == 2
    path = plot_hit_at_k(rows, [1, 2, 5, 10, 20], tmp_path / "hit_at_k.png")
    assert path.stat().st_size > 0


def test_a_cell_without_usable_lists_gets_no_interval(tmp_path: Path):
    records = [_cell(tmp_path, m, "hop1", None) for m in ("a", "b", "c")]
    _topk(tmp_path, records[0], [0, 1, 2], [0, 0, 0], [0, 0, 0])
    _topk(tmp_path, records[1], [0, 1, 5], [0, 0, 0], [0, 0, 0])  # a label outside its space
    rows = summary_rows(tmp_path, records, [1], gzsl=False)  # c has no topk/ at all
    assert [r["hit@1 95% CI"] for r in rows] == ["n/a (3 classes)", "–", "–"]  # too few to resample
    assert [r["n.s. vs"] for r in rows] == ["–", "–", "–"]  # a is alone in its group: no pair at all


def test_the_run_writes_one_result_record_per_cell_and_report_merges_them(demo_run, tmp_path):
    """#47 §2: ``results/BACKBONE__MODEL__SPLIT.json`` per finished cell, with the protocol in it,
    listed in the run's manifest; ``report`` on the run directory gives the run's own rows."""
    manifest = json.loads((demo_run / "manifest.json").read_text())
    files = sorted((demo_run / "results").glob("*.json"))
    assert len(files) == len(manifest["cells"]) == 10
    listed = {entry["path"] for entry in manifest["files"]}
    assert {f"results/{f.name}" for f in files} <= listed
    backbone = manifest["cells"][0]["provenance"]["backbone"]  # SIMULATED @<digest>
    name = backbone.replace(" @", "-")
    record = json.loads((demo_run / "results" / f"{name}__eszsl__hop1.json").read_text())
    protocol = record["protocol"]
    # hop1's 15 classes, 3 of them without a GloVe vector: dropped for every model (conftest)
    assert protocol["label_space"] == {
        "name": "split",
        "size": 12,
        "full": 15,
        "without_vector": 3,
        "missing_semantics": "drop",
        "text": "split−vec 12",
    }
    assert protocol["ks"] == [1, 2, 5, 10, 20] and protocol["images"] == 36  # 12 classes x 3 images
    assert protocol["classes"] == {
        "in_split": 15,
        "evaluated": 12,
        "with_test_images": 12,
        "count_as_miss": 0,
    }
    assert protocol["features"]["simulated"] and protocol["features"]["weights_sha256"] is None
    assert len(protocol["features"]["identity_sha256"]) == 64 and protocol["software"]["imagenet-zsl"]
    assert protocol["gzsl"]["calibration"]["seed"] == 0 and protocol["seed"] == {"bootstrap": 0}
    cell = json.loads((demo_run / "cells" / "eszsl__hop1" / "metrics.json").read_text())
    assert record["metrics"]["hit@1"] == cell["zsl"]["flat"]["1"]
    assert record["metrics"]["validation H"] == cell["gzsl"]["calibration"]["validation_H"]
    assert record["interval"]["method"] == bootstrap.INTERVAL_TEXT and record["interval"]["low"] is not None
    # report reads the run's records: the run's own rows, intervals and verdicts
    from imagenet_zsl.cli import main

    assert main(["report", str(demo_run), "--out", str(tmp_path / "t.md"), "--columns", "all"]) == 0
    with (tmp_path / "t.csv").open() as handle, (demo_run / "summary.csv").open() as run_handle:
        ours, runs = list(csv.DictReader(handle)), list(csv.DictReader(run_handle))
    for a, b in zip(sorted(ours, key=_cell_key), sorted(runs, key=_cell_key), strict=True):
        assert a == b, {k: (a[k], b[k]) for k in a if a[k] != b[k]}  # report sorts by split, run by model


def _cell_key(row: dict) -> tuple[str, str]:
    return row["split"], row["model"]


def test_run_prints_the_columns_asked_for_and_refuses_a_typo_before_any_work(
    demo_inputs, demo_run, tmp_path, capsys
):
    import shutil

    from imagenet_zsl.cli import main

    out = tmp_path / "run"
    shutil.copytree(demo_run, out)  # every cell finished: only the summary is written again
    capsys.readouterr()
    argv = ["run", str(demo_inputs.recipe), "--out", str(out), "--no-progress"]
    assert main([*argv, "--columns", "paper,strict"]) == 0
    printed = capsys.readouterr().out
    header = (
        "| model | split | label space | hit@1 [95% CI] | hit@2 | hit@5 | hit@10 | hit@20 | strict hit@1 |"
    )
    assert header in printed and header in (out / "summary.md").read_text()
    assert "| GZSL H | strict GZSL U | strict GZSL S | strict GZSL H |" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["columns"] == "paper,strict"
    assert (out / "summary.csv").read_text() == (demo_run / "summary.csv").read_text()  # every column
    typo = tmp_path / "typo"
    assert main(["run", str(demo_inputs.recipe), "--out", str(typo), "--columns", "strict hit1"]) == 2
    assert "did you mean 'strict hit@1'" in capsys.readouterr().err and not typo.exists()


def test_an_incomplete_published_list_is_marked_in_the_run_table_and_never_comparable(tmp_path: Path):
    """#48 §3: test features holding 20 of dgp-2hops' 1,549 classes (2 images each): the run
    counts the copy it holds against the whole list, its row's label space says "20 of 1,549
    held", a line under the table says so, and no published row of the split is comparable (each
    names the classes the copy lacks)."""
    from imagenet_zsl.batch.summary import coverage_notes, split_coverage
    from imagenet_zsl.splits.named import PUBLISHED_SPLITS, read_published_split
    from tests.evaluation.evaluation_fixtures import write_feature_dir

    published = PUBLISHED_SPLITS["dgp-2hops"]
    wnids = read_published_split("dgp-2hops")
    held = wnids[:20]
    labels = np.repeat(np.arange(20), 2)
    features = write_feature_dir(
        tmp_path / "test", labels, np.eye(20, dtype=np.float32)[labels], classes=held
    )
    coverage = split_coverage({"dgp-2hops": wnids}, {"dgp-2hops": published.path}, lambda split: features)
    found = coverage["dgp-2hops"]
    assert {k: found[k] for k in ("classes", "held", "images", "complete")} == {
        "classes": 1549,
        "held": 20,
        "images": 40,
        "complete": False,
    }
    assert found["split_sha256"] == published.sha256 and found["missing"] == wnids[20:]
    (note,) = coverage_notes(coverage)
    assert note.startswith("your copy of dgp-2hops: 20 of 1,549 classes held, 40 test images; incomplete")
    record = _cell(tmp_path, "mine", "dgp-2hops", None)
    record["label_space"] = {"name": "split", "size": 1549, "full": 1549, "without_vector": 0}
    record["coverage"] = {k: v for k, v in found.items() if k != "missing"}
    rows, results, notes = summary_tables(tmp_path, [record], [1], gzsl=False)
    assert rows[0]["label space"] == "split 1,549 (20 of 1,549 held)"
    assert results[0]["protocol"]["coverage"]["held"] == 20
    md = render_summary(rows, notes, None, published=results)[0]
    assert "| mine | dgp-2hops | split 1,549 (20 of 1,549 held) |" in md
    theirs = [
        line
        for line in md.splitlines()
        if "hascoet2019zero Table 1 (quoting kampffmeyer2018rethinking)" in line
    ]
    assert len(theirs) == 2  # GCNZ and ADGPM on the 2-hops list, as Hascoet et al. quote them
    assert all(
        "| no |" in line and "your copy holds 20 of 1,549 classes of the list" in line for line in theirs
    )
    assert "| yes |" not in md
