"""Issue 44 §3: a FIFO in a weights cache blocked ``extract`` for ever (the hub's own lookup
returned the path, and hashing it opened the pipe). Every reader of a weights file now goes
through ``paths.regular_input_file`` first: one ``error:`` line naming the entry, exit 2."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from imagenet_zsl.features.synthetic_store import make_store

REPO = "timm/tf_efficientnet_lite0.in1k"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _no_hang():
    """A regression blocks on the pipe: fail after 30 s instead of hanging the suite."""

    def expire(signum, frame):
        raise TimeoutError("blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _extract_argv(tmp: Path, backbone: str) -> list[str]:
    store = make_store(tmp / "store", "tree", {"n01440764": 1})
    (tmp / "classes.txt").write_text("n01440764\n")
    argv = ["extract", "--store", store.root, "--classes", tmp / "classes.txt", "--out", tmp / "out"]
    return [*argv, "--backbone", backbone, "--device", "cpu", "--workers", "0", "--no-progress"]


def _snapshot(hf_home: Path, repo: str) -> Path:
    folder = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(REVISION)
    snapshot = folder / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    return snapshot


@pytest.mark.parametrize("offline", ["1", "0"])
def test_a_fifo_as_cached_hub_weights(caches, cli_error, monkeypatch, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)  # online too: the cache is looked at first
    fifo = _snapshot(caches / "hf", REPO) / "model.safetensors"
    os.mkfifo(fifo)
    line = cli_error(_extract_argv(caches, "timm:tf_efficientnet_lite0"), [str(fifo), "FIFO"])
    assert "not a regular file" in line


def test_a_fifo_as_a_hub_model_config(caches, cli_error):
    fifo = _snapshot(caches / "hf", "org/model") / "config.json"
    os.mkfifo(fifo)
    cli_error(_extract_argv(caches, "timm:hf-hub:org/model") + ["--weights", "random"], [str(fifo), "FIFO"])


def test_a_fifo_in_the_torch_hub_cache(caches, cli_error):
    fifo = caches / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    cli_error(_extract_argv(caches, "resnet18"), [str(fifo), "FIFO"])


def test_a_fifo_as_weights_file(caches, cli_error):
    os.mkfifo(caches / "weights.pth")
    argv = _extract_argv(caches, "tiny-test") + ["--weights", caches / "weights.pth"]
    cli_error(argv, [str(caches / "weights.pth"), "FIFO"], not_created=[caches / "out"])
