"""The commands that decode images in worker processes tune their process
(:func:`imagenet_zsl.devices.tune_process_for_image_pipeline`): torch's OpenMP threads sleep, not
spin, while they wait, and glibc reuses freed memory instead of page-faulting it in anew.

libgomp reads its setting once, when torch loads it, so the checks that matter run in fresh
processes and read what libgomp itself reports (``OMP_DISPLAY_ENV=VERBOSE``): its spin count is 0
under the passive policy and 300,000 by default. The memory setting is checked by counting the
page faults of a loop that allocates and frees a 20 MB block.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagenet_zsl import devices
from imagenet_zsl.cli import handler_config_type
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.synthetic_store import make_store

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, env_extra: dict[str, str] | None = None, args: list[str] | None = None):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({"OMP_DISPLAY_ENV": "VERBOSE", "PYTHONPATH": str(REPO), **(env_extra or {})})
    done = subprocess.run(
        [sys.executable, "-c", code, *(args or [])], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _spin_count(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "GOMP_SPINCOUNT" in line]
    if not lines:
        pytest.skip("torch's OpenMP runtime is not libgomp here: it reports no GOMP_SPINCOUNT")
    return lines[0].split("=", 1)[1].strip().strip("'")


SET_THEN_LOAD = (
    "from imagenet_zsl.devices import tune_process_for_image_pipeline as tune\n"
    "print(tune()['openmp_wait_policy'])\n"
    "import torch\n"
    "torch.ones(1)\n"
)


def test_before_torch_loads_the_waiting_threads_sleep():
    done = _run(SET_THEN_LOAD)
    assert done.stdout.split() == ["PASSIVE"]
    assert _spin_count(done.stderr) == "0"


def test_default_openmp_spins_which_is_what_the_setting_changes():
    done = _run("import torch\ntorch.ones(1)\n")
    assert _spin_count(done.stderr) != "0"


def test_a_policy_the_user_chose_is_kept():
    done = _run(SET_THEN_LOAD, {"OMP_WAIT_POLICY": "ACTIVE"})
    assert done.stdout.split() == ["ACTIVE"]
    assert _spin_count(done.stderr) != "0"


def test_after_torch_loaded_it_changes_nothing_and_says_so(monkeypatch):
    import torch  # noqa: F401 - loaded, as in this test process

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert devices._passive_openmp_waits() == "default"
    assert "OMP_WAIT_POLICY" not in os.environ


FAULTS_PER_LOOP = (
    "import resource, sys, numpy as np\n"
    "if sys.argv[1:] == ['tune']:\n"
    "    from imagenet_zsl.devices import _keep_freed_memory\n"
    "    assert _keep_freed_memory() == 'kept'\n"
    "def step():  # like a forward pass: six 12 MB activations alive at once, then all freed\n"
    "    blocks = [np.ones(12_000_000, np.uint8) for _ in range(6)]\n"
    "step()  # first use: faulted in either way\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(20):\n"
    "    step()\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
)


def test_freed_memory_is_reused_instead_of_faulted_in_again():
    """Measured here: 64,779 page faults over the 20 steps by default (the freed heap is trimmed
    and mapped anew), 0 with the setting."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the memory setting applies to glibc only")
    block = 12_000_000 // 4096
    default = int(_run(FAULTS_PER_LOOP).stdout)
    tuned = int(_run(FAULTS_PER_LOOP, args=["tune"]).stdout)
    assert default > 5 * block
    assert tuned < block


def test_imagenet_zsl_extract_runs_its_network_with_sleeping_threads(tmp_path, monkeypatch):
    """The real command in a fresh process: the handler sets the policy before torch loads, and
    the features are byte-identical to an extraction in this process, which has no such set-up."""
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    store = make_store(tmp_path / "store", "tars", {"n01440764": 3})
    classes = tmp_path / "classes.txt"
    classes.write_text("n01440764\n")
    argv = ["extract", "--store", str(store.root), "--classes", str(classes), "--out", str(tmp_path / "out")]
    argv += ["--backbone", "tiny-test", "--weights", "random", "--resize", "64", "--crop", "56"]
    argv += ["--device", "cpu", "--workers", "1", "--no-progress"]
    done = _run(
        "import sys\nfrom imagenet_zsl.cli import main\nsys.exit(main(sys.argv[1:]))\n",
        {"IMAGENET_ZSL_CACHE": str(tmp_path / "cache")},
        argv,
    )
    assert "complete: 1 shards" in done.stdout
    assert _spin_count(done.stderr) == "0"
    # scheduling and memory reuse only: the same bytes as a run in this (untuned) process
    from imagenet_zsl.features.extract import ExtractConfig, run_extraction

    config = ExtractConfig(
        store=str(store.root),
        classes_file=str(classes),
        out=str(tmp_path / "here"),
        backbone="tiny-test",
        weights="random",
        resize=64,
        crop=56,
        device="cpu",
        workers=1,
        progress=False,
    )
    run_extraction(config)
    shards = sorted(p.name for p in (tmp_path / "out").glob("*.npy"))
    assert shards and shards == sorted(p.name for p in (tmp_path / "here").glob("*.npy"))
    for name in shards:
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "here" / name).read_bytes()


@pytest.mark.parametrize(
    ("module", "handler", "args"),
    [
        (
            "imagenet_zsl.image_filter.commands",
            "filter_images",
            {"features": "f", "out": "o", "finetune_last_block": True},  # stops at its first check
        ),
        (
            "imagenet_zsl.models.commands",
            "finetune_dgp",
            {
                "model": "m",
                "features": "f",
                "images": "x",
                "out": "o",
                "backbone": "tiny-test",
                "weights": None,
                "finetune_epochs": 0,  # stops at the parameters' validation
                "finetune_batch_size": 4,
                "finetune_lr": 1e-3,
                "weight_decay": 0.0,
                "min_steps": 1,
                "workers": 0,
                "allow_incomplete": False,
            },
        ),
    ],
)
def test_the_fine_tuning_commands_set_it_first(monkeypatch, module, handler, args):
    """Both fine-tuning commands decode images in workers: the setting is their first step."""
    import importlib

    from imagenet_zsl import devices

    cli = importlib.import_module(module)
    calls = []
    # the handlers call it through the module (devices.tune_process_for_image_pipeline): patch it there
    monkeypatch.setattr(devices, "tune_process_for_image_pipeline", lambda: calls.append(1) or {})
    run = getattr(cli, handler)
    with pytest.raises(UserInputError):
        run(handler_config_type(run)(**args))  # its config, as the command line builds it
    assert calls == [1]
