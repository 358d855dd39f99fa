"""Scoring while extracting (issue 38 §1): a run whose test images are a store and a backbone
writes every cell with the bytes of extract-then-run on the same images (the test features' path
and manifest sha256 in metrics.json aside), writes no test feature, and resumes a killed fused
pass to the same bytes, with one process or several (torchrun: each rank scores its own shards)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from threadpoolctl import threadpool_limits

from imagenet_zsl.batch import commands, fused
from imagenet_zsl.batch.flags import RunOptions
from imagenet_zsl.batch.plan import RunResult
from imagenet_zsl.batch.runner import run
from imagenet_zsl.cli import build_parser, handler_config
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import extract
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.synthetic_store import make_store

#: ILSVRC-2012 classes with GloVe vectors: the training classes
TRAIN = {"n01440764": 4, "n01443537": 4, "n01484850": 4}
#: hop1 classes with GloVe vectors: two splits of the test store
SPLITS = {"a": ["n01322898", "n01323068"], "b": ["n01439121", "n01482330"]}
TEST = {"n01322898": 4, "n01323068": 3, "n01439121": 4, "n01482330": 3}
EXTRACT = {"backbone": "tiny-test", "weights": "random", "batch_size": 4, "shard_size": 5, "workers": 0}
SMALL = {"device": "cpu", "resize": 64, "crop": 56}

needs_scored_probe = pytest.mark.skipif(
    "unstored_sha256" not in inspect.getsource(FeatureDir.first_row),
    reason="needs FeatureDir.first_row's zero row for a directory whose features are not stored",
)


def _extract(store, classes: list[str], out: Path) -> Path:
    classes_file = out.parent / f"{out.name}.classes.txt"
    classes_file.write_text("".join(f"{w}\n" for w in classes))
    cfg = ExtractConfig(
        store=str(store.root),
        classes_file=str(classes_file),
        out=str(out),
        val_labels=str(store.labels) if store.labels else None,
        progress=False,
        **EXTRACT,
        **SMALL,
    )
    run_extraction(cfg)
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fused")
    train_store = make_store(root / "train_store", "tree", TRAIN, oddities=False)
    test_store = make_store(root / "test_store", "tree", TEST, oddities=False)
    train = _extract(train_store, sorted(TRAIN), root / "train")
    seen_store = make_store(root / "seen_store", "flat", {w: 2 for w in TRAIN}, oddities=False)
    _extract(seen_store, sorted(TRAIN), root / "seen")
    for name, wnids in SPLITS.items():
        (root / f"{name}.txt").write_text("".join(f"{w}\n" for w in wnids))
    recipe = {
        "semantics": "glove-6b-50d",
        "models": {
            "eszsl": {"model": "eszsl", "params": {"gamma": 1.0, "lam": 1.0}},
            "conse": {"model": "conse", "params": {"top": 2}},
        },
        "splits": [str(root / f"{name}.txt") for name in SPLITS],
        "ks": [1, 2],
        "plots": False,
        "label_frequency": False,
    }
    return root, train, test_store, recipe


def _recipe(root: Path, recipe: dict, name: str, test: object, train: Path, **changes: object) -> Path:
    path = root / f"{name}.yaml"
    features = {"train": str(train), "test": test}
    if changes.get("gzsl"):
        features["seen"] = str(root / "seen")
    path.write_text(yaml.safe_dump({**recipe, "features": features, **changes}))
    return path


def scored_path(out: Path) -> Path:
    return out / "test-images" / "scored"


def _store_spec(test_store) -> dict:
    return {"store": str(test_store.root), **EXTRACT, **SMALL}


def _cell_files(out: Path, test: Path) -> dict[str, bytes]:
    """Every file of every cell directory, with the run's and the test features' paths (which two
    runs cannot share) replaced by OUT and TEST in the JSON and markdown files."""
    cells, files = out / "cells", {}
    for path in sorted(cells.rglob("*")):
        if path.is_file() and path.parent != cells:
            data = path.read_bytes()
            if path.suffix in (".json", ".md"):
                data = data.replace(str(test).encode(), b"TEST").replace(str(out).encode(), b"OUT")
            files[str(path.relative_to(cells))] = data
    return files


def _same_cells(
    fused_out: Path, fused_test: Path, stored_out: Path, stored_test: Path, other_command: bool = False
) -> None:
    """Every cell file equal, but for the test features' manifest sha256 in metrics.json and the
    cell manifest (which also records metrics.json and report.md, whose paths differ in length;
    with ``other_command``, and the command line that wrote it: torchrun's is not pytest's)."""
    got, want = _cell_files(fused_out, fused_test), _cell_files(stored_out, stored_test)
    assert sorted(got) == sorted(want) and len(got) > 8
    for name in got:
        if name.endswith("metrics.json"):
            a, b = json.loads(got[name]), json.loads(want[name])
            a["inputs"]["features"].pop("manifest_sha256")
            b["inputs"]["features"].pop("manifest_sha256")
            assert a == b, name
        elif name.endswith("manifest.json"):
            a, b = json.loads(got[name]), json.loads(want[name])
            for m in (a, b):
                m["inputs"]["features"].pop("manifest_sha256")
                m["files"] = [f for f in m["files"] if f["path"] not in ("metrics.json", "report.md")]
                if other_command:
                    m.pop("command")
            assert a == b, name
        else:
            assert got[name] == want[name], name


def _no_test_features(out: Path) -> None:
    stored = [p for p in out.rglob("*.npy") if p.name.endswith((".features.npy", ".logits.npy"))]
    assert stored == []


@needs_scored_probe
def test_fused_run_equals_extract_then_run_and_stores_no_test_feature(tmp_path, inputs, monkeypatch):
    """The cells of extract-then-run, no test feature on disk, the backbone built once (planning
    begins the extraction, the fused pass goes on from it) and the head written once (the scored
    directory's is the planned one's file)."""
    root, train, test_store, recipe = inputs
    test_dir = _extract(test_store, sorted({w for ws in SPLITS.values() for w in ws}), tmp_path / "test")
    stored = run(_recipe(root, recipe, "stored", str(test_dir), train), tmp_path / "stored", progress=False)
    built, load_backbone = [], extract.load_backbone
    monkeypatch.setattr(
        extract, "load_backbone", lambda cfg: built.append(cfg.backbone) or load_backbone(cfg)
    )
    result = run(
        _recipe(root, recipe, "fused", _store_spec(test_store), train), tmp_path / "fused", progress=False
    )
    assert result.failed == [] and stored.failed == [] and len(result.evaluated) == 4
    assert built == ["tiny-test"]
    images = tmp_path / "fused" / "test-images"
    assert os.path.samefile(images / "planned" / "head.npz", images / "scored" / "head.npz")
    _same_cells(tmp_path / "fused", scored_path(tmp_path / "fused"), tmp_path / "stored", test_dir)
    _no_test_features(tmp_path / "fused")
    scored = FeatureDir(scored_path(tmp_path / "fused"))
    assert scored.identity == FeatureDir(test_dir).identity
    assert scored.ids().tolist() == FeatureDir(test_dir).ids().tolist()
    # every shard's would-be feature file is the one extract wrote
    assert [s["unstored_sha256"]["features"] for s in scored.shards] == [
        s["sha256"]["features"] for s in FeatureDir(test_dir).shards
    ]
    # a second run has nothing to do and changes nothing
    again = run(
        _recipe(root, recipe, "fused", _store_spec(test_store), train), tmp_path / "fused", progress=False
    )
    assert again.evaluated == [] and len(again.skipped) == 4
    assert built == ["tiny-test"] * 2  # planned again; nothing extracted
    _same_cells(tmp_path / "fused", scored_path(tmp_path / "fused"), tmp_path / "stored", test_dir)


@needs_scored_probe
def test_gzsl_cells_scored_while_extracting_equal_extract_then_run(tmp_path, inputs):
    root, train, test_store, recipe = inputs
    test_dir = _extract(test_store, sorted({w for ws in SPLITS.values() for w in ws}), tmp_path / "test")
    gzsl = {"gzsl": True, "calibration": False}
    stored = run(
        _recipe(root, recipe, "gstored", str(test_dir), train, **gzsl), tmp_path / "stored", progress=False
    )
    path = _recipe(root, recipe, "gfused", _store_spec(test_store), train, **gzsl)
    result = run(path, tmp_path / "fused", progress=False)
    assert result.failed == [] and stored.failed == [] and len(result.evaluated) == 4
    _same_cells(tmp_path / "fused", scored_path(tmp_path / "fused"), tmp_path / "stored", test_dir)
    _no_test_features(tmp_path / "fused")
    # the test images were searched in the seen classes' space too (the GZSL joint lists)
    topk = tmp_path / "fused" / "cells" / "eszsl__a" / "topk"
    assert (topk / "test.seen.ids.npy").is_file() and (topk / "seen.unseen.ids.npy").is_file()


def _killed_at(call: int) -> Callable[..., int]:
    """``fused.cache_shards`` that raises at its ``call``-th call: a process killed mid-pass."""
    real, calls = fused.cache_shards, []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    return dying


@needs_scored_probe
def test_a_killed_fused_pass_resumes_to_the_same_bytes(tmp_path, inputs, monkeypatch):
    root, train, test_store, recipe = inputs
    path = _recipe(root, recipe, "fused", _store_spec(test_store), train)
    run(path, tmp_path / "whole", progress=False)
    real = fused.cache_shards
    monkeypatch.setattr(fused, "cache_shards", _killed_at(6))  # the second shard, for the second cell
    with pytest.raises(RuntimeError, match="killed"):
        run(path, tmp_path / "resumed", progress=False)
    monkeypatch.setattr(fused, "cache_shards", real)
    run(path, tmp_path / "resumed", progress=False)
    _same_cells(
        tmp_path / "resumed",
        scored_path(tmp_path / "resumed"),
        tmp_path / "whole",
        scored_path(tmp_path / "whole"),
    )
    _no_test_features(tmp_path / "resumed")


@needs_scored_probe
def test_a_shard_cached_from_other_test_features_is_searched_again(tmp_path, inputs, monkeypatch):
    """A fused pass killed after caching the first shard for one cell, then run again with
    another crop: the same images, labels and ids, other features; the cached shard's key holds
    its features' digest, so it is searched again and the cells are those of a fresh run."""
    root, train, test_store, recipe = inputs
    real = fused.cache_shards
    monkeypatch.setattr(fused, "cache_shards", _killed_at(2))  # the first shard, for the second cell
    with pytest.raises(RuntimeError, match="killed"):
        run(
            _recipe(root, recipe, "fused", _store_spec(test_store), train), tmp_path / "again", progress=False
        )
    monkeypatch.setattr(fused, "cache_shards", real)
    cropped = _recipe(root, recipe, "cropped", {**_store_spec(test_store), "crop": 48}, train)
    # the training features keep the first crop: allowed, recorded the same way in both runs
    assert not run(cropped, tmp_path / "again", progress=False, allow_feature_mismatch=True).failed
    assert not run(cropped, tmp_path / "fresh", progress=False, allow_feature_mismatch=True).failed
    _same_cells(
        tmp_path / "again",
        scored_path(tmp_path / "again"),
        tmp_path / "fresh",
        scored_path(tmp_path / "fresh"),
    )


def _torchrun(recipe: Path, out: Path, processes: int) -> subprocess.CompletedProcess:
    """``imagenet-zsl run`` under torchrun (gloo on the CPU, one BLAS thread a process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command += ["-m", "imagenet_zsl.cli", "run", str(recipe), "--out", str(out), "--no-progress"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)


@needs_scored_probe
def test_two_processes_resume_a_killed_fused_pass_to_the_bytes_of_one(tmp_path, inputs, monkeypatch):
    """One process is killed while scoring the first of the 3 test shards; two processes resume
    it, rank 0 scoring shard 0, rank 1 shards 1 and 2 without waiting for shard 0 (a cached
    shard's rows are its own): every cell is the bytes of the one-process fused run and of
    extract-then-run."""
    root, train, test_store, recipe = inputs
    path = _recipe(root, recipe, "fused", _store_spec(test_store), train)
    dying = _killed_at(2)  # the first shard, for the second cell
    # one BLAS thread, as each torchrun process has: the scores' last bits depend on the count
    with threadpool_limits(limits=1):
        test_dir = _extract(test_store, sorted({w for ws in SPLITS.values() for w in ws}), tmp_path / "test")
        stored = run(
            _recipe(root, recipe, "stored", str(test_dir), train), tmp_path / "stored", progress=False
        )
        whole = run(path, tmp_path / "whole", progress=False)
        monkeypatch.setattr(fused, "cache_shards", dying)
        with pytest.raises(RuntimeError, match="killed"):
            run(path, tmp_path / "spread", progress=False)
    assert stored.failed == whole.failed == [] and len(whole.evaluated) == 4
    assert not list(scored_path(tmp_path / "spread").glob("*.done.json"))
    proc = _torchrun(path, tmp_path / "spread", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "evaluated 4 cells, skipped 0 finished, 0 failed" in proc.stdout
    done = sorted(p.name for p in scored_path(tmp_path / "spread").glob("*.done.json"))
    assert done == ["r000-s000000.done.json", "r001-s000001.done.json", "r001-s000002.done.json"]
    for reference, test in (
        (tmp_path / "whole", scored_path(tmp_path / "whole")),
        (tmp_path / "stored", test_dir),
    ):
        _same_cells(
            tmp_path / "spread", scored_path(tmp_path / "spread"), reference, test, other_command=True
        )
    _no_test_features(tmp_path / "spread")
    assert (tmp_path / "spread" / "summary.md").read_bytes() == (
        tmp_path / "whole" / "summary.md"
    ).read_bytes()


def test_a_typo_under_the_test_store_is_one_line(tmp_path, inputs):
    root, train, test_store, recipe = inputs
    spec = {**_store_spec(test_store), "wieghts": "random"}
    with pytest.raises(UserInputError, match="wieghts"):
        run(_recipe(root, recipe, "typo", spec, train), tmp_path / "typo", progress=False)
    missing = {**_store_spec(test_store), "store": str(tmp_path / "nowhere")}
    with pytest.raises(UserInputError, match="no such image store"):
        run(_recipe(root, recipe, "missing", missing, train), tmp_path / "missing", progress=False)


def test_run_tunes_the_process_only_when_its_recipe_extracts(tmp_path, inputs, monkeypatch):
    """``run``'s handler tunes the process for the image pipeline, as ``extract`` does, before
    torch loads, for a recipe whose test images are a store (alone or under a backbone's name);
    not for stored features, nor for a recipe it cannot read (the run says why)."""
    root, train, test_store, recipe = inputs
    tuned: list[int] = []
    monkeypatch.setattr(commands.devices, "tune_process_for_image_pipeline", lambda: tuned.append(1))
    monkeypatch.setattr(commands, "run_recipe", lambda *a, **k: RunResult(tmp_path, primary=False))
    recipes = {
        "fused": _recipe(root, recipe, "fused", _store_spec(test_store), train),
        "stored": _recipe(root, recipe, "stored", str(train), train),
        "per-split": _recipe(root, recipe, "per-split", {"a": str(train), "store": str(train)}, train),
        "missing": tmp_path / "missing.yaml",
    }
    named = tmp_path / "named.yaml"
    named.write_text(
        yaml.safe_dump({"features": {"r50": {"train": str(train), "test": _store_spec(test_store)}}})
    )
    recipes["named"] = named
    calls = {}
    for name, path in recipes.items():
        tuned.clear()
        assert commands.run(RunOptions(recipe=Path(path), out=tmp_path / name, progress=False)) == 0
        calls[name] = len(tuned)
    assert calls == {"fused": 1, "stored": 0, "per-split": 0, "missing": 0, "named": 1}
    # the one-line run from names: tuned when it extracts from --store, not on stored --features
    split = tmp_path / "split.txt"
    split.write_text("".join(f"{w}\n" for w in sorted(FeatureDir(train).classes)[:2]))
    for flags, expected in (
        (["--store", str(test_store), "--backbones", "tiny-test", "--weights", "random"], 1),
        (["--features", str(train)], 0),
    ):
        tuned.clear()
        argv = ["run", "--models", "trivial", "--splits", str(split), *flags, "--out", str(tmp_path / "o")]
        assert commands.run(handler_config(commands.run, build_parser().parse_args(argv))) == 0
        assert len(tuned) == expected, flags
