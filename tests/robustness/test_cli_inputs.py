"""Malformed inputs through the CLI (issue 35 §2-§4): each case gives a correct result or one
``error:`` line naming the file or key, exit status 2, and no harm done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.checksums import sha256_bytes, sha256_file
from imagenet_zsl.cli import main
from imagenet_zsl.features.head import BackboneHead
from imagenet_zsl.features.shard_files import encode_head, write_manifest

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ["n01440764", "n01443537"]
SHARD = "r000-s000000"


# ----------------------------------------------------------------------------- 1. configs
def _recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _population(n: str) -> str:
    return "splits:\n  - {name: p, kind: population, n: " + n + "}\n"


YAML11_CASES = {
    # YAML 1.1 read `010` as 8: a split of 8 classes where 10 were asked for
    "octal": (_population("010"), ["'010'", "would read it as 8", ":2:"]),
    "0o octal": (_population("0o10"), ["'0o10'"]),
    "hexadecimal": (_population("0x10"), ["'0x10'", "16"]),
    "binary": (_population("0b10"), ["'0b10'"]),
    "underscores": (_population("1_0"), ["'1_0'", "10"]),
    "sexagesimal": (_population("1:30"), ["'1:30'", "90"]),
    "sexagesimal float": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, max_branch_share: 0:30.5}\n",
        ["'0:30.5'"],
    ),
    "yes for true": ("splits:\n  - {name: p, kind: population, n: yes}\n", ["'yes'", "true"]),
    "off for false": ("splits:\n  - {name: off, kind: all}\n", ["'off'", "false"]),
    "float underflow": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, max_branch_share: 1e-400}\n",
        ["1e-400"],
    ),
    "float overflow": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, max_branch_share: 1e400}\n",
        ["1e400"],
    ),
    "NaN value": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, max_branch_share: .nan}\n",
        ["splits[0].max_branch_share = nan", "finite"],
    ),
    "infinite value": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, max_branch_share: .inf}\n",
        ["splits[0].max_branch_share = inf", "finite"],
    ),
    "deep list": ("splits: " + "[" * 20_000 + "]" * 20_000 + "\n", ["nested too deeply"]),
    "deep mapping": ("splits: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n", ["nested too deeply"]),
}


@pytest.mark.parametrize("case", sorted(YAML11_CASES))
def test_recipe_numbers_are_decimal_or_an_error(tmp_path, cli_error, case):
    text, culprits = YAML11_CASES[case]
    config = _recipe(tmp_path, text)
    out = tmp_path / "out"
    cli_error(
        ["splits", "build", config, "--out", out, "--no-progress"],
        culprit=[str(config), *culprits],
        inputs=[config],
        not_created=[out],
    )


def test_decimal_numbers_and_quoted_strings_still_read():
    from imagenet_zsl.config import parse_recipe_yaml

    text = "a: [0, 10, -3, +4, 1.5, 1e-3, 2.5E+2, .inf, true, False, '010', 'yes', 1e-310]\n"
    assert parse_recipe_yaml(text) == {
        "a": [0, 10, -3, 4, 1.5, 0.001, 250.0, float("inf"), True, False, "010", "yes", 1e-310]
    }


def _alias_bomb(levels: int) -> str:
    text = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    for i in range(1, levels):
        text += f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n"
    return text


@pytest.mark.parametrize(
    ("value", "culprits"),
    [
        ("{" + _alias_bomb(8).replace("\n", ", ").rstrip(", ") + "}", ["--set", "100,000"]),
        ("[" * 20_000 + "]" * 20_000, ["--set", "lam=[[["]),  # the item is quoted in full first
        ("010", ["--set", "'010'"]),
    ],
    ids=["alias bomb", "deep", "octal"],
)
def test_train_set_values(tmp_path, cli_error, value, culprits):
    out = tmp_path / "model"
    cli_error(
        [
            "train",
            "--config",
            ROOT / "configs/models/eszsl.yaml",
            "--features",
            tmp_path / "none",
            "--out",
            out,
            "--set",
            f"lam={value}",
        ],
        culprit=culprits,
        not_created=[out],
    )


# ----------------------------------------------------------------------------- 2. feature dirs
def _save_shard(out: Path, kind: str, array: np.ndarray) -> str:
    path = out / f"{SHARD}.{kind}.npy"
    np.save(path, array, allow_pickle=False)
    return sha256_file(path)


def feature_dir(  # noqa: PLR0913 - a test builder: every part can be planted
    out: Path,
    features: np.ndarray | None = None,
    labels: list[int] | None = None,
    classes: list[str] | None = None,
    ids: list[str] | None = None,
    head: BackboneHead | None = None,
    shards_twice: bool = False,
) -> Path:
    """A feature directory of 4 images (2 classes) whose manifest is valid for whatever is planted."""
    out.mkdir(parents=True)
    features = np.arange(8, dtype=np.float16).reshape(4, 2) if features is None else features
    labels = [0, 0, 1, 1] if labels is None else labels
    classes = CLASSES if classes is None else classes
    ids = [f"{CLASSES[c]}/img{i}.JPEG" for i, c in enumerate([0, 0, 1, 1])] if ids is None else ids
    digests = {
        "features": _save_shard(out, "features", features),
        "labels": _save_shard(out, "labels", np.asarray(labels, np.int32)),
        "ids": _save_shard(out, "ids", np.asarray(ids, np.str_)),
    }
    record = {"name": SHARD, "rows": len(labels), "sha256": digests}
    fields = {"classes": classes, "dim": int(features.shape[1]), "shards": [record] * (1 + shards_twice)}
    if head is not None:
        data = encode_head(head)
        atomic_write_bytes(out / "head.npz", data)
        fields["head"] = {"file": "head.npz", "sha256": sha256_bytes(data)}
    write_manifest(out, fields)
    return out


def test_a_good_feature_directory_gives_the_class_means(tmp_path, capsys):
    from imagenet_zsl.semantics.class_vectors import ClassVectors

    features = feature_dir(tmp_path / "f")
    assert (
        main(["labels", "visual-prototypes", "--features", str(features), "--out", str(tmp_path / "p.npz")])
        == 0
    )
    vectors = ClassVectors.load(tmp_path / "p.npz")
    assert vectors.wnids == CLASSES
    np.testing.assert_array_equal(vectors.matrix, [[1, 2], [5, 6]])  # (0,1)&(2,3); (4,5)&(6,7)


FEATURE_CASES = {
    "int8 features": (
        {"features": np.arange(8, dtype=np.int8).reshape(4, 2)},
        [f"{SHARD}.features.npy", "int8"],
    ),
    "bool features": ({"features": np.ones((4, 2), bool)}, [f"{SHARD}.features.npy", "bool"]),
    "complex features": (
        {"features": np.ones((4, 2), np.complex64)},
        [f"{SHARD}.features.npy", "complex64"],
    ),
    "+inf feature": (
        {"features": np.array([[0, 1], [2, np.inf], [4, 5], [6, 7]], np.float16)},
        ["NaN or Inf"],
    ),
    "-inf feature": (
        {"features": np.array([[0, 1], [2, 3], [4, 5], [6, -np.inf]], np.float32)},
        ["NaN or Inf"],
    ),
    "NaN feature": (
        {"features": np.array([[np.nan, 1], [2, 3], [4, 5], [6, 7]], np.float32)},
        ["NaN or Inf"],
    ),
    "duplicate classes": ({"classes": ["n01440764", "n01440764"]}, ["manifest.json", "n01440764 twice"]),
    # the labels say image 0 is class 0, and its id says n01440764: the manifest's list was swapped
    "swapped classes": ({"classes": ["n01443537", "n01440764"]}, [f"{SHARD}.ids.npy", "row 0", "reordered"]),
    "class not a wnid": (
        {"classes": ["n01440764", "N01443537"]},
        ["manifest.json", "'N01443537'", "not a wnid"],
    ),
    "class with a space": ({"classes": ["n01440764", " n01443537"]}, ["manifest.json", "' n01443537'"]),
    "short wnid": ({"classes": ["n1440764", "n01443537"]}, ["manifest.json", "'n1440764'"]),
    "label past the classes": ({"labels": [0, 0, 1, 2]}, [f"{SHARD}.labels.npy", "label 2"]),
    "negative label": ({"labels": [0, -1, 1, 1]}, [f"{SHARD}.labels.npy", "label -1"]),
    "shard listed twice": ({"shards_twice": True}, ["manifest.json", "listed twice"]),
}


@pytest.mark.parametrize("case", sorted(FEATURE_CASES))
def test_malformed_feature_directory(tmp_path, cli_error, case):
    planted, culprits = FEATURE_CASES[case]
    features = feature_dir(tmp_path / "f", **planted)
    out = tmp_path / "p.npz"
    cli_error(
        ["labels", "visual-prototypes", "--features", features, "--out", out],
        culprit=[str(features), *culprits],
        inputs=[features],
        not_created=[out],
    )


@pytest.mark.parametrize(
    ("weight", "bias", "classes", "culprit"),
    [
        (np.full((2, 2), np.nan, np.float32), np.zeros(2, np.float32), CLASSES, "weight holds NaN"),
        (np.ones((2, 2), np.float32), np.array([0, np.inf], np.float32), CLASSES, "bias holds NaN or inf"),
        (np.ones((2, 2), np.float32), np.zeros(2, np.float32), ["n01440764"] * 2, "twice"),
    ],
    ids=["NaN weight", "inf bias", "duplicate class"],
)
def test_malformed_stored_head(tmp_path, cli_error, weight, bias, classes, culprit):
    head = BackboneHead.__new__(BackboneHead)  # planted as stored, past the writer's checks
    object.__setattr__(head, "weight", weight)
    object.__setattr__(head, "bias", bias)
    object.__setattr__(head, "classes", classes)
    features = feature_dir(tmp_path / "f", head=head)
    out = tmp_path / "model"
    cli_error(
        ["train", "--config", ROOT / "configs/models/conse.yaml", "--features", features, "--out", out],
        culprit=[str(features / "head.npz"), culprit],
        inputs=[features],
        not_created=[out],
    )


def test_symlink_loop_in_a_feature_directory(tmp_path, cli_error):
    features = feature_dir(tmp_path / "f")
    shard = features / f"{SHARD}.features.npy"
    shard.unlink()
    shard.symlink_to(shard.name)  # the file is a link to itself
    out = tmp_path / "p.npz"
    cli_error(
        ["labels", "visual-prototypes", "--features", features, "--out", out],
        culprit=[str(shard), "loop"],
        not_created=[out],
    )


def test_feature_directory_that_is_a_symlink_loop(tmp_path, cli_error):
    loop = tmp_path / "features"
    loop.symlink_to(loop.name)
    out = tmp_path / "p.npz"
    cli_error(
        ["labels", "visual-prototypes", "--features", loop, "--out", out],
        culprit=[str(loop), "loop"],
        not_created=[out],
    )


def test_deeply_nested_manifest(tmp_path, cli_error):
    features = feature_dir(tmp_path / "f")
    (features / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    out = tmp_path / "p.npz"
    cli_error(
        ["labels", "visual-prototypes", "--features", features, "--out", out],
        culprit=[str(features / "manifest.json"), "nested too deeply"],
        not_created=[out],
    )


# ----------------------------------------------------------------------------- 7. no arguments
@pytest.mark.parametrize("argv", [[], ["splits"], ["labels"]], ids=["nothing", "splits", "labels"])
def test_no_command_is_usage_and_one_error_line(capsys, argv):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("usage: imagenet-zsl")
    assert len(lines) == 2 and lines[1].startswith("error: no command given")
    assert "--help" in lines[1]
    if argv == ["splits"]:
        assert "build" in lines[1] and "frontier" in lines[1]


# ----------------------------------------------------------------------------- 2. prototype files
def _evaluate_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """A one-hot feature directory of 4 images (2 classes) and its split file."""
    features = feature_dir(tmp_path / "f", features=np.eye(2, dtype=np.float16)[[0, 0, 1, 1]])
    split = tmp_path / "split.txt"
    split.write_text("".join(f"{w}\n" for w in CLASSES))
    return features, split


def _evaluate(features: Path, split: Path, prototypes: Path, out: Path, *extra: str) -> list[str | Path]:
    return [
        "evaluate", "--features", features, "--split", split, "--prototypes", prototypes,
        "--out", out, "--graph", "none", *extra,
    ]  # fmt: skip


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def _matrix(row: list[float], dtype: type = np.float64) -> np.ndarray:
    return np.array([[1.0, 0.0], row], dtype=dtype)


PROTOTYPE_CASES = {
    "NaN row": ({"matrix": _matrix([np.nan, 1.0])}, ["n01443537 = nan"]),
    "+inf row": ({"matrix": _matrix([np.inf, 1.0])}, ["n01443537 = inf"]),
    "-inf row": ({"matrix": _matrix([0.0, -np.inf])}, ["n01443537 = -inf"]),
    "beyond float32": ({"matrix": _matrix([1e300, 1.0])}, ["n01443537 = inf"]),
    "complex matrix": ({"matrix": _matrix([0.0, 1.0], np.complex128)}, ["'matrix' must hold real numbers"]),
    "pickled wnids": ({"wnids": np.array(CLASSES, dtype=object)}, ["pickled"]),
    "numeric wnids": ({"wnids": np.array([1, 2])}, ["'wnids' must be strings"]),
}


@pytest.mark.parametrize("case", sorted(PROTOTYPE_CASES))
def test_malformed_prototype_file(tmp_path, cli_error, case):
    planted, culprits = PROTOTYPE_CASES[case]
    features, split = _evaluate_inputs(tmp_path)
    arrays = {"wnids": np.array(CLASSES), "matrix": np.eye(2), **planted}
    prototypes = _npz(tmp_path / "p.npz", **arrays)
    out = tmp_path / "run"
    cli_error(
        _evaluate(features, split, prototypes, out),
        culprit=[str(prototypes), *culprits],
        inputs=[prototypes, features],
        not_created=[out],
    )


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ({"wnid": [1, 2], "e0": [1.0, 0.0]}, "'wnid' column must hold strings"),
        ({"wnid": CLASSES, "e0": [1.0, float("nan")]}, "n01443537 = nan"),
        ({"wnid": CLASSES, "e0": ["a", "b"]}, "column 'e0' must hold numbers"),
        ({"wnid": [CLASSES[0]] * 2, "e0": [1.0, 0.0]}, "not a class-vector parquet"),
    ],
    ids=["numeric wnids", "NaN", "text column", "duplicate wnid"],
)
def test_malformed_class_vector_parquet(tmp_path, columns, match):
    import pandas as pd

    from imagenet_zsl.errors import UserInputError
    from imagenet_zsl.semantics.vector_files import load_class_vector_file

    path = tmp_path / "v.parquet"
    pd.DataFrame(columns).to_parquet(path)
    with pytest.raises(UserInputError, match=match) as err:
        load_class_vector_file(path)
    assert str(path) in str(err.value)


def test_good_prototypes_rank_every_image_first(tmp_path, capsys):
    features, split = _evaluate_inputs(tmp_path)
    prototypes = _npz(tmp_path / "p.npz", wnids=np.array(CLASSES), matrix=np.eye(2))
    out = tmp_path / "run"
    assert main([str(a) for a in _evaluate(features, split, prototypes, out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert "hit@1 100.00%" in capsys.readouterr().out
    assert metrics["zsl"]["images"] == 4


def test_zero_row_is_refused_where_rows_are_l2_normalised():
    from imagenet_zsl.errors import UserInputError
    from imagenet_zsl.semantics.class_vectors import ClassVectors

    vectors = ClassVectors(CLASSES, _matrix([0.0, 0.0]))
    with pytest.raises(UserInputError, match=r"p\.npz: 1 classes have an all-zero vector.*n01443537"):
        vectors.require_nonzero_rows("p.npz")
    ClassVectors(CLASSES, _matrix([0.0, 1e-10])).require_nonzero_rows("p.npz")  # short is a direction
    with pytest.raises(UserInputError, match="all-zero"):  # as l2_normalize sees it: norm 0 in float32
        ClassVectors(CLASSES, _matrix([0.0, 1e-30])).require_nonzero_rows("p.npz")


def test_zero_prototype_row_under_l2_normalisation(tmp_path, cli_error):
    features, split = _evaluate_inputs(tmp_path)
    prototypes = _npz(tmp_path / "p.npz", wnids=np.array(CLASSES), matrix=_matrix([0.0, 0.0]))
    out = tmp_path / "run"
    cli_error(
        _evaluate(features, split, prototypes, out, "--l2-normalize"),
        culprit=[str(prototypes), "n01443537", "all-zero"],
        not_created=[out],
    )


# ----------------------------------------------------------------------------- 3. word vectors
WORD_VECTOR_CASES = {
    "dim 0": (b"3 0\ncairn\nterrier\ndog\n", ["vectors.txt:1", "dimension 0"]),
    "count 0": (b"0 3\n", ["vectors.txt:1", "0 vectors"]),
    "count overflows int64": (
        b"99999999999999999999 3\ncairn 1 0 0\n",
        ["vectors.txt:1", "more than the file"],
    ),
    "count needs terabytes": (b"3000000000 3\ncairn 1 0 0\n", ["vectors.txt:1", "3,000,000,000"]),
    "dim needs terabytes": (b"1 99999999999\ncairn 1 0 0\n", ["vectors.txt:1", "99,999,999,999"]),
    # Latin-1 'caf\xe9': with a header it was read as a word2vec *binary* file; without, as no format
    "Latin-1 with header": (b"2 3\ncairn 1 0 0\ncaf\xe9 0 1 0\n", ["vectors.txt:3", "not UTF-8", "0xe9"]),
    "Latin-1 GloVe": (b"caf\xe9 0 1 0\ncairn 1 0 0\n", ["vectors.txt:1", "not UTF-8", "'café'"]),
    "Latin-1 GloVe line 2": (b"cairn 1 0 0\n\xe9t\xe9 0 1 0\n", ["vectors.txt:2", "not UTF-8"]),
    # gensim stopped at the header's COUNT and dropped 'dog' without a word
    "rows past the header count": (b"1 3\ncairn 1 0 0\ndog 0 0 1\n", ["vectors.txt:1", "1 more rows"]),
    # gensim kept the first 'cairn' and added a None word with a zero vector
    "word twice": (b"2 3\ncairn 1 0 0\ncairn 0 0 1\n", ["'cairn' has two vectors", "rows 1 and 2"]),
    "word twice, GloVe": (b"cairn 1 0 0\ndog 0 1 0\ncairn 0 0 1\n", ["'cairn'", "rows 1 and 3"]),
}


@pytest.mark.parametrize("case", sorted(WORD_VECTOR_CASES))
def test_malformed_word_vector_file(tmp_path, cli_error, case):
    data, culprits = WORD_VECTOR_CASES[case]
    vectors = tmp_path / "vectors.txt"
    vectors.write_bytes(data)
    out = tmp_path / "v.npz"
    cli_error(
        ["labels", "vectors", vectors, "--out", out],
        culprit=[str(vectors), *culprits],
        inputs=[vectors],
        not_created=[out],
    )


def test_a_complex_npy_matrix_is_refused(tmp_path, cli_error):
    import pandas as pd

    folder = tmp_path / "set"
    folder.mkdir()
    np.save(folder / "vectors.npy", np.ones((2, 3), np.complex64))
    pd.DataFrame({"index": ["cairn", "dog"]}).to_parquet(folder / "vocab.parquet")
    out = tmp_path / "v.npz"
    cli_error(
        ["labels", "vectors", folder, "--out", out],
        culprit=[str(folder / "vectors.npy"), "complex64"],
        not_created=[out],
    )


def test_a_utf8_word_vector_file_with_accents_reads(tmp_path, capsys):
    from imagenet_zsl.semantics.word_vectors import load_word_vectors

    vectors = tmp_path / "vectors.txt"
    vectors.write_bytes("2 3\ncairn 1 0 0\ncafé 0 1 0\n".encode())
    kv = load_word_vectors(str(vectors))
    assert kv.index_to_key == ["cairn", "café"]
    np.testing.assert_array_equal(kv["café"], [0, 1, 0])


# ----------------------------------------------------------------------------- 5. special files
def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _run_guarded(argv: list[str | Path], seconds: float = 60) -> subprocess.CompletedProcess:
    """The command in a subprocess: a reader that blocks on a FIFO fails the test, not the suite."""
    return subprocess.run(
        [sys.executable, "-m", "imagenet_zsl.cli", *map(str, argv)],
        capture_output=True, text=True, timeout=seconds, check=False,
    )  # fmt: skip


FIFO_CASES = {
    "split file": lambda t, f: ["splits", "stats", f],
    "split of evaluate": lambda t, f: _evaluate(*_evaluate_inputs(t)[:1], f, _protos(t), t / "run"),
    "prototype file": lambda t, f: _evaluate(*_evaluate_inputs(t), f, t / "run"),
    "word-vector file": lambda t, f: ["labels", "vectors", f, "--out", t / "v.npz"],
    "recipe": lambda t, f: ["splits", "build", f, "--out", t / "out"],
    "semantics of simulate": lambda t, f: [
        "simulate",
        _simulate_config(t, f"semantics: {f}\n"),
        "--out",
        t / "s",
    ],
}


def _protos(tmp_path: Path) -> Path:
    return _npz(tmp_path / "p.npz", wnids=np.array(CLASSES), matrix=np.eye(2))


def _simulate_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(FIFO_CASES))
def test_a_fifo_is_refused_before_it_is_opened(tmp_path, case):
    fifo = _fifo(tmp_path, "fifo.txt")
    result = _run_guarded(FIFO_CASES[case](tmp_path, fifo))
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and str(fifo) in errors[0], result.stderr
    if case != "split of evaluate":  # evaluate checks its --split itself (says "not found")
        assert "FIFO" in errors[0], result.stderr


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_not_a_split_file(cli_error, device):
    if not Path(device).exists():
        pytest.skip(f"no {device}")
    cli_error(["splits", "stats", device], culprit=[device, "device"])


# ----------------------------------------------------------------------------- 5. split lists
SPLIT_LINE_CASES = {
    "one line, spaces": ("n01440764 n01443537 n01484850\n", ["split.txt:1", "3 wnids", "one wnid a line"]),
    "one line, commas": ("n01440764,n01443537\n", ["split.txt:1", "2 wnids"]),
    "one line, tabs": ("n01440764\tn01443537\n", ["split.txt:1", "2 wnids"]),
    "second line joined": ("n01440764\nn01443537, n01484850\n", ["split.txt:2", "2 wnids"]),
}


@pytest.mark.parametrize("case", sorted(SPLIT_LINE_CASES))
def test_a_list_on_one_line_is_not_read_as_its_first_class(tmp_path, cli_error, case):
    text, culprits = SPLIT_LINE_CASES[case]
    split = tmp_path / "split.txt"
    split.write_text(text)
    cli_error(["splits", "stats", split], culprit=[str(split), *culprits], inputs=[split])


def test_extra_columns_that_are_not_wnids_are_still_ignored(tmp_path):
    from imagenet_zsl.splits.io import read_wnid_list

    split = tmp_path / "split.txt"
    split.write_text("n01440764 tench\nn01443537\t42  # goldfish n01484850 in a comment\n")
    assert read_wnid_list(split) == ["n01440764", "n01443537"]


def test_a_million_line_split_is_read_in_linear_time(tmp_path):
    """Counted, not timed: the reader touches each line a bounded number of times (a quadratic
    one, e.g. a list membership test per line, does 10**12 steps on this file)."""
    from imagenet_zsl.splits import io as split_io

    split = tmp_path / "big.txt"
    split.write_text("".join(f"n{i:08d}\n" for i in range(1_000_000)))
    calls = 0
    real = split_io.WNID_RE

    class Counting:
        def match(self, text: str):  # noqa: ANN202
            nonlocal calls
            calls += 1
            return real.match(text)

    split_io.WNID_RE = Counting()
    try:
        wnids = split_io.read_wnid_list(split)
    finally:
        split_io.WNID_RE = real
    assert len(wnids) == 1_000_000 and wnids[-1] == "n00999999"
    assert calls == 1_000_000


# ----------------------------------------------------------------------------- 5. count tables
COUNT_CASES = {
    "superscript digit": ("cairn\t1²\n".encode(), ["counts.tsv:1", "'1²'"]),
    "Arabic-Indic digits": ("cairn\t٣\n".encode(), ["counts.tsv:1", "'٣'"]),
    "Latin-1": (b"caf\xe9\t3\n", ["counts.tsv", "not UTF-8"]),
    "binary": (bytes(range(256)) * 4, ["counts.tsv"]),
}


@pytest.mark.parametrize("case", sorted(COUNT_CASES))
def test_malformed_word_count_table(tmp_path, cli_error, case):
    data, culprits = COUNT_CASES[case]
    counts = tmp_path / "counts.tsv"
    counts.write_bytes(data)
    (tmp_path / "tiny.txt").write_text("cairn 1 0 0\nterrier 0 1 0\n")
    config = tmp_path / "labels.yaml"
    config.write_text(
        "vectors: {source: tiny.txt, format: glove}\n"
        "frequency: {source: counts.tsv, reference_tokens: null}\n"
    )
    classes = tmp_path / "classes.txt"
    classes.write_text("n02084071\n")
    out = tmp_path / "out"
    cli_error(
        ["labels", "build", config, "--classes", classes, "--out", out],
        culprit=[str(counts), *culprits],
        inputs=[counts],
        not_created=[out],
    )


# ----------------------------------------------------------------------------- 4. simulate
@pytest.fixture(scope="module")
def sim_inputs(tmp_path_factory) -> Path:
    """Class vectors of the training classes and two test classes, and their test list."""
    from imagenet_zsl.hierarchy.universe import training_wnids
    from imagenet_zsl.semantics.class_vectors import ClassVectors

    root = tmp_path_factory.mktemp("sim")
    test = ["n01443537", "n02084071"]
    wnids = sorted(set(training_wnids()) | set(test))
    rng = np.random.default_rng(0)
    ClassVectors(wnids, rng.normal(size=(len(wnids), 4))).save(root / "vectors.npz")
    (root / "test.txt").write_text("".join(f"{w}\n" for w in test))
    return root


SIMULATE_CASES = {
    "no test images": ("test: {classes: [test.txt], images_per_class: 0}\n", [], ["test.images_per_class"]),
    "infinite noise": ("noise: .inf\n", [], ["sim.yaml", "noise = inf"]),
    "NaN step": ("step: .nan\n", [], ["sim.yaml", "step = nan"]),
    "step of 1e308": ("step: 1.0e308\n", [], ["sim.yaml", "step = 1e+308", "1000000"]),
    "huge noise": ("noise: 1.0e6\nlogits: none\n", [], ["features reach", "float16"]),
    "logits beyond float16": ("noise: 1.0e-6\n", [], ["logits reach", "raise noise"]),
    "negative seed": ("", ["--seed", "-1"], ["seed", "0..4294967295"]),
    "seed of 2**70": ("", ["--seed", str(2**70)], ["seed", "0..4294967295"]),
    "seed 2**70 in the recipe": (f"seed: {2**70}\n", [], ["sim.yaml", "seed"]),
}


@pytest.mark.parametrize("case", sorted(SIMULATE_CASES))
def test_simulate_values_that_cannot_be_simulated(sim_inputs, tmp_path, cli_error, case):
    text, flags, culprits = SIMULATE_CASES[case]
    config = tmp_path / "sim.yaml"
    base = (
        f"dim: 4\nsemantics: {sim_inputs / 'vectors.npz'}\n"
        + ("" if "logits:" in text else "logits: train\n")
        + "train: {classes: [training], images_per_class: 2}\nseen_test: {images_per_class: 0}\n"
    )
    if "test:" not in text:
        base += f"test: {{classes: [{sim_inputs / 'test.txt'}], images_per_class: 2}}\n"
    else:
        text = text.replace("test.txt", str(sim_inputs / "test.txt"))
    config.write_text(base + text)
    out = tmp_path / "out"
    cli_error(
        ["simulate", config, "--out", out, *flags], culprit=culprits, inputs=[config], not_created=[out]
    )


# ----------------------------------------------------------------------------- 4. report --out
@pytest.fixture
def one_run(tmp_path) -> Path:
    features, split = _evaluate_inputs(tmp_path)
    run = tmp_path / "run"
    assert main([str(a) for a in _evaluate(features, split, _protos(tmp_path), run)]) == 0
    return run


def test_check_out_stem_refuses_a_directory_or_a_device(tmp_path):
    from imagenet_zsl.errors import UserInputError
    from imagenet_zsl.safe_output import check_out_stem

    written = [tmp_path / "r.md", tmp_path / "r.csv"]
    with pytest.raises(UserInputError, match=r"is a directory; give a file name, e.g. --out .*report"):
        check_out_stem(tmp_path, written)
    with pytest.raises(UserInputError, match="not a regular file"):
        check_out_stem(_fifo(tmp_path, "pipe"), written)
    with pytest.raises(UserInputError, match="not a regular file"):
        check_out_stem("/dev/full", written)
    check_out_stem(tmp_path / "report", written)  # a new name: fine


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_report_out_that_is_a_directory_or_special_file(one_run, tmp_path, cli_error, kind):
    out = tmp_path / "tables"
    out.mkdir() if kind == "directory" else os.mkfifo(out)
    cli_error(
        ["report", one_run, "--out", out],
        culprit=[f"--out {out}"],
        inputs=[one_run],
        not_created=[tmp_path / "tables.md", tmp_path / "tables.csv", tmp_path / "tables.tex"],
    )


# ----------------------------------------------------------------------------- 6. nothing deleted
def test_evaluate_over_its_own_output_keeps_a_file_the_user_added(one_run, tmp_path, cli_error, capsys):
    features, split = tmp_path / "f", tmp_path / "split.txt"
    argv = _evaluate(features, split, tmp_path / "p.npz", one_run)
    assert main([str(a) for a in argv]) == 0  # its own output, nothing added: replaced
    notes = one_run / "notes.txt"
    notes.write_text("my notes\n")
    line = cli_error(argv, culprit=[f"--out {one_run}", "notes.txt", "'evaluate' did not write"])
    assert "move it out" in line
    assert notes.read_text() == "my notes\n"
    (one_run / "mine").mkdir()  # an empty folder of the user's counts too
    notes.unlink()
    cli_error(argv, culprit=["mine"])
    (one_run / "mine").rmdir()
    assert main([str(a) for a in argv]) == 0


def test_simulate_over_its_own_output_keeps_a_file_the_user_added(sim_inputs, tmp_path, cli_error):
    config = tmp_path / "sim.yaml"
    config.write_text(
        f"dim: 4\nsemantics: {sim_inputs / 'vectors.npz'}\nlogits: none\n"
        "train: {classes: [training], images_per_class: 1}\nseen_test: {images_per_class: 0}\n"
        f"test: {{classes: [{sim_inputs / 'test.txt'}], images_per_class: 1}}\n"
    )
    out = tmp_path / "sim"
    assert main(["simulate", str(config), "--out", str(out)]) == 0
    assert main(["simulate", str(config), "--out", str(out)]) == 0  # its own output: replaced
    added = out / "test" / "README"  # inside a part: the top manifest lists every part's files
    added.write_text("keep me\n")
    cli_error(["simulate", config, "--out", out], culprit=[f"--out {out}", "test/README"], inputs=[out])
    assert added.read_text() == "keep me\n"


def test_foreign_files_lists_what_the_manifest_does_not(tmp_path):
    from imagenet_zsl.safe_output import foreign_files

    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("manifest.json", "x.csv", "a/b/y.npy", "a/z.txt", "n.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "x.csv")
    manifest = {"files": [{"path": "x.csv"}, {"path": "a/b/y.npy"}]}
    assert foreign_files(tmp_path, manifest) == ["a/z.txt", "empty", "link", "n.txt"]
    assert foreign_files(tmp_path, {"files": "garbage"}) == sorted(
        ["a", "a/b", "a/b/y.npy", "a/z.txt", "empty", "link", "n.txt", "x.csv"]
    )


# ----------------------------------------------------------------------------- 7. seeds
@pytest.mark.parametrize("text", ["-1", "4294967296", str(2**70), "2e70", "1.5", "x"])
def test_a_seed_outside_0_to_2_32_is_a_usage_error(capsys, text):

    from imagenet_zsl.cli import ArgumentParser, _UsageError
    from imagenet_zsl.cli_types import seed

    parser = ArgumentParser(prog="imagenet-zsl x")
    parser.add_argument("--seed", type=seed)
    with pytest.raises(_UsageError, match=r"argument --seed: .*(0\.\.4294967295|not an integer)"):
        parser.parse_args(["--seed", text])
    assert parser.parse_args(["--seed", "4294967295"]).seed == 2**32 - 1
    assert parser.parse_args(["--seed", "0"]).seed == 0


def test_recipe_seed_bound_is_the_command_line_bound():
    from imagenet_zsl.cli_types import MAX_SEED as CLI_MAX
    from imagenet_zsl.config import MAX_SEED, Config, Seed, validate_config
    from imagenet_zsl.errors import UserInputError

    class Recipe(Config):
        seed: Seed = 0

    assert CLI_MAX == MAX_SEED == 2**32 - 1
    assert validate_config({"seed": MAX_SEED}, Recipe, "r.yaml").seed == MAX_SEED
    for bad in (-1, MAX_SEED + 1, 2**70):
        with pytest.raises(UserInputError, match=r"r\.yaml: seed"):
            validate_config({"seed": bad}, Recipe, "r.yaml")


# ----------------------------------------------------------------------------- 5. image-count tables
@pytest.mark.parametrize(
    ("data", "culprit"),
    [("n02084071\t1²\n".encode(), "counts.tsv:1"), (bytes(range(128, 256)), "not UTF-8"), (None, "FIFO")],
    ids=["superscript digit", "binary", "fifo"],
)
def test_malformed_image_count_table(tmp_path, data, culprit):
    split = tmp_path / "split.txt"
    split.write_text("n02084071\n")
    counts = tmp_path / "counts.tsv"
    os.mkfifo(counts) if data is None else counts.write_bytes(data)
    result = _run_guarded(["splits", "stats", split, "--counts", counts], seconds=20)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert str(counts) in errors[0] and culprit in errors[0]


def test_an_out_directory_whose_manifest_is_a_fifo(tmp_path):
    features, split = _evaluate_inputs(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / "manifest.json")
    result = _run_guarded(_evaluate(features, split, _protos(tmp_path), out))
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"--out {out} exists and is not an output of 'evaluate'" in errors[0]
