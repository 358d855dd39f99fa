"""End to end: tiny feature directories → `imagenet-zsl evaluate` → metrics worked out by hand."""

import json

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import queries
from imagenet_zsl.evaluation import run as run_module
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.models.base import ZSLModel
from imagenet_zsl.scoring import hit_at_k
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM, SEEN, TEST, VAL, one_hot, write_feature_dir


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

    # ZSL: 17 of 18 images right; the planted one ties 5 classes at 0 -> rank 5: miss at K<=5
    assert m["zsl"]["flat"] == {
        "1": pytest.approx(17 / 18),
        "2": pytest.approx(17 / 18),
        "5": pytest.approx(17 / 18),
    }
    assert m["zsl"]["per_class"]["1"] == pytest.approx((2 / 3 + 5) / 6)
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
    assert h["semantic_lower_bound"] == pytest.approx(1.0)

    files = {p.name for p in out.iterdir()}
    assert {
        "metrics.json",
        "per_class.csv",
        "report.md",
        "manifest.json",
        "hit_at_k.png",
        "suc_curve.png",
        "error_breakdown.png",
        "topk",
    } <= files
    for png in ("hit_at_k.png", "suc_curve.png", "error_breakdown.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "γ = 0.75" in report and "| per-class | hit@1 |" in report
    manifest = json.loads((out / "manifest.json").read_text())
    assert {o["path"] for o in manifest["outputs"]} >= {"metrics.json", "topk/test.labels.npy"}
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
    for name in ("metrics.json", "per_class.csv", "report.md", "hit_at_k.png"):
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


def expect_error(cfg, match, graph=None):
    with pytest.raises(UserInputError, match=match):
        evaluate(cfg, graph="none" if graph is None else graph, progress=False)
    assert not cfg.out.exists()


def test_bad_input_fails_before_searching(bench, tmp_path, monkeypatch):
    def no_search(*args, **kwargs):
        raise AssertionError("searched before checking the inputs")

    monkeypatch.setattr(run_module, "_search_shard", no_search)
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
    # a split class without any image
    labels = np.repeat(np.arange(5), 2)
    no_five = write_feature_dir(tmp_path / "no5", labels, one_hot(labels))
    expect_error(config(bench, out, features=no_five), "have no images: n00000005")
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
    real = run_module._search_shard
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "_search_shard", flaky)
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
    monkeypatch.setattr(queries, "load_model", lambda path: ScaledModel())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "manifest.json").write_text("{}")
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


def test_kept_images_restricts_the_test_set(bench, graph, tmp_path):
    # the ambiguous-image filter rejected the planted error (image 0 of n00000000): hit@1 = 1
    filter_dir = tmp_path / "filter"
    filter_dir.mkdir()
    kept = [f"{CLASSES[c]}/{i}.JPEG" for i, c in enumerate(np.repeat(np.arange(6), 3)) if i != 0]
    (filter_dir / "kept.csv").write_text(
        "image_id,wnid\n" + "".join(f"{image},{image.split('/')[0]}\n" for image in kept)
    )
    m = evaluate(config(bench, tmp_path / "run", kept_images=filter_dir), graph=graph, progress=False)
    assert m["zsl"]["images"] == 17
    assert m["zsl"]["flat"]["1"] == pytest.approx(1.0)
    assert m["parameters"]["kept_images"]["n_kept_ids"] == 17
    (filter_dir / "kept.csv").write_text("image_id,wnid\nnot/there.JPEG,n00000000\n")
    with pytest.raises(UserInputError, match="none of the split's images"):
        evaluate(config(bench, tmp_path / "run2", kept_images=filter_dir), graph=graph, progress=False)
