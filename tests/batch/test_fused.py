"""Scoring while extracting (issue 38 §1): a run whose test images are a store and a backbone
writes every cell with the bytes of extract-then-run on the same images (the test features' path
and manifest sha256 in metrics.json aside), writes no test feature, and resumes a killed fused
pass to the same bytes."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import yaml

from imagenet_zsl.batch import fused
from imagenet_zsl.batch.runner import run
from imagenet_zsl.errors import UserInputError
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


def _same_cells(fused_out: Path, fused_test: Path, stored_out: Path, stored_test: Path) -> None:
    """Every cell file equal, but for the test features' manifest sha256 in metrics.json and the
    cell manifest (which also records metrics.json and report.md, whose paths differ in length)."""
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
            assert a == b, name
        else:
            assert got[name] == want[name], name


def _no_test_features(out: Path) -> None:
    stored = [p for p in out.rglob("*.npy") if p.name.endswith((".features.npy", ".logits.npy"))]
    assert stored == []


@needs_scored_probe
def test_fused_run_equals_extract_then_run_and_stores_no_test_feature(tmp_path, inputs):
    root, train, test_store, recipe = inputs
    test_dir = _extract(test_store, sorted({w for ws in SPLITS.values() for w in ws}), tmp_path / "test")
    stored = run(_recipe(root, recipe, "stored", str(test_dir), train), tmp_path / "stored", progress=False)
    result = run(
        _recipe(root, recipe, "fused", _store_spec(test_store), train), tmp_path / "fused", progress=False
    )
    assert result.failed == [] and stored.failed == [] and len(result.evaluated) == 4
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


@needs_scored_probe
def test_a_killed_fused_pass_resumes_to_the_same_bytes(tmp_path, inputs, monkeypatch):
    root, train, test_store, recipe = inputs
    path = _recipe(root, recipe, "fused", _store_spec(test_store), train)
    run(path, tmp_path / "whole", progress=False)
    real, calls = fused.cache_shards, []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:  # the second shard, for the second cell
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(fused, "cache_shards", dying)
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


def test_a_typo_under_the_test_store_is_one_line(tmp_path, inputs):
    root, train, test_store, recipe = inputs
    spec = {**_store_spec(test_store), "wieghts": "random"}
    with pytest.raises(UserInputError, match="wieghts"):
        run(_recipe(root, recipe, "typo", spec, train), tmp_path / "typo", progress=False)
    missing = {**_store_spec(test_store), "store": str(tmp_path / "nowhere")}
    with pytest.raises(UserInputError, match="no such image store"):
        run(_recipe(root, recipe, "missing", missing, train), tmp_path / "missing", progress=False)
