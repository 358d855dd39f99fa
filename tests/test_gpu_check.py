"""tools/gpu_check.sh, scaled down (--small) on the CPU: the same steps and code paths a GPU run
takes (extraction in both modes, the device search, evaluate, SGCN and DGP on the real graph), each figure
line printed, and the determinism verdict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "gpu_check.sh"


def run_check(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def small_cpu_run() -> subprocess.CompletedProcess:
    return run_check("--device", "cpu", "--small")


def test_small_cpu_run_exits_0_and_prints_every_figure_line(small_cpu_run):
    assert small_cpu_run.returncode == 0, small_cpu_run.stderr[-3000:]
    out = small_cpu_run.stdout
    assert re.search(r"^### GPU check: CPU: .*, \d+ cores \(scaled down by --small", out, re.M)
    assert "`bash tools/gpu_check.sh --device cpu --small`" in out
    number = r"[\d,]+(?:\.\d+)?"
    mem = rf"peak memory {number} GiB \(ru_maxrss\)"
    patterns = [
        rf"^- extract, ResNet-50 \(random weights\), 16 generated JPEGs ~96x72: deterministic \(default, "
        rf"fp32\) {number} images/s, --fast {number} images/s; {mem}$",
        rf"^- search, 4,096 queries x 2,000 classes x 64-d, top-20: {number} s \({number} images/s; "
        rf"12\.9M images projected {number} s\); {mem}$",
        rf"^- evaluate \(the whole command: fp16 shards read ahead, staged, searched, tie ranks, "
        rf"tables\), 512 images x 200 classes x 64-d: {number} s \({number} images/s; CPU {number} s\); "
        rf"hit@k and per-class table equal to the CPU's; {mem}$",
        # 2 epochs timed as (1 + 2 epochs) - (1 epoch): on a loaded machine the noise can be negative
        rf"^- SGCN, 2 epochs on the real WordNet graph \({number} nodes\): -?{number} s/epoch; {mem}",
        rf"^- DGP, 2 epochs on the real WordNet graph \({number} nodes\): -?{number} s/epoch; {mem}",
        r"^- determinism: PASS: two deterministic extractions wrote identical shards \(3 files; "
        r"first sha256 [0-9a-f]{12}\.\.\.\); two same-seed trainings gave predicted classifiers: "
        r"SGCN identical, DGP identical$",
    ]
    for pattern in patterns:
        assert re.search(pattern, out, re.M), f"no line matching {pattern!r} in:\n{out}"
    assert len(re.findall(r"^- ", out, re.M)) == 6


def test_bad_arguments_exit_2_with_one_line():
    bad = run_check("--device", "tpu")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --device tpu: use cuda, cuda:N or cpu"
    unknown = run_check("--fast")
    assert unknown.returncode == 2 and "unknown argument --fast" in unknown.stderr
