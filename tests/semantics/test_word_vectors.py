"""Loaders of every word-vector format, format detection, and clear errors on bad files."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.word_vectors import VectorSpec, detect_format, load_word_vectors

WORDS = ["cairn", "terrier", "new_york", "t-shirt"]
VECTORS = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -0.5], [0.25, 0.25, 0.0], [-1.0, 2.0, 3.5]], dtype=np.float32)


def _text_lines() -> list[str]:
    return [w + " " + " ".join(f"{x:g}" for x in v) for w, v in zip(WORDS, VECTORS, strict=True)]


def _check(kv) -> None:
    assert kv.index_to_key == WORDS
    np.testing.assert_allclose(kv.vectors, VECTORS)


def test_word2vec_text(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("4 3\n" + "\n".join(_text_lines()) + "\n")
    assert detect_format(path) == "word2vec-text"
    _check(load_word_vectors(str(path)))


def test_fasttext_vec(tmp_path):
    path = tmp_path / "wiki.en.vec"
    path.write_text("4 3\n" + "\n".join(_text_lines()) + "\n")
    assert detect_format(path) == "fasttext"
    _check(load_word_vectors(str(path)))


def test_glove_text_without_header(tmp_path):
    path = tmp_path / "glove.tiny.3d.txt"
    path.write_text("\n".join(_text_lines()) + "\n")
    assert detect_format(path) == "glove"
    _check(load_word_vectors(str(path)))


def test_gzipped_glove(tmp_path):
    path = tmp_path / "glove.txt.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(_text_lines()) + "\n")
    assert detect_format(path) == "glove"
    _check(load_word_vectors(str(path)))


def test_word2vec_binary(tmp_path):
    from tests.semantics.cases import tiny_keyed_vectors

    kv = tiny_keyed_vectors(dict(zip(WORDS, VECTORS.tolist(), strict=True)))
    path = tmp_path / "vectors.model"  # a suffix that says nothing: detection reads the bytes
    kv.save_word2vec_format(str(path), binary=True)
    assert detect_format(path) == "word2vec-binary"
    _check(load_word_vectors({"source": str(path), "format": "auto"}))


def test_npy_parquet_folder(tmp_path):
    np.save(tmp_path / "emb.npy", VECTORS)
    pd.DataFrame({"index": WORDS}).to_parquet(tmp_path / "index.parquet")
    assert detect_format(tmp_path) == "npy-parquet"
    _check(load_word_vectors(str(tmp_path)))


def test_gensim_native(tmp_path):
    from tests.semantics.cases import tiny_keyed_vectors

    path = tmp_path / "vectors.kv"
    tiny_keyed_vectors(dict(zip(WORDS, VECTORS.tolist(), strict=True))).save(str(path))
    assert detect_format(path) == "gensim"
    # a pickle runs code when loaded: only an explicit trust_pickle loads it
    with pytest.raises(UserInputError, match="trust_pickle"):
        load_word_vectors(str(path))
    with pytest.raises(UserInputError, match="trust_pickle"):
        load_word_vectors({"source": str(path), "format": "gensim"})
    _check(load_word_vectors({"source": str(path), "trust_pickle": True}))


def test_packaged_glove_by_name(glove_vectorizer):
    kv = load_word_vectors("glove-6b-50d")
    assert kv.vectors.shape == (400_000, 50)
    assert kv.index_to_key[:4] == ["the", ",", ".", "of"]
    # GloVe 6B is lower-case: the stone-memorial word is near other archaeological sites
    assert kv.similarity("cairn", "stonehenge") > kv.similarity("cairn", "violin")


def test_dim_mismatch_with_config(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("\n".join(_text_lines()) + "\n")
    with pytest.raises(UserInputError, match=r"dimension 3 but the config says dim: 300"):
        load_word_vectors(VectorSpec(str(path), "auto", 300))


# --------------------------------------------------------------------------- bad files
def test_unknown_format_names_file_and_line(tmp_path):
    path = tmp_path / "vectors.csv"
    path.write_text("word,x,y\ncairn,1,2\n")
    with pytest.raises(UserInputError, match=r"vectors\.csv:1: unknown word-vector format"):
        load_word_vectors(str(path))


def test_row_of_wrong_dimension_names_line(tmp_path):
    lines = _text_lines()
    lines[2] = "new_york 0.25 0.25"  # one value short, on line 3
    path = tmp_path / "glove.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=r"glove\.txt:3: expected a word and 3 numbers, found 2"):
        load_word_vectors(str(path))


def test_row_of_wrong_dimension_after_header(tmp_path):
    lines = _text_lines()
    lines[3] = lines[3] + " 9"
    path = tmp_path / "vectors.vec"
    path.write_text("4 3\n" + "\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=r"vectors\.vec:5: .*found 4 numbers \(dimension mismatch\)"):
        load_word_vectors(str(path))


def test_value_that_is_not_a_number(tmp_path):
    lines = _text_lines()
    lines[1] = "terrier 0 x -0.5"
    path = tmp_path / "glove.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=r"glove\.txt:2: 'x' is not a number"):
        load_word_vectors(str(path))


def test_header_promising_more_rows(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("9 3\n" + "\n".join(_text_lines()) + "\n")
    with pytest.raises(UserInputError, match=r"vectors\.txt:5: file ends after 4 vectors but its header"):
        load_word_vectors(str(path))


def test_truncated_binary(tmp_path):
    from tests.semantics.cases import tiny_keyed_vectors

    path = tmp_path / "vectors.bin"
    tiny_keyed_vectors(dict(zip(WORDS, VECTORS.tolist(), strict=True))).save_word2vec_format(
        str(path), binary=True
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])
    with pytest.raises(UserInputError, match=r"vectors\.bin: corrupt or truncated word2vec binary"):
        load_word_vectors(str(path))


def test_nan_row_names_line(tmp_path):
    lines = _text_lines()
    lines[1] = "terrier nan 1 2"
    path = tmp_path / "glove.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=r"glove\.txt:2: vector of 'terrier' holds NaN"):
        load_word_vectors(str(path))


def test_npy_and_vocabulary_disagree(tmp_path):
    np.save(tmp_path / "emb.npy", VECTORS)
    pd.DataFrame({"index": WORDS[:3]}).to_parquet(tmp_path / "index.parquet")
    with pytest.raises(UserInputError, match=r"emb\.npy: matrix shape \(4, 3\) does not match the 3 words"):
        load_word_vectors(str(tmp_path))


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(UserInputError, match="not found"):
        load_word_vectors(str(tmp_path / "nope.txt"))
    with pytest.raises(UserInputError, match="format"):
        VectorSpec.parse({"source": "x", "format": "excel"})
