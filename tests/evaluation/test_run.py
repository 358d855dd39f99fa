"""End to end: tiny feature directories → `imagenet-zsl evaluate` → metrics worked out by hand."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import model_source
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.evaluation.run import classes as classes_module
from imagenet_zsl.evaluation.run import search_sets as search_module
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT as FILTER_FORMAT
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.models.base import ZSLModel
from imagenet_zsl.scoring import hit_at_k
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import (
    CLASSES,
    DIM,
    SEEN,
    TEST,
    VAL,
    one_hot,
    write_feature_dir,
    write_model_dir,
)


def config(bench, out, **kw) -> EvaluationConfig:
    base = dict(
        features=bench["features"],
        split=bench["split"],
        out=out,
        prototypes=bench["protos"],
        ks=[1, 2, 5],
        label_frequency=False,
    )
    base.update(kw)
    return EvaluationConfig(**base)


def test_zsl_gzsl_calibration_and_breakdown_end_to_end(bench, graph, tmp_path):
    # make validation images ambiguous: val class images also score 1.5 on seen class n00000008
    val_rows = np.repeat([6, 7], 2)
    val_features = one_hot(val_rows) + 1.5 * one_hot(np.array([8]))
    test_labels = np.repeat(np.arange(6), 3)
    test_features = one_hot(test_labels)
    test_features[0] = one_hot(np.array([1]))[0]  # planted error: looks like its parent
    features = write_feature_dir(
        tmp_path / "f2", np.r_[test_labels, val_rows], np.vstack([test_features, val_features])
    )
    out = tmp_path / "run"
    m = evaluate(
        config(bench, out, features=features, gzsl=True, seen_features=bench["seen"], val_split=bench["val"]),
        graph=graph,
        progress=False,
    )

    # ZSL: 17 of 18 images right; the planted one ties 5 classes at 0 -> strict rank 5: miss at K<=5
    assert m["zsl"]["flat_strict"] == {
        "1": pytest.approx(17 / 18),
        "2": pytest.approx(17 / 18),
        "5": pytest.approx(17 / 18),
    }
    assert m["zsl"]["per_class_strict"]["1"] == pytest.approx((2 / 3 + 5) / 6)
    # expected rule: r = 1 class above, t = 4 tied -> credit (K - 1) / 5 = 0, 1/5, 4/5
    assert m["zsl"]["flat"] == {
        "1": pytest.approx(17 / 18),
        "2": pytest.approx((17 + 1 / 5) / 18),
        "5": pytest.approx((17 + 4 / 5) / 18),
    }
    assert m["zsl"]["per_class"]["1"] == pytest.approx((2 / 3 + 5) / 6)
    assert m["zsl"]["per_class"]["5"] == pytest.approx(((2 + 4 / 5) / 3 + 5) / 6)
    assert m["zsl"]["tied_images"] == 1
    assert "expected" in m["parameters"]["tie_rule"] and "strict" in m["parameters"]["tie_rule"]
    # GZSL at γ=0: every seen image right, unseen as in ZSL
    g = m["gzsl"]["per_class"]["1"]
    assert g["seen"] == pytest.approx(1.0) and g["unseen"] == pytest.approx(17 / 18)
    assert g["H"] == pytest.approx(34 / 35)
    # curve: unseen hits for γ > -1, seen hits for γ < 1 -> AUSUC = 17/18
    assert g["ausuc"] == pytest.approx(17 / 18)
    # validation: unseen val images win for γ > 0.5, seen for γ < 1 -> γ = 0.75, H = 1
    cal = m["gzsl"]["calibration"]
    assert cal["gamma"] == pytest.approx(0.75)
    assert cal["validation_H"] == pytest.approx(1.0)
    assert cal["test"]["per_class"]["1"]["H"] == pytest.approx(34 / 35)
    assert m["gzsl"]["images"]["seen"] + cal["validation_images"]["seen"] == 6
    # hierarchy: the one error predicts the true class's parent
    h = m["hierarchy"]
    assert h["counts"]["correct"] == 17 and h["counts"]["parent"] == 1
    # GZSL breakdown (joint test + seen label space): the same parent error; seen images right
    gh = m["gzsl"]["hierarchy"]
    assert gh["direct"]["unseen_images"]["counts"]["parent"] == 1
    assert gh["direct"]["unseen_images"]["counts"]["correct"] == 17
    seen_part = gh["direct"]["seen_images"]
    assert seen_part["counts"]["correct"] == seen_part["images"] == m["gzsl"]["images"]["seen"]
    assert gh["calibrated"]["gamma"] == pytest.approx(0.75)
    assert h["semantic_lower_bound"] == pytest.approx(1.0)

    files = {p.name for p in out.iterdir()}
    assert {
        "metrics.json",
        "per_class.csv",
        "report.md",
        "manifest.json",
        "hit_at_k.svg",
        "suc_curve.svg",
        "error_breakdown.svg",
        "topk",
    } <= files
    for svg in ("hit_at_k.svg", "suc_curve.svg", "error_breakdown.svg"):
        assert (out / svg).read_bytes().startswith(b'<svg xmlns="http://www.w3.org/2000/svg"')
    report = (out / "report.md").read_text()
    assert "γ = 0.75" in report and "| per-class | hit@1 |" in report
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "imagenet-zsl/evaluation-v2" and manifest["tool"] == "imagenet-zsl evaluate"
    assert {o["path"] for o in manifest["files"]} >= {"metrics.json", "topk/test.labels.npy"}
    assert manifest["parameters"]["device"] == "auto" and manifest["parameters"]["ks"] == [1, 2, 5]
    assert not (tmp_path / ".run.search-cache").exists()

    # the kept top-k lists recompute the metrics without searching again
    ids = np.load(out / "topk" / "test.unseen.ids.npy")
    scores = np.load(out / "topk" / "test.unseen.scores.npy")
    labels = np.load(out / "topk" / "test.labels.npy")
    assert ids.shape == (18, 6)
    recomputed = hit_at_k(ids, labels, [1, 2, 5], topk_scores=scores, num_classes=6)
    assert recomputed[1] == pytest.approx(m["zsl"]["flat"]["1"])

    import pandas as pd

    table = pd.read_csv(out / "per_class.csv")
    assert table["wnid"].tolist() == TEST + SEEN
    assert table.loc[0, "hit@1"] == pytest.approx(2 / 3)
    assert table["role"].tolist() == ["unseen"] * 6 + ["seen"] * 2
    assert {"population", "structural_ratio", "label_frequency", "gzsl_hit@1"} <= set(table)
    assert table.loc[table.role == "seen", "structural_ratio"].isna().all()


def test_same_inputs_same_bytes(bench, graph, tmp_path):
    a = evaluate(config(bench, tmp_path / "a"), graph=graph, progress=False)
    b = evaluate(config(bench, tmp_path / "b"), graph=graph, progress=False)
    assert a == b
    for name in ("metrics.json", "per_class.csv", "report.md", "hit_at_k.svg"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_cli_evaluate_and_errors(bench, tmp_path, capsys):
    out = tmp_path / "cli-run"
    rc = main(
        [
            "evaluate",
            "--features",
            str(bench["features"]),
            "--split",
            str(bench["split"]),
            "--prototypes",
            str(bench["protos"]),
            "--k",
            "1",
            "5",
            "--graph",
            "none",
            "--no-label-frequency",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert "hit@1 94.44%" in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text())["parameters"]["ks"] == [1, 5]

    rc = main(
        [
            "evaluate",
            "--features",
            str(bench["features"]),
            "--split",
            str(bench["split"]),
            "--prototypes",
            str(bench["protos"]),
            "--gzsl",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert rc == 2
    assert "error: --gzsl needs --seen-features" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()

    rc = main(
        [
            "evaluate",
            *("--features", str(bench["features"]), "--split", str(bench["split"])),
            *("--prototypes", str(bench["protos"]), "--device", "gpu", "--out", str(tmp_path / "y")),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "error: --device 'gpu': use cuda, cuda:N, cpu or auto" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y").exists()


def expect_error(cfg, match, graph=None):
    with pytest.raises(UserInputError, match=match):
        evaluate(cfg, graph="none" if graph is None else graph, progress=False)
    assert not cfg.out.exists()


def test_bad_input_fails_before_searching(bench, tmp_path, monkeypatch):
    def no_search(*args, **kwargs):
        raise AssertionError("searched before checking the inputs")

    monkeypatch.setattr(search_module, "search_shard", no_search)
    out = tmp_path / "out"
    # feature dimension != prototype dimension
    ClassVectors(CLASSES, np.ones((len(CLASSES), 4))).save(tmp_path / "p4.npz")
    expect_error(config(bench, out, prototypes=tmp_path / "p4.npz"), "prototypes are 4-d but")
    # an empty split
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    expect_error(config(bench, out, split=tmp_path / "empty.txt"), "split is empty")
    # GZSL without seen images
    expect_error(config(bench, out, gzsl=True), "--gzsl needs --seen-features")
    # a seen class in the test split
    (tmp_path / "overlap.txt").write_text("\n".join(SEEN[:1] + TEST[:1]) + "\n")
    expect_error(
        config(bench, out, gzsl=True, seen_features=bench["seen"], seen_classes=tmp_path / "overlap.txt"),
        "both seen and in the test",
    )
    # a split without any test image (a split class without images is a distractor, not an error)
    labels = np.repeat([6, 7], 2)
    val_only = write_feature_dir(tmp_path / "val-only", labels, one_hot(labels))
    expect_error(config(bench, out, features=val_only), "none of the 6 classes of the split")
    # a label-space spec that is neither named nor a file
    expect_error(config(bench, out, label_space="nowhere.txt"), "label space 'nowhere.txt'")
    # count_as_miss names a class outside the split
    expect_error(config(bench, out, count_as_miss=["n00000009"]), "count_as_miss: 1 classes are not in")
    # labels outside the label space of the feature directory
    labels = np.r_[np.repeat(np.arange(6), 2), 9]
    short = write_feature_dir(tmp_path / "short", labels, one_hot(labels), classes=CLASSES[:7])
    expect_error(config(bench, out, features=short), "labels outside the directory's 7 classes")
    # validation classes that are test classes
    expect_error(
        config(bench, out, gzsl=True, seen_features=bench["seen"], val_split=bench["split"]),
        "validation classes are test or seen",
    )


def test_nan_features_name_the_image(bench, tmp_path):
    labels = np.repeat(np.arange(6), 2)
    features = one_hot(labels)
    features[7, 3] = np.nan
    bad = write_feature_dir(tmp_path / "nan", labels, features, shard_rows=5)
    expect_error(config(bench, tmp_path / "out", features=bad), r"NaN or Inf \(first: n00000003/7.JPEG\)")


def test_interrupted_run_resumes_from_cached_shards(bench, tmp_path, monkeypatch):
    real = search_module.search_shard
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(search_module, "search_shard", flaky)
    cfg = config(bench, tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        evaluate(cfg, graph="none", progress=False)
    assert not cfg.out.exists()
    cache = tmp_path / ".run.search-cache"
    assert len(list(cache.glob("test-*.npz"))) == 2
    calls.clear()
    m = evaluate(cfg, graph="none", progress=False)
    n_shards = len(json.loads((bench["features"] / "manifest.json").read_text())["shards"])
    assert len(calls) == n_shards - 2  # the two finished shards were not searched again
    assert m["zsl"]["flat"]["1"] == pytest.approx(17 / 18)
    assert not cache.exists()


def test_identical_prototypes_tie_and_pretraining_leakage_is_counted(bench, tmp_path):
    # classes n00000004 and n00000005 share one prototype (e4 + e5), at different columns
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[4] = matrix[5] = one_hot(np.array([4]))[0] + one_hot(np.array([5]))[0]
    ClassVectors(CLASSES, matrix).save(tmp_path / "twins.npz")
    # the backbone's pretraining label set holds two test classes
    (tmp_path / "pretrain.txt").write_text(f"{TEST[0]}\n{TEST[3]}\nn09999999\n")
    manifest_path = bench["features"] / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["pretraining"] = {
        "model": "toy",
        "label_sets": [str(tmp_path / "pretrain.txt")],
        "web_data": False,
    }
    manifest_path.write_text(json.dumps(manifest))
    m = evaluate(
        config(bench, tmp_path / "run", prototypes=tmp_path / "twins.npz"), graph="none", progress=False
    )
    # 12 images as before (one planted error among them); the 6 twin images have r = 0, t = 1
    assert m["zsl"]["flat"]["1"] == pytest.approx((11 + 3 * 0.5 * 2) / 18)
    assert m["zsl"]["flat_strict"]["1"] == pytest.approx(11 / 18)
    # the planted image (r = 1, t = 4) earns 1/5 at hit@2; the twins 1
    assert m["zsl"]["flat"]["2"] == pytest.approx((17 + 1 / 5) / 18)
    assert m["zsl"]["duplicate_prototypes"] == 1 and m["zsl"]["tied_images"] == 7
    assert m["pretraining"]["test_classes_seen"] == 2
    assert m["pretraining"]["seen_wnids"] == [TEST[0], TEST[3]]
    table = (tmp_path / "run" / "per_class.csv").read_text().splitlines()
    assert "seen_in_pretraining" in table[0] and "hit@1_strict" in table[0]
    assert "seen in pretraining: 2 test classes" in (tmp_path / "run" / "report.md").read_text()


def test_web_data_pretraining_is_reported_as_unknown(bench, tmp_path):
    manifest_path = bench["features"] / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["pretraining"] = {"model": "ViT-B-32/laion2b", "label_sets": [], "web_data": True}
    manifest_path.write_text(json.dumps(manifest))
    m = evaluate(config(bench, tmp_path / "run"), graph="none", progress=False)
    assert m["pretraining"]["test_classes_seen"] == "unknown (web data)"


#: runs `imagenet-zsl ARGV` in a fresh interpreter; with DIE_AT=n it SIGKILLs itself when the
#: n-th shard search starts (no cleanup handler runs: a real kill -9)
_KILLABLE = """
import os, signal, sys
from imagenet_zsl.evaluation.run import search_sets
real, calls = search_sets.search_shard, []
def dying(*args, **kwargs):
    calls.append(1)
    if len(calls) == int(os.environ.get("DIE_AT", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
search_sets.search_shard = dying
from imagenet_zsl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _evaluate_process(args: list[str], die_at: int = 0) -> int:
    env = {**os.environ, "DIE_AT": str(die_at), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-c", _KILLABLE, *args], env=env, capture_output=True).returncode


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_killed_run_resumes_to_the_same_bytes(bench, tmp_path):
    out = tmp_path / "run"
    args = [
        "evaluate",
        *("--features", str(bench["features"]), "--split", str(bench["split"])),
        *("--prototypes", str(bench["protos"]), "--gzsl", "--seen-features", str(bench["seen"])),
        *("--k", "1", "2", "--graph", "none", "--no-label-frequency", "--no-plots", "--out", str(out)),
    ]
    assert _evaluate_process(args) == 0
    reference = _files(out)
    shutil.rmtree(out)
    # killed while searching the third shard: two shards are cached, nothing else is written
    assert _evaluate_process(args, die_at=3) == -signal.SIGKILL
    assert not out.exists()
    cache = tmp_path / ".run.search-cache"
    assert len(list(cache.glob("*.npz"))) == 2
    assert _evaluate_process(args) == 0
    assert _files(out) == reference
    assert not cache.exists()


class ScaledModel(ZSLModel):
    """Queries = 2 x features; prototypes = one-hot rows (a stand-in fitted model)."""

    name = "scaled"
    defaults = {"scale": 2.0}

    def fit(self, data, semantics, graph=None):
        return self

    def embed_images(self, features, logits=None):
        if features.shape[1] != DIM:
            raise ValueError(f"expected {DIM}-d features")
        return self.params["scale"] * features

    def class_prototypes(self, wnids):
        return np.eye(DIM, dtype=np.float32)[[CLASSES.index(w) for w in wnids]]


def test_model_directory_is_evaluated_through_the_registry(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(model_source, "load_model", lambda path: ScaledModel())
    model_dir = write_model_dir(tmp_path / "model")
    m = evaluate(
        config(bench, tmp_path / "run", prototypes=None, model=model_dir), graph="none", progress=False
    )
    assert m["model"]["kind"] == "model" and m["model"]["type"] == "scaled"
    assert m["model"]["name"] == "model"  # the directory names the fitted model in reports
    assert m["zsl"]["flat"]["1"] == pytest.approx(17 / 18)
    # a model that cannot embed these features: one clear line before any search
    wide = write_feature_dir(tmp_path / "wide", np.arange(6), np.zeros((6, DIM + 3)))
    expect_error(
        config(bench, tmp_path / "run2", prototypes=None, model=model_dir, features=wide),
        "model cannot embed the 13-d features",
    )


def test_val_split_without_seen_dir_holds_out_seen_images(bench, tmp_path):
    m = evaluate(
        config(
            bench,
            tmp_path / "run",
            gzsl=True,
            seen_features=bench["seen"],
            val_split=bench["val"],
            val_seen_fraction=0.5,
            seed=3,
        ),
        graph="none",
        progress=False,
    )
    held = m["gzsl"]["calibration"]["validation_images"]["seen"]
    assert 0 < held < 6 and m["gzsl"]["images"]["seen"] == 6 - held
    assert m["inputs"]["val_seen"] == {"held_out_from": "seen_features", "fraction": 0.5, "seed": 3}
    assert VAL == json.loads((tmp_path / "run" / "topk" / "classes.json").read_text())["val_unseen"]


def test_a_given_gamma_scores_as_the_gamma_chosen_here(bench, tmp_path):
    # run's carved calibration: γ chosen by another model, applied as is, and the seen rows that
    # chose it held out of the seen test images by the same seeded rule as --val-seen-fraction
    common = dict(gzsl=True, seen_features=bench["seen"], val_seen_fraction=0.5, seed=3)
    chosen = evaluate(
        config(bench, tmp_path / "chosen", val_split=bench["val"], **common), graph="none", progress=False
    )
    gamma = chosen["gzsl"]["calibration"]["gamma"]
    source = {
        "chosen_with": "calibration/x",
        "validation_H": 0.25,
        "validation_images": {"unseen": 4, "seen": 3},
    }
    given = evaluate(
        config(
            bench, tmp_path / "given", gamma=gamma, gamma_source=source, hold_calibration_rows=True, **common
        ),
        graph="none",
        progress=False,
    )
    calibration = given["gzsl"]["calibration"]
    assert calibration["gamma"] == gamma and calibration["chosen_by"] == source
    assert (
        calibration["validation_H"] == 0.25 and calibration["test"] == chosen["gzsl"]["calibration"]["test"]
    )
    assert given["gzsl"]["images"] == chosen["gzsl"]["images"]  # the same seen test images
    assert given["zsl"] == chosen["zsl"]
    # a given γ needs --gzsl, excludes --val-split and is finite
    for bad, match in (
        (dict(gamma=0.1), "only used with --gzsl"),
        (dict(gamma=0.1, val_split=bench["val"], **common), "not both"),
        (dict(gamma=float("nan"), **common), "finite"),
    ):
        with pytest.raises(UserInputError, match=match):
            evaluate(config(bench, tmp_path / "bad", **bad), graph="none", progress=False)


def test_kept_images_restricts_the_test_set(bench, graph, tmp_path):
    # the ambiguous-image filter rejected the planted error (image 0 of n00000000): hit@1 = 1
    filter_dir = tmp_path / "filter"
    filter_dir.mkdir()
    kept = [f"{CLASSES[c]}/{i}.JPEG" for i, c in enumerate(np.repeat(np.arange(6), 3)) if i != 0]
    (filter_dir / "kept.csv").write_text(
        "image_id,wnid\n" + "".join(f"{image},{image.split('/')[0]}\n" for image in kept)
    )
    write_manifest(filter_dir, format=FILTER_FORMAT, tool="imagenet-zsl images filter")
    m = evaluate(config(bench, tmp_path / "run", kept_images=filter_dir), graph=graph, progress=False)
    assert m["zsl"]["images"] == 17
    assert m["zsl"]["flat"]["1"] == pytest.approx(1.0)
    assert m["parameters"]["kept_images"]["n_kept_ids"] == 17
    (filter_dir / "kept.csv").write_text("image_id,wnid\nnot/there.JPEG,n00000000\n")
    write_manifest(filter_dir, format=FILTER_FORMAT, tool="imagenet-zsl images filter")
    with pytest.raises(UserInputError, match="none of the split's images"):
        evaluate(config(bench, tmp_path / "run2", kept_images=filter_dir), graph=graph, progress=False)


# ----------------------------------------------------------------------------- label space


def test_a_distractor_without_images_turns_a_hit_into_a_miss(bench, tmp_path):
    # images of test classes 0-4 only (3 each, all exactly their prototype); n00000005 has no image
    labels = np.repeat(np.arange(5), 3)
    features = write_feature_dir(tmp_path / "f", labels, one_hot(labels))
    # n00000005's prototype (2 e4) outscores n00000004's own (e4) on the images of n00000004
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[5] = 2 * one_hot(np.array([4]))[0]
    ClassVectors(CLASSES, matrix).save(tmp_path / "p.npz")
    m = evaluate(
        config(bench, tmp_path / "run", features=features, prototypes=tmp_path / "p.npz"),
        graph="none",
        progress=False,
    )
    assert m["zsl"]["flat"]["1"] == pytest.approx(12 / 15)
    assert m["zsl"]["per_class"]["1"] == pytest.approx(4 / 5)  # averaged over the 5 classes with images
    assert m["zsl"]["flat"]["2"] == pytest.approx(1.0)  # second behind the distractor
    assert m["zsl"]["images"] == 15
    assert m["label_space"]["spec"] == "split"
    assert m["label_space"]["classes_in_label_space"] == m["zsl"]["classes_in_label_space"] == 6
    assert m["label_space"]["classes_with_test_images"] == m["zsl"]["classes_with_test_images"] == 5
    assert m["label_space"]["split_classes_without_test_images"] == 1
    report = (tmp_path / "run" / "report.md").read_text()
    assert "6 classes in the label space, 5 with test images" in report
    table = (tmp_path / "run" / "per_class.csv").read_text().splitlines()
    assert len(table) == 1 + 5  # the distractor has no row (no test image)
    # the old behaviour, on request: a split file without the distractor gives every image right
    (tmp_path / "five.txt").write_text("\n".join(TEST[:5]) + "\n")
    m = evaluate(
        config(
            bench,
            tmp_path / "r2",
            features=features,
            prototypes=tmp_path / "p.npz",
            split=tmp_path / "five.txt",
        ),
        graph="none",
        progress=False,
    )
    assert m["zsl"]["flat"]["1"] == pytest.approx(1.0)


def test_all_label_space_ranks_against_the_universe_less_seen(bench, tmp_path, monkeypatch):
    import imagenet_zsl.splits.label_space as label_space

    # a tiny universe: the 10 toy classes and one without any prototype
    monkeypatch.setattr(label_space, "universe_wnids", lambda: [*CLASSES, "n00000099"])
    # a prototype file records no seen classes: ILSVRC-2012's are used; here they are SEEN
    monkeypatch.setattr(classes_module, "training_wnids", lambda: list(SEEN))
    # validation class n00000006 (not a split class) attracts the images of n00000000
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[6] = 2 * one_hot(np.array([0]))[0]
    ClassVectors(CLASSES, matrix).save(tmp_path / "p.npz")
    split_run = evaluate(
        config(bench, tmp_path / "split", prototypes=tmp_path / "p.npz"), graph="none", progress=False
    )
    assert split_run["zsl"]["flat"]["1"] == pytest.approx(17 / 18)  # as without the distractor
    m = evaluate(
        config(bench, tmp_path / "all", prototypes=tmp_path / "p.npz", label_space="all"),
        graph="none",
        progress=False,
    )
    # all 3 images of n00000000 now miss (2 to n00000006, the planted one to its parent as before)
    assert m["zsl"]["flat"]["1"] == pytest.approx(15 / 18)
    assert m["zsl"]["per_class"]["1"] == pytest.approx(5 / 6)
    space = m["label_space"]
    assert space["spec"] == "all"
    assert space["classes_in_label_space"] == 8  # TEST + VAL: the seen classes left, n00000099 too
    assert space["classes_with_test_images"] == 6
    assert space["without_prototype"] == {"classes": 1, "wnids": ["n00000099"]}
    assert space["seen_classes_left_out"]["classes"] == 2
    classes = json.loads((tmp_path / "all" / "topk" / "classes.json").read_text())
    assert classes["unseen"] == TEST + VAL


def test_all_label_space_is_the_same_with_and_without_gzsl(bench, tmp_path, monkeypatch):
    # #33 §2: the model records no training classes, so ILSVRC-2012's stand for them (here SEEN
    # and n00000007); the held-out seen images cover only SEEN: n00000007 must stay out with GZSL
    import imagenet_zsl.splits.label_space as label_space

    monkeypatch.setattr(label_space, "universe_wnids", lambda: list(CLASSES))
    monkeypatch.setattr(classes_module, "training_wnids", lambda: [*SEEN, VAL[1]])
    spaces = {}
    for gzsl in (False, True):
        extra = {"gzsl": True, "seen_features": bench["seen"]} if gzsl else {}
        cfg = config(bench, tmp_path / f"gzsl_{gzsl}", label_space="all", **extra)
        m = evaluate(cfg, graph="none", progress=False)
        spaces[gzsl] = json.loads((tmp_path / f"gzsl_{gzsl}" / "topk" / "classes.json").read_text())["unseen"]
        assert m["label_space"]["seen_classes_left_out"] == {
            "source": "ILSVRC-2012 classes (the model does not record its training classes)",
            "classes": 3,
        }
        assert m["label_space"]["classes_in_label_space"] == 7
    assert spaces[False] == spaces[True] == [*TEST, VAL[0]]


def test_count_as_miss_keeps_the_images_in_every_denominator(bench, tmp_path):
    m = evaluate(
        config(bench, tmp_path / "run", count_as_miss=[TEST[5]], gzsl=True, seen_features=bench["seen"]),
        graph="none",
        progress=False,
    )
    # 18 images; the 3 of n00000005 are misses, and so is the planted image at hit@1
    assert m["zsl"]["images"] == 18
    assert m["zsl"]["flat"]["1"] == pytest.approx(14 / 18)
    # planted image among the 5 classes left: r = 1 above, t = 3 tied -> hit@2 credit 1/4, hit@5 1;
    # the misses get no credit even at K = 5 = the size of the label space
    assert m["zsl"]["flat"]["2"] == pytest.approx((14 + 1 / 4) / 18)
    assert m["zsl"]["flat"]["5"] == pytest.approx(15 / 18)
    assert m["zsl"]["flat_strict"]["5"] == pytest.approx(15 / 18)
    assert m["zsl"]["per_class"]["1"] == pytest.approx((2 / 3 + 4 + 0) / 6)
    assert m["zsl"]["classes_in_label_space"] == 5 and m["zsl"]["classes_with_test_images"] == 6
    assert m["count_as_miss"] == {
        "classes": [TEST[5]],
        "images": 3,
        "classes_with_test_images": 1,
        "images_per_class": {TEST[5]: 3},
    }
    # GZSL at γ = 0: seen all right; unseen per class (2/3 + 4 + 0) / 6 = 7/9; H = 14/16
    g = m["gzsl"]["per_class"]["1"]
    assert g["seen"] == pytest.approx(1.0) and g["unseen"] == pytest.approx(7 / 9)
    assert g["H"] == pytest.approx(14 / 16)
    assert m["gzsl"]["flat"]["1"]["unseen"] == pytest.approx(14 / 18)
    import pandas as pd

    table = pd.read_csv(tmp_path / "run" / "per_class.csv")
    assert table["wnid"].tolist() == TEST + SEEN
    row = table[table.wnid == TEST[5]].iloc[0]
    assert bool(row["count_as_miss"]) and row["hit@1"] == 0 and row["images"] == 3
    # the searched images only are kept in topk/, over the 5-class label space
    classes = json.loads((tmp_path / "run" / "topk" / "classes.json").read_text())
    assert classes["unseen"] == TEST[:5] and classes["count_as_miss"] == {TEST[5]: 3}
    assert len(np.load(tmp_path / "run" / "topk" / "test.labels.npy")) == 15
    assert "counted as misses" in (tmp_path / "run" / "report.md").read_text()


# ----------------------------------------------------------------------------- provenance


def _set_backbone(features: Path, name: str, weights: str) -> None:
    path = features / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["backbone"] = {"name": name, "weights": {"sha256": weights}}
    path.write_text(json.dumps(manifest))


def _model_dir(tmp_path: Path, identity: dict | None) -> Path:
    fields = {"inputs": {"semantics": "glove-6b-50d"}}
    if identity is not None:
        fields["feature_identity"] = identity
    return write_model_dir(tmp_path / "model", **fields)


def test_features_of_another_backbone_are_refused_unless_allowed(bench, tmp_path, monkeypatch):
    from imagenet_zsl.features.feature_dir import FeatureDir

    monkeypatch.setattr(model_source, "load_model", lambda path: ScaledModel())
    _set_backbone(bench["features"], "resnet50", "aa11bb22cc33")
    trained_on = FeatureDir(bench["features"]).identity
    _set_backbone(bench["features"], "vit_b_16", "ff00ee11")
    model_dir = _model_dir(tmp_path, trained_on)
    cfg = config(bench, tmp_path / "run", prototypes=None, model=model_dir)
    expect_error(cfg, r"feature mismatch: model .*resnet50 @aa11bb22.* --features .*vit_b_16 @ff00ee11")
    m = evaluate(
        config(bench, tmp_path / "run", prototypes=None, model=model_dir, allow_feature_mismatch=True),
        graph="none",
        progress=False,
    )
    record = m["provenance"]["feature_mismatch"][0]
    assert record["allowed"] and record["differ"] == ["backbone", "weights_sha256"]
    assert m["provenance"]["features"]["backbone"] == "vit_b_16 @ff00ee11"
    assert m["provenance"]["model_features"]["backbone"] == "resnet50 @aa11bb22"
    assert m["provenance"]["class_vectors"] == "glove-6b-50d"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["feature_mismatch"] == m["provenance"]["feature_mismatch"]
    assert "feature mismatch allowed" in (tmp_path / "run" / "report.md").read_text()


def test_matching_or_unknown_identities_pass_and_are_recorded(bench, tmp_path, monkeypatch):
    from imagenet_zsl.features.feature_dir import FeatureDir

    monkeypatch.setattr(model_source, "load_model", lambda path: ScaledModel())
    _set_backbone(bench["features"], "resnet50", "aa11bb22cc33")
    _set_backbone(bench["seen"], "vit_b_16", "ff00ee11")
    model_dir = _model_dir(tmp_path, FeatureDir(bench["features"]).identity)
    m = evaluate(
        config(bench, tmp_path / "run", prototypes=None, model=model_dir), graph="none", progress=False
    )
    assert m["provenance"]["feature_mismatch"] == []
    assert m["provenance"]["features"]["identity"]["backbone"] == "resnet50"
    # seen features of another backbone than the test features (and the model): refused
    expect_error(
        config(
            bench, tmp_path / "r2", prototypes=None, model=model_dir, gzsl=True, seen_features=bench["seen"]
        ),
        "--seen-features",
    )
    # a model directory written before identities: no check, "unknown" in the record
    other = tmp_path / "old"
    write_model_dir(other / "model")
    m = evaluate(
        config(bench, tmp_path / "r3", prototypes=None, model=other / "model"), graph="none", progress=False
    )
    assert m["provenance"]["model_features"] is None and m["provenance"]["class_vectors"] == "unknown"


def test_label_space_file_adds_its_distractors(bench, tmp_path):
    # n00000006 (listed in the file, not a split class) attracts the 2 clean images of n00000000
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[6] = 2 * one_hot(np.array([0]))[0]
    ClassVectors(CLASSES, matrix).save(tmp_path / "p.npz")
    (tmp_path / "space.txt").write_text("\n".join([*TEST, VAL[0]]) + "\n")
    m = evaluate(
        config(
            bench, tmp_path / "run", prototypes=tmp_path / "p.npz", label_space=str(tmp_path / "space.txt")
        ),
        graph="none",
        progress=False,
    )
    assert m["zsl"]["flat"]["1"] == pytest.approx(15 / 18)
    assert m["label_space"]["classes_in_label_space"] == 7
    assert m["label_space"]["file"]["path"] == str(tmp_path / "space.txt")
    # a label-space file without one of the split's classes
    (tmp_path / "short.txt").write_text("\n".join(TEST[1:]) + "\n")
    expect_error(
        config(bench, tmp_path / "r2", label_space=str(tmp_path / "short.txt")), "lacks 1 of the split"
    )


def test_held_out_seen_images_that_are_the_models_training_features_are_refused(bench, tmp_path, monkeypatch):
    """Issue #45: ``evaluate --gzsl --seen-features DIR`` with DIR the features the model was fitted
    on (its manifest records their sha256) measured GZSL S on training images. The rule that ``run``
    applies (one function) refuses it, by content: the same directory, a copy at another path, and
    features sharing image ids with the training features; unrelated held-out images pass."""
    from imagenet_zsl.manifests import MANIFEST_NAME, file_record

    monkeypatch.setattr(model_source, "load_model", lambda path: ScaledModel())
    seen = bench["seen"]
    fitted_on_seen = write_model_dir(tmp_path / "m1", inputs={"features": file_record(seen / MANIFEST_NAME)})
    gz = dict(prototypes=None, gzsl=True, seen_features=seen, ks=[1])
    expect_error(
        config(bench, tmp_path / "r1", model=fitted_on_seen, **gz),
        "held-out seen images are the training features",
    )
    copy = tmp_path / "copy"
    shutil.copytree(seen, copy)
    expect_error(
        config(bench, tmp_path / "r2", model=fitted_on_seen, **{**gz, "seen_features": copy}),
        "held-out seen images are the training features",
    )
    # training features holding the first 4 held-out images again (same ids, other features)
    labels = np.repeat(np.arange(len(SEEN)) + CLASSES.index(SEEN[0]), 3)[:4]
    train = write_feature_dir(tmp_path / "train", labels, 2 * one_hot(labels), shard_rows=4)
    fitted = write_model_dir(tmp_path / "m2", inputs={"features": file_record(train / MANIFEST_NAME)})
    expect_error(
        config(bench, tmp_path / "r3", model=fitted, **gz), "4 held-out seen images are training images of"
    )
    # the test features as training features: no held-out seen image among them
    other = write_model_dir(
        tmp_path / "m3", inputs={"features": file_record(bench["features"] / MANIFEST_NAME)}
    )
    m = evaluate(config(bench, tmp_path / "r4", model=other, **gz), graph="none", progress=False)
    assert m["gzsl"]["images"]["seen"] > 0


def test_the_carved_gamma_maximises_flat_h_as_metrics_say(tmp_path, monkeypatch):
    """Rule (``evaluation/run/calibrate.py``): the carved γ maximises flat (per-image) H@1, the
    averaging metrics.json names (``h_averaging: flat``), not per-class H. By hand (the model's
    scores are twice the features): validation classes n00000000 (one image, a hit iff γ > 2) and
    n00000001 (four images, hits iff γ > 6); seen classes n00000002..4 (one image each, hits iff
    γ < 8, 4, 4). Intervals (−inf, 2), (2, 4), (4, 6), (6, 8), (8, inf): S = 1, 1, 1/3, 1/3, 0;
    flat U = 0, 1/5, 1/5, 1, 1 (flat H peaks at 1/2 in (6, 8): γ = 7); per-class U = 0, 1/2, 1/2,
    1, 1 (per-class H peaks at 2/3 in (2, 4): γ = 3)."""
    from imagenet_zsl.evaluation.run.calibrate import CarvedCalibration, choose_carved_gamma

    monkeypatch.setattr(model_source, "load_model", lambda path: ScaledModel())
    low = -5.0
    rows = [[0, low, 1, low, low]] + [[low, 0, 3, low, low]] * 4
    rows += [[0, low, 4, low, low], [0, low, low, 2, low], [0, low, low, low, 2]]
    features = np.zeros((8, DIM), np.float32)
    features[:, :5] = rows  # scores: 2 x features (ScaledModel), prototypes one-hot
    fd = write_feature_dir(tmp_path / "held", np.array([0, 1, 1, 1, 1, 2, 3, 4]), features)
    model = write_model_dir(tmp_path / "model")
    setup = CarvedCalibration(fd, TEST[2:5], TEST[:2], fraction=1.0, seed=0, m=2)
    chosen = choose_carved_gamma(model, setup)
    assert (chosen["gamma"], chosen["validation_H"], chosen["h_averaging"]) == (7.0, 0.5, "flat")
    assert chosen["validation_images"] == {"unseen": 5, "seen": 3}
    per_class = choose_carved_gamma(
        model, CarvedCalibration(fd, TEST[2:5], TEST[:2], 1.0, 0, 2, h_averaging="per_class")
    )
    assert (per_class["gamma"], per_class["validation_H"]) == (3.0, pytest.approx(2 / 3))
