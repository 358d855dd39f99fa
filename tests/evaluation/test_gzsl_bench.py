"""tools/bench_gzsl_memory.py: each step's peak projected on its own to 12.9M test images (the
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
