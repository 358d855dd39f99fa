"""Finding WordNet: Debian's files become an nltk corpus; a warm cache never re-parses."""

from __future__ import annotations

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy import nouns as nouns_module
from imagenet_zsl.hierarchy import wordnet
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns


def test_dict_dir_is_copied_as_plain_files_with_lexnames(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "dict"
    source.mkdir()
    real = wordnet.locate_wordnet()
    for name in wordnet.WORDNET_FILES:
        (source / name).symlink_to(real / name)  # symlinks: nltk refuses them ("escapes root")
    monkeypatch.setenv("IMAGENET_ZSL_WORDNET_DIR", str(source))
    corpus = wordnet.locate_wordnet()
    assert corpus == tmp_path / "cache" / "nltk_data" / "corpora" / "wordnet"
    assert (corpus / "lexnames").read_text().startswith("00\tadj.all")
    assert not any(p.is_symlink() for p in corpus.iterdir())
    assert (corpus / "data.noun").stat().st_size == (real / "data.noun").stat().st_size


def test_missing_wordnet_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENET_ZSL_WORDNET_DIR", str(tmp_path))
    with pytest.raises(UserInputError, match="apt-get install wordnet-base"):
        wordnet.locate_wordnet()


def test_warm_cache_never_parses_wordnet(monkeypatch):
    load_wordnet_nouns()  # make sure the cache file exists
    load_wordnet_nouns.cache_clear()

    def fail(*_args, **_kwargs):
        raise AssertionError("WordNet was re-parsed although the cache is warm")

    monkeypatch.setattr(nouns_module, "_parse", fail)
    try:
        assert len(load_wordnet_nouns().wnids) == 82_115
    finally:
        load_wordnet_nouns.cache_clear()


def test_reader_is_wordnet_30():
    reader = wordnet.get_wordnet()
    assert reader.get_version() == "3.0"
    assert wordnet.synset_wnid(reader.synset("dog.n.01")) == "n02084071"
