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
