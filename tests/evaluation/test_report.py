import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import plots
from imagenet_zsl.evaluation.report import aggregate_runs
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
    assert "| split | protos | features | **94.44** |" in md
    assert "| split | swapped | features | 61.11 |" in md
    csv = pd.read_csv(tmp_path / "table.csv")
    assert csv["hit@1"].tolist() == pytest.approx([94.4444, 61.1111])
    tex = (tmp_path / "table.tex").read_text()
    assert r"\toprule" in tex and r"\textbf{94.44}" in tex and "hit@2" in tex


def test_report_rejects_a_directory_without_metrics(tmp_path, capsys):
    with pytest.raises(UserInputError, match="no metrics.json"):
        aggregate_runs([tmp_path])
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "t.md")]) == 2
    assert "error:" in capsys.readouterr().err


def test_plots_render(tmp_path):
    zsl = {"flat": {"1": 0.2, "2": 0.3, "5": 0.5}, "per_class": {"1": 0.1, "2": 0.3, "5": 0.4}}
    plots.plot_hit_curve(zsl, tmp_path / "hit.png")
    scores = np.random.default_rng(0).random((50, 6)).astype(np.float32)
    labels = np.r_[np.arange(25) % 3, 3 + np.arange(25) % 3]
    gz = gzsl_from_scores(scores, labels, np.arange(6) >= 3, m=3)
    curve = seen_unseen_curve(gz, 1)
    plots.plot_suc({"hit@1": curve}, tmp_path / "suc.png", {"hit@1": curve.at(0.0)}, {"hit@1": curve.at(0.1)})
    breakdown = {
        "counts": {"correct": 3, "parent": 1, "unrelated": 2, "not_in_graph": 0},
        "shares": {"correct": 0.5, "parent": 1 / 6, "unrelated": 1 / 3, "not_in_graph": 0.0},
        "strict_top1": 0.5,
        "semantic_lower_bound": 2 / 3,
        "semantic_upper_bound": 2 / 3,
    }
    plots.plot_error_breakdown(breakdown, tmp_path / "err.png")
    for name in ("hit.png", "suc.png", "err.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
