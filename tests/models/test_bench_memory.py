"""tools/bench_models.py --parts memory: bytes per image from the slope between sizes, the
projection to 1.28M images, PASS/FAIL against 8 GB, and the child that trains and measures."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch):
    path = Path(__file__).resolve().parents[2] / "tools" / "bench_models.py"
    spec = importlib.util.spec_from_file_location("tools_bench_models_memory", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _run(rss: float, anon: float) -> dict[str, float]:
    return {"peak_rss": rss, "peak_anon": anon}


def test_report_projects_the_slope_to_imagenet_and_judges_it_against_8_gb(bench, capsys):
    sizes = [1000, 3000]
    results = {
        # 1 GB + 2,000 B/image (RSS), 0.5 GB + 100 B/image (anon): 1e9 + 2000 x 1,281,167 = 3.56 GB
        "eszsl": [_run(1e9 + 2000 * n, 5e8 + 100 * n) for n in sizes],
        # 10,000 B/image: 1e9 + 12.8 GB > 8 GB
        "devise": [_run(1e9 + 10_000 * n, 5e8) for n in sizes],
    }
    assert bench._report_memory(results, sizes, 2048, 100) is False
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert lines["eszsl"].split()[1:3] == ["2,000", "100"]
    assert "3.56 GB" in lines["eszsl"] and lines["eszsl"].endswith("PASS")
    assert "13.81 GB" in lines["devise"] and lines["devise"].endswith("FAIL")
    # an L-BFGS model adds its full history: 2 x 20 x (2048 + 1) x 100 outputs x 4 B = 32.8 MB
    assert bench._lbfgs_history("sync", 2048, 100) == pytest.approx(2 * 20 * 2049 * 100 * 4)
    assert bench._lbfgs_history("eszsl", 2048, 100) == 0.0


def test_the_child_trains_with_train_and_reports_its_peaks(bench, tmp_path, capsys):
    classes = bench._bench_classes(3)
    bench.write_random_features(tmp_path, 40, 8, classes)
    features, vectors = str(tmp_path / "features"), str(tmp_path / "vectors.npz")
    bench.memory_child("eszsl", features, vectors, str(tmp_path / "m"))
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["peak_rss"] >= report["base_rss"] > 0 and report["peak_anon"] >= report["base_anon"]
    assert report["traced"] > 0 and (tmp_path / "m" / "manifest.json").is_file()
