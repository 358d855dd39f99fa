import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import plots
from imagenet_zsl.evaluation.report import aggregate_runs, record_row
from imagenet_zsl.evaluation.result_records import result_record
from imagenet_zsl.scoring import gzsl_from_scores, seen_unseen_curve
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM


def run_cli(bench, out, protos, *extra):
    rc = main(
        [
            "evaluate",
            "--features",
            str(bench["features"]),
            "--split",
            str(bench["split"]),
            "--prototypes",
            str(protos),
            "--k",
            "1",
            "2",
            "--graph",
            "none",
            "--no-label-frequency",
            "--out",
            str(out),
            *extra,
        ]
    )
    assert rc == 0


def test_report_aggregates_runs_into_md_csv_tex(bench, tmp_path):
    # a worse model: prototypes of test classes 2 and 3 swapped -> their 6 images are wrong
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[[2, 3]] = matrix[[3, 2]]
    ClassVectors(CLASSES, matrix).save(tmp_path / "swapped.npz")
    run_cli(bench, tmp_path / "good", bench["protos"], "--gzsl", "--seen-features", str(bench["seen"]))
    run_cli(bench, tmp_path / "bad", tmp_path / "swapped.npz")

    table = aggregate_runs([tmp_path / "bad", tmp_path / "good"])
    assert table["model"].tolist() == ["protos", "swapped"]  # sorted by split, then model
    assert table["hit@1"].tolist() == pytest.approx([17 / 18, 11 / 18])
    assert np.isnan(table.loc[1, "GZSL H"]) and table.loc[0, "GZSL H"] == pytest.approx(34 / 35)

    assert (
        main(["report", str(tmp_path / "good"), str(tmp_path / "bad"), "--out", str(tmp_path / "table.md")])
        == 0
    )
    md = (tmp_path / "table.md").read_text()
    # the paper table; 6 test classes are too few for an interval (the note says so); the best of
    # the split in bold; the run without GZSL has none
    assert (
        md.splitlines()[1]
        == "| model | split | label space | hit@1 [95% CI] | hit@2 | GZSL U | GZSL S | GZSL H |"
    )
    assert "| protos | split | split 6 | **94.44** | **95.56** | **94.44** | **100.00** | **97.14** |" in md
    assert "| swapped | split | split 6 | 61.11 | 68.89 | – | – | – |" in md
    assert "- split: no hit@1 interval: 6 test classes (18 images): too few to resample" in md
    assert "backbone (every row): unknown; class vectors: protos.npz (protos); swapped.npz (swapped)" in md
    csv = pd.read_csv(tmp_path / "table.csv")
    assert csv["hit@1"].tolist() == pytest.approx([94.4444, 61.1111])
    assert csv["hit@1 95% CI"].tolist() == ["n/a (6 classes)"] * 2 and "strict GZSL H" in csv.columns
    tex = (tmp_path / "table.tex").read_text()
    assert r"\toprule" in tex and r"\textbf{94.44}" in tex and "hit@2" in tex


def _set_backbone(features, name: str, weights: str) -> None:
    path = features / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["backbone"] = {"name": name, "weights": {"sha256": weights}}
    path.write_text(json.dumps(manifest))


def test_report_merges_runs_of_different_backbones_each_row_naming_its_own(bench, tmp_path):
    """Issue 34 §2: runs of two backbones, each consistent within itself, are one table with the
    backbone column telling them apart; only a run whose own evaluation allowed a mismatch is marked."""
    _set_backbone(bench["features"], "resnet50", "aa11bb22cc33")
    run_cli(bench, tmp_path / "resnet", bench["protos"])
    _set_backbone(bench["features"], "vit_b_16", "ff00ee11")
    run_cli(bench, tmp_path / "vit", bench["protos"])
    run_cli(bench, tmp_path / "vit2", bench["protos"], "--l2-normalize")

    table = aggregate_runs([tmp_path / "vit", tmp_path / "resnet", tmp_path / "vit2"])
    assert sorted(table["backbone"]) == ["resnet50 @aa11bb22", "vit_b_16 @ff00ee11", "vit_b_16 @ff00ee11"]
    assert table["class vectors"].tolist() == ["protos.npz"] * 3
    out = tmp_path / "t.md"
    argv = ["report", str(tmp_path / "resnet"), str(tmp_path / "vit"), str(tmp_path / "vit2")]
    assert main([*argv, "--out", str(out)]) == 0
    md = out.read_text()
    assert md.splitlines()[1].startswith("| backbone | model | split | label space |")  # several: a column
    assert "| resnet50 @aa11bb22 |" in md and "| vit_b_16 @ff00ee11 |" in md and "[mismatch]" not in md
    metrics_path = tmp_path / "vit2" / "metrics.json"  # as evaluate --allow-feature-mismatch records it
    metrics = json.loads(metrics_path.read_text())
    metrics["provenance"]["feature_mismatch"] = [{"allowed": True, "differ": ["backbone"]}]
    row = record_row(result_record(metrics))
    assert row["backbone"] == "vit_b_16 @ff00ee11 [mismatch]"


def test_report_rejects_a_directory_without_metrics(tmp_path, capsys):
    with pytest.raises(UserInputError, match="no metrics.json"):
        aggregate_runs([tmp_path])
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "t.md")]) == 2
    assert "error:" in capsys.readouterr().err


def test_plots_render(tmp_path):
    """The run's figures are SVG documents drawn from the numbers: each point and bar where its
    value puts it, every label written, the same bytes for the same data."""
    import xml.etree.ElementTree as ET

    svg = "{http://www.w3.org/2000/svg}"
    zsl = {"flat": {"1": 0.2, "2": 0.3, "5": 0.5}, "per_class": {"1": 0.1, "2": 0.3, "5": 0.4}}
    plots.plot_hit_curve(zsl, tmp_path / "hit.svg", "model & <split>")
    hit = ET.parse(tmp_path / "hit.svg").getroot()
    texts = [t.text for t in hit.iter(f"{svg}text")]
    assert "model & <split>" in texts and {"1", "2", "5", "flat (per image)", "per-class mean"} <= set(texts)
    flat, per_class = (line.get("points").split() for line in hit.iter(f"{svg}polyline"))
    ys = [float(p.split(",")[1]) for p in flat]
    # y pixels are linear in hit@K: 20 % -> 30 % -> 50 % rise by 10 then 20 units
    assert ys[0] > ys[1] > ys[2] and (ys[1] - ys[2]) == pytest.approx(2 * (ys[0] - ys[1]), abs=0.02)
    assert float(per_class[1].split(",")[1]) == pytest.approx(ys[1], abs=0.01)  # both 30 % at K=2
    scores = np.random.default_rng(0).random((50, 6)).astype(np.float32)
    labels = np.r_[np.arange(25) % 3, 3 + np.arange(25) % 3]
    gz = gzsl_from_scores(scores, labels, np.arange(6) >= 3, m=3)
    curve = seen_unseen_curve(gz, 1)
    plots.plot_suc({"hit@1": curve}, tmp_path / "suc.svg", {"hit@1": curve.at(0.0)}, {"hit@1": curve.at(0.1)})
    suc = ET.parse(tmp_path / "suc.svg").getroot()
    assert f"hit@1 (AUSUC {100 * curve.ausuc:.1f})" in [t.text for t in suc.iter(f"{svg}text")]
    assert len(next(suc.iter(f"{svg}polyline")).get("points").split()) == len(curve.unseen) + 1
    breakdown = {
        "counts": {"correct": 3, "parent": 1, "unrelated": 2, "not_in_graph": 0},
        "shares": {"correct": 0.5, "parent": 1 / 6, "unrelated": 1 / 3, "not_in_graph": 0.0},
        "strict_top1": 0.5,
        "semantic_lower_bound": 2 / 3,
        "semantic_upper_bound": 2 / 3,
    }
    first = plots.plot_error_breakdown(breakdown, tmp_path / "err.svg").read_bytes()
    err = ET.parse(tmp_path / "err.svg").getroot()
    bars = [
        r for r in err.iter(f"{svg}rect") if r.get("fill", "").startswith("#") and r.get("fill") != "#fff"
    ]
    heights = [float(r.get("height")) for r in bars]
    assert len(heights) == 3 and heights[0] == pytest.approx(3 * heights[1], abs=0.02)  # 50 % vs 1/6
    assert {"50.0", "16.7", "33.3", "correct", "parent", "unrelated"} <= {
        t.text for t in err.iter(f"{svg}text")
    }
    assert "not_in_graph" not in {t.text for t in err.iter(f"{svg}text")}  # an empty category is not drawn
    assert plots.plot_error_breakdown(breakdown, tmp_path / "again.svg").read_bytes() == first


def test_report_replaces_only_its_own_tables(tmp_path: Path) -> None:
    from imagenet_zsl.evaluation.report import is_report_output

    own = [
        (".md", "<!-- imagenet-zsl report -->\n"),
        (".md", "| model | split | backbone | class vectors | label space | features | hit@1 |\n"),  # before
        (".md", "| split | model | backbone |\n"),  # written before the run's column order
        (".csv", "backbone,model,split,class vectors,label space,classes,hit@1\n"),
        (".csv", "model,split,backbone,class vectors,label space,features,hit@1\n"),
        (".csv", "split,model,backbone\n"),
        (".tex", "% imagenet-zsl report table: needs \\usepackage{booktabs}\n"),
        (".tex", "\\begin{tabular}{ll}\n"),
    ]
    for suffix, first in own:
        path = tmp_path / f"table{suffix}"
        path.write_text(first + "rest\n")
        assert is_report_output(path)
        path.write_text("my notes\n" + first)  # a file someone else wrote
        assert not is_report_output(path)
    other = tmp_path / "table.txt"
    other.write_text("| split | model |\n")
    assert not is_report_output(other)  # not a suffix report writes
    summary = tmp_path / "summary.md"  # run's summary is not report's table
    summary.write_text("| model | split | label space | hit@1 [95% CI] |\n")
    assert not is_report_output(summary)
    summary_tex = tmp_path / "summary.tex"
    summary_tex.write_text("% imagenet-zsl run summary: needs \\usepackage{booktabs}\n")
    assert not is_report_output(summary_tex)
