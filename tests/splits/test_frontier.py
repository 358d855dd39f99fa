"""The frontier marks every point that is not proven optimal: table, CSV and plot (hollow marker)."""

from __future__ import annotations

import json

import pytest
from matplotlib.colors import to_rgba

from imagenet_zsl.cli import main
from imagenet_zsl.splits import frontier as frontier_module
from imagenet_zsl.splits.frontier import _csv, _plot, frontier_table, is_proven


def _row(
    share: float, ratio: float, bound: float | None, status: str, largest: float, entropy: float
) -> dict:
    gap = None if bound is None else round(max(0.0, bound - ratio), 6)
    return {
        "max_branch_share": share,
        "ratio": ratio,
        "upper_bound": bound,
        "gap": gap,
        "status": status,
        "proven": is_proven(status, gap),
        "tie_break": "min_positions" if status == "optimal" else None,
        "largest_share": largest,
        "entropy": entropy,
        "file": f"share-{share:.2f}.txt",
        "branches": {"noun.animal": 3, "noun.plant": 1},
    }


# a toy sweep: two certified points and one that the time limit cut short (R 4.038 < bound 4.068)
ROWS = [
    _row(1.0, 5.02, 5.02, "optimal", 0.75, 0.5623),
    _row(0.5, 4.5, 4.5, "optimal", 0.5, 0.6931),
    _row(0.1, 4.038, 4.068, "time_limit", 0.1, 2.1),
]


def test_proven_needs_the_optimal_status_and_a_zero_gap():
    assert is_proven("optimal", 0.0) and is_proven("optimal", 1e-7)
    assert not is_proven("time_limit", 0.03) and not is_proven("gap", 0.002)
    assert not is_proven("optimal", 0.01) and not is_proven("heuristic", None)


def test_table_and_csv_say_which_points_are_proven():
    lines = frontier_table(ROWS).splitlines()
    assert lines[0] == "| max share | R | bound | gap | proven | largest share | entropy | top branches |"
    assert lines[2] == "| 1.00 | 5.020 | 5.020 | 0 | yes | 0.75 | 0.56 | noun.animal 3, noun.plant 1 |"
    assert lines[4] == "| 0.10 | 4.038 | 4.068 | 0.03 | no | 0.10 | 2.10 | noun.animal 3, noun.plant 1 |"
    csv_lines = _csv(ROWS).splitlines()
    assert csv_lines[0] == "max_branch_share,ratio,upper_bound,gap,proven,largest_share,entropy,file"
    assert csv_lines[1].split(",")[4] == "True" and csv_lines[3].split(",")[4] == "False"


def _captured_figure(monkeypatch, rows):
    saved = []
    monkeypatch.setattr(frontier_module, "save_figure", lambda fig, path, dpi: saved.append(fig))
    _plot(rows, None, "toy")
    assert len(saved) == 1
    return saved[0]


def _markers(ax):
    """(x, y, hollow) for every marker drawn on ``ax``."""
    out = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", ""):
            continue
        hollow = line.get_markerfacecolor() == "none" or to_rgba(line.get_markerfacecolor())[3] == 0
        out += [(float(x), float(y), hollow) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]
    return sorted(out)


def test_plot_draws_unproven_points_hollow_with_a_legend(monkeypatch):
    fig = _captured_figure(monkeypatch, ROWS)
    left, right = fig.axes
    assert _markers(left) == [(0.1, 4.038, True), (0.5, 4.5, False), (0.75, 5.02, False)]
    assert _markers(right) == [(0.5623, 5.02, False), (0.6931, 4.5, False), (2.1, 4.038, True)]
    legend = [t.get_text() for t in left.get_legend().get_texts()]
    assert legend == ["proven optimal", "not proven optimal"]
    assert left.get_ylabel() == "structural ratio R"  # no longer calls every point "optimal"


def test_plot_of_a_fully_certified_sweep_has_no_hollow_marker(monkeypatch):
    fig = _captured_figure(monkeypatch, ROWS[:2])
    assert all(not hollow for ax in fig.axes for *_, hollow in _markers(ax))
    assert fig.axes[0].get_legend() is None


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_frontier_run_marks_a_time_limited_share(tmp_path, monkeypatch):
    """End to end on a small real pool: the share whose solve is cut short is 'proven: no'."""
    real_select = frontier_module.select_for

    def select_for(spec, graph, train, pool, **overrides):
        sel = real_select(spec, graph, train, pool, **overrides)
        if overrides["max_branch_share"] == 0.25:  # as if the time limit stopped this share
            sel.status, sel.upper_bound = "time_limit", sel.ratio + 0.05
        return sel

    monkeypatch.setattr(frontier_module, "select_for", select_for)
    config = tmp_path / "small.yaml"
    config.write_text(
        "splits:\n"
        "  - name: bench\n    kind: benchmark\n    size: 8\n"
        "    pool: [{filter: not_training}, {filter: min_images, min: 1900}, {filter: connected},"
        " {filter: not_related_to_training}]\n"
    )
    out = tmp_path / "front"
    assert main(["splits", "frontier", str(config), "--out", str(out), "--shares", "1,0.25"]) == 0
    rows = json.loads((out / "manifest.json").read_text())["rows"]
    assert [r["proven"] for r in rows] == [True, False]
    assert rows[1]["gap"] == pytest.approx(0.05, abs=1e-6)
    table = (out / "frontier.md").read_text().splitlines()
    assert "| yes |" in table[2] and "| no |" in table[3]
