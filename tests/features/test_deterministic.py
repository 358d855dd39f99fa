"""Deterministic extraction (the default) against ``--fast``: the mode's settings, its record in the
manifest and the resume identity, and reproducible bytes. The CUDA-only flags are set on the CPU too
(one code path), so these tests exercise the code a GPU run takes."""

import json
import os

import pytest
import torch

from imagenet_zsl.cli import main
from imagenet_zsl.devices import CUBLAS_WORKSPACE_CONFIG, torch_numerics
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features import extract as extract_mod
from imagenet_zsl.features.synthetic_store import make_store

CLASSES = {"n01440764": 5, "n01443537": 4}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("tars"), "tars", CLASSES, oddities=False)


def shard_bytes(out) -> dict[str, bytes]:
    """The shard files (features, ids, labels) of an extraction directory, by name."""
    return {p.name: p.read_bytes() for p in sorted(out.glob("r*-s*.npy"))}


def numerics_state() -> tuple:
    cudnn = torch.backends.cudnn
    return (
        cudnn.benchmark,
        cudnn.deterministic,
        cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.are_deterministic_algorithms_enabled(),
    )


def test_torch_numerics_sets_each_flag_and_restores_the_callers(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = numerics_state()
    with torch_numerics(True):
        assert numerics_state() == (False, True, False, "highest", True)
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE_CONFIG == ":4096:8"
    assert numerics_state() == before
    with torch_numerics(False):
        assert numerics_state()[0] is True and numerics_state()[4] is False
    assert numerics_state() == before


def test_manifest_records_the_mode_and_deterministic_runs_give_identical_bytes(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "a")
    fx.extract(store, classes, tmp_path / "b", mode="deterministic")
    fx.extract(store, classes, tmp_path / "fast", mode="fast")
    manifests = {d: json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("a", "b", "fast")}
    assert manifests["a"]["parameters"]["mode"] == "deterministic"  # the default
    assert manifests["a"]["parameters"]["precision"] == "fp32"
    assert manifests["fast"]["parameters"]["mode"] == "fast"
    a, b = shard_bytes(tmp_path / "a"), shard_bytes(tmp_path / "b")
    # 9 images in shards of 6: 2 shards x (features, ids, labels)
    assert len(a) == 6 and a == b
    # on the CPU --fast also computes in fp32 (autocast is CUDA's bf16): the same feature bytes
    assert shard_bytes(tmp_path / "fast") == a


def test_the_extraction_runs_under_the_modes_settings(tmp_path, store, fx, monkeypatch):
    seen = []
    real = extract_mod.extract_shards

    def spy(*args, **kwargs):
        seen.append(numerics_state())
        return real(*args, **kwargs)

    monkeypatch.setattr(extract_mod, "extract_shards", spy)
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    before = numerics_state()
    fx.extract(store, classes, tmp_path / "det")
    fx.extract(store, classes, tmp_path / "fast", mode="fast")
    assert seen[0] == (False, True, False, "highest", True)
    assert seen[1][0] is True and seen[1][4] is False
    assert numerics_state() == before


def test_the_mode_is_part_of_the_resume_identity(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    fx.extract(store, classes, out)
    with pytest.raises(UserInputError, match=r"holds a different extraction \(mode, precision differ\)"):
        fx.extract(store, classes, out, mode="fast", precision="bf16")
    with pytest.raises(UserInputError, match=r"holds a different extraction \(mode differ\)"):
        fx.extract(store, classes, out, mode="fast")
    assert fx.extract(store, classes, out).verified  # the same mode resumes (here: verifies)


def test_a_run_recorded_before_modes_existed_resumes_as_fast(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    fx.extract(store, classes, out, mode="fast")
    record = dist.read_run(out)
    del record["identity"]["mode"]
    (out / dist.RUN_FILE).write_text(json.dumps(record))
    assert fx.extract(store, classes, out, mode="fast").verified
    with pytest.raises(UserInputError, match=r"\(mode differ\)"):
        fx.extract(store, classes, out)


def test_unknown_mode_is_a_user_error_before_anything_is_written(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    with pytest.raises(UserInputError, match=r"extraction mode 'quick': choose one of deterministic, fast"):
        fx.extract(store, classes, tmp_path / "y", mode="quick")
    assert not (tmp_path / "y").exists()


def test_explicit_reduced_precision_is_honoured_and_recorded_in_deterministic_mode(tmp_path, store, fx):
    """--precision bf16 without --fast: bf16 autocast under the deterministic settings (on the CPU
    too), so the features differ from the fp32 default; the record says both."""
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "fp32")
    fx.extract(store, classes, tmp_path / "bf16", precision="bf16")
    parameters = json.loads((tmp_path / "bf16" / "manifest.json").read_text())["parameters"]
    assert (parameters["mode"], parameters["precision"]) == ("deterministic", "bf16")
    assert shard_bytes(tmp_path / "bf16") != shard_bytes(tmp_path / "fp32")


def test_cli_fast_flag_and_help_text_name_the_cost(tmp_path, store, fx, capsys):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    argv = fx.extract_argv(store, classes, tmp_path / "out")
    assert main([*argv, "--fast", "--precision", "bf16"]) == 0
    parameters = json.loads((tmp_path / "out" / "manifest.json").read_text())["parameters"]
    assert (parameters["mode"], parameters["precision"]) == ("fast", "bf16")
    # the two modes exclude each other: one error line, exit 2
    assert main([*fx.extract_argv(store, classes, tmp_path / "bad"), "--fast", "--deterministic"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    with pytest.raises(SystemExit):
        main(["extract", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--deterministic" in text and "--fast" in text
    assert "cuDNN autotuning (cudnn.benchmark), TF32" in text
