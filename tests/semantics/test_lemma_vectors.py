"""Lemma → vector and synset → class-vector rules on a hand-made vocabulary, then on real GloVe."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.lemma_vectors import LemmaVectorizer, class_vectors_from_lemmas
from tests.semantics.cases import tiny_keyed_vectors

R = np.sqrt(0.5)


@pytest.fixture()
def vectorizer() -> LemmaVectorizer:
    return LemmaVectorizer(
        tiny_keyed_vectors(
            {
                "cairn": [1, 0, 0],
                "terrier": [0, 2, 0],
                "new_york": [0, 0, 3],
                "Paris": [0, 5, 0],
                "bird": [3, 0, 0],
                "of": [0, 0, 7],
                "paradise": [0, 0, 1],
                "ice": [1, 0, 0],
                "cream": [0, 1, 0],
                "zero": [0, 0, 0],
            }
        )
    )


def test_phrase_token_wins(vectorizer):
    assert vectorizer.tokens("new_york") == ((2,), "phrase")
    assert vectorizer.tokens("New_York") == ((2,), "phrase")  # lower-case fallback
    assert vectorizer.tokens("Paris") == ((3,), "phrase")  # as written first


def test_mean_of_unit_word_vectors(vectorizer):
    rows, how = vectorizer.tokens("cairn_terrier")
    assert how == "words" and rows == (0, 1)
    matrix, has = vectorizer.lemma_matrix(["cairn_terrier"])
    # unit(cairn) = (1,0,0), unit(terrier) = (0,1,0): mean (.5,.5,0), unit length after
    np.testing.assert_allclose(matrix[0], [R, R, 0], atol=1e-6)
    assert has.tolist() == [True]


def test_function_words_dropped_and_hyphens_split(vectorizer):
    assert vectorizer.tokens("bird_of_paradise") == ((4, 6), "words")  # 'of' left out
    assert vectorizer.tokens("ice-cream") == ((7, 8), "words")
    assert vectorizer.tokens("of") == ((5,), "phrase")  # a lemma that is only a function word


def test_any_unknown_word_means_no_vector(vectorizer):
    assert vectorizer.tokens("cairn_xyzzy") == ((), "oov")
    assert vectorizer.tokens("zero") == ((), "oov")  # a zero vector cannot be normalised: absent
    matrix, has = vectorizer.lemma_matrix(["cairn_xyzzy", "cairn"])
    assert has.tolist() == [False, True]
    np.testing.assert_array_equal(matrix[0], 0)


def test_class_rule_mean(vectorizer):
    vectors = class_vectors_from_lemmas(
        vectorizer, ["n1", "n2", "n3"], [["cairn", "cairn_terrier"], ["xyzzy", "New_York"], ["qqq"]], "mean"
    )
    assert vectors.wnids == ["n1", "n2"]
    assert vectors.missing == ["n3"]  # reported, never zero-filled
    mean = np.array([1 + R, R, 0]) / 2
    np.testing.assert_allclose(vectors.get(["n1"])[0], mean / np.linalg.norm(mean), atol=1e-6)
    np.testing.assert_allclose(vectors.get(["n2"])[0], [0, 0, 1], atol=1e-6)
    with pytest.raises(UserInputError, match="n3"):
        vectors.get(["n3"])


def test_class_rule_first_and_no_normalisation(vectorizer):
    lemmas = [["cairn", "cairn_terrier"], ["xyzzy", "New_York"]]
    first = class_vectors_from_lemmas(vectorizer, ["n1", "n2"], lemmas, "first")
    np.testing.assert_allclose(first.matrix, [[1, 0, 0], [0, 0, 1]], atol=1e-6)
    raw = class_vectors_from_lemmas(vectorizer, ["n1"], [["cairn", "cairn_terrier"]], "mean", normalize=False)
    np.testing.assert_allclose(raw.matrix[0], [(1 + R) / 2, R / 2, 0], atol=1e-6)
    with pytest.raises(UserInputError, match="lemma_rule"):
        class_vectors_from_lemmas(vectorizer, ["n1"], [["cairn"]], "median")


def test_real_class_vectors_cover_the_universe(glove_vectorizer):
    from imagenet_zsl.hierarchy.universe import universe_wnids
    from imagenet_zsl.semantics.lemma_vectors import _load_cached, load_class_vectors

    vectors = load_class_vectors("glove-6b-50d")
    universe = universe_wnids()
    assert len(vectors) + len(vectors.missing) == len(universe) == 21_842
    assert set(vectors.wnids).isdisjoint(vectors.missing)
    assert vectors.dim == 50
    assert 0.85 < len(vectors) / len(universe) < 0.97
    np.testing.assert_allclose(np.linalg.norm(vectors.matrix, axis=1), 1, atol=1e-5)
    # n02096177 "cairn, cairn_terrier": mean of unit(cairn) and unit(mean(unit(cairn), unit(terrier)))
    kv = glove_vectorizer.kv

    def unit(x):
        return x / np.linalg.norm(x)

    expected = unit(unit(kv["cairn"]) + unit(unit(kv["cairn"]) + unit(kv["terrier"])))
    np.testing.assert_allclose(vectors.get(["n02096177"])[0], expected, atol=1e-5)
    # training classes are included (the models need them)
    assert "n01440764" in vectors  # tench
    # the on-disk cache gives the same matrix
    _load_cached.cache_clear()
    again = load_class_vectors("glove-6b-50d")
    assert again.wnids == vectors.wnids
    np.testing.assert_array_equal(again.matrix, vectors.matrix)
