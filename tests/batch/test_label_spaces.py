"""The label spaces the papers mean (#33 §2): with ``label_space: all`` every ``run`` ranks the test
images against the 20,842 ImageNet-21K classes that are not ILSVRC-2012 classes, with and without
GZSL, whatever calibration and held-out seen images it has; no training class ever enters a ZSL
label space; ``predict`` resolves the same space; held-out seen images that are training images
are refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from imagenet_zsl.batch.runner import run
from imagenet_zsl.evaluation.predict import excluded_classes
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.hierarchy.universe import training_wnids
from imagenet_zsl.semantics.lemma_vectors import load_class_vectors
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import resolve_label_space

ALL = 20_842


def _recipe(demo_inputs, name: str, **changes: object) -> Path:
    """One cheap model on hop1, ``label_space: all``, no plots or graph breakdown."""
    trivial = {**demo_inputs.data["models"]["trivial"], "splits": ["hop1"]}
    data = {"models": {"trivial": trivial}, "splits": ["hop1"], "label_space": "all", "plots": False}
    data.update(graph="none", label_frequency=False)
    return demo_inputs.write_recipe(name, **{**data, **changes})


def _check_all(out: Path) -> list[str]:
    """The run's 'all' space for hop1 holds 20,842 classes (those some model has no vector for
    then leave it for every model, listed) and no training class; every cell ranks against it.
    Returns the space before the prototype policy."""
    kept = read_wnid_list(out / "classes" / "label_space.hop1.txt")
    with (out / "classes_dropped.csv").open() as handle:
        gone = [r["wnid"] for r in csv.DictReader(handle) if r["set"] == "label space of hop1"]
    assert len(kept) + len(gone) == ALL
    training = set(read_wnid_list(out / "classes" / "training.txt"))
    assert set(training_wnids()) <= training and not set(kept) & training
    for cell in (out / "cells").iterdir():
        if cell.is_dir():
            topk = json.loads((cell / "topk" / "classes.json").read_text())
            assert topk["unseen"] == sorted(kept) and not set(topk["unseen"]) & training
            record = json.loads((out / "cells" / f"{cell.name}.json").read_text())
            assert record["classes"]["in_label_space"] == len(kept)
            assert record["classes"]["with_test_images"] == 15  # hop1's (trivial scores them all)
    # the legend says how many classes the space holds, not only "All"
    legend = (out / "summary.md").read_text()
    assert f"classes in the label space / with test images: hop1 {len(kept)}/15" in legend
    return sorted({*kept, *gone})


def _subset_features(source: Path, target: Path, wnids: list[str]) -> Path:
    """A copy of a feature directory holding only the images of ``wnids`` (same identity)."""
    fd = FeatureDir(source)
    block = fd.load(with_logits=fd.has_logits)
    keep = np.isin(np.asarray(fd.classes)[block.labels], wnids)
    target.mkdir(parents=True)
    logits = None if block.logits is None else block.logits[keep]
    rows = (block.features[keep], block.labels[keep], block.ids[keep], logits)
    record = write_shard(target, shard_name(0, 0), *rows)
    computed = ("shards", "files", "format", "command", "software")
    manifest = {k: v for k, v in fd.manifest.items() if k not in computed}
    write_manifest(target, {**manifest, "shards": [record]})
    return target


@pytest.fixture(scope="module")
def plain(demo_inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("spaces") / "plain"
    assert (
        run(_recipe(demo_inputs, "all_plain.yaml", gzsl=False), out, progress=False, echo=print).failed == []
    )
    return out


def test_all_is_20842_classes_without_gzsl_and_predict_agrees(plain):
    space = _check_all(plain)
    # predict on the run's model, with the backbone's ImageNet-1K head (the simulated features
    # carry its logits), resolves the same space
    seen = excluded_classes(None, True, "all")
    assert resolve_label_space("all", [], seen.wnids) == space


@pytest.mark.parametrize(
    "calibration",
    [None, False, "listed"],
    ids=["carved", "no-calibration", "listed-classes"],
)
def test_all_is_20842_classes_with_gzsl_whatever_the_calibration(demo_inputs, plain, tmp_path, calibration):
    changes: dict[str, object] = {"gzsl": True}
    if calibration == "listed":
        listed = tmp_path / "validation.txt"  # benchmark classes: images in the test features
        listed.write_text("".join(f"{w}\n" for w in read_wnid_list(demo_inputs.root / "benchmark.txt")[:5]))
        changes["calibration"] = {"classes": str(listed)}
    elif calibration is False:
        changes["calibration"] = False
    out = tmp_path / "run"
    recipe = _recipe(demo_inputs, f"all_{calibration}.yaml", **changes)
    assert run(recipe, out, progress=False, echo=print).failed == []
    assert _check_all(out) == _check_all(plain)


def test_all_is_20842_classes_with_held_out_images_of_only_some_seen_classes(demo_inputs, plain, tmp_path):
    features = plain / "features"
    some = training_wnids()[:50]
    seen = _subset_features(features / "seen_test", tmp_path / "seen50", some)
    recipe = _recipe(
        demo_inputs,
        "all_seen50.yaml",
        gzsl=True,
        calibration=False,
        features={"train": str(features / "train"), "test": str(features / "test"), "seen": str(seen)},
    )
    out = tmp_path / "run"
    assert run(recipe, out, progress=False, echo=print).failed == []
    assert _check_all(out) == _check_all(plain)
    # the GZSL seen label space is the 50 classes with held-out images; ZSL still leaves out all 1,000
    metrics = json.loads((out / "cells" / "trivial__hop1" / "metrics.json").read_text())
    assert metrics["gzsl"]["classes"]["seen"] == 50


def test_held_out_seen_images_that_are_training_images_are_refused(demo_inputs, plain, tmp_path, cli_error):
    features = plain / "features"
    same = {"train": str(features / "train"), "test": str(features / "test"), "seen": str(features / "train")}
    recipe = _recipe(demo_inputs, "seen_is_train.yaml", gzsl=True, features=same)
    cli_error(
        ["run", str(recipe), "--out", str(tmp_path / "a")], "held-out seen images are the training features"
    )
    # a copy of some training images: overlapping image ids
    copy = _subset_features(features / "train", tmp_path / "copy", training_wnids()[:3])
    overlap = {**same, "seen": str(copy)}
    recipe = _recipe(demo_inputs, "seen_overlaps.yaml", gzsl=True, features=overlap)
    cli_error(
        ["run", str(recipe), "--out", str(tmp_path / "b")], "held-out seen images are training images of"
    )


def test_a_split_holding_a_training_class_is_one_line(demo_inputs, tmp_path, cli_error):
    split = tmp_path / "with_seen.txt"
    split.write_text(
        "".join(f"{w}\n" for w in [*read_wnid_list(demo_inputs.root / "hop1.txt")[:3], "n01440764"])
    )
    sim = yaml.safe_load((demo_inputs.root / "sim.yaml").read_text())
    assert sim["train"]["classes"] == ["training"]  # n01440764 (tench) is an ILSVRC-2012 class
    recipe = _recipe(demo_inputs, "seen_split.yaml", splits=[str(split)], models={"t": {"model": "trivial"}})
    cli_error(
        ["run", str(recipe), "--out", str(tmp_path / "out")],
        f"{split}: split 'with_seen' holds 1 training classes, e.g. n01440764",
    )


def test_keep_ranks_against_all_20842_classes_and_names_the_space_in_each_record(demo_inputs, tmp_path):
    """#45 §2: with a word-vector model, ``drop`` leaves All at 18,925 classes for every model
    (20,842 less the 1,917 without a GloVe vector); ``keep`` keeps them, never predicted by the
    model without their vector, and the test images of hop1's 3 such classes are its misses. A
    class without a prototype never outranks, so ConSE's hits are the same images under both:
    hit@K(keep) x 45 images = hit@K(drop) x 36 (12 classes with vectors x 3 images)."""
    trivial = {**demo_inputs.data["models"]["trivial"], "splits": ["hop1"]}
    models = {"trivial": trivial, "conse": {"model": "conse"}}
    outs = {}
    for policy in ("keep", "drop"):
        recipe = _recipe(demo_inputs, f"{policy}.yaml", models=models, gzsl=False, missing_semantics=policy)
        outs[policy] = tmp_path / policy
        assert run(recipe, outs[policy], progress=False, echo=print).failed == []

    def cell(policy: str, model: str, name: str) -> dict:
        return json.loads((outs[policy] / "cells" / f"{model}__hop1{name}").read_text())

    # an independent count: the classes of the kept space (and hop1) that GloVe has no vector for
    space = read_wnid_list(outs["keep"] / "classes" / "label_space.hop1.txt")
    vectors = load_class_vectors("glove-6b-50d")
    assert len(space) == ALL and sum(w not in vectors for w in space) == 1917
    for model, without in (("trivial", 0), ("conse", 1917)):
        assert cell("keep", model, ".json")["label_space"] == {
            "name": "all",
            "full": ALL,
            "size": ALL,
            "without_vector": without,
            "missing_semantics": "keep",
        }
        assert cell("drop", model, ".json")["label_space"] == {
            "name": "all",
            "full": ALL,
            "size": 18_925,
            "without_vector": 1917,
            "missing_semantics": "drop",
        }
    keep, drop = cell("keep", "conse", "/metrics.json"), cell("drop", "conse", "/metrics.json")
    assert keep["count_as_miss"]["images"] == 9
    assert keep["zsl"]["images"] == 45 and drop["zsl"]["images"] == 36
    for k in ("1", "2", "5", "10", "20"):
        assert keep["zsl"]["flat"][k] * 45 == pytest.approx(drop["zsl"]["flat"][k] * 36)
    # the run's manifest carries the same record per cell; the dropped-classes list says what was kept
    manifest = json.loads((outs["keep"] / "manifest.json").read_text())
    assert [c["label_space"]["size"] for c in manifest["cells"]] == [ALL, ALL]
    with (outs["keep"] / "classes_dropped.csv").open() as handle:
        actions = {(r["set"], r["action"]) for r in csv.DictReader(handle)}
    kept = ("label space of hop1", "kept in the label space (never predicted)")
    assert actions == {("hop1", "counted as miss"), kept}
    # every model ranks against the label space its record names (review of #45 §2: ConSE's
    # metrics.json and the summary said 18,925 under keep): metrics.json, the cell record's
    # counts and the summary's label-space cell agree with the record's size, for every model
    with (outs["keep"] / "summary.csv").open() as handle:
        shown = {row["model"]: row["label space"] for row in csv.DictReader(handle)}
    for policy, size in (("keep", ALL), ("drop", 18_925)):
        for model in ("trivial", "conse"):
            record, metrics = cell(policy, model, ".json"), cell(policy, model, "/metrics.json")
            assert record["label_space"]["size"] == size
            assert metrics["label_space"]["classes_in_label_space"] == size
            assert metrics["zsl"]["classes_in_label_space"] == size
            assert record["classes"]["in_label_space"] == size
            if policy == "keep":
                assert str(size) in shown[model] or f"{size:,}" in shown[model], shown[model]
    # ConSE keeps its 1,914 distractors without a vector (and hop1's 3 misses) in the space, never
    # predicted: its top-k lists hold only classes it has a vector for
    never = keep["label_space"]["without_prototype"]
    assert never["classes"] == 1914 and never["kept_never_predicted"] is True
    topk = json.loads((outs["keep"] / "cells" / "conse__hop1" / "topk" / "classes.json").read_text())
    assert len(topk["unseen"]) == ALL - 1917 and not set(topk["unseen"]) & set(never["wnids"])
