"""The GBU protocol end to end on aPY (real class structure, generated features)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.attributes import protocol
from imagenet_zsl.attributes.dataset import load_dataset, packaged_dir
from imagenet_zsl.attributes.outputs import RUN_FORMAT, TABLE_FORMAT, load_results
from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory
from imagenet_zsl.attributes.table import ranking_matrix, results_frame, zsl_table
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.models.closed_form import Ridge
from imagenet_zsl.models.persistence import load_model
from imagenet_zsl.scoring import harmonic_mean


def _per_class(predicted: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean([np.mean(predicted[labels == c] == c) for c in np.unique(labels)]))


def test_ridge_run_matches_an_independent_evaluation(tmp_path, apy_root, monkeypatch):
    ds = load_dataset("APY", apy_root)
    task = ds.task("ps")
    test_images = set(task.test_seen.tolist()) | set(task.test_unseen.tolist())
    fitted_on: list[np.ndarray] = []
    real_fit = Ridge.fit
    row_of = {row.tobytes(): i for i, row in enumerate(ds.images.features)}

    def recording_fit(model, data, semantics, graph=None):
        fitted_on.append(np.array([row_of[row.tobytes()] for row in data.features]))
        return real_fit(model, data, semantics, graph)

    monkeypatch.setattr(Ridge, "fit", recording_fit)
    config = RunConfig("APY", "ridge", grid={"alpha": [1e-3, 1.0, 1e7]})
    results = run_to_directory(ds, config, tmp_path / "run")

    # hyper-parameters: three validation fits that never see a test image, then one final fit
    assert len(fitted_on) == 4
    assert all(not (set(rows.tolist()) & test_images) for rows in fitted_on[:3])
    np.testing.assert_array_equal(fitted_on[3], task.train)
    grid = results["validation"]["grid"]
    best = max(grid, key=lambda row: row["val_top1_per_class"])
    assert results["params"] == best["params"] and best["params"]["alpha"] != 1e7

    # recompute every headline number from the saved model
    model = load_model(tmp_path / "run" / "model")
    features, labels = ds.images.features, ds.images.labels
    unseen_scores = (
        model.embed_images(features[task.test_unseen])
        @ model.class_prototypes([ds.class_names[c] for c in task.unseen]).T
    )
    zsl = _per_class(task.unseen[unseen_scores.argmax(axis=1)], labels[task.test_unseen])
    assert results["zsl"]["top1_per_class"] == pytest.approx(zsl, abs=1e-9)
    assert zsl > 0.3  # far above chance (1/12): attributes carry the planted signal

    classes = np.arange(32)
    prototypes = model.class_prototypes(ds.class_names)
    gz = results["gzsl"]
    for gamma, suffix in ((0.0, ""), (gz["gamma"], "_cs")):
        shift = np.where(np.isin(classes, task.seen), gamma, 0.0)
        seen_pred = (model.embed_images(features[task.test_seen]) @ prototypes.T - shift).argmax(1)
        unseen_pred = (model.embed_images(features[task.test_unseen]) @ prototypes.T - shift).argmax(1)
        s = _per_class(seen_pred, labels[task.test_seen])
        u = _per_class(unseen_pred, labels[task.test_unseen])
        assert gz["seen" + suffix] == pytest.approx(s, abs=1e-6)
        assert gz["unseen" + suffix] == pytest.approx(u, abs=1e-6)
        assert gz["H" + suffix] == pytest.approx(harmonic_mean(s, u), abs=1e-6)
    assert 0 < gz["ausuc"] <= 1 and gz["seen"] > gz["unseen"]

    manifest = read_manifest_verified(tmp_path / "run", RUN_FORMAT)
    assert manifest["parameters"]["model"] == "ridge" and len(manifest["inputs"]) == 2
    assert manifest["tool"] == "imagenet-zsl attributes run" and "python" in manifest["software"]
    listed = {record["path"] for record in manifest["files"]}
    assert {"results.json", "validation.csv", "per_class.csv", "model/manifest.json"} <= listed
    assert len((tmp_path / "run" / "per_class.csv").read_text().splitlines()) == 33

    # a finished run with the same configuration is kept, not recomputed
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: pytest.fail("recomputed"))
    again = run_to_directory(ds, config, tmp_path / "run")
    assert again["zsl"] == results["zsl"]
    # a results.json changed after the run (same size, other bytes) is neither read nor reused
    done = tmp_path / "run" / "results.json"
    done.write_text(done.read_text().replace('"dataset": "APY"', '"dataset": "AWA"'))
    with pytest.raises(UserInputError, match=r"results\.json: changed since it was written \(sha256"):
        load_results([tmp_path / "run"])
    with pytest.raises(pytest.fail.Exception, match="recomputed"):
        run_to_directory(ds, config, tmp_path / "run")


def test_cli_runs_splits_and_tables(tmp_path, apy_root, capsys):
    out = tmp_path / "runs"
    common = ["--dataset", "APY", "--root", str(apy_root)]
    dap = ["--model", "dap", "--param", "max_iter=15", "--grid", "reg=0.1,10"]
    assert main(["attributes", "run", *common, *dap, "--out", str(out / "dap")]) == 0
    assert (
        main(
            [
                "attributes",
                "run",
                *common,
                "--model",
                "ridge",
                "--grid",
                "alpha=1",
                "--val-split",
                "2",
                "--out",
                str(out / "ridge"),
            ]
        )
        == 0
    )
    # Standard Split from user class lists (aPY's SS classes equal its PS classes)
    ss = tmp_path / "standard_split" / "APY"
    shutil.copytree(packaged_dir("APY"), ss, ignore=shutil.ignore_patterns("*.mat"))
    assert (
        main(
            [
                "attributes",
                "run",
                *common,
                "--model",
                "ridge",
                "--grid",
                "alpha=1",
                "--split",
                "ss",
                "--ss-dir",
                str(ss),
                "--out",
                str(out / "ridge_ss"),
            ]
        )
        == 0
    )
    ss_result = json.loads((out / "ridge_ss" / "results.json").read_text())
    assert ss_result["gzsl"] is None and ss_result["images"]["test_unseen"] == 7924
    # a GRAB split, then the same model on it
    assert main(["attributes", "split", *common, "--method", "ccs", "--out", str(tmp_path / "ccs")]) == 0
    assert (
        main(
            [
                "attributes",
                "run",
                *common,
                "--model",
                "ridge",
                "--grid",
                "alpha=1",
                "--att-splits",
                str(tmp_path / "ccs"),
                "--out",
                str(out / "ridge_ccs"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["attributes", "table", str(out), "--out", str(tmp_path / "table")]) == 0
    printed = capsys.readouterr().out
    assert "APY SS" in printed and "APY PS" in printed and "dap" in printed
    assert "Ranking matrix" in printed
    assert (tmp_path / "table" / "ranking_zsl.png").read_bytes()[:4] == b"\x89PNG"
    table = read_manifest_verified(tmp_path / "table", TABLE_FORMAT)
    assert sorted(Path(r["path"]).parent.name for r in table["inputs"]) == [
        "dap",
        "ridge",
        "ridge_ccs",
        "ridge_ss",
    ]
    assert main(["attributes", "table", str(out), "--out", str(tmp_path / "table")]) == 0  # its own output
    assert main(["attributes", "table", str(out), "--out", str(out / "table")]) == 2
    assert "overlaps the input" in capsys.readouterr().err and not (out / "table").exists()
    # a GRAB split folder is verified before it is read: a changed file is refused in one line
    split_json = tmp_path / "ccs" / "split.json"
    split_json.write_text(split_json.read_text() + " ")
    argv = ["attributes", "run", *common, "--model", "ridge", "--att-splits", str(tmp_path / "ccs")]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert "split.json: changed since it was written (size differs" in capsys.readouterr().err
    # bad input: one clear line, exit status 2
    assert main(["attributes", "run", *common, "--model", "nope", "--out", str(out / "x")]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert (
        main(["attributes", "run", *common, "--model", "ridge", "--param", "beta=1", "--out", str(out / "x")])
        == 2
    )
    assert "unknown hyper-parameters" in capsys.readouterr().err


def test_ranking_matrix_and_table_by_hand():
    def result(dataset, model, val_split, zsl, h=None):
        gz = None if h is None else {"seen": 0.5, "unseen": 0.5, "H": h}
        return {
            "dataset": dataset,
            "model": model,
            "split": "ps",
            "val_split": val_split,
            "zsl": {"top1_per_class": zsl},
            "gzsl": gz,
        }

    runs = [
        result("AWA2", "a", 1, 0.5, 0.3),
        result("AWA2", "b", 1, 0.4, 0.2),
        result("AWA2", "c", 1, 0.4, 0.1),
        result("AWA2", "a", 2, 0.5),
        result("AWA2", "b", 2, 0.1),
        result("AWA2", "c", 2, 0.6),
        result("CUB", "a", 1, 0.2),
        result("CUB", "b", 1, 0.3),
        result("CUB", "c", 1, 0.1),
    ]
    frame = results_frame(runs)
    ranks = ranking_matrix(frame, "zsl")
    # ties share the better rank: AWA2/1 → a 1, b 2, c 2; AWA2/2 → c, a, b; CUB → b, a, c
    assert ranks.loc["a", [1, 2, 3]].tolist() == [1, 2, 0]
    assert ranks.loc["b", [1, 2, 3]].tolist() == [1, 1, 1]
    assert ranks.loc["c", [1, 2, 3]].tolist() == [1, 1, 1]
    assert ranks["mean rank"].to_dict() == pytest.approx({"a": 5 / 3, "b": 2.0, "c": 2.0})
    assert list(ranks.index)[0] == "a"
    table = zsl_table(frame)
    assert table.loc["a", "AWA2 PS"] == pytest.approx(50.0)
    assert table.loc["c", "AWA2 PS"] == pytest.approx(50.0)  # mean over validation splits
    assert ranking_matrix(frame, "H").loc["a", 1] == 1


def test_missing_run_directory_is_reported(tmp_path):
    with pytest.raises(UserInputError, match="no results.json"):
        load_results([tmp_path])


def test_spread_over_validation_splits_and_ts_tr_rankings_by_hand():
    """GBU Fig. 3/4 additions: "mean ± std" over validation splits (sample std) and rankings by
    ts (unseen) and tr (seen) per-class accuracy."""
    from imagenet_zsl.attributes.table import render, spread_table

    def result(model, val_split, zsl, u, s):
        return {
            "dataset": "AWA2",
            "model": model,
            "split": "ps",
            "val_split": val_split,
            "zsl": {"top1_per_class": zsl},
            "gzsl": {"seen": s, "unseen": u, "H": 2 * s * u / (s + u)},
        }

    runs = [
        result("a", 1, 0.50, 0.2, 0.9),
        result("a", 2, 0.60, 0.3, 0.8),
        result("a", 3, 0.70, 0.4, 0.7),
        result("b", 1, 0.40, 0.5, 0.6),
    ]
    frame = results_frame(runs)
    spread = spread_table(frame, "zsl")
    assert spread.loc["a", "AWA2 PS"] == "60.0 ± 10.0 (n=3)"  # std of 50, 60, 70 with ddof 1
    assert spread.loc["b", "AWA2 PS"] == "40.0"
    # ts: b (0.5) beats a in every split it ran (1 setting: val 1) ; tr: a (0.9) beats b (0.6)
    ts, tr = ranking_matrix(frame, "u"), ranking_matrix(frame, "s")
    assert ts.loc["b", 1] == 1 and ts.loc["a", 2] == 1 and ts.loc["a", 1] == 2
    assert tr.loc["a", 1] == 3 and tr.loc["b", 2] == 1
    text, tables = render(runs)
    assert "GZSL ts" in text and "GZSL tr" in text and "60.0 ± 10.0 (n=3)" in text
    assert set(tables) >= {"spread_zsl", "spread_gzsl_H", "ranking_gzsl_ts", "ranking_gzsl_tr"}


def test_select_gzsl_chooses_by_validation_h(tmp_path, apy_root):
    """``--select gzsl`` (Le Cacheux et al.): the grid point with the best calibrated validation H
    wins, and each recorded score equals an independent calibration of that point's model."""
    from imagenet_zsl.models.base import create
    from imagenet_zsl.models.selection import calibration

    ds = load_dataset("APY", apy_root)
    grid = {"alpha": [1e-3, 1.0, 1e7]}
    results = run_to_directory(ds, RunConfig("APY", "ridge", grid=grid, select="gzsl"), tmp_path / "run")
    validation = results["validation"]
    assert validation["criterion"] == "val_H_calibrated"
    val_task = ds.val_task("ps", 1, seed=0)
    split = protocol.validation_split(ds, val_task, calibrate=True)
    semantics = protocol.semantics_for(Ridge, ds)
    expected = [
        calibration(create("ridge", alpha=a).fit(split.fit, semantics), split)[1] for a in grid["alpha"]
    ]
    assert [row["val_H_calibrated"] for row in validation["grid"]] == pytest.approx(expected, abs=1e-12)
    assert results["params"]["alpha"] == grid["alpha"][int(np.argmax(expected))]
    assert validation["gzsl_H"] == pytest.approx(max(expected))
    assert "val_H_calibrated" in (tmp_path / "run" / "validation.csv").read_text().splitlines()[0]
    assert "select" in RunConfig("APY", "ridge", select="gzsl").key()
    assert "select" not in RunConfig("APY", "ridge").key()  # earlier finished runs still resume
    with pytest.raises(UserInputError, match="--select gzsl"):
        run_to_directory(ds, RunConfig("APY", "ridge", split="ss", select="gzsl"), tmp_path / "ss")
    assert not (tmp_path / "ss").exists()


@pytest.fixture(scope="module")
def awa_root(tmp_path_factory):
    """AWA1 and AWA2 with the real class structure: AWA2 and "AWA1 same" share the generator seed
    (same class means: no domain shift), "shifted/AWA1" uses another (another feature space)."""
    from tests.attributes.conftest import make_root

    root = tmp_path_factory.mktemp("awa")
    make_root(root, "AWA2", dim=12)
    make_root(root / "same", "AWA1", dim=12)
    make_root(root / "shifted", "AWA1", dim=12, seed=5)
    return root


def test_cross_dataset_awa2_to_awa1_with_paired_ttest(tmp_path, awa_root, capsys):
    """GBU Table 4: train on AWA2, test on AWA1; the t-test is scipy's ttest_rel over the per-class
    accuracies written to per_class_cross.csv, recomputed here by hand."""
    from scipy import stats

    ds = load_dataset("AWA2", awa_root)
    other = load_dataset("AWA1", awa_root / "shifted")
    config = RunConfig("AWA2", "eszsl", grid={"gamma": [1.0], "lam": [1.0]}, test_dataset="AWA1")
    results = run_to_directory(ds, config, tmp_path / "run", test_ds=other)
    cross = results["cross_dataset"]
    assert cross["test_dataset"] == "AWA1" and cross["ttest"]["classes"] == 10
    assert results["zsl"]["top1_per_class"] > 0.5  # chance 0.1
    assert cross["zsl"]["top1_per_class"] < 0.35  # another feature space: transfer breaks down
    # recompute: per-class ZSL on AWA1's unseen test images with the saved model
    model = load_model(tmp_path / "run" / "model")
    task = other.task("ps")
    names = [other.class_names[c] for c in task.unseen]
    predicted = task.unseen[(model.embed_images(other.images.features[task.test_unseen])
                             @ model.class_prototypes(names).T).argmax(1)]  # fmt: skip
    truth = other.images.labels[task.test_unseen]
    per_class = np.array([np.mean(predicted[truth == c] == c) for c in task.unseen])
    assert cross["zsl"]["top1_per_class"] == pytest.approx(per_class.mean(), abs=1e-9)
    rows = cross["per_class"]
    np.testing.assert_allclose([r["cross_zsl_top1"] for r in rows], per_class)
    own = np.array([r["own_zsl_top1"] for r in rows])
    assert own.mean() == pytest.approx(results["zsl"]["top1_per_class"], abs=1e-9)
    expected = stats.ttest_rel(own, per_class)
    assert cross["ttest"]["statistic"] == pytest.approx(expected.statistic)
    assert cross["ttest"]["pvalue"] == pytest.approx(expected.pvalue) and expected.pvalue < 0.01
    assert (tmp_path / "run" / "per_class_cross.csv").is_file()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert len(manifest["inputs"]) == 4 and manifest["parameters"]["test_dataset"] == "AWA1"

    # the CLI and the table: same features (no shift) → accuracies close, the test not significant
    out = tmp_path / "cli"
    argv = ["attributes", "run", "--dataset", "AWA2", "--root", str(awa_root), "--model", "eszsl"]
    argv += ["--grid", "gamma=1", "--grid", "lam=1", "--test-dataset", "awa1"]
    assert main([*argv, "--test-root", str(awa_root / "same"), "--out", str(out)]) == 0
    assert "tested on AWA1" in capsys.readouterr().out
    same = json.loads((out / "results.json").read_text())["cross_dataset"]
    assert same["ttest"]["pvalue"] is None or same["ttest"]["pvalue"] > 0.01
    assert main(["attributes", "table", str(out), str(tmp_path / "run")]) == 0
    text = capsys.readouterr().out
    assert "Cross-dataset test per run (extra)" in text and text.count("AWA2 → AWA1") == 2
    assert "GBU's paired t-test" not in text  # it pairs methods run both ways (test_table.py)


def test_visual_semantics_are_the_class_mean_features(tmp_path, apy_root):
    """Chao et al.'s G-attr: class vector = mean feature of all the class's images (computed here
    by a loop); its runs are labelled rows of the tables and stay out of the ranking matrices."""
    from imagenet_zsl.attributes.table import render
    from imagenet_zsl.models.lampert import DAP

    ds = load_dataset("APY", apy_root)
    vectors = protocol.semantics_for(Ridge, ds, "visual")
    features, labels = ds.images.features.astype(np.float64), ds.images.labels
    for c in (0, 7, 31):
        np.testing.assert_allclose(
            vectors.get([ds.class_names[c]])[0], features[labels == c].mean(axis=0), rtol=1e-5
        )
    with pytest.raises(UserInputError, match="--semantics visual: dap needs binary attributes"):
        protocol.semantics_for(DAP, ds, "visual")
    grid = {"alpha": [1.0]}
    plain = run_to_directory(ds, RunConfig("APY", "ridge", grid=grid), tmp_path / "plain")
    visual = run_to_directory(
        ds, RunConfig("APY", "ridge", grid=grid, semantics="visual"), tmp_path / "visual"
    )
    assert "semantics" not in plain and "semantics" not in plain["config"]
    assert visual["semantics"] == "visual" and visual["config"]["semantics"] == "visual"
    assert visual["zsl"]["top1_per_class"] > plain["zsl"]["top1_per_class"]  # the idealised bound
    text, tables = render(load_results([tmp_path]))
    assert "ridge + visual semantics" in tables["zsl"].index and "ridge" in tables["zsl"].index
    assert list(tables["ranking_zsl"].index) == ["ridge"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--test-root", "elsewhere"], "error: --test-root needs --test-dataset\n"),
        (["--test-dataset", "apy"], "error: --test-dataset APY: must differ from --dataset\n"),
    ],
)
def test_run_refuses_a_cross_dataset_flag_alone_before_reading(tmp_path, capsys, extra, message):
    """``RunOptions`` checks the two cross-dataset flags as it is built: one line, nothing read."""
    argv = ["attributes", "run", "--dataset", "APY", "--root", str(tmp_path / "absent"), "--model", "ridge"]
    assert main([*argv, *extra, "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == message and not (tmp_path / "run").exists()
