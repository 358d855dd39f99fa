"""Finding WordNet and reading its nouns: WordNet's own files, read directly, give what nltk's walk
gives (a hand-made WordNet with every shape that matters, then the real one); the cache is compact
and a warm cache never re-reads WordNet."""

from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path

import nltk
import numpy as np
import pytest
from nltk.data import FileSystemPathPointer

from imagenet_zsl.data import data_path
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy import nouns as nouns_module
from imagenet_zsl.hierarchy import wordnet
from imagenet_zsl.hierarchy.nouns import (
    STRING_COLUMNS,
    WordNetNouns,
    content_digest,
    load_wordnet_nouns,
    read_noun_files,
    read_with_nltk,
)

#: content_digest of nltk's walk over the whole of WordNet 3.0 (``read_with_nltk``, ~20 s; recomputed
#: by ``tools/bench_wordnet.py --verify``, which also compares the two readings column by column)
NLTK_WALK_DIGEST = "e84cbfba8d597c3015a3edbd5d9e37799a6030de411cb2c7b48f3a65ec2a6b4c"

HEADER = (
    "  1 This software and database is being provided to you, the LICENSEE, by  \n"
    "  2 WordNet 3.0 Copyright 2006 by Princeton University.  All rights reserved.  \n"
)
#: key, lexicographer file number, lemmas (word, lex_id), pointers (symbol, target key, lemma ids), gloss
SYNSETS = [
    ("entity", 3, [("entity", 0)], [], 'that which is perceived; "an example"'),
    ("canine", 5, [("canine", 0)], [("@", "entity", "0000"), ("~", "dog", "0000")], "a carnivore"),
    (
        "dog",
        5,
        [("dog", 0), ("domestic_dog", 0)],
        # two hypernyms, one named twice; a lemma-level '@' (0101) is no synset hypernym for nltk
        [("@", "canine", "0000"), ("@", "entity", "0000"), ("@", "entity", "0000"), ("@", "city", "0101")],
        'a member of the genus Canis; "the dog barked"; kept by man',
    ),
    ("city", 15, [("city", 0), ("metropolis", 0)], [("@", "entity", "0000")], "a large town"),
    ("rome", 15, [("Rome", 0)], [("@i", "city", "0000")], "capital of Italy"),  # an instance
    ("hotdog", 13, [("dog", 1), ("frank", 0)], [("@", "entity", "0000")], "a sausage"),
]
#: lemma → synset keys in sense order: "dog" names the sausage first, so the animal is dog.n.02
SENSES = {
    "canine": ["canine"],
    "city": ["city"],
    "dog": ["hotdog", "dog"],
    "domestic_dog": ["dog"],
    "entity": ["entity"],
    "frank": ["hotdog"],
    "metropolis": ["city"],
    "rome": ["rome"],
}
#: SemCor counts by sense key (lower-cased: "Rome" is counted as rome%1:15:00::); two verb keys
#: around them, as in the real file (nltk's binary search misses the first line of a tiny file)
COUNTS = {
    "abide%2:42:00::": 2,
    "dog%1:05:00::": 42,
    "dog%1:13:01::": 3,
    "city%1:15:00::": 7,
    "rome%1:15:00::": 5,
    "zoom%2:38:00::": 1,
}


def _line(spec: tuple, offsets: dict[str, int]) -> str:
    key, lexnum, lemmas, pointers, gloss = spec
    words = " ".join(f"{w} {i:x}" for w, i in lemmas)
    ptrs = "".join(f" {s} {offsets[t]:08d} n {ids}" for s, t, ids in pointers)
    return (
        f"{offsets[key]:08d} {lexnum:02d} n {len(lemmas):02x} {words} {len(pointers):03d}{ptrs} | {gloss}  \n"
    )


def write_wordnet(root: Path, synsets: list = SYNSETS, header: str = HEADER) -> dict[str, str]:
    """A WordNet dict folder nltk's reader opens too (data.noun offsets are byte offsets);
    returns key → wnid."""
    root.mkdir(parents=True, exist_ok=True)
    offsets, at = {}, len(header.encode())
    zeros = {spec[0]: 0 for spec in synsets}
    for spec in synsets:  # an offset has 8 digits, so a line's length does not depend on the offsets
        offsets[spec[0]] = at
        at += len(_line(spec, zeros).encode())
    (root / "data.noun").write_text(header + "".join(_line(s, offsets) for s in synsets))
    senses = {lemma: [k for k in keys if k in offsets] for lemma, keys in sorted(SENSES.items())}
    index = [
        f"{lemma} n {len(keys)} 1 @ {len(keys)} 0 {' '.join(f'{offsets[k]:08d}' for k in keys)}  \n"
        for lemma, keys in senses.items()
        if keys
    ]
    (root / "index.noun").write_text(header + "".join(index))
    (root / "cntlist.rev").write_text("".join(f"{k} 1 {c}\n" for k, c in sorted(COUNTS.items())))
    shutil.copyfile(data_path("lexnames"), root / "lexnames")
    for name in wordnet.WORDNET_FILES:
        (root / name).touch()
    return {key: f"n{off:08d}" for key, off in offsets.items()}


@pytest.fixture()
def toy_wordnet(tmp_path) -> tuple[Path, dict[str, str]]:
    return tmp_path / "dict", write_wordnet(tmp_path / "dict")


def expected_toy(w: dict[str, str]) -> dict:
    """The hand-computed reading of the toy WordNet (synsets in offset order: the order above)."""
    return {
        "wnids": tuple(w[s[0]] for s in SYNSETS),
        "names": ("entity.n.01", "canine.n.01", "dog.n.02", "city.n.01", "rome.n.01", "dog.n.01"),
        "lexnames": (
            "noun.Tops",
            "noun.animal",
            "noun.animal",
            "noun.location",
            "noun.location",
            "noun.food",
        ),
        "definitions": (
            "that which is perceived",
            "a carnivore",
            "a member of the genus Canis; ; kept by man",  # nltk drops the quoted example only
            "a large town",
            "capital of Italy",
            "a sausage",
        ),
        "lemmas_joined": ("entity", "canine", "dog|domestic_dog", "city|metropolis", "Rome", "dog|frank"),
        "lemma_counts_joined": ("0", "0", "42|0", "7|0", "5", "3|0"),
        "sense_lemmas": tuple(sorted(SENSES)),
        "sense_wnids_joined": tuple("|".join(w[k] for k in SENSES[lemma]) for lemma in sorted(SENSES)),
        # (parent, child) rows: entity 0, canine 1, dog 2, city 3, rome 4, hotdog 5
        "hypernym_edges": [[0, 1], [0, 2], [0, 3], [0, 5], [1, 2]],
        "instance_edges": [[3, 4]],
    }


def assert_reading(nouns: WordNetNouns, expected: dict) -> None:
    for column in STRING_COLUMNS:
        assert getattr(nouns, column) == expected[column], column
    for column in ("hypernym_edges", "instance_edges"):
        edges = getattr(nouns, column)
        assert edges.dtype == np.int32 and edges.tolist() == expected[column], column


def nltk_reader(root: Path, monkeypatch):
    """nltk's own reader over ``root`` (nltk opens only folders under its data path)."""
    monkeypatch.setattr(nltk.data, "path", [str(root.parent), *nltk.data.path])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available"
        return wordnet._reader_class()(FileSystemPathPointer(str(root)), None)


def test_reads_a_hand_made_wordnet(toy_wordnet):
    root, w = toy_wordnet
    nouns = read_noun_files(root, "key")
    assert_reading(nouns, expected_toy(w))
    assert nouns.senses["dog"] == (w["hotdog"], w["dog"]) and nouns.lemma_counts[2] == (42, 0)
    assert nouns.edges(include_instances=True)[-1] == (w["city"], w["rome"])


def test_nltk_reads_the_hand_made_wordnet_the_same(toy_wordnet, monkeypatch):
    root, w = toy_wordnet
    reference = read_with_nltk(nltk_reader(root, monkeypatch), "key")
    assert_reading(reference, expected_toy(w))
    assert content_digest(reference) == content_digest(read_noun_files(root, "key"))


def test_a_malformed_line_names_the_file_and_the_line(tmp_path):
    broken = [*SYNSETS[:2], ("dog", 5, [("dog", 0)], [("@", "canine", "0000")], "a | b")]
    write_wordnet(tmp_path, broken)  # the third synset's gloss holds a second bar
    with pytest.raises(UserInputError, match=r"data.noun, line 5: not a WordNet 3.0 noun synset"):
        read_noun_files(tmp_path, "key")
    (tmp_path / "index.noun").write_bytes(HEADER.encode() + b"dog n 1 0 1 0 \xff\n")
    with pytest.raises(
        UserInputError, match=r"index.noun: not a WordNet text file \(byte \d+ is not UTF-8\)"
    ):
        read_noun_files(tmp_path, "key")
    (tmp_path / "lexnames").write_text("00\tadj.all\t3\nxx\tadj.pert\t3\n")
    with pytest.raises(UserInputError, match=r"lexnames, line 2: not a lexnames line"):
        read_noun_files(tmp_path, "key")


def test_another_wordnet_version_is_refused(tmp_path):
    write_wordnet(tmp_path, header=HEADER.replace("WordNet 3.0", "WordNet 3.1"))
    with pytest.raises(UserInputError, match=r"data.noun: WordNet 3.1; imagenet-zsl needs WordNet 3.0"):
        read_noun_files(tmp_path, "key")


def test_missing_semcor_counts_are_an_error_not_zero_counts(toy_wordnet):
    root, _ = toy_wordnet
    (root / "cntlist.rev").unlink()
    with pytest.raises(UserInputError, match=r"cntlist.rev: the SemCor counts file is missing"):
        read_noun_files(root, "key")


def test_cache_round_trip_and_digest(toy_wordnet, tmp_path):
    root, w = toy_wordnet
    nouns = read_noun_files(root, "ab" * 32)
    nouns_module._save(nouns, tmp_path / "c.npz")
    again = nouns_module._load(tmp_path / "c.npz", "ab" * 32)
    assert_reading(again, expected_toy(w))
    assert nouns_module._load(tmp_path / "c.npz", "cd" * 32) is None  # other WordNet files: stale
    changed = WordNetNouns(**{**nouns.__dict__, "definitions": ("x",) * 6})
    assert content_digest(changed) != content_digest(nouns)


def test_the_real_wordnet_equals_nltks_walk():
    """Every column, on a seeded sample of 2,000 synsets read by nltk itself, every sense of every
    lemma, and the whole reading against the digest of nltk's full walk."""
    nouns = load_wordnet_nouns()
    assert content_digest(nouns) == NLTK_WALK_DIGEST
    wn = wordnet.get_wordnet()
    index = nouns.index
    parents: dict[tuple[str, int], list[int]] = {}
    for kind, edges in (("@", nouns.hypernym_edges), ("@i", nouns.instance_edges)):
        for parent, child in edges.tolist():
            parents.setdefault((kind, child), []).append(parent)
    for i in sorted(random.Random(0).sample(range(len(nouns.wnids)), 2000)):
        synset = wn.synset_from_pos_and_offset("n", int(nouns.wnids[i][1:]))
        assert wordnet.synset_wnid(synset) == nouns.wnids[i]
        assert (synset.name(), synset.lexname(), synset.definition()) == (
            nouns.names[i],
            nouns.lexnames[i],
            nouns.definitions[i],
        )
        assert tuple(x.name() for x in synset.lemmas()) == nouns.lemmas[i]
        assert tuple(x.count() for x in synset.lemmas()) == nouns.lemma_counts[i]
        for kind, related in (("@", synset.hypernyms()), ("@i", synset.instance_hypernyms())):
            expected = sorted(index[wordnet.synset_wnid(h)] for h in related)
            assert sorted(parents.get((kind, i), [])) == expected
    offsets = wn._lemma_pos_offset_map
    assert {k: v for k, v in nouns.senses.items()} == {
        k: tuple(f"n{o:08d}" for o in v["n"]) for k, v in offsets.items() if "n" in v
    }


def test_the_cache_is_compact():
    nouns = load_wordnet_nouns()
    path = nouns_module.cache_path(nouns.digest)
    assert path.name.startswith("wordnet-nouns-v3-") and path.stat().st_size < 50e6


def test_wordnet_is_read_where_it_is_and_copied_only_for_nltk(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "dict"
    source.mkdir()
    real = wordnet.locate_wordnet()
    for name in wordnet.WORDNET_FILES:
        (source / name).symlink_to(real / name)  # symlinks: nltk refuses them ("escapes root")
    monkeypatch.setenv("IMAGENET_ZSL_WORDNET_DIR", str(source))
    assert wordnet.locate_wordnet() == source  # the toolkit reads the files in place
    assert not (tmp_path / "cache" / "nltk_data").exists()
    corpus = wordnet.nltk_corpus_dir()
    assert corpus == tmp_path / "cache" / "nltk_data" / "corpora" / "wordnet"
    assert (corpus / "lexnames").read_text().startswith("00\tadj.all")
    assert not any(p.is_symlink() for p in corpus.iterdir())
    assert (corpus / "data.noun").stat().st_size == (real / "data.noun").stat().st_size


def test_missing_wordnet_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENET_ZSL_WORDNET_DIR", str(tmp_path))
    with pytest.raises(UserInputError, match="apt-get install wordnet-base"):
        wordnet.locate_wordnet()


def test_warm_cache_never_reads_wordnet(monkeypatch):
    load_wordnet_nouns()  # make sure the cache file exists
    load_wordnet_nouns.cache_clear()

    def fail(*_args, **_kwargs):
        raise AssertionError("WordNet was re-read although the cache is warm")

    monkeypatch.setattr(nouns_module, "read_noun_files", fail)
    try:
        assert len(load_wordnet_nouns().wnids) == 82_115
    finally:
        load_wordnet_nouns.cache_clear()


def test_reader_is_wordnet_30():
    reader = wordnet.get_wordnet()
    assert reader.get_version() == "3.0"
    assert wordnet.synset_wnid(reader.synset("dog.n.01")) == "n02084071"
