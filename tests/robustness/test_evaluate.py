"""Bad inputs to `imagenet-zsl evaluate`: one `error:` line naming the culprit, exit 2, nothing
written, inputs byte-identical (see conftest.py's ``cli_error``)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.shard_files import shard_name, write_shard
from imagenet_zsl.features.shard_files import write_manifest as write_features_manifest
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM, SEEN, TEST, one_hot, write_feature_dir


@pytest.fixture
def bench(tmp_path: Path) -> dict:
    """Test images (3 per test class), seen images, one-hot prototypes, split files."""
    test_labels = np.repeat(np.arange(6), 3)
    seen_labels = np.repeat([8, 9], 3)
    root = tmp_path / "in"
    features = write_feature_dir(root / "features", test_labels, one_hot(test_labels))
    seen = write_feature_dir(root / "seen", seen_labels, one_hot(seen_labels), shard_rows=4)
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(root / "protos.npz")
    (root / "split.txt").write_text("\n".join(TEST) + "\n")
    return {
        "root": root,
        "features": features,
        "seen": seen,
        "protos": root / "protos.npz",
        "split": root / "split.txt",
    }


def argv(bench: dict, out: Path, *extra: str, **replace: Path) -> list[str]:
    args = {"--features": bench["features"], "--split": bench["split"], "--prototypes": bench["protos"]}
    args.update({f"--{k.replace('_', '-')}": v for k, v in replace.items()})
    flat = [str(x) for pair in args.items() for x in pair]
    return [
        "evaluate",
        *flat,
        "--graph",
        "none",
        "--no-label-frequency",
        "--no-plots",
        "--out",
        str(out),
        *extra,
    ]


def check(cli_error, bench: dict, out: Path, extra: tuple[str, ...], culprit: str, **replace: Path) -> None:
    cli_error(argv(bench, out, *extra, **replace), culprit=culprit, inputs=[bench["root"]], not_created=[out])


# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (("--block-rows", "0"), "--block-rows"),
        (("--block-rows", "-5"), "--block-rows"),
        (("--k", "0", "1"), "--k"),
        (("--gzsl", "--k", "2", "5"), "--k"),  # GZSL needs hit@1: refused before the search
        (("--gzsl",), "--seen-features"),
        (("--val-split", "x.txt"), "--val-split"),
    ],
    ids=["block-rows-0", "block-rows-negative", "k-zero", "gzsl-without-k1", "gzsl-no-seen", "val-no-gzsl"],
)
def test_bad_flag(cli_error, bench, tmp_path, extra, culprit):
    check(cli_error, bench, tmp_path / "out", extra, culprit)


def test_val_seen_fraction_out_of_range(cli_error, bench, tmp_path):
    (bench["root"] / "val.txt").write_text("n00000006\n")
    val = write_feature_dir(bench["root"] / "val", np.array([6, 6]), one_hot(np.array([6, 6])))
    extra = (
        "--gzsl",
        "--seen-features",
        str(bench["seen"]),
        "--val-split",
        str(bench["root"] / "val.txt"),
        "--val-features",
        str(val),
    )
    check(cli_error, bench, tmp_path / "out", (*extra, "--val-seen-fraction", "1.5"), "--val-seen-fraction")


# ----------------------------------------------------------------------------- --out never destroys data


@pytest.mark.parametrize("where", ["features", "inside-features", "root-of-inputs"])
def test_out_overlapping_an_input(cli_error, bench, where):
    out = {
        "features": bench["features"],
        "inside-features": bench["features"] / "run",
        "root-of-inputs": bench["root"],
    }[where]
    check(cli_error, bench, out, (), "--out")


def test_out_written_by_another_command(cli_error, bench, tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    cli_error(argv(bench, out), culprit="--out", inputs=[bench["root"], out])


def test_out_is_a_file(cli_error, bench, tmp_path):
    out = tmp_path / "file.txt"
    out.write_text("x")
    cli_error(argv(bench, out), culprit="--out", inputs=[bench["root"], out])


# ----------------------------------------------------------------------------- split and class lists


@pytest.mark.parametrize(
    ("content", "culprit"),
    [
        ("# nothing here\n\n", "split.txt"),
        ("n00000000\ndog\n", "dog"),
        ("n00000000\nn00000000\n", "n00000000"),
        ("n00000000\nn09999999\n", "n09999999"),  # not in the feature directory
    ],
    ids=["empty", "malformed-wnid", "duplicate", "class-without-features"],
)
def test_bad_split(cli_error, bench, tmp_path, content, culprit):
    bench["split"].write_text(content)
    check(cli_error, bench, tmp_path / "out", (), culprit)


def test_split_file_missing(cli_error, bench, tmp_path):
    check(cli_error, bench, tmp_path / "out", (), "nope.txt", split=bench["root"] / "nope.txt")


def test_seen_class_in_the_test_split(cli_error, bench, tmp_path):
    (bench["root"] / "seen.txt").write_text(f"{SEEN[0]}\n{TEST[2]}\n")
    extra = (
        "--gzsl",
        "--seen-features",
        str(bench["seen"]),
        "--seen-classes",
        str(bench["root"] / "seen.txt"),
    )
    check(cli_error, bench, tmp_path / "out", extra, TEST[2])


# ----------------------------------------------------------------------------- features


def test_corrupted_shard(cli_error, bench, tmp_path):
    shard = bench["features"] / "r000-s000001.features.npy"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF  # one flipped byte inside the feature values
    shard.write_bytes(bytes(data))
    check(cli_error, bench, tmp_path / "out", (), "r000-s000001.features.npy")


def test_missing_shard(cli_error, bench, tmp_path):
    (bench["features"] / "r000-s000002.features.npy").unlink()
    check(cli_error, bench, tmp_path / "out", (), "r000-s000002.features.npy")


def test_features_manifest_not_json(cli_error, bench, tmp_path):
    (bench["features"] / "manifest.json").write_text("{not json")
    check(cli_error, bench, tmp_path / "out", (), "manifest.json")


def test_nan_features_name_the_image(cli_error, bench, tmp_path):
    labels = np.repeat(np.arange(6), 2)
    features = one_hot(labels)
    features[7, 3] = np.nan
    bad = write_feature_dir(bench["root"] / "nan", labels, features, shard_rows=5)
    check(cli_error, bench, tmp_path / "out", (), "n00000003/7.JPEG", features=bad)


# ----------------------------------------------------------------------------- prototypes / model


def test_prototypes_missing(cli_error, bench, tmp_path):
    check(cli_error, bench, tmp_path / "out", (), "gone.npz", prototypes=bench["root"] / "gone.npz")


def test_prototypes_of_another_dimension(cli_error, bench, tmp_path):
    ClassVectors(CLASSES, np.ones((len(CLASSES), 4), np.float32)).save(bench["root"] / "p4.npz")
    check(cli_error, bench, tmp_path / "out", (), "p4.npz", prototypes=bench["root"] / "p4.npz")


def test_prototype_without_a_test_class(cli_error, bench, tmp_path):
    ClassVectors(CLASSES[1:], np.eye(DIM, dtype=np.float32)[1:]).save(bench["root"] / "short.npz")
    check(cli_error, bench, tmp_path / "out", (), "n00000000", prototypes=bench["root"] / "short.npz")


def test_scores_overflow(cli_error, bench, tmp_path):
    # finite features and prototypes whose products sum past float32's 3.4e38
    labels = np.repeat(np.arange(6), 2)
    ones = write_feature_dir(bench["root"] / "ones", labels, np.ones((len(labels), DIM), np.float32))
    ClassVectors(CLASSES, np.full((len(CLASSES), DIM), 1e38, np.float32)).save(bench["root"] / "huge.npz")
    check(
        cli_error,
        bench,
        tmp_path / "out",
        (),
        "overflow",
        prototypes=bench["root"] / "huge.npz",
        features=ones,
    )


def test_model_directory_missing(cli_error, bench, tmp_path):
    args = argv(bench, tmp_path / "out")
    at = args.index("--prototypes")
    args[at : at + 2] = ["--model", str(bench["root"] / "no-model")]
    cli_error(args, culprit="no-model", inputs=[bench["root"]], not_created=[tmp_path / "out"])


def test_kept_images_directory_missing(cli_error, bench, tmp_path):
    check(cli_error, bench, tmp_path / "out", ("--kept-images", str(bench["root"] / "nofilter")), "nofilter")


# ----------------------------------------------------------------------------- label space and provenance


def test_label_space_neither_named_nor_a_file(cli_error, bench, tmp_path):
    check(cli_error, bench, tmp_path / "out", ("--label-space", "everything"), "everything")


def test_split_without_any_test_image(cli_error, bench, tmp_path):
    (bench["root"] / "val.txt").write_text("n00000006\nn00000007\n")  # classes without images here
    check(cli_error, bench, tmp_path / "out", (), "val.txt", split=bench["root"] / "val.txt")


def _set_backbone(features: Path, name: str) -> None:
    path = features / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["backbone"] = {"name": name, "weights": {"sha256": name * 4}}
    path.write_text(json.dumps(manifest))


def test_model_trained_on_another_backbone(cli_error, bench, tmp_path, monkeypatch):
    from imagenet_zsl.evaluation import model_source
    from imagenet_zsl.features.feature_dir import FeatureDir
    from tests.evaluation.evaluation_fixtures import write_model_dir
    from tests.evaluation.test_run import ScaledModel

    monkeypatch.setattr(model_source, "load_model", lambda path: ScaledModel())
    _set_backbone(bench["features"], "resnet50")
    model = write_model_dir(bench["root"] / "model", feature_identity=FeatureDir(bench["features"]).identity)
    _set_backbone(bench["features"], "efficientnet")
    args = argv(bench, tmp_path / "out")
    at = args.index("--prototypes")
    args[at : at + 2] = ["--model", str(model)]
    line = cli_error(
        args, culprit=["resnet50", "efficientnet", "--allow-feature-mismatch"], inputs=[bench["root"]]
    )
    assert str(model) in line and str(bench["features"]) in line
    assert main([*args, "--allow-feature-mismatch"]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["provenance"]["feature_mismatch"][0]["allowed"] is True


# ----------------------------------------------------------------------------- report: trusted runs


def _evaluated(bench: dict, out: Path) -> Path:
    assert main(argv(bench, out)) == 0
    return out


def _rewrite_metrics(run: Path, text: str) -> None:
    """Replace metrics.json and update its manifest record, as a consistent (older or broken)
    writer would have left it."""
    (run / "metrics.json").write_text(text)
    manifest = json.loads((run / "manifest.json").read_text())
    for record in manifest["files"]:
        if record["path"] == "metrics.json":
            record["bytes"] = len(text.encode())
            record["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(manifest))


def test_report_on_metrics_missing_keys(cli_error, bench, tmp_path):
    run = _evaluated(bench, tmp_path / "run")
    metrics = json.loads((run / "metrics.json").read_text())
    del metrics["inputs"]
    _rewrite_metrics(run, json.dumps(metrics))
    line = cli_error(["report", run, "--out", tmp_path / "rep.md"], culprit="metrics.json", inputs=[run])
    assert "inputs" in line and not (tmp_path / "rep.md").exists()


@pytest.mark.parametrize("manifest_updated", [False, True], ids=["as-left", "manifest-updated"])
def test_report_on_truncated_metrics(cli_error, bench, tmp_path, manifest_updated):
    run = _evaluated(bench, tmp_path / "run")
    text = (run / "metrics.json").read_text()[:100]
    if manifest_updated:
        _rewrite_metrics(run, text)
    else:
        (run / "metrics.json").write_text(text)
    cli_error(["report", run, "--out", tmp_path / "rep.md"], culprit="metrics.json", inputs=[run])


def test_report_refuses_an_edited_metrics_file(cli_error, bench, tmp_path):
    run = _evaluated(bench, tmp_path / "run")
    path = run / "metrics.json"
    before = path.read_text()
    text = before.replace('"1": 1.0', '"1": 0.5', 1)  # same size: only the sha256 tells
    assert text != before and len(text) == len(before)
    path.write_text(text)
    line = cli_error(["report", run, "--out", tmp_path / "rep.md"], culprit="metrics.json", inputs=[run])
    assert "sha256 differs" in line


@pytest.mark.parametrize("files", ['"x"', "[1]", '[{"path": "metrics.json", "bytes": 1, "sha256": 5}]', "[]"])
def test_report_on_a_malformed_run_manifest(cli_error, bench, tmp_path, files):
    run = _evaluated(bench, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"] = json.loads(files)  # "[]": metrics.json is not listed
    (run / "manifest.json").write_text(json.dumps(manifest))
    cli_error(["report", run, "--out", tmp_path / "rep.md"], culprit="manifest.json", inputs=[run])


def test_report_on_an_older_run_manifest(cli_error, bench, tmp_path):
    run = _evaluated(bench, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["format"] = "imagenet-zsl/evaluation-v1"
    (run / "manifest.json").write_text(json.dumps(manifest))
    cli_error(["report", run, "--out", tmp_path / "rep.md"], culprit="manifest.json", inputs=[run])


def test_report_without_a_run_manifest(cli_error, bench, tmp_path):
    run = _evaluated(bench, tmp_path / "run")
    (run / "manifest.json").unlink()
    cli_error(["report", run, "--out", tmp_path / "rep.md"], culprit="manifest.json", inputs=[run])


@pytest.mark.parametrize("name", ["report.md", "table.md", "sub/table.md"])
def test_report_out_inside_an_input_run(cli_error, bench, tmp_path, name):
    run = _evaluated(bench, tmp_path / "run")
    cli_error(["report", run, "--out", run / name], culprit="--out", inputs=[run], not_created=[run / name])


def test_report_lists_a_run_given_twice_once(bench, tmp_path):
    run = _evaluated(bench, tmp_path / "run")
    out = tmp_path / "rep.md"
    assert main(["report", str(run), str(tmp_path / "." / "run"), "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| protos | split |")]
    assert len(rows) == 1
    assert len(pd.read_csv(tmp_path / "rep.csv")) == 1


# -------------------------------------------------------------------- issue 44: the --kept-images file


def _hangs_fail(seconds: int = 10):
    """Turn a read that blocks (a FIFO opened for reading) into a test failure after ``seconds``."""

    def alarm(*_):
        raise AssertionError(f"blocked for {seconds} s: a FIFO was opened")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    return previous


def test_kept_images_fifo_is_refused_without_blocking(cli_error, bench, tmp_path):
    fifo = tmp_path / "kept.csv"
    os.mkfifo(fifo)
    previous = _hangs_fail()
    try:
        line = check_line(cli_error, bench, tmp_path / "out", ("--kept-images", str(fifo)), "kept.csv")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "FIFO" in line


@pytest.mark.parametrize(
    ("content", "culprit"),
    [
        (
            "image_id,wnid\nn00000000/0.JPEG,n00000000\ncaf\xe9.JPEG,n00000000\n".encode("latin-1"),
            "kept.csv:3",
        ),
        (b'image_id,wnid\nn00000000/0.JPEG,n00000000\n"n00000000/1.JPEG,n00000000\n', "kept.csv:3"),
        (b"image_id,wnid\nn00000000/0.JPEG\n", "kept.csv:2"),
        (b"image_id,wnid\n,n00000000\n", "kept.csv:2"),
    ],
    ids=["latin-1", "unbalanced-quote", "short-row", "empty-id"],
)
def test_kept_images_csv_mistakes_name_the_line(cli_error, bench, tmp_path, content, culprit):
    kept = tmp_path / "kept.csv"
    kept.write_bytes(content)
    check(cli_error, bench, tmp_path / "out", ("--kept-images", str(kept)), culprit)


def test_kept_images_csv_is_read_as_written(bench, tmp_path):
    # quoted ids (a comma inside one), CRLF, a BOM and a blank last line: the ids the file says
    kept = tmp_path / "kept.csv"
    kept.write_bytes(
        b'\xef\xbb\xbfimage_id,wnid\r\n"n00000000/0.JPEG",n00000000\r\nn00000001/3.JPEG,n00000001\r\n\r\n'
    )
    assert main(argv(bench, tmp_path / "out", "--kept-images", str(kept))) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["parameters"]["kept_images"]["n_kept_ids"] == 2
    assert metrics["zsl"]["images"] == 2 and metrics["zsl"]["classes"] == 2


# ------------------------------------------------------------ issue 44: a failed evaluate leaves nothing


def _wrong_width_features(root: Path) -> Path:
    """A feature directory whose second shard has one column more than its manifest's dim (each
    shard's sha256 recorded, so only reading it finds the width)."""
    labels = np.repeat(np.arange(6), 2)
    root.mkdir(parents=True)
    records = []
    for index, rows in enumerate((slice(0, 6), slice(6, 12))):
        features = one_hot(labels[rows])
        if index == 1:
            features = np.concatenate([features, np.zeros((6, 1), np.float32)], axis=1)
        ids = [f"{CLASSES[lab]}/{rows.start + i}.JPEG" for i, lab in enumerate(labels[rows])]
        records.append(write_shard(root, shard_name(0, index), features, labels[rows], ids))
    write_features_manifest(root, {"classes": CLASSES, "dim": DIM, "shards": records})
    return root


@pytest.mark.parametrize("fault", ["nan", "inf", "wrong-width"])
def test_a_failed_search_leaves_no_search_cache(cli_error, bench, tmp_path, fault):
    if fault == "wrong-width":
        bad = _wrong_width_features(bench["root"] / "bad")
    else:
        labels = np.repeat(np.arange(6), 2)
        features = one_hot(labels)
        features[7, 3] = np.nan if fault == "nan" else np.inf
        bad = write_feature_dir(bench["root"] / "bad", labels, features, shard_rows=5)
    out = tmp_path / "out"
    culprit = "r000-s000001" if fault == "wrong-width" else "n00000003/7.JPEG"
    cli_error(
        argv(bench, out, features=bad),
        culprit=culprit,
        inputs=[bench["root"]],
        not_created=[out, tmp_path / ".out.search-cache"],
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def check_line(cli_error, bench: dict, out: Path, extra: tuple[str, ...], culprit: str) -> str:
    return cli_error(argv(bench, out, *extra), culprit=culprit, inputs=[bench["root"]], not_created=[out])
