"""Fixtures of the semantics tests: real GloVe, real WordNet and one sense model per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def nouns():
    from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns

    return load_wordnet_nouns()


@pytest.fixture(scope="session")
def glove_vectorizer():
    """The packaged GloVe 6B 50-d vectors (loaded once per session)."""
    from imagenet_zsl.semantics.lemma_vectors import vectorizer_for

    return vectorizer_for("glove-6b-50d")


@pytest.fixture(scope="session")
def sense_model(glove_vectorizer, nouns):
    from imagenet_zsl.semantics.senses import PrimarySenseModel

    return PrimarySenseModel(glove_vectorizer, nouns)
