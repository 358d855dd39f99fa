"""Every script under tools/ imports (without running its main): a renamed or removed function
that a tool uses fails here, not in front of a user."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = sorted((Path(__file__).resolve().parents[1] / "tools").glob("*.py"))


def test_there_are_tools():
    assert TOOLS


@pytest.mark.parametrize("path", TOOLS, ids=[p.stem for p in TOOLS])
def test_tool_imports(path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "argv", [str(path)])
    spec = importlib.util.spec_from_file_location(f"tools_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # as an import would (dataclasses look there)
    spec.loader.exec_module(module)  # runs top-level code only: main() is behind __name__ == "__main__"
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_bench_extract_runs_end_to_end(tmp_path: Path):
    """The extraction benchmark on a tiny store: the reference and the toolkit (in a fresh process,
    set up as the command sets itself up) both extract every image, twice."""
    import json
    import os
    import subprocess

    tool = Path(__file__).resolve().parents[1] / "tools" / "bench_extract.py"
    argv = ["--images", "12", "--classes", "2", "--backbone", "tiny-test", "--width", "80"]
    argv += ["--height", "60", "--repeats", "2", "--json", str(tmp_path / "rows.json")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("OMP_WAIT_POLICY", None)
    done = subprocess.run(
        [sys.executable, str(tool), *argv], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [row["pipeline"] for row in rows] == [
        "reference (PIL, fp32, batch 32)",
        "imagenet-zsl extract (decode pil)",
    ]
    assert all(row["images"] == 12 and len(row["runs_images_per_s"]) == 2 for row in rows)
    assert rows[0]["openmp_wait_policy"] == "default"
    assert rows[1]["openmp_wait_policy"] == "PASSIVE"
    assert "best of 2 alternating runs" in done.stdout


def test_bench_search_times_the_device_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The GPU section of the search benchmark, run on the CPU (``--devices cpu``): the toolkit's
    device search, its GEMM floor and the plain matmul + topk lines are all timed and projected."""
    import json

    path = Path(__file__).resolve().parents[1] / "tools" / "bench_search.py"
    spec = importlib.util.spec_from_file_location("tools_bench_search_run", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    argv = ["--mode", "search", "--queries", "64", "--classes", "300", "--dim", "16", "--k", "5"]
    argv += ["--repeats", "1", "--devices", "cpu", "--gpu-queries", "500", "--json", str(tmp_path / "r.json")]
    assert module.main(argv) == 0
    device = json.loads((tmp_path / "r.json").read_text())["search"]["devices"]["cpu"]
    assert device["queries"] == 500 and device["toolkit_over_floor"] > 0
    assert set(device["seconds"]) == {
        "toolkit_topk",
        "gemm_floor_fp32",
        "plain_matmul_topk_fp32",
        "plain_matmul_topk_bf16",
    }


def test_bench_models_times_the_graph_models(monkeypatch: pytest.MonkeyPatch, capsys):
    """The model benchmark on the real graph: trivial prototypes against their reference, then the
    GCN timing section on the CPU (tiny sizes)."""
    path = Path(__file__).resolve().parents[1] / "tools" / "bench_models.py"
    spec = importlib.util.spec_from_file_location("tools_bench_models_run", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    argv = ["--classes", "20", "--repeat", "1", "--gcn-epochs", "1", "--gcn-models", "sgcn,dgp"]
    assert module.main([*argv, "--devices", "cpu", "--feature-dim", "8", "--hidden", "8"]) == 0
    out = capsys.readouterr().out
    assert "identical prototypes" in out
    assert "sgcn on the full graph" in out and "dgp on the full graph" in out


def test_the_mutation_list_is_current(monkeypatch: pytest.MonkeyPatch):
    """tools/mutation_check.py is not run in CI, but its list is checked here: each planted bug's
    snippet is in its file exactly once, the planted file still compiles (a mutation that breaks
    the import would be 'caught' by any test), and each listed test file exists."""
    path = Path(__file__).resolve().parents[1] / "tools" / "mutation_check.py"
    spec = importlib.util.spec_from_file_location("tools_mutation_check_list", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    module.check_list(module.MUTATIONS)
    assert len(module.MUTATIONS) >= 5
    for mutation in module.MUTATIONS:
        text = (module.ROOT / mutation.path).read_text(encoding="utf-8")
        assert text.count(mutation.old) == 1, f"{mutation.name}: snippet not exactly once in {mutation.path}"
        assert mutation.new != mutation.old
        compile(text.replace(mutation.old, mutation.new), mutation.path, "exec")
        for test in mutation.tests:
            assert (module.ROOT / test.split("::")[0]).is_file(), f"{mutation.name}: no {test}"
