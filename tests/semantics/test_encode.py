"""Class vectors from a text encoder: template × lemma averaging, gloss, batching, CLI (fake encoder)."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.encode import check_templates, class_texts, encode_class_vectors
from imagenet_zsl.semantics.vector_files import load_class_vector_file
from tests.semantics.cases import FakeTextEncoder, register_fake_encoder

CAIRN_TERRIER = "n02096177"  # lemmas: cairn, cairn_terrier
CAIRN = "n07273802"  # lemma: cairn


def _unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_class_texts_are_templates_times_lemmas_with_optional_gloss(nouns):
    texts, owner = class_texts([CAIRN_TERRIER, CAIRN], ["a {}", "the {}."], nouns=nouns)
    assert texts == [
        "a cairn",
        "the cairn.",
        "a cairn terrier",
        "the cairn terrier.",
        "a cairn",
        "the cairn.",
    ]
    assert owner.tolist() == [0, 0, 0, 0, 1, 1]
    glossed, _ = class_texts([CAIRN], ["a {}"], gloss=True, nouns=nouns)
    definition = nouns.definitions[nouns.index[CAIRN]]
    assert glossed == [f"a cairn {definition}"]


def test_mean_of_unit_text_vectors_hand_computed(nouns):
    table = {
        "a cairn terrier": [3, 0, 0, 0],
        "the cairn terrier": [0, 2, 0, 0],
        "a cairn": [0, 0, 5, 0],
        "the cairn": [1, 1, 0, 0],
    }
    encoder = FakeTextEncoder(table=table)
    vectors = encode_class_vectors(encoder, [CAIRN_TERRIER, CAIRN], ["a {}", "the {}"], batch_size=3)
    assert isinstance(vectors, ClassVectors) and vectors.wnids == [CAIRN_TERRIER, CAIRN]
    assert vectors.matrix.shape == (2, 4) and vectors.matrix.dtype == np.float32 and vectors.missing == []
    # unit per text, mean over the 2 templates × 2 lemmas, unit again
    terrier = _unit([1, 0, 0, 0]) + _unit([0, 1, 0, 0]) + _unit([0, 0, 1, 0]) + _unit([1, 1, 0, 0])
    np.testing.assert_allclose(vectors.matrix[0], _unit(terrier / 4), atol=1e-6)
    np.testing.assert_allclose(vectors.matrix[1], _unit(_unit([0, 0, 1, 0]) + _unit([1, 1, 0, 0])), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors.matrix, axis=1), 1, atol=1e-6)
    # each distinct text is encoded once, in batches of at most 3, shortest first
    calls = encoder.calls
    assert [len(c) for c in calls] == [3, 1]
    assert sorted(t for c in calls for t in c) == sorted(table)
    assert "template" in vectors.source and "fake:" in vectors.source


def test_deterministic_and_batch_size_independent(nouns):
    wnids = [CAIRN_TERRIER, CAIRN, "n02084071", "n02963159"]
    a = encode_class_vectors(FakeTextEncoder(), wnids, ["a photo of a {}.", "{}"], gloss=True, batch_size=2)
    b = encode_class_vectors(FakeTextEncoder(), wnids, ["a photo of a {}.", "{}"], gloss=True, batch_size=64)
    np.testing.assert_array_equal(a.matrix, b.matrix)
    c = encode_class_vectors(FakeTextEncoder(), wnids, ["a photo of a {}.", "{}"], gloss=False)
    assert not np.allclose(a.matrix, c.matrix)  # the gloss changes the texts


@pytest.mark.parametrize("templates", [["a photo"], ["{} and {}"], ["a {}", "a {}"]])
def test_bad_templates(templates):
    with pytest.raises(UserInputError, match="--template"):
        check_templates(templates)


def test_unknown_wnid_is_an_error(nouns):
    with pytest.raises(UserInputError, match="n99999999"):
        class_texts(["n99999999"], ["{}"], nouns=nouns)


def test_cli_encode_end_to_end(tmp_path, capsys):
    register_fake_encoder()
    classes = tmp_path / "classes.txt"
    classes.write_text(f"{CAIRN_TERRIER}\n{CAIRN}\n")
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "fake:tiny", "--template", "a {}", "--template", "the {}"]
    assert main([*argv, "--gloss", "--classes", str(classes), "--out", str(out), "--batch-size", "2"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    vectors = ClassVectors.load(out)
    expected = encode_class_vectors(FakeTextEncoder("tiny"), [CAIRN_TERRIER, CAIRN], ["a {}", "the {}"], True)
    assert vectors.wnids == [CAIRN_TERRIER, CAIRN]
    np.testing.assert_array_equal(vectors.matrix, expected.matrix)
    first = out.read_bytes()
    parquet = tmp_path / "cv.parquet"
    assert main([*argv, "--gloss", "--classes", str(classes), "--out", str(parquet)]) == 0
    assert main([*argv, "--gloss", "--classes", str(classes), "--out", str(out)]) == 0
    assert out.read_bytes() == first  # deterministic bytes
    np.testing.assert_array_equal(load_class_vector_file(parquet).matrix, vectors.matrix)


def test_cli_encode_defaults_to_the_universe(tmp_path, capsys):
    register_fake_encoder()
    out = tmp_path / "all.npz"
    assert main(["labels", "encode", "--encoder", "fake:x", "--out", str(out), "--batch-size", "4096"]) == 0
    vectors = ClassVectors.load(out)
    assert len(vectors) == 21_842 and vectors.missing == []
    assert "a photo of a {}." in vectors.source


def test_progress_lines_off_a_terminal():
    """Not a terminal (a log file): plain lines, the first at 0, one per batch with interval 0,
    and a last one; never a carriage-return bar (a 17-minute encode printed nothing)."""
    import io

    from imagenet_zsl.semantics.encode import progress_bar

    stream = io.StringIO()  # isatty() is False
    with progress_bar(5, "encode", "text", stream=stream, interval=0.0) as bar:
        for _ in range(3):
            bar.update(2 if _ < 2 else 1)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "encode: 0/5 texts"
    assert lines[1].startswith("encode: 2/5 texts (40%), ") and "s left" in lines[1]
    assert lines[2].startswith("encode: 4/5 texts (80%), ")
    assert lines[3].startswith("encode: 5/5 texts done in ")
    assert len(lines) == 4 and "\r" not in stream.getvalue()


def test_progress_is_silent_when_disabled():
    import io

    from imagenet_zsl.semantics.encode import progress_bar

    stream = io.StringIO()
    with progress_bar(5, "encode", "text", enabled=False, stream=stream) as bar:
        bar.update(5)
    assert stream.getvalue() == ""
