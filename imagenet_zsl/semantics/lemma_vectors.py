"""Class vectors from WordNet lemmas, the way the field builds them (DeViSE, ConSE, SYNC, GCNZ).

Lemma → vector (``LemmaVectorizer``):

1. **Phrase token.** If the vocabulary holds the lemma itself (``cairn_terrier``, ``New_York`` as
   in word2vec's phrase vocabulary; a hyphenated lemma such as ``T-shirt``), looked up as written,
   then lower-cased, that vector is the lemma's vector.
2. **Mean of words.** Otherwise the lemma is split on ``_`` into words; function words (``of``,
   ``the``, ``'s`` ...; see ``FUNCTION_WORDS``) are dropped unless nothing else is left; a word is
   looked up as written, then lower-cased, then (hyphenated words only) as its hyphen-separated
   parts. The lemma vector is the mean of the unit-normalised word vectors. If any word is out of
   vocabulary the lemma has **no** vector: a partial mean would silently change its meaning.

Synset → class vector (``lemma_rule``):

* ``mean`` (default): the mean of the unit-normalised vectors of all the synset's lemmas that have
  a vector (synonyms add evidence and dilute one polysemous word), as GCNZ/SYNC average the words
  of all class names.
* ``first``: the vector of the first lemma (WordNet order) that has a vector.

Class vectors are L2-normalised (``normalize: true``) so dot products are cosines. A class none
of whose lemmas has a vector is listed in ``ClassVectors.missing``, never given a zero vector.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from imagenet_zsl.atomic import canonical_json
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import universe_wnids
from imagenet_zsl.hierarchy.wordnet import wordnet_digest
from imagenet_zsl.paths import cache_dir
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.config import LabelConfig, load_label_config
from imagenet_zsl.semantics.spec import LEMMA_RULES
from imagenet_zsl.semantics.word_vectors import DEFAULT_VECTORS, VectorSpec, load_word_vectors

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

log = logging.getLogger(__name__)

#: words dropped from multi-word lemmas before averaging (they carry no visual meaning)
FUNCTION_WORDS = frozenset(
    {"a", "an", "and", "at", "by", "for", "from", "in", "into", "of", "on", "or", "the", "to", "with", "'s"}
)
#: bump when the rules above change (invalidates cached class vectors)
RULES_VERSION = 1


class LemmaVectorizer:
    """Maps WordNet lemmas to the vocabulary rows to average (see the module docstring).

    ``tokens(lemma)`` returns the tuple of row indices (empty: no vector) and how they were found
    (``phrase``, ``words`` or ``oov``). Results are memoised: ImageNet lemmas repeat.
    """

    def __init__(self, keyed_vectors: KeyedVectors) -> None:
        self.kv = keyed_vectors
        self._key_to_index = keyed_vectors.key_to_index
        norms = np.linalg.norm(keyed_vectors.vectors, axis=1)
        self._usable = norms > 0
        self._norms = norms
        self._cache: dict[str, tuple[tuple[int, ...], str]] = {}

    def token_index(self, token: str) -> int | None:
        """Row of ``token`` as written, else lower-cased; None if absent (or a zero vector)."""
        for form in (token, token.lower()):
            row = self._key_to_index.get(form)
            if row is not None and self._usable[row]:
                return int(row)
        return None

    def _word_rows(self, word: str) -> list[int] | None:
        row = self.token_index(word)
        if row is not None:
            return [row]
        if word.endswith("'s") and len(word) > 2:
            base = self._word_rows(word[:-2])
            return None if base is None else base
        parts = [p for p in word.replace("-", " ").replace("/", " ").split() if p]
        if len(parts) > 1:
            rows = [self.token_index(p) for p in parts]
            return None if any(r is None for r in rows) else [int(r) for r in rows]
        if word.endswith(".") and len(word) > 1:
            row = self.token_index(word[:-1])
            return None if row is None else [row]
        return None

    def tokens(self, lemma: str) -> tuple[tuple[int, ...], str]:
        """(vocabulary rows whose unit vectors are averaged, how: phrase|words|oov)."""
        hit = self._cache.get(lemma)
        if hit is not None:
            return hit
        row = self.token_index(lemma)
        if row is not None:
            result: tuple[tuple[int, ...], str] = ((row,), "phrase")
        else:
            words = [w for w in lemma.replace(" ", "_").split("_") if w]
            content = [w for w in words if w.lower() not in FUNCTION_WORDS] or words
            rows: list[int] = []
            for word in content:
                found = self._word_rows(word)
                if found is None:
                    rows = []
                    break
                rows += found
            result = (tuple(rows), "words") if rows else ((), "oov")
        self._cache[lemma] = result
        return result

    def has_vector(self, lemma: str) -> bool:
        return bool(self.tokens(lemma)[0])

    def lemma_matrix(self, lemmas: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Unit lemma vectors (len, D) float32 and a bool mask of lemmas that have one.

        One sparse (lemmas × used words) averaging matrix times the used unit word vectors.
        """
        token_lists = [self.tokens(lemma)[0] for lemma in lemmas]
        return self.mean_of_tokens(token_lists)

    def mean_of_tokens(self, token_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Row i = unit(mean of the unit vectors of rows ``token_lists[i]``); mask of non-empty rows."""
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(token_lists))
        flat = np.fromiter((r for t in token_lists for r in t), dtype=np.int64, count=int(lengths.sum()))
        used, columns = np.unique(flat, return_inverse=True)
        weights = np.repeat(1.0 / np.maximum(lengths, 1), lengths)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        averaging = sp.csr_matrix((weights, columns, indptr), shape=(len(token_lists), len(used)))
        unit = self.kv.vectors[used] / self._norms[used, None]
        out = np.asarray(averaging @ unit, dtype=np.float32)
        return _normalise_rows(out), lengths > 0


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def class_vectors_from_lemmas(
    vectorizer: LemmaVectorizer,
    wnids: Sequence[str],
    lemmas: Sequence[Sequence[str]],
    lemma_rule: str = "mean",
    normalize: bool = True,
    source: str = "",
) -> ClassVectors:
    """Class vectors for ``wnids`` whose synonyms are ``lemmas[i]`` (WordNet order).

    Returns ClassVectors over the classes that have a vector, in input order; the others are in
    ``.missing``.
    """
    if lemma_rule not in LEMMA_RULES:
        raise UserInputError(f"lemma_rule: {lemma_rule!r} is not one of {', '.join(LEMMA_RULES)}")
    if len(wnids) != len(lemmas):
        raise ValueError(f"{len(wnids)} wnids but {len(lemmas)} lemma lists")
    owner = np.repeat(np.arange(len(wnids)), [len(x) for x in lemmas])
    flat = [lemma for group in lemmas for lemma in group]
    lemma_vecs, has = vectorizer.lemma_matrix(flat)
    if lemma_rule == "first":
        # keep only the first lemma with a vector of each class
        first = np.full(len(wnids), -1, dtype=np.int64)
        rows = np.flatnonzero(has)
        order = np.unique(owner[rows], return_index=True)
        first[order[0]] = rows[order[1]]
        keep = np.zeros(len(flat), dtype=bool)
        keep[first[first >= 0]] = True
        has = has & keep
    combine = sp.csr_matrix(
        (has.astype(np.float32), (owner, np.arange(len(flat)))), shape=(len(wnids), len(flat))
    )
    counts = np.asarray(combine.sum(axis=1)).ravel()
    matrix = np.asarray(combine @ lemma_vecs, dtype=np.float32)
    present = counts > 0
    matrix = matrix[present] / counts[present, None]
    if normalize:
        matrix = _normalise_rows(matrix)
    wnids = list(wnids)
    return ClassVectors(
        wnids=[w for w, p in zip(wnids, present, strict=True) if p],
        matrix=matrix,
        missing=[w for w, p in zip(wnids, present, strict=True) if not p],
        source=source,
    )


# --------------------------------------------------------------------------- the 21,842 classes
def _vector_options(config_or_name: Any) -> tuple[VectorSpec, str, bool]:
    """(spec, lemma_rule, normalize) from a name/path, a VectorSpec, a mapping or a labels config."""
    if isinstance(config_or_name, LabelConfig):
        cfg = config_or_name
        return cfg.vectors, cfg.lemma_rule, cfg.normalize
    if isinstance(config_or_name, str | Path) and str(config_or_name).endswith((".yaml", ".yml")):
        cfg = load_label_config(config_or_name)
        return cfg.vectors, cfg.lemma_rule, cfg.normalize
    if isinstance(config_or_name, Mapping) and {"lemma_rule", "vectors"} & set(config_or_name):
        cfg = load_label_config(dict(config_or_name))
        return cfg.vectors, cfg.lemma_rule, cfg.normalize
    return VectorSpec.parse(config_or_name), "mean", True


def build_class_vectors(
    config_or_name: Any = DEFAULT_VECTORS, wnids: Sequence[str] | None = None
) -> ClassVectors:
    """Class vectors for ``wnids`` (default: the 21,842-class universe), computed now (no disk cache)."""
    spec, rule, normalize = _vector_options(config_or_name)
    return _build(spec, rule, normalize, wnids)


def _build(spec: VectorSpec, rule: str, normalize: bool, wnids: Sequence[str] | None = None) -> ClassVectors:
    nouns = load_wordnet_nouns()
    wnids = list(universe_wnids() if wnids is None else wnids)
    absent = [w for w in wnids if w not in nouns]
    if absent:
        raise UserInputError(f"{len(absent)} wnids are not WordNet 3.0 noun synsets: {preview(absent)}")
    lemmas = [nouns.lemmas[nouns.index[w]] for w in wnids]
    return class_vectors_from_lemmas(
        vectorizer_for(spec), wnids, lemmas, rule, normalize, source=_describe(spec, rule)
    )


def _describe(spec: VectorSpec, rule: str) -> str:
    return f"{Path(spec.source).name if not spec.is_named else spec.source} (lemma_rule={rule})"


@functools.lru_cache(maxsize=4)
def _vectorizer(spec: VectorSpec, identity: str) -> LemmaVectorizer:  # noqa: ARG001 - cache key
    return LemmaVectorizer(load_word_vectors(spec))


def vectorizer_for(spec: VectorSpec | str) -> LemmaVectorizer:
    """A shared LemmaVectorizer per vector set (its memo of lemma lookups is reused)."""
    spec = VectorSpec.parse(spec)
    return _vectorizer(spec, canonical_json(spec.identity()))


def _cache_key(spec: VectorSpec, rule: str, normalize: bool) -> str:
    key = {
        "vectors": spec.identity(),
        "dim": spec.dim,
        "lemma_rule": rule,
        "normalize": normalize,
        "rules_version": RULES_VERSION,
        "wordnet": _wordnet_digest(),
        "universe": hashlib.sha256("\n".join(universe_wnids()).encode()).hexdigest(),
    }
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()


@functools.cache
def _wordnet_digest() -> str:
    return wordnet_digest()


@functools.lru_cache(maxsize=4)
def _load_cached(key: str, spec: VectorSpec, rule: str, normalize: bool) -> ClassVectors:
    path = cache_dir() / f"class-vectors-{key[:20]}.npz"
    if path.exists():
        try:
            return ClassVectors.load(path)
        except UserInputError as err:
            log.warning("rebuilding unreadable class-vector cache %s (%s)", path, err)
    vectors = _build(spec, rule, normalize)
    vectors.save(path)
    return vectors


def load_class_vectors(config_or_name: Any = DEFAULT_VECTORS) -> ClassVectors:
    """Word-vector class semantics of all 21,842 ImageNet classes (training classes included).

    ``config_or_name``: a vector-set name (``glove-6b-50d``), a vector file path, a labels YAML
    (``configs/labels.yaml``: its ``vectors``, ``lemma_rule``, ``normalize``) or that mapping.
    Built by this module's lemma rules (default ``mean``, unit-normalised) and cached under the
    user cache dir, keyed by the vector set, the rules, WordNet and the class list. Classes with
    no vector are listed in ``.missing``. Treat the result as read-only (it is shared).
    """
    spec, rule, normalize = _vector_options(config_or_name)
    return _load_cached(_cache_key(spec, rule, normalize), spec, rule, normalize)
