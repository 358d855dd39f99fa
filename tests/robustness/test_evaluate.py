"""Bad inputs to `imagenet-zsl evaluate`: one `error:` line naming the culprit, exit 2, nothing
written, inputs byte-identical (see conftest.py's ``cli_error``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
