"""The device choice without torch (issue 38 §2): a CPU `evaluate` of stored features never
imports torch, and `--device auto` decides "no GPU" from the driver nodes alone."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from imagenet_zsl import devices


def test_gpu_possible_reads_the_environment_and_the_driver_nodes(monkeypatch):
    monkeypatch.setattr(devices.sys, "platform", "linux")
    monkeypatch.setattr(devices.os.path, "exists", lambda node: node == "/dev/nvidiactl")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices.gpu_possible()  # a driver node: torch decides
    for hidden in ("", "-1", " -1 "):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert not devices.gpu_possible()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert devices.gpu_possible()
    monkeypatch.setattr(devices.os.path, "exists", lambda node: False)
    assert not devices.gpu_possible()  # no driver at all
    monkeypatch.setattr(devices.sys, "platform", "darwin")
    assert devices.gpu_possible()  # elsewhere torch decides


def test_a_cpu_evaluate_of_stored_features_imports_no_torch(tmp_path):
    """The whole command in a fresh interpreter, --device cpu, and auto where no GPU is visible."""
    from imagenet_zsl.semantics.class_vectors import ClassVectors
    from tests.evaluation.evaluation_fixtures import write_feature_dir

    rng = np.random.default_rng(0)
    wnids = [f"n{i:08d}" for i in range(30)]
    labels = rng.integers(0, 30, 120)
    features = write_feature_dir(tmp_path / "f", labels, rng.standard_normal((120, 8)), classes=wnids)
    ClassVectors(wnids, rng.standard_normal((30, 8))).save(tmp_path / "p.npz")
    (tmp_path / "split.txt").write_text("\n".join(wnids) + "\n")
    for device, env in (("cpu", {}), ("auto", {"CUDA_VISIBLE_DEVICES": "-1"})):
        argv = ["evaluate", "--features", str(features), "--split", str(tmp_path / "split.txt")]
        argv += ["--prototypes", str(tmp_path / "p.npz"), "--graph", "none", "--no-label-frequency"]
        argv += ["--no-plots", "--device", device, "--out", str(tmp_path / f"run-{device}")]
        code = (
            "import sys\nfrom imagenet_zsl.cli import main\n"
            f"assert main({argv!r}) == 0\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, done.stderr[-2000:]
