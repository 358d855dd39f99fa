"""Bad inputs to `labels build|vectors|encode|sense`: one `error:` line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

GLOVE = "cairn 1 0 0\nterrier 0 1 0\ndog 0 0 1\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A tiny GloVe file and a valid labels config that reads it."""
    (tmp_path / "tiny.txt").write_text(GLOVE)
    (tmp_path / "labels.yaml").write_text("vectors: {source: tiny.txt, format: glove}\n")
    return tmp_path


def _config(folder: Path, text: str | bytes) -> Path:
    path = folder / "bad.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --------------------------------------------------------------------------- config files
CONFIG_CASES = [
    ("vectors: {source: tiny.txt, format: glove}\nfrequency: {min_cont: 50}\n", "min_cont"),
    ("vectros: tiny.txt\n", "vectros"),
    ("vectors: {source: tiny.txt, sourse: x}\n", "sourse"),
    ("polysemy: {temprature: 0.2}\n", "temprature"),
    ("polysemy: {min_confidence: 2}\n", "polysemy.min_confidence = 2"),
    ("polysemy: {min_confidence: -0.1}\n", "polysemy.min_confidence = -0.1"),
    ("polysemy: {order_decay: 0}\n", "polysemy.order_decay = 0"),
    ("polysemy: {temperature: hot}\n", "polysemy.temperature = 'hot'"),
    ("frequency: {min_count: -5}\n", "frequency.min_count = -5"),
    ("frequency: {min_zipf: 12}\n", "frequency.min_zipf = 12"),
    ("frequency: {reference_tokens: 0}\n", "frequency.reference_tokens = 0"),
    ("lemma_rule: median\n", "lemma_rule = 'median'"),
    ("normalize: maybe\n", "normalize = 'maybe'"),
    ("vectors: {source: tiny.txt, format: excel}\n", "vectors.format = 'excel'"),
    ("vectors: {source: tiny.txt, dim: -3}\n", "vectors.dim = -3"),
    ("vectors: [tiny.txt]\n", "vectors"),
    ("polysemy: [\n", "invalid YAML"),
    ("vectors: {source: tiny.txt\n", "invalid YAML"),
    ("- vectors\n- tiny.txt\n", "must be a mapping"),
    (b"vectors: t\xe9.txt\n", "not UTF-8"),  # a Latin-1 byte
]


@pytest.mark.parametrize(("text", "culprit"), CONFIG_CASES)
def test_build_bad_config(cli_error, folder: Path, text: str | bytes, culprit: str) -> None:
    config = _config(folder, text)
    out = folder / "out"
    cli_error(["labels", "build", config, "--out", out], [culprit, "bad.yaml"], [folder], [out])


@pytest.mark.parametrize(("text", "culprit"), CONFIG_CASES[:6])
def test_vectors_bad_config(cli_error, folder: Path, text: str, culprit: str) -> None:
    config = _config(folder, text)
    out = folder.parent / f"{folder.name}-cv.npz"
    cli_error(["labels", "vectors", config, "--out", out], [culprit, "bad.yaml"], [folder], [out])


def test_sense_bad_config(cli_error, folder: Path) -> None:
    config = _config(folder, "polysemy: {temprature: 0.2}\n")
    cli_error(["labels", "sense", "cairn", "--config", config], "temprature", [folder])


def test_build_missing_config(cli_error, tmp_path: Path) -> None:
    config = tmp_path / "nope.yaml"
    cli_error(["labels", "build", config, "--out", tmp_path / "out"], str(config), [], [tmp_path / "out"])


# --------------------------------------------------------------------------- vector files
@pytest.mark.parametrize(
    ("vectors", "culprit"),
    [
        ("cairn 1 0 0\nterrier 0 1\n", "tiny.txt:2"),  # a short row
        ("cairn 1 0 0\nterrier 0 one 0\n", "tiny.txt:2"),  # not a number
        ("cairn 1 0 0\nterrier nan 0 0\n", "tiny.txt:2"),  # NaN
        ("", "tiny.txt"),  # empty file
    ],
)
def test_bad_vector_file(cli_error, folder: Path, vectors: str, culprit: str) -> None:
    (folder / "tiny.txt").write_text(vectors)
    out = folder.parent / f"{folder.name}-cv.npz"
    cli_error(["labels", "vectors", folder / "labels.yaml", "--out", out], culprit, [folder], [out])


def test_missing_vector_file(cli_error, folder: Path) -> None:
    config = _config(folder, "vectors: {source: missing.txt, format: glove}\n")
    out = folder / "out"
    cli_error(["labels", "build", config, "--out", out], "missing.txt", [folder], [out])


def test_vector_dim_mismatch(cli_error, folder: Path) -> None:
    config = _config(folder, "vectors: {source: tiny.txt, format: glove, dim: 50}\n")
    out = folder.parent / f"{folder.name}-cv.npz"
    cli_error(["labels", "vectors", config, "--out", out], ["tiny.txt", "dim"], [folder], [out])


# --------------------------------------------------------------------------- wnid lists
BAD_LISTS = [
    ("n02084071\ndog\n", "classes.txt:2"),
    ("n02084071\nN01443537\n", "classes.txt:2"),
    ("n02084071\nn02084071\n", "classes.txt:2"),
    ("n0208407\n", "classes.txt:1"),
]


@pytest.mark.parametrize(("text", "culprit"), BAD_LISTS)
def test_build_malformed_class_list(cli_error, folder: Path, text: str, culprit: str) -> None:
    classes = folder / "classes.txt"
    classes.write_text(text)
    out = folder.parent / f"{folder.name}-out"
    argv = ["labels", "build", folder / "labels.yaml", "--classes", classes, "--out", out]
    cli_error(argv, culprit, [folder], [out])


@pytest.mark.parametrize(("text", "culprit"), BAD_LISTS)
def test_encode_malformed_class_list(cli_error, tmp_path: Path, text: str, culprit: str) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text(text)
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "sentence:x", "--classes", classes, "--out", out]
    cli_error(argv, culprit, [classes], [out])


def test_build_class_list_not_found(cli_error, folder: Path) -> None:
    classes = folder / "nope.txt"
    out = folder.parent / f"{folder.name}-out"
    cli_error(
        ["labels", "build", folder / "labels.yaml", "--classes", classes, "--out", out],
        "nope.txt",
        [folder],
        [out],
    )


# --------------------------------------------------------------------------- outputs
def test_build_out_is_the_config_folder(cli_error, folder: Path) -> None:
    cli_error(["labels", "build", folder / "labels.yaml", "--out", folder], "--out", [folder])


def test_build_out_contains_the_inputs(cli_error, folder: Path) -> None:
    config = folder / "labels.yaml"
    cli_error(["labels", "build", config, "--out", folder.parent], "--out", [folder])


def test_build_out_is_someone_elses_folder(cli_error, folder: Path, tmp_path_factory) -> None:
    other = tmp_path_factory.mktemp("other")
    (other / "precious.txt").write_text("keep me")
    cli_error(["labels", "build", folder / "labels.yaml", "--out", other], "--out", [folder, other])


def test_build_out_is_a_file(cli_error, folder: Path) -> None:
    cli_error(["labels", "build", folder / "labels.yaml", "--out", folder / "tiny.txt"], "--out", [folder])


@pytest.mark.parametrize("name", ["tiny.txt", "labels.yaml"])
def test_vectors_out_is_an_input(cli_error, folder: Path, name: str) -> None:
    out = folder / name
    out_npz = out.with_suffix(".npz")
    # same name with the right suffix is fine; the input itself (renamed .npz target) must be refused
    (folder / "labels.yaml").write_text(f"vectors: {{source: {out_npz.name}, format: glove}}\n")
    out_npz.write_text(GLOVE)
    cli_error(["labels", "vectors", folder / "labels.yaml", "--out", out_npz], ["--out", "input"], [folder])


@pytest.mark.parametrize("out", ["cv.csv", "cv", "cv.npy"])
def test_vectors_out_bad_suffix(cli_error, folder: Path, out: str) -> None:
    target = folder.parent / f"{folder.name}-{out}"
    cli_error(["labels", "vectors", folder / "labels.yaml", "--out", target], "--out", [folder], [target])


def test_vectors_out_is_a_directory(cli_error, folder: Path, tmp_path_factory) -> None:
    target = tmp_path_factory.mktemp("dir") / "cv.npz"
    target.mkdir()
    cli_error(["labels", "vectors", folder / "labels.yaml", "--out", target], "--out", [folder, target])


# --------------------------------------------------------------------------- encode flags
@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (["--encoder", "clp:ViT-B-32/openai"], "clp"),
        (["--encoder", "ViT-B-32"], "--encoder"),
        (["--encoder", "sentence:x", "--template", "a photo"], "--template"),
        (["--encoder", "sentence:x", "--template", "{} and {}"], "--template"),
        (["--encoder", "sentence:x", "--batch-size", "0"], "--batch-size"),
        (["--encoder", "sentence:x", "--batch-size", "-4"], "--batch-size"),
        (["--encoder", "sentence:x", "--weights", "/nonexistent/model"], "--weights"),
        (["--encoder", "sentence:x", "--device", "tpu"], "--device"),
    ],
)
def test_encode_bad_flag(cli_error, tmp_path: Path, extra: list[str], culprit: str) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text("n02084071\n")
    out = tmp_path / "cv.npz"
    cli_error(["labels", "encode", *extra, "--classes", classes, "--out", out], culprit, [classes], [out])


def test_encode_out_is_the_class_list(cli_error, tmp_path: Path) -> None:
    classes = tmp_path / "classes.npz"
    classes.write_text("n02084071\n")
    argv = ["labels", "encode", "--encoder", "sentence:x", "--classes", classes, "--out", classes]
    cli_error(argv, ["--out", "input"], [classes])


def test_encode_class_not_in_wordnet(cli_error, tmp_path: Path) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text("n02084071\nn99999999\n")
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "sentence:x", "--classes", classes, "--out", out]
    cli_error(argv, "n99999999", [classes], [out])


def test_encode_clip_weights_never_downloaded(cli_error, tmp_path: Path) -> None:
    pytest.importorskip("open_clip")
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "clip:RN50/yfcc15m", "--device", "cpu", "--out", out]
    cli_error(argv, ["RN50/yfcc15m", "--weights"], [], [out])


# --------------------------------------------------------------------------- issue 26: never unpickle
def _malicious_pickle(path: Path, marker: Path) -> Path:
    """A pickle that creates ``marker`` when unpickled (a stand-in for ``os.system``)."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path.write_bytes(pickle.dumps(Payload(), protocol=4))
    return path


@pytest.mark.parametrize("name", ["v.kv", "v.model", "words.txt"])  # detected by its bytes, not its name
def test_vectors_never_unpickle_a_kv_file(cli_error, tmp_path: Path, name: str) -> None:
    marker = tmp_path / "MARKER"
    vectors = _malicious_pickle(tmp_path / name, marker)
    out = tmp_path / "v.npz"
    line = cli_error(["labels", "vectors", vectors, "--out", out], [name, "--trust-pickle"], [vectors], [out])
    assert "executes any code" in line
    assert not marker.exists()


@pytest.mark.parametrize("fmt", ["auto", "gensim"])
def test_build_never_unpickles_the_configs_vectors(cli_error, tmp_path: Path, fmt: str) -> None:
    marker = tmp_path / "MARKER"
    _malicious_pickle(tmp_path / "words.kv", marker)
    config = tmp_path / "labels.yaml"
    config.write_text(f"vectors: {{source: words.kv, format: {fmt}}}\n")
    out = tmp_path / "out"
    cli_error(["labels", "build", config, "--out", out], ["words.kv", "trust_pickle"], [tmp_path], [out])
    assert not marker.exists()


def test_sense_never_unpickles(cli_error, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    _malicious_pickle(tmp_path / "words.kv", marker)
    config = tmp_path / "labels.yaml"
    config.write_text("vectors: words.kv\n")
    cli_error(["labels", "sense", "cairn", "--config", config], "words.kv", [tmp_path])
    assert not marker.exists()


def test_trust_pickle_is_what_loads_a_pickle(cli_error, tmp_path: Path) -> None:
    """The flag does what its help says: the file is unpickled (and its code runs)."""
    marker = tmp_path / "MARKER"
    vectors = _malicious_pickle(tmp_path / "v.kv", marker)
    out = tmp_path / "v.npz"
    cli_error(
        ["labels", "vectors", vectors, "--out", out, "--trust-pickle"], "not a gensim KeyedVectors", [], [out]
    )
    assert marker.exists()


def test_encode_malicious_weights_are_one_line(cli_error, tmp_path: Path) -> None:
    pytest.importorskip("open_clip")
    marker = tmp_path / "MARKER"
    weights = _malicious_pickle(tmp_path / "evil.pt", marker)
    classes = tmp_path / "classes.txt"
    classes.write_text("n02084071\n")
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "clip:ViT-B-32", "--weights", weights, "--device", "cpu"]
    line = cli_error(
        [*argv, "--classes", classes, "--out", out], ["evil.pt", "refused"], [weights, classes], [out]
    )
    assert not marker.exists()
    assert "UnpicklingError" not in line


# --------------------------------------------------------------------------- issue 26: damaged class vectors
def _class_vectors(path: Path) -> Path:
    import numpy as np

    from imagenet_zsl.semantics.class_vectors import ClassVectors

    return ClassVectors(["n02084071", "n07273802"], np.eye(2, 3)).save(path)


@pytest.mark.parametrize("keep", [0, 30, -20])
def test_truncated_class_vector_npz_is_one_line(tmp_path: Path, keep: int) -> None:
    from imagenet_zsl.errors import UserInputError
    from imagenet_zsl.semantics.vector_files import load_class_vector_file

    path = _class_vectors(tmp_path / "cv.npz")
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[:keep])
    with pytest.raises(UserInputError, match=r"cv\.npz: not a readable class-vector npz") as caught:
        load_class_vector_file(path)
    assert "\n" not in str(caught.value)


def test_truncated_class_vectors_through_a_split_recipe(cli_error, tmp_path: Path) -> None:
    """A has_vector pool filter reading a truncated ``.npz`` (BadZipFile before)."""
    path = _class_vectors(tmp_path / "cv.npz")
    path.write_bytes(path.read_bytes()[:-20])
    config = tmp_path / "split.yaml"
    config.write_text(
        "splits:\n  - name: few\n    kind: benchmark\n    size: 10\n"
        f"    pool:\n      - {{filter: has_vector, vectors: {path}}}\n"
    )
    out = tmp_path / "out"
    cli_error(["splits", "build", config, "--out", out], "cv.npz", [tmp_path], [out])


# --------------------------------------------------------------------------- issue 26: --out files
def test_vectors_out_is_another_tools_file(cli_error, folder: Path, tmp_path_factory) -> None:
    """An existing --out that is not a class-vector file (someone's npz) is never replaced."""
    import numpy as np

    other = tmp_path_factory.mktemp("other") / "weights.npz"
    np.savez(other, w=np.ones(3))
    cli_error(["labels", "vectors", folder / "labels.yaml", "--out", other], "weights.npz", [other])


def test_vectors_out_replaces_its_own_output(folder: Path, tmp_path_factory, capsys) -> None:
    from imagenet_zsl.cli import main

    out = tmp_path_factory.mktemp("cv") / "cv.npz"
    _class_vectors(out)
    assert main(["labels", "vectors", str(folder / "labels.yaml"), "--out", str(out)]) == 0
    import numpy as np

    with np.load(out) as data:
        assert data["matrix"].shape[1] == 3  # the tiny GloVe file's dimension: rewritten


# --------------------------------------------------------------------------- issue 26: recipes
def test_labels_config_duplicate_key(cli_error, folder: Path) -> None:
    config = _config(
        folder, "vectors: {source: tiny.txt, format: glove}\nlemma_rule: mean\nlemma_rule: first\n"
    )
    out = folder.parent / f"{folder.name}-cv.npz"
    cli_error(
        ["labels", "vectors", config, "--out", out],
        ["bad.yaml", "'lemma_rule'", "lines 2 and 3"],
        [folder],
        [out],
    )


# --------------------------------------------------------------------------- issue 23 §9: progress
def test_encode_prints_progress_lines_when_not_a_terminal(tmp_path: Path, capsys) -> None:
    """stderr captured by pytest is not a terminal: the encode says where it is, in plain lines."""
    from imagenet_zsl.cli import main
    from tests.semantics.cases import register_fake_encoder

    register_fake_encoder()
    classes = tmp_path / "classes.txt"
    classes.write_text("n02084071\nn07273802\n")
    out = tmp_path / "cv.npz"
    capsys.readouterr()
    argv = ["labels", "encode", "--encoder", "fake:x", "--classes", str(classes), "--out", str(out)]
    assert main([*argv, "--batch-size", "2"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("encode: ")]
    # 4 texts: "a photo of a dog." / "domestic dog." / "Canis familiaris." / "cairn."
    assert lines[0] == "encode: 0/4 texts"
    assert lines[-1].startswith("encode: 4/4 texts done in ")
    assert "\r" not in err
