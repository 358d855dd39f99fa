"""The WordNet 3.0 noun graph as plain arrays, read from WordNet's own files and cached on disk.

Everything the toolkit needs from WordNet (synset ids, lemmas, SemCor lemma counts, glosses,
lexicographer files, hypernym and instance-hypernym edges, and the sense order of every noun lemma)
comes from three plain-text files of the WordNet dict folder, read directly (about 1 s):
``data.noun`` (one synset a line: offset, lexicographer file, lemmas, pointers, ``| gloss``),
``index.noun`` (each lemma's synsets in sense order) and ``cntlist.rev`` (SemCor counts by sense
key). The result is what walking nltk's objects gives (``read_with_nltk``, kept as the reference:
``tools/bench_wordnet.py --verify`` and ``tests/hierarchy/test_wordnet.py`` compare the two), at a
fraction of the cost (nltk's walk: ~20 s of CPU, 1.6 GB). The cache holds each string column as
one UTF-8 blob (15 MB for 82,115 synsets, uncompressed: a warm load takes ~0.1 s), keyed by the
sha256 of the WordNet files.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.data import data_path
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.wordnet import HOW_TO_GET_WORDNET, locate_wordnet, synset_wnid, wordnet_digest
from imagenet_zsl.paths import cache_dir

log = logging.getLogger(__name__)

CACHE_VERSION = 3
SEP = "|"
#: the string columns of the cache, each stored as one "\n"-joined UTF-8 blob
STRING_COLUMNS = (
    "wnids",
    "names",
    "lexnames",
    "definitions",
    "lemmas_joined",
    "lemma_counts_joined",
    "sense_lemmas",
    "sense_wnids_joined",
)
#: nltk's readings of a gloss and a lemma (``WordNetCorpusReader._synset_from_pos_and_line``)
_QUOTED = re.compile(r"[\"].*?[\"]")
_SYNTACTIC_MARKER = re.compile(r"(.*?)(\([^()]*\))?$")
_VERSION = re.compile(r"Word[nN]et (\d+\+?|\d+\.\d+) Copyright")


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


# ----------------------------------------------------------------------------- WordNet's own files
@dataclass(frozen=True)
class _Synset:
    """One line of ``data.noun``, parsed (pointers as target offsets)."""

    offset: int
    lexname: str
    name: str
    definition: str
    lemmas: tuple[str, ...]
    counts: tuple[int, ...]
    hypernyms: frozenset[int]
    instances: frozenset[int]


def _data_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of a WordNet data or index file, the licence header (lines that start
    with a space) left out, as nltk reads them (UTF-8, split at '\\n' only)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not a WordNet text file (byte {err.start} is not UTF-8)") from err
    return [(i, line) for i, line in enumerate(text.split("\n"), 1) if line and not line[0].isspace()]


def _check_version(path: Path) -> None:
    """ImageNet's wnids are WordNet 3.0 offsets: another version's header is refused."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        head = "".join(handle.readline() for _ in range(40))
    match = _VERSION.search(head)
    if match is None or match.group(1) != "3.0":
        found = f"WordNet {match.group(1)}" if match else "no 'WordNet 3.0 Copyright' line in its header"
        raise UserInputError(
            f"{path}: {found}; imagenet-zsl needs WordNet 3.0 (ImageNet's wnids are WordNet 3.0 offsets)"
        )


def _read_lexnames(root: Path) -> list[str]:
    """Lexicographer file names by number (``lexnames``; Debian leaves it out: the packaged copy)."""
    path = root / "lexnames" if (root / "lexnames").is_file() else data_path("lexnames")
    names = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit() or int(parts[0]) != i:
            raise UserInputError(f"{path}, line {i + 1}: not a lexnames line ({line[:80]!r})")
        names.append(parts[1])
    return names


def _read_index(path: Path) -> dict[str, list[int]]:
    """lemma → its noun synsets' offsets in sense order (``index.noun``)."""
    offsets: dict[str, list[int]] = {}
    for number, line in _data_lines(path):
        try:
            tokens = line.split()
            n_synsets, n_pointers = int(tokens[2]), int(tokens[3])
            start = 4 + n_pointers + 2  # the pointer symbols, then n_senses and the tagged count
            if n_synsets < 1 or int(tokens[4 + n_pointers]) != n_synsets:
                raise ValueError("synset counts disagree")
            found = [int(t) for t in tokens[start : start + n_synsets]]
            if len(found) != n_synsets:
                raise ValueError("fewer offsets than its count")
        except (ValueError, IndexError) as err:
            raise UserInputError(f"{path}, line {number}: not a WordNet index line ({err})") from err
        if tokens[1] == "n":
            offsets[tokens[0]] = found
    return offsets


def _read_counts(path: Path) -> dict[str, int]:
    """SemCor count by sense key (``cntlist.rev``: ``key sense_number count``)."""
    if not path.is_file():
        raise UserInputError(f"{path}: the SemCor counts file is missing. {HOW_TO_GET_WORDNET}")
    counts = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        key, _, count = line.rpartition(" ")
        try:
            counts.setdefault(key.split(" ", 1)[0], int(count))
        except ValueError as err:
            raise UserInputError(f"{path}, line {number}: not a cntlist.rev line ({line!r})") from err
    return counts


def _parse_line(line: str, lexnames: Sequence[str], senses: dict[str, list[int]], counts: dict) -> _Synset:
    """One synset of ``data.noun``, read exactly as nltk reads it (``ValueError``/``IndexError``/
    ``KeyError`` on a malformed line)."""
    columns, gloss = line.strip().split("|")  # exactly one bar, as nltk requires
    definition = _QUOTED.sub("", gloss).strip().strip("; ")
    tokens = columns.split()
    offset, lexnum = int(tokens[0]), int(tokens[1])
    n_lemmas = int(tokens[3], 16)
    lemmas, counted = [], []
    for k in range(n_lemmas):
        word, lex_id = tokens[4 + 2 * k], int(tokens[5 + 2 * k], 16)
        if word.endswith(")"):
            word = _SYNTACTIC_MARKER.match(word).group(1)  # adjectives' (a)/(p)/(ip); never a noun
        lemmas.append(word)
        counted.append(counts.get(f"{word}%1:{lexnum:02d}:{lex_id:02d}::".lower(), 0))
    at = 4 + 2 * n_lemmas
    pointers: dict[str, set[int]] = {"@": set(), "@i": set()}
    for k in range(int(tokens[at])):
        symbol, target, pos, lemma_ids = tokens[at + 1 + 4 * k : at + 5 + 4 * k]
        if symbol in pointers and lemma_ids == "0000":  # synset pointers; lemma pointers are lexical
            if pos != "n":
                raise ValueError(f"{symbol} pointer to part of speech {pos!r}")
            pointers[symbol].add(int(target))
    first = lemmas[0].lower()
    return _Synset(
        offset=offset,
        lexname=lexnames[lexnum],
        name=f"{first}.n.{senses[first].index(offset) + 1:02d}",
        definition=definition,
        lemmas=tuple(lemmas),
        counts=tuple(counted),
        hypernyms=frozenset(pointers["@"]),
        instances=frozenset(pointers["@i"]),
    )


def _edge_array(pairs: list[tuple[int, int]]) -> np.ndarray:
    """(E, 2) int32 (parent, child) rows in sorted order."""
    edges = np.asarray(pairs, dtype=np.int32).reshape(-1, 2)
    return edges[np.lexsort((edges[:, 1], edges[:, 0]))]


def read_noun_files(root: Path, digest: str) -> WordNetNouns:
    """The noun graph from WordNet 3.0's dict folder ``root`` (``data.noun``, ``index.noun``,
    ``cntlist.rev``, ``lexnames``): what :func:`read_with_nltk` gives, in about a second.

    A malformed line is one error naming the file and the line."""
    data = Path(root) / "data.noun"
    _check_version(data)
    lexnames = _read_lexnames(Path(root))
    senses = _read_index(Path(root) / "index.noun")
    counts = _read_counts(Path(root) / "cntlist.rev")
    synsets = []
    for number, line in _data_lines(data):
        try:
            synsets.append(_parse_line(line, lexnames, senses, counts))
        except (ValueError, IndexError, KeyError) as err:
            raise UserInputError(f"{data}, line {number}: not a WordNet 3.0 noun synset ({err!r})") from err
    synsets.sort(key=lambda s: s.offset)
    index = {s.offset: i for i, s in enumerate(synsets)}
    missing = sorted({t for s in synsets for t in s.hypernyms | s.instances} - set(index))
    if missing:
        raise UserInputError(f"{data}: hypernym pointers to synsets it does not hold: n{missing[0]:08d}")
    sense_lemmas = tuple(sorted(senses))
    return WordNetNouns(
        wnids=tuple(f"n{s.offset:08d}" for s in synsets),
        names=tuple(s.name for s in synsets),
        lexnames=tuple(s.lexname for s in synsets),
        definitions=tuple(s.definition for s in synsets),
        lemmas_joined=tuple(SEP.join(s.lemmas) for s in synsets),
        lemma_counts_joined=tuple(SEP.join(map(str, s.counts)) for s in synsets),
        hypernym_edges=_edge_array([(index[h], i) for i, s in enumerate(synsets) for h in s.hypernyms]),
        instance_edges=_edge_array([(index[h], i) for i, s in enumerate(synsets) for h in s.instances]),
        sense_lemmas=sense_lemmas,
        sense_wnids_joined=tuple(SEP.join(f"n{o:08d}" for o in senses[k]) for k in sense_lemmas),
        digest=digest,
    )


def read_with_nltk(wn: Any, digest: str) -> WordNetNouns:
    """The noun graph by walking nltk's objects (the reference :func:`read_noun_files` must equal;
    ~20 s of CPU and 1.6 GB for the whole of WordNet). ``wn``: an nltk WordNetCorpusReader."""
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


def content_digest(nouns: WordNetNouns) -> str:
    """sha256 of everything a :class:`WordNetNouns` holds but its cache key: equal digests, equal
    readings (how the two readers are compared on the whole of WordNet)."""
    digest = hashlib.sha256()
    for column in STRING_COLUMNS:
        values = getattr(nouns, column)
        digest.update(f"{column} {len(values)}\n".encode())
        digest.update("\n".join(values).encode("utf-8"))
    for column in ("hypernym_edges", "instance_edges"):
        edges = np.ascontiguousarray(getattr(nouns, column), dtype="<i4")
        digest.update(f"{column} {edges.shape}\n".encode())
        digest.update(edges.tobytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- the cache
def _blob(values: tuple[str, ...], column: str) -> np.ndarray:
    """A string column as one UTF-8 byte array, the values joined by '\\n'."""
    if any("\n" in v for v in values):
        raise ValueError(f"bug: a line break inside the WordNet column {column}")
    return np.frombuffer("\n".join(values).encode("utf-8"), dtype=np.uint8)


def _unblob(data: Any, column: str) -> tuple[str, ...]:
    count = int(data[f"{column}_count"])
    values = tuple(data[column].tobytes().decode("utf-8").split("\n")) if count else ()
    if len(values) != count:
        raise ValueError(f"column {column} holds {len(values)} values, not {count}")
    return values


def _save(nouns: WordNetNouns, path: Path) -> None:
    arrays: dict[str, np.ndarray] = {
        "version": np.asarray(CACHE_VERSION),
        "digest": np.frombuffer(nouns.digest.encode("ascii"), dtype=np.uint8),
        "hypernym_edges": nouns.hypernym_edges,
        "instance_edges": nouns.instance_edges,
    }
    for column in STRING_COLUMNS:
        values = getattr(nouns, column)
        arrays[column] = _blob(values, column)
        arrays[f"{column}_count"] = np.asarray(len(values))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def _load(path: Path, digest: str) -> WordNetNouns | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            if int(data["version"]) != CACHE_VERSION or data["digest"].tobytes().decode() != digest:
                return None
            columns = {column: _unblob(data, column) for column in STRING_COLUMNS}
            return WordNetNouns(
                **columns,
                hypernym_edges=data["hypernym_edges"],
                instance_edges=data["instance_edges"],
                digest=digest,
            )
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as err:
        log.warning("ignoring unreadable WordNet cache %s (%s)", path, err)
        return None


def cache_path(digest: str) -> Path:
    """Where the noun graph of the WordNet files with sha256 ``digest`` is cached."""
    return cache_dir() / f"wordnet-nouns-v{CACHE_VERSION}-{digest[:16]}.npz"


@functools.cache
def load_wordnet_nouns() -> WordNetNouns:
    """The cached noun graph; reads WordNet's files only when the cache is cold or stale."""
    root = locate_wordnet()
    digest = wordnet_digest(root)
    path = cache_path(digest)
    if path.exists():
        nouns = _load(path, digest)
        if nouns is not None:
            return nouns
    log.info("reading the WordNet 3.0 nouns of %s (once; cached afterwards)", root)
    nouns = read_noun_files(root, digest)
    _save(nouns, path)
    return nouns
