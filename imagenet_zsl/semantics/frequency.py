"""How often a label word is used: wordfreq's English Zipf frequency, or a user's word→count table.

Frequencies are on the Zipf scale: ``log10(occurrences per billion words)`` (wordfreq's unit;
0 = never seen). A multi-word label is looked up as a phrase first; otherwise its frequency is
wordfreq's estimate for phrases, ``1/f = sum(1/f_i)`` over its words (so one rare word makes the
phrase rare); a label with an unseen word gets 0.

Rare-word threshold. Hascoet et al. (CVPR 2019) flag labels seen fewer than 50 times in
Wikipedia. The default here is that rule: ``min_count: 50`` occurrences in a reference corpus
of ``reference_tokens: 3.0e9`` words (English Wikipedia's size), i.e. Zipf
``log10(50 / 3e9 * 1e9) = 1.22``. wordfreq blends Wikipedia with other sources (subtitles, news,
web, books), so this is Hascoet's threshold on a broader English sample. With a user count
table, ``min_count`` applies to the table's own counts (its total is the reference size), or
give ``min_zipf`` directly.
"""

from __future__ import annotations

import functools
import io
import logging
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import derived_key, universe_wnids, write_cache
from imagenet_zsl.paths import cache_dir, regular_input_file
from imagenet_zsl.versions import software_versions

log = logging.getLogger(__name__)

DEFAULT_MIN_COUNT = 50
#: words in English Wikipedia, the corpus Hascoet et al. counted label occurrences in
WIKIPEDIA_TOKENS = 3.0e9


def zipf_from_count(count: float, corpus_tokens: float) -> float:
    """Zipf value of ``count`` occurrences in a corpus of ``corpus_tokens`` words."""
    if count <= 0:
        return 0.0
    return math.log10(count * 1e9 / corpus_tokens)


def _phrase(label: str) -> str:
    return label.replace("_", " ").strip()


class WordfreqFrequencies:
    """wordfreq's frequencies (``best`` word list; English counts Wikipedia among its sources)."""

    def __init__(self, lang: str = "en"):
        import wordfreq  # deferred: a large data package, only when frequencies are looked up

        if lang not in wordfreq.available_languages():
            raise UserInputError(f"frequency.lang: wordfreq has no {lang!r} word list")
        self.lang = lang
        self._wordfreq = wordfreq
        self.reference_tokens = WIKIPEDIA_TOKENS

    @property
    def name(self) -> str:
        return f"wordfreq {metadata.version('wordfreq')} ({self.lang})"

    def zipf(self, labels: Sequence[str]) -> np.ndarray:
        """Zipf frequency of each label (underscores read as spaces), float64 (len,)."""
        cache: dict[str, float] = {}
        out = np.empty(len(labels), dtype=np.float64)
        for i, label in enumerate(labels):
            phrase = _phrase(label)
            if phrase not in cache:
                cache[phrase] = self._wordfreq.zipf_frequency(phrase, self.lang)
            out[i] = cache[phrase]
        return out


@dataclass
class CountTableFrequencies:
    """A user's word→count table (e.g. counted in their own Wikipedia dump).

    Format: one ``word<TAB>count`` (or ``word,count``) per line; optional header ``word<sep>count``;
    ``#`` comments. Words are matched case-insensitively (case variants' counts are summed);
    multi-word entries may use spaces or underscores.
    """

    path: Path
    counts: dict[str, int]
    total: int

    @classmethod
    def read(cls, path: str | Path) -> CountTableFrequencies:
        path = regular_input_file(path, "word-frequency table")
        counts: dict[str, int] = {}
        total = 0
        with open(path, encoding="utf-8", errors="strict") as handle:
            try:
                for line_no, raw in enumerate(handle, 1):
                    line = raw.rstrip("\r\n")
                    if not line.strip() or line.lstrip().startswith("#"):
                        continue
                    sep = "\t" if "\t" in line else ","
                    parts = line.split(sep)
                    header = parts[1].strip().lower() in ("count", "counts", "n")
                    if line_no == 1 and len(parts) == 2 and header:
                        continue
                    if len(parts) != 2 or not parts[0].strip():
                        raise UserInputError(
                            f"{path}:{line_no}: expected 'word<TAB>count' (or 'word,count'), "
                            f"got {line[:60]!r}"
                        )
                    text = parts[1].strip()
                    if not (text.isascii() and text.isdigit()):  # ASCII digits: not '²' or '٣'
                        raise UserInputError(
                            f"{path}:{line_no}: count {text[:20]!r} of {parts[0][:30]!r} is not a "
                            "non-negative integer"
                        )
                    key = _phrase(parts[0]).lower()
                    counts[key] = counts.get(key, 0) + int(text)
                    total += int(text)
            except UnicodeDecodeError as err:
                raise UserInputError(f"{path}: not UTF-8 text ({err.reason} near byte {err.start})") from err
        if total == 0:
            raise UserInputError(f"{path}: the frequency table holds no counts")
        return cls(path=path, counts=counts, total=total)

    @property
    def name(self) -> str:
        return f"table {self.path.name} ({self.total:,} tokens)"

    @property
    def reference_tokens(self) -> float:
        return float(self.total)

    def zipf(self, labels: Sequence[str]) -> np.ndarray:
        out = np.empty(len(labels), dtype=np.float64)
        for i, label in enumerate(labels):
            phrase = _phrase(label).lower()
            count = self.counts.get(phrase)
            if count is None:
                words = phrase.split()
                word_counts = [self.counts.get(w, 0) for w in words]
                # wordfreq's phrase rule: 1/f = sum(1/f_i)
                unseen = not words or min(word_counts) == 0
                count = 0.0 if unseen else 1.0 / sum(1.0 / c for c in word_counts)
            out[i] = zipf_from_count(count, self.total)
        return out


#: either source of word frequencies (both offer ``zipf(labels)`` and ``reference_tokens``)
Frequencies = WordfreqFrequencies | CountTableFrequencies


def load_frequencies(source: str = "wordfreq", lang: str = "en", base_dir: Path | None = None) -> Frequencies:
    """``wordfreq`` or a path to a count table (relative paths: against ``base_dir`` first)."""
    if source == "wordfreq":
        return WordfreqFrequencies(lang)
    path = Path(source)
    if base_dir is not None and not path.is_absolute() and (Path(base_dir) / path).exists():
        path = Path(base_dir) / path
    return CountTableFrequencies.read(path)


def rare_threshold(
    frequencies: Frequencies,
    min_zipf: float | None = None,
    min_count: float | None = DEFAULT_MIN_COUNT,
    reference_tokens: float | None = None,
) -> float:
    """The Zipf value below which a label is rare (``min_zipf`` wins over ``min_count``)."""
    if min_zipf is not None:
        return float(min_zipf)
    if min_count is None:
        return 0.0
    tokens = reference_tokens if reference_tokens is not None else frequencies.reference_tokens
    if tokens <= 0:
        raise UserInputError(f"frequency.reference_tokens must be positive, got {tokens}")
    return zipf_from_count(float(min_count), float(tokens))


#: the layout of the label-frequency cache file; a new one is a new file name
LABEL_FREQUENCY_CACHE_VERSION = 1


def first_lemma_frequencies(wnids: Sequence[str]) -> np.ndarray:
    """(len(wnids),) wordfreq English Zipf frequency of each class's first WordNet lemma
    (underscores read as spaces); NaN for a wnid that is not a WordNet noun. Loads the WordNet
    noun table and wordfreq."""
    nouns = load_wordnet_nouns()
    rows = [nouns.index.get(w) for w in wnids]
    lemmas = [nouns.lemmas[r][0] if r is not None and nouns.lemmas[r] else None for r in rows]
    known = [i for i, lemma in enumerate(lemmas) if lemma is not None]
    out = np.full(len(wnids), np.nan)
    out[known] = WordfreqFrequencies("en").zipf([lemmas[i] for i in known])
    return out


@functools.cache
def universe_label_frequencies() -> dict[str, float]:
    """wnid -> :func:`first_lemma_frequencies` of the 21,842 ImageNet classes, computed once (2 s:
    the WordNet noun table and 21,842 wordfreq look-ups) and then read from a cache file keyed by
    the WordNet files, the packaged class lists and wordfreq's version. Raises ImportError
    without wordfreq."""
    version = software_versions().get("wordfreq")
    if version is None:
        raise ImportError("wordfreq is not installed")
    key = derived_key(f"label-frequency-v{LABEL_FREQUENCY_CACHE_VERSION}", f"wordfreq {version} en")
    path = cache_dir() / f"label-frequency-v{LABEL_FREQUENCY_CACHE_VERSION}-{key[:16]}.npz"
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["key"]) == key:
                    return dict(zip(data["wnids"].tolist(), data["zipf"].tolist(), strict=True))
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
            log.warning("ignoring unreadable label-frequency cache %s (%s): rebuilding it", path, err)
    wnids = universe_wnids()
    values = first_lemma_frequencies(wnids)
    buffer = io.BytesIO()
    np.savez(buffer, key=np.asarray(key), wnids=np.asarray(wnids), zipf=values)
    write_cache(path, buffer.getvalue())
    return dict(zip(wnids, values.tolist(), strict=True))


def class_label_frequencies(wnids: Sequence[str]) -> np.ndarray:
    """(len(wnids),) :func:`first_lemma_frequencies` of any classes: the ImageNet ones from
    :func:`universe_label_frequencies` (no WordNet or wordfreq load once cached), the others
    looked up."""
    table = universe_label_frequencies()
    out = np.array([table.get(w, np.nan) for w in wnids], dtype=np.float64)
    other = [i for i, w in enumerate(wnids) if w not in table]
    if other:
        out[other] = first_lemma_frequencies([wnids[i] for i in other])
    return out
