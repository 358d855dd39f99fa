"""Label tables: every lemma of every ImageNet class with its frequency, vector and sense evidence.

Chosen label. A class's label is its **first WordNet lemma** (``cairn`` for n02096177 "cairn,
cairn_terrier"): the word ImageNet shows first for the synset and the one Hascoet et al. use.
The rare-word and primary-meaning decisions of a class are about this word; the class vector
(``lemma_vectors``) may still draw on all lemmas.

A class is kept when it has a vector and its label is frequent and used in its primary meaning;
the exclusion reasons (all that apply, ``;``-joined in ``classes.csv``):

* ``no_vector``: none of the class's lemmas has a word vector;
* ``rare_label``: the label's Zipf frequency is below the rare-word threshold (``frequency``);
* ``secondary_meaning``: the label's primary meaning is another WordNet sense (``senses``);
* ``low_confidence``: the class is the label's primary meaning, but with a posterior below
  ``min_confidence``.

``lemmas.csv`` columns: ``n_noun_senses`` (WordNet noun synsets having the lemma),
``n_imagenet_classes_sharing`` (the *other* ImageNet classes having it among their lemmas),
``zipf_frequency`` (``frequency``), ``in_vocabulary`` (the lemma has a vector: phrase token or all
its words), ``is_primary``/``primary_confidence`` (this class is the lemma's primary meaning, and
its posterior; 1.0 for a monosemous lemma), then ``lemma_position``, ``vector_from``
(phrase|words|oov) and ``primary_sense``. ``classes.csv`` repeats these for the label and adds
``n_classes_same_label``, ``shares_label_with``, ``kept`` and ``exclusion_reasons``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import WordNetNouns, load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import training_wnids, universe_wnids
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.config import LabelConfig
from imagenet_zsl.semantics.frequency import Frequencies
from imagenet_zsl.semantics.lemma_vectors import LemmaVectorizer, class_vectors_from_lemmas, vectorizer_for
from imagenet_zsl.semantics.senses import PrimarySenseModel, word_key

log = logging.getLogger(__name__)

REASONS = ("no_vector", "rare_label", "secondary_meaning", "low_confidence")
LEMMA_COLUMNS = (
    "wnid",
    "lemma",
    "n_noun_senses",
    "n_imagenet_classes_sharing",
    "zipf_frequency",
    "in_vocabulary",
    "is_primary",
    "primary_confidence",
)


def chosen_labels(wnids: Sequence[str], nouns: WordNetNouns | None = None) -> list[str]:
    """The label of each class: its first WordNet lemma (see the module docstring)."""
    if nouns is None:
        nouns = load_wordnet_nouns()
    return [nouns.lemmas[nouns.index[w]][0] for w in wnids]


def primary_decisions(
    words: Sequence[str], wnids: Sequence[str], model: PrimarySenseModel
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """For each (word, class) pair: is the class the word's primary sense, its posterior, and the
    primary sense's wnid. A word with no other noun sense is primary with confidence 1."""
    evidence = model.evidence(words)
    lookup = {
        (w, n): (p, c)
        for w, n, p, c in zip(
            evidence["word"], evidence["wnid"], evidence["is_primary"], evidence["posterior"], strict=True
        )
    }
    primary_of = dict(
        zip(
            evidence.loc[evidence["is_primary"], "word"],
            evidence.loc[evidence["is_primary"], "wnid"],
            strict=True,
        )
    )
    is_primary = np.ones(len(words), dtype=bool)
    confidence = np.ones(len(words), dtype=np.float64)
    primary = []
    for i, (word, wnid) in enumerate(zip(words, wnids, strict=True)):
        key = word_key(word)
        hit = lookup.get((key, wnid))
        if hit is not None:
            is_primary[i], confidence[i] = hit
        primary.append(primary_of.get(key, wnid))
    return is_primary, confidence, primary


def imagenet_classes_by_lemma(nouns: WordNetNouns, universe: Sequence[str]) -> dict[str, list[str]]:
    """lemma (index form) → the ImageNet classes having it among their lemmas (universe order)."""
    found: dict[str, list[str]] = {}
    for wnid in universe:
        for key in dict.fromkeys(word_key(lemma) for lemma in nouns.lemmas[nouns.index[wnid]]):
            found.setdefault(key, []).append(wnid)
    return found


@dataclass
class LabelTables:
    """``lemmas`` (one row per (wnid, lemma)), ``classes`` (one row per class) and the settings."""

    lemmas: pd.DataFrame
    classes: pd.DataFrame
    rare_zipf: float
    config: LabelConfig
    frequency_source: str
    vectors_source: str
    class_vectors: ClassVectors | None = None


@dataclass(frozen=True)
class Lexicon:
    """WordNet and the ImageNet universe, as the tables see them: ``key_to_classes`` maps a lemma
    (index form) to the ImageNet classes having it (:func:`imagenet_classes_by_lemma`)."""

    nouns: WordNetNouns
    universe: Sequence[str]
    key_to_classes: dict[str, list[str]]

    @classmethod
    def load(cls) -> Lexicon:
        nouns = load_wordnet_nouns()
        universe = universe_wnids()
        return cls(nouns, universe, imagenet_classes_by_lemma(nouns, universe))

    def synonyms(self, wnid: str) -> list[str]:
        """The lemmas of a class, in WordNet order (the first is its label)."""
        return self.nouns.lemmas[self.nouns.index[wnid]]


def build_label_tables(
    config: LabelConfig, wnids: Sequence[str] | None = None, model: PrimarySenseModel | None = None
) -> LabelTables:
    """Analyse every lemma of ``wnids`` (default: the 21,842 ImageNet classes).

    Sharing counts are always against all 21,842 ImageNet classes, whatever subset is analysed.
    """
    lexicon = Lexicon.load()
    wnids = list(lexicon.universe if wnids is None else wnids)
    absent = [w for w in wnids if w not in lexicon.nouns]
    if absent:
        raise UserInputError(f"{len(absent)} wnids are not WordNet 3.0 noun synsets: {preview(absent)}")
    vectorizer = vectorizer_for(config.vectors)
    frequencies = config.frequency.load()
    threshold = config.frequency.threshold(frequencies)
    if model is None:
        model = PrimarySenseModel(vectorizer, lexicon.nouns, **dict(config.sense_params))
    lemmas = lemma_table(wnids, lexicon, frequencies, vectorizer, model)
    vectors = class_vectors_from_lemmas(
        vectorizer,
        wnids,
        [lexicon.synonyms(w) for w in wnids],
        config.lemma_rule,
        config.normalize,
        source=f"{config.vectors.source} (lemma_rule={config.lemma_rule})",
    )
    # the class rows describe the chosen label: the lemma at position 0
    first = lemmas[lemmas["lemma_position"] == 0].reset_index(drop=True)
    has_vector = np.asarray([w in vectors for w in wnids])
    flags = exclusion_flags(first, has_vector, threshold, config.min_confidence)
    return LabelTables(
        lemmas=lemmas,
        classes=class_table(wnids, first, flags, lexicon),
        rare_zipf=threshold,
        config=config,
        frequency_source=frequencies.name,
        vectors_source=config.vectors.source,
        class_vectors=vectors,
    )


def lemma_table(
    wnids: Sequence[str],
    lexicon: Lexicon,
    frequencies: Frequencies,
    vectorizer: LemmaVectorizer,
    model: PrimarySenseModel,
) -> pd.DataFrame:
    """One row per (class, lemma): senses, sharing, frequency, vector and primary-sense evidence."""
    nouns, key_to_classes = lexicon.nouns, lexicon.key_to_classes
    synonyms = [lexicon.synonyms(w) for w in wnids]
    row_wnid = [w for w, group in zip(wnids, synonyms, strict=True) for _ in group]
    row_lemma = [lemma for group in synonyms for lemma in group]
    row_position = [j for group in synonyms for j in range(len(group))]
    keys = [word_key(lemma) for lemma in row_lemma]
    n_senses = np.asarray([max(len(nouns.senses.get(k, ())), 1) for k in keys], dtype=np.int64)
    sharing = np.asarray(
        [len(set(key_to_classes.get(k, ())) - {w}) for k, w in zip(keys, row_wnid, strict=True)],
        dtype=np.int64,
    )
    zipf = frequencies.zipf(row_lemma)
    found = [vectorizer.tokens(lemma) for lemma in row_lemma]
    is_primary, confidence, primary = primary_decisions(row_lemma, row_wnid, model)
    return pd.DataFrame(
        {
            "wnid": row_wnid,
            "lemma": row_lemma,
            "n_noun_senses": n_senses,
            "n_imagenet_classes_sharing": sharing,
            "zipf_frequency": np.round(zipf, 3),
            "in_vocabulary": [bool(rows) for rows, _ in found],
            "is_primary": is_primary,
            "primary_confidence": np.round(confidence, 4),
            "lemma_position": row_position,
            "vector_from": [how for _, how in found],
            "primary_sense": primary,
        }
    )


def exclusion_flags(
    first: pd.DataFrame, has_vector: np.ndarray, rare_zipf: float, min_confidence: float
) -> dict[str, np.ndarray]:
    """Reason → (C,) bool: which classes (rows of ``first``, their label lemmas) it excludes."""
    is_primary = first["is_primary"].to_numpy()
    return {
        "no_vector": ~has_vector,
        "rare_label": first["zipf_frequency"].to_numpy() < rare_zipf,
        "secondary_meaning": ~is_primary,
        "low_confidence": is_primary & (first["primary_confidence"].to_numpy() < min_confidence),
    }


def class_table(
    wnids: Sequence[str], first: pd.DataFrame, flags: dict[str, np.ndarray], lexicon: Lexicon
) -> pd.DataFrame:
    """One row per class: its label's evidence (``first``), label sharing, images, and the
    exclusion reasons that apply (``flags``, all ``;``-joined; "" = kept)."""
    nouns, key_to_classes = lexicon.nouns, lexicon.key_to_classes
    reasons = [";".join(r for r in REASONS if flags[r][i]) for i in range(len(wnids))]
    label_keys = [word_key(x) for x in first["lemma"]]
    shares_with = [
        ";".join(w for w in key_to_classes.get(k, ()) if w != wnid)
        for k, wnid in zip(label_keys, wnids, strict=True)
    ]
    universe_labels = Counter(word_key(x) for x in chosen_labels(lexicon.universe, nouns))
    universe_set = set(lexicon.universe)
    same_label = np.asarray(
        [universe_labels[k] - (wnid in universe_set) for k, wnid in zip(label_keys, wnids, strict=True)],
        dtype=np.int64,
    )
    train = set(training_wnids())
    counts = fall11_counts()
    return pd.DataFrame(
        {
            "wnid": wnids,
            "name": [nouns.names[nouns.index[w]] for w in wnids],
            "label": first["lemma"],
            "is_training": [w in train for w in wnids],
            "n_images": [counts.get(w, 0) for w in wnids],
            "label_zipf": first["zipf_frequency"],
            "label_rare": flags["rare_label"],
            "has_vector": ~flags["no_vector"],
            "label_in_vocabulary": first["in_vocabulary"],
            "n_noun_senses": first["n_noun_senses"],
            "n_imagenet_classes_sharing": first["n_imagenet_classes_sharing"],
            "n_classes_same_label": same_label,
            "shares_label_with": shares_with,
            "primary_sense": first["primary_sense"],
            "is_primary": first["is_primary"],
            "primary_confidence": first["primary_confidence"],
            "kept": [not r for r in reasons],
            "exclusion_reasons": reasons,
        }
    )
