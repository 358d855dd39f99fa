"""The WordNet 3.0 noun graph as plain arrays, cached on disk so warm runs never re-parse WordNet.

Parsing WordNet with nltk takes ~10 s; everything the toolkit needs from it (synset ids, lemmas,
SemCor lemma counts, glosses, lexicographer files, hypernym and instance-hypernym edges, and the
sense order of every noun lemma) fits in a ~10 MB npz keyed by the sha256 of the WordNet files.
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.hierarchy.wordnet import get_wordnet, locate_wordnet, synset_wnid, wordnet_digest
from imagenet_zsl.io import atomic_write_bytes, cache_dir

log = logging.getLogger(__name__)

CACHE_VERSION = 2
SEP = "|"


@dataclass(frozen=True)
class WordNetNouns:
    """All 82,115 noun synsets of WordNet 3.0, index-aligned.

    wnids[i] is 'n' + offset; hypernym_edges (E, 2) int32 rows (parent, child); instance_edges
    likewise for instance hypernyms. Lemma tables are stored '|'-joined and split on first use
    (``lemmas``, ``lemma_counts``, ``senses``) so that loading the cache stays fast.
    """

    wnids: tuple[str, ...]
    names: tuple[str, ...]
    lexnames: tuple[str, ...]
    definitions: tuple[str, ...]
    lemmas_joined: tuple[str, ...]
    lemma_counts_joined: tuple[str, ...]
    hypernym_edges: np.ndarray
    instance_edges: np.ndarray
    sense_lemmas: tuple[str, ...]
    sense_wnids_joined: tuple[str, ...]
    digest: str

    @functools.cached_property
    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.wnids)}

    @functools.cached_property
    def lemmas(self) -> tuple[tuple[str, ...], ...]:
        """Each synset's lemma names in WordNet order (underscored, original case)."""
        return tuple(tuple(x.split(SEP)) for x in self.lemmas_joined)

    @functools.cached_property
    def lemma_counts(self) -> tuple[tuple[int, ...], ...]:
        """SemCor tag counts aligned with ``lemmas``."""
        return tuple(tuple(int(c) for c in x.split(SEP)) for x in self.lemma_counts_joined)

    @functools.cached_property
    def senses(self) -> dict[str, tuple[str, ...]]:
        """lemma (lower-case, underscored) → noun synsets' wnids in WordNet sense order."""
        return {
            k: tuple(v.split(SEP)) for k, v in zip(self.sense_lemmas, self.sense_wnids_joined, strict=True)
        }

    def __contains__(self, wnid: str) -> bool:
        return wnid in self.index

    def edges(self, include_instances: bool = False) -> list[tuple[str, str]]:
        """(parent_wnid, child_wnid) hypernym edges, optionally with instance-hypernym edges."""
        arrays = [self.hypernym_edges] + ([self.instance_edges] if include_instances else [])
        rows = np.concatenate(arrays)
        return [(self.wnids[p], self.wnids[c]) for p, c in rows]


def _parse(wn: Any, digest: str) -> WordNetNouns:
    log.info("parsing WordNet 3.0 nouns with nltk (once; cached afterwards)")
    synsets = sorted(wn.all_synsets("n"), key=lambda s: s.offset())
    wnids = tuple(synset_wnid(s) for s in synsets)
    index = {w: i for i, w in enumerate(wnids)}
    hyper, inst = [], []
    lemmas, counts = [], []
    for i, s in enumerate(synsets):
        hyper += [(index[synset_wnid(h)], i) for h in s.hypernyms()]
        inst += [(index[synset_wnid(h)], i) for h in s.instance_hypernyms()]
        lemmas.append(tuple(lemma.name() for lemma in s.lemmas()))
        counts.append(tuple(lemma.count() for lemma in s.lemmas()))
    offsets = wn._lemma_pos_offset_map  # exact index.noun sense order, no morphological guessing
    senses = {
        name: tuple(f"n{off:08d}" for off in offsets[name]["n"])
        for name in wn.all_lemma_names("n")
        if "n" in offsets.get(name, {})
    }
    return WordNetNouns(
        wnids=wnids,
        names=tuple(s.name() for s in synsets),
        lexnames=tuple(s.lexname() for s in synsets),
        definitions=tuple(s.definition() for s in synsets),
        lemmas_joined=tuple(SEP.join(x) for x in lemmas),
        lemma_counts_joined=tuple(SEP.join(map(str, x)) for x in counts),
        hypernym_edges=np.asarray(sorted(hyper), dtype=np.int32).reshape(-1, 2),
        instance_edges=np.asarray(sorted(inst), dtype=np.int32).reshape(-1, 2),
        sense_lemmas=tuple(sorted(senses)),
        sense_wnids_joined=tuple(SEP.join(senses[k]) for k in sorted(senses)),
        digest=digest,
    )


def _save(nouns: WordNetNouns, path: Path) -> None:
    buffer = io.BytesIO()
    np.savez(
        buffer,
        version=np.asarray(CACHE_VERSION),
        digest=np.asarray(nouns.digest),
        wnids=np.asarray(nouns.wnids),
        names=np.asarray(nouns.names),
        lexnames=np.asarray(nouns.lexnames),
        definitions=np.asarray(nouns.definitions),
        lemmas=np.asarray(nouns.lemmas_joined),
        lemma_counts=np.asarray(nouns.lemma_counts_joined),
        hypernym_edges=nouns.hypernym_edges,
        instance_edges=nouns.instance_edges,
        sense_lemmas=np.asarray(nouns.sense_lemmas),
        sense_wnids=np.asarray(nouns.sense_wnids_joined),
    )
    atomic_write_bytes(path, buffer.getvalue())


def _load(path: Path, digest: str) -> WordNetNouns | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            if int(data["version"]) != CACHE_VERSION or str(data["digest"]) != digest:
                return None
            return WordNetNouns(
                wnids=tuple(data["wnids"].tolist()),
                names=tuple(data["names"].tolist()),
                lexnames=tuple(data["lexnames"].tolist()),
                definitions=tuple(data["definitions"].tolist()),
                lemmas_joined=tuple(data["lemmas"].tolist()),
                lemma_counts_joined=tuple(data["lemma_counts"].tolist()),
                hypernym_edges=data["hypernym_edges"],
                instance_edges=data["instance_edges"],
                sense_lemmas=tuple(data["sense_lemmas"].tolist()),
                sense_wnids_joined=tuple(data["sense_wnids"].tolist()),
                digest=digest,
            )
    except (OSError, KeyError, ValueError) as err:
        log.warning("ignoring unreadable WordNet cache %s (%s)", path, err)
        return None


@functools.cache
def load_wordnet_nouns() -> WordNetNouns:
    """The cached noun graph; parses WordNet with nltk only when the cache is cold or stale."""
    root = locate_wordnet()
    digest = wordnet_digest(root)
    path = cache_dir() / f"wordnet-nouns-v{CACHE_VERSION}-{digest[:16]}.npz"
    if path.exists():
        nouns = _load(path, digest)
        if nouns is not None:
            return nouns
    nouns = _parse(get_wordnet(), digest)
    _save(nouns, path)
    return nouns
