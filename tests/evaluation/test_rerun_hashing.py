"""Re-running ``evaluate`` over its own output (review of issues #44-#47, item 7): the listed files
(the top-k lists among them, multi-GB at ImageNet scale) were hashed three times, by the check of
``--out`` before any work, when ``atomic_directory`` starts and just before the swap. Each is now
hashed once per process while unchanged (``checksums.listed_sha256``), and a file edited in between
is still hashed again and refused."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from imagenet_zsl import checksums, manifests
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import run as run_package
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate


def _config(bench, out: Path) -> EvaluationConfig:
    return EvaluationConfig(
        features=bench["features"],
        split=bench["split"],
        out=out,
        prototypes=bench["protos"],
        ks=[1, 2],
        label_frequency=False,
        plots=False,
    )


def _count_hashes(monkeypatch) -> Counter:
    """sha256_file calls by (path, inode): the manifests' and the checksums' (the same function)."""
    calls: Counter = Counter()
    real = checksums.sha256_file

    def counted(path, *args, **kwargs):
        calls[(str(Path(path).resolve()), Path(path).stat().st_ino)] += 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checksums, "sha256_file", counted)
    monkeypatch.setattr(manifests, "sha256_file", counted)
    return calls


def test_a_rerun_hashes_each_listed_file_once(bench, tmp_path, monkeypatch):
    out = tmp_path / "run"
    evaluate(_config(bench, out), graph="none", progress=False)
    listed = [out / r["path"] for r in json.loads((out / "manifest.json").read_text())["files"]]
    before = {(str(p.resolve()), p.stat().st_ino) for p in listed}
    assert any("topk" in str(p) for p in listed)
    calls = _count_hashes(monkeypatch)
    evaluate(_config(bench, out), graph="none", progress=False)
    old = {key: n for key, n in calls.items() if key in before}
    assert sorted(old) == sorted(before)  # every listed file is still checked ...
    assert set(old.values()) == {1}  # ... once


def test_a_file_edited_during_the_run_is_still_refused(bench, tmp_path, monkeypatch):
    out = tmp_path / "run"
    evaluate(_config(bench, out), graph="none", progress=False)
    write_run = run_package.write_run

    def edit_then_write(tmp, *args):  # after the first two checks, before the swap's
        text = (out / "report.md").read_text()
        (out / "report.md").write_text("X" + text[1:])  # the same size: only the sha256 tells
        return write_run(tmp, *args)

    monkeypatch.setattr(run_package, "write_run", edit_then_write)
    with pytest.raises(UserInputError, match="report.md was edited"):
        evaluate(_config(bench, out), graph="none", progress=False)
    assert (out / "report.md").read_text().startswith("X")
