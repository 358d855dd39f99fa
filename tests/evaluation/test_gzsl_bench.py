"""tools/bench_gzsl_memory.py: the measured peak RSS continued through both measured sizes, the
search cache joined by the search's own join, and each step's heap peak projected on its own (the
largest step at a few 100K images is not the one that grows fastest), and the phase tracker."""

from __future__ import annotations

import importlib.util
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch):
    path = Path(__file__).resolve().parents[2] / "tools" / "bench_gzsl_memory.py"
    spec = importlib.util.spec_from_file_location("tools_bench_gzsl_memory", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _row(n: int, phases: list[tuple[str, int]]) -> dict:
    return {"base": 150e6, "heap_inputs": 32 * n, "phases": phases}


def test_projection_takes_the_step_that_grows_fastest(bench):
    sizes = [200_000, 400_000]
    # "blocks": a constant 200 MB (largest at both sizes); "curves": 100 B per image
    rows = {
        ("gzsl", n): _row(n, [("blocks", 200_000_000), ("curves", 100 * n), ("curves", 50 * n)])
        for n in sizes
    }
    p = bench.project(rows, "gzsl", sizes)
    assert p["top"] == "curves"
    assert p["phases"]["curves"] == pytest.approx((100.0, 100 * 12_900_000))  # the larger of the two
    assert p["phases"]["blocks"] == pytest.approx((0.0, 200e6))
    assert p["peak_per_image"] == pytest.approx(132.0)
    assert p["peak"] == pytest.approx(150e6 + 32 * 12_900_000 + 100 * 12_900_000)
    rows["gzsl", 400_000]["phases"].pop()
    with pytest.raises(SystemExit, match="phases differ"):
        bench.project(rows, "gzsl", sizes)


def test_phase_tracker_records_top_level_calls_only(bench):
    tracker = bench.PhaseTracker()

    def inner() -> int:
        return len(np.ones(1000))

    owner = SimpleNamespace(inner=inner)
    owner.outer = lambda: np.zeros(100_000).sum() + owner.inner()
    tracker.wrap(owner, "outer")
    tracker.wrap(owner, "inner")
    tracker.wrap(owner, "absent")  # an older version without this step: skipped
    tracemalloc.start()
    try:
        assert owner.outer() == 1000
        owner.inner()
        tracker.close("after")
    finally:
        tracemalloc.stop()
    names = [name for name, _ in tracker.phases]
    assert names == ["before outer", "outer", "before inner", "inner", "after"]
    peaks = dict(tracker.phases)
    assert peaks["outer"] >= 800_000 > peaks["inner"]  # the 100,000 float64 zeros


def test_measured_peak_continues_the_line_through_both_measured_points(bench):
    sizes = [250_000, 1_000_000]
    rows = {
        ("evaluate", 250_000): {"maxrss": 500e6, "anon_peak": 300e6},
        ("evaluate", 1_000_000): {"maxrss": 650e6, "anon_peak": 450e6},
    }
    got = bench.measured(rows, "evaluate", sizes)
    # 150 MB over 750,000 images: 200 B per image; 11.9M images more than the largest size
    assert got["maxrss"] == pytest.approx((500e6, 650e6, 200.0, 650e6 + 200.0 * 11_900_000))
    assert got["anon_peak"][2:] == pytest.approx((200.0, 450e6 + 200.0 * 11_900_000))


def test_synthetic_results_go_through_the_searchs_own_join(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "SHARD", 4)
    monkeypatch.setattr(bench, "_space_sizes", lambda: {"unseen": 50, "seen": 10, "val_unseen": 5})
    monkeypatch.setattr(bench, "FIXED_SETS", tuple((s[0], 3, *s[2:]) for s in bench.FIXED_SETS))
    bench.write_results(tmp_path, 10, 4)
    results = bench.load_results(tmp_path)
    assert len(results.test.labels) == 10 and len(results.seen.labels) == 3
    scores, ids = results.test.lists["unseen"]
    assert isinstance(scores, np.memmap) and scores.shape == (10, 4) and ids.dtype == np.int32
    assert (np.diff(scores, axis=1) <= 0).all() and ((0 <= ids) & (ids < 50)).all()
    assert results.test.rows.tolist() == list(range(10))  # three shards of 4, 4, 2 images joined
    first = ids[:, 0] == results.test.labels  # listed first: nothing scores above it
    assert first.any() and (results.test.ranks.above[first] == 0).all()
