"""Polysemy and primary meaning: which WordNet noun sense does a label word mostly stand for?

A zero-shot model sees one vector per word, a blend of all the word's uses, dominated by its most
frequent one. A class named by a secondary meaning of its word ("cairn" the terrier; the stone
memorial is the primary meaning) gets a vector that describes something else (Hascoet et al.,
CVPR 2019). For each word we score every noun sense ``i`` of the word and call the best-scoring
one the primary meaning:

WordNet evidence ``p_wordnet(i)``: SemCor tag counts ``n_i`` of the word in sense ``i``, smoothed
by pseudo-counts that follow WordNet's sense order::

    p_wordnet(i) = (n_i + prior_strength * o_i) / (N + prior_strength),   o_i ∝ order_decay ** rank_i

With many SemCor tags the counts decide; with few, the order prior weighs in (sense 1 is
``1/order_decay`` = 2× as likely as sense 2 by default). WordNet orders senses by SemCor
frequency only where they were tagged, so a word with no tag at all (most ImageNet words) gets a
flat prior: there the embedding alone decides.

Embedding evidence ``p_embedding(i) = softmax_i(cos(v_word, c_i) / temperature)``: ``v_word`` is
the word's vector (lemma rules of ``lemma_vectors``) and ``c_i`` the sense's context, the sum of
four unit vectors: the mean word vector of the sense's other lemmas (synonyms), of its hypernyms'
lemmas, of its direct hyponyms' lemmas and of its gloss's content words. Left out of every
context: the word itself and its WordNet collocates, the words it forms compound lemmas with
("cairn" → "terrier" from "cairn terrier"): a word vector is close to its collocates because of
the compound, whatever the bare word mostly means. A word vector leans towards its dominant
corpus sense, so the most similar context marks the primary meaning *in the embedding's corpus*
(with GloVe 6B, trained on Wikipedia and newswire, "butterfly" is the swimming stroke).

Decision: ``posterior(i) ∝ p_wordnet(i) · p_embedding(i)``; the primary meaning is the argmax and
``primary_confidence`` of a (word, class) pair is the class's posterior. Without SemCor counts
the embedding decides; with a few counts it overrules WordNet as soon as its likelihood ratio
beats the prior's; with strong counts it needs a much larger cosine gap. Words without a vector
fall back to WordNet evidence alone. The temperature (0.16 for GloVe 6B 50-d) is the
maximum-likelihood fit of ``tools/bench_labels.py --calibrate`` on the 1,848 words whose SemCor
counts name a clear most-frequent sense (not on ImageNet labels); there the embedding alone finds
that sense for 55% of words (chance 31%). Refit it for other vector sets.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.optimize import minimize_scalar

from imagenet_zsl.hierarchy.nouns import WordNetNouns, load_wordnet_nouns
from imagenet_zsl.semantics.lemma_vectors import LemmaVectorizer
from imagenet_zsl.semantics.spec import SENSE_DEFAULTS

CONTEXT_GROUPS = ("synonyms", "hypernyms", "hyponyms", "gloss")
_GLOSS_WORD = re.compile(r"[a-z][a-z'-]*[a-z]|[a-z]")


def word_key(label: str) -> str:
    """WordNet's index form of a lemma: lower case, underscores."""
    return label.strip().lower().replace(" ", "_")


@dataclass
class SenseInventory:
    """Noun-graph lookups the sense model needs (built once from ``WordNetNouns``)."""

    nouns: object
    parents: sp.csr_matrix
    children: sp.csr_matrix

    @classmethod
    def from_nouns(cls, nouns: WordNetNouns) -> SenseInventory:
        n = len(nouns.wnids)
        edges = np.concatenate([nouns.hypernym_edges, nouns.instance_edges])
        ones = np.ones(len(edges), dtype=np.int8)
        child_to_parent = sp.csr_matrix((ones, (edges[:, 1], edges[:, 0])), shape=(n, n))
        hypo = nouns.hypernym_edges  # direct hyponyms only: instances (cities, people) add noise
        parent_to_child = sp.csr_matrix(
            (np.ones(len(hypo), dtype=np.int8), (hypo[:, 0], hypo[:, 1])), shape=(n, n)
        )
        return cls(nouns, child_to_parent, parent_to_child)

    @functools.cached_property
    def _collocates(self) -> dict[str, frozenset[str]]:
        found: dict[str, set[str]] = {}
        for lemma in self.nouns.senses:
            words = lemma.split("_")
            if len(words) < 2:
                continue
            spans = [(a, b) for a in range(len(words)) for b in range(a + 1, min(len(words), a + 3) + 1)]
            for start, stop in spans:
                if stop - start < len(words):
                    part = "_".join(words[start:stop])
                    found.setdefault(part, set()).update(words[:start] + words[stop:])
        return {k: frozenset(v) for k, v in found.items()}

    def collocates(self, key: str) -> frozenset[str]:
        """Words that form WordNet noun compounds with ``key`` ("cairn" → {"terrier"})."""
        return self._collocates.get(key, frozenset())

    def senses(self, key: str) -> tuple[str, ...]:
        return self.nouns.senses.get(key, ())

    def semcor_count(self, wnid: str, key: str) -> int:
        i = self.nouns.index[wnid]
        for lemma, count in zip(self.nouns.lemmas[i], self.nouns.lemma_counts[i], strict=True):
            if word_key(lemma) == key:
                return count
        return 0


class PrimarySenseModel:
    """Scores the noun senses of words (see the module docstring for the rule).

    Parameters: ``temperature`` (> 0, cosine units), ``order_decay`` in (0, 1], ``prior_strength``
    (> 0, pseudo-counts). ``vectorizer`` None → WordNet evidence only.
    """

    defaults = SENSE_DEFAULTS

    def __init__(
        self, vectorizer: LemmaVectorizer | None, nouns: WordNetNouns | None = None, **params: float
    ) -> None:
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(
                f"unknown PrimarySenseModel parameter(s) {sorted(unknown)}; allowed: {sorted(self.defaults)}"
            )
        self.params = {**self.defaults, **params}
        if not self.params["temperature"] > 0:
            raise ValueError(f"temperature must be > 0, got {self.params['temperature']}")
        if not 0 < self.params["order_decay"] <= 1:
            raise ValueError(f"order_decay must be in (0, 1], got {self.params['order_decay']}")
        if not self.params["prior_strength"] > 0:
            raise ValueError(f"prior_strength must be > 0, got {self.params['prior_strength']}")
        if nouns is None:
            nouns = load_wordnet_nouns()
        self.vectorizer = vectorizer
        self.inventory = SenseInventory.from_nouns(nouns)
        self.group_items_memo: dict[tuple[int, str], list[tuple[int, ...]]] = {}
        self.excluded_memo: dict[str, set[int]] = {}

    # ------------------------------------------------------------------ context token lists
    def _lemma_rows(self, lemma: str) -> tuple[int, ...]:
        return self.vectorizer.tokens(lemma)[0]

    def group_items(self, i: int, group: str) -> list[tuple[int, ...]]:
        """Vocabulary rows of each item (a lemma or a gloss word) of one context group of synset i."""
        hit = self.group_items_memo.get((i, group))
        if hit is not None:
            return hit
        nouns = self.inventory.nouns
        if group == "synonyms":
            names = list(nouns.lemmas[i])
        elif group in ("hypernyms", "hyponyms"):
            matrix = self.inventory.parents if group == "hypernyms" else self.inventory.children
            related = matrix.indices[matrix.indptr[i] : matrix.indptr[i + 1]]
            names = [lemma for j in related for lemma in nouns.lemmas[j]]
        else:
            # deferred: gensim is heavy; only a gloss context needs its stop words
            from gensim.parsing.preprocessing import STOPWORDS

            names = [w for w in _GLOSS_WORD.findall(nouns.definitions[i].lower()) if w not in STOPWORDS]
        items = [rows for rows in map(self._lemma_rows, names) if rows]
        self.group_items_memo[(i, group)] = items
        return items

    def excluded_rows(self, key: str) -> set[int]:
        """Rows left out of every context of ``key``: the word, its words and its collocates."""
        hit = self.excluded_memo.get(key)
        if hit is not None:
            return hit
        rows = set(self._lemma_rows(key))
        for word in (*key.split("_"), *self.inventory.collocates(key)):
            row = self.vectorizer.token_index(word)
            if row is not None:
                rows.add(row)
        self.excluded_memo[key] = rows
        return rows

    # ------------------------------------------------------------------ scoring
    def evidence(self, words: Iterable[str]) -> pd.DataFrame:
        """One row per (word, noun sense): the evidence and the decision.

        Columns: word (index form), wnid, sense_rank (1 = WordNet's first), n_senses, semcor_count,
        p_wordnet, similarity (NaN: no vector or no context), p_embedding, posterior, is_primary.
        Words that are not WordNet nouns are skipped.
        """
        keys = sorted({word_key(w) for w in words} & set(self.inventory.nouns.senses))
        inv = self.inventory
        rows_word, rows_wnid, rows_rank, rows_n = [], [], [], []
        for key in keys:
            senses = inv.senses(key)
            rows_word += [key] * len(senses)
            rows_wnid += list(senses)
            rows_rank += list(range(1, len(senses) + 1))
            rows_n += [len(senses)] * len(senses)
        frame = pd.DataFrame(
            {"word": rows_word, "wnid": rows_wnid, "sense_rank": rows_rank, "n_senses": rows_n}
        )
        if frame.empty:
            for col in ("semcor_count", "p_wordnet", "similarity", "p_embedding", "posterior"):
                frame[col] = pd.Series(dtype=float)
            frame["is_primary"] = pd.Series(dtype=bool)
            return frame
        frame["semcor_count"] = [inv.semcor_count(w, k) for w, k in zip(rows_wnid, rows_word, strict=True)]
        starts = np.flatnonzero(np.r_[True, frame["word"].to_numpy()[1:] != frame["word"].to_numpy()[:-1]])
        frame["p_wordnet"] = self._wordnet_prior(frame, starts)
        frame["similarity"] = self._similarities(frame)
        frame["p_embedding"] = self._embedding_likelihood(frame["similarity"].to_numpy(), starts)
        post = frame["p_wordnet"].to_numpy() * frame["p_embedding"].to_numpy()
        post = post / np.repeat(np.add.reduceat(post, starts), np.diff(np.r_[starts, len(frame)]))
        frame["posterior"] = post
        frame["is_primary"] = _segment_argmax_mask(post, starts)
        return frame

    def _wordnet_prior(self, frame: pd.DataFrame, starts: np.ndarray) -> np.ndarray:
        sizes = np.diff(np.r_[starts, len(frame)])
        counts = frame["semcor_count"].to_numpy(dtype=np.float64)
        total = np.repeat(np.add.reduceat(counts, starts), sizes)
        # WordNet orders senses by SemCor frequency only where they were tagged; the order of
        # untagged senses carries no frequency information, so a word without any tag gets a
        # flat prior and the embedding decides alone.
        decay = np.where(total > 0, self.params["order_decay"] ** (frame["sense_rank"].to_numpy() - 1.0), 1.0)
        order = decay / np.repeat(np.add.reduceat(decay, starts), sizes)
        beta = self.params["prior_strength"]
        return (counts + beta * order) / (total + beta)

    def _similarities(self, frame: pd.DataFrame) -> np.ndarray:
        sims = np.full(len(frame), np.nan)
        if self.vectorizer is None:
            return sims
        polysemous = frame["n_senses"].to_numpy() > 1
        index = self.inventory.nouns.index
        word_tokens, context_lists, owners = [], [], []
        keys = frame["word"].tolist()
        wnids = frame["wnid"].tolist()
        for r in np.flatnonzero(polysemous):
            key = keys[r]
            label_rows = self._lemma_rows(key)
            if not label_rows:
                continue
            excluded = self.excluded_rows(key)
            i = index[wnids[r]]
            for group in CONTEXT_GROUPS:
                rows = tuple(t for item in self.group_items(i, group) for t in item if t not in excluded)
                if rows:
                    context_lists.append(rows)
                    owners.append(r)
            word_tokens.append((r, label_rows))
        if not context_lists:
            return sims
        group_vecs, _ = self.vectorizer.mean_of_tokens(context_lists)
        owners_arr = np.asarray(owners)
        context = np.zeros((len(frame), group_vecs.shape[1]), dtype=np.float64)
        np.add.at(context, owners_arr, group_vecs)
        label_vecs, _ = self.vectorizer.mean_of_tokens([t for _, t in word_tokens])
        rows_idx = np.asarray([r for r, _ in word_tokens])
        norms = np.linalg.norm(context[rows_idx], axis=1)
        dots = np.einsum("ij,ij->i", context[rows_idx], label_vecs)
        with np.errstate(invalid="ignore", divide="ignore"):
            sims[rows_idx] = np.where(norms > 0, dots / norms, np.nan)
        return sims

    def _embedding_likelihood(self, sims: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Softmax of similarity/temperature per word; senses without a similarity get the word's
        mean logit (no evidence either way); a word with no similarity at all gets a uniform one."""
        sizes = np.diff(np.r_[starts, len(sims)])
        owner = np.repeat(np.arange(len(starts)), sizes)
        logits = sims / self.params["temperature"]
        known = np.isfinite(logits)
        n_known = np.bincount(owner, weights=known, minlength=len(starts))
        sum_known = np.bincount(owner, weights=np.where(known, logits, 0.0), minlength=len(starts))
        mean_known = np.divide(sum_known, n_known, out=np.zeros_like(sum_known), where=n_known > 0)
        logits = np.where(known, logits, mean_known[owner])
        peak = np.maximum.reduceat(logits, starts)
        weights = np.exp(logits - peak[owner])
        return weights / np.add.reduceat(weights, starts)[owner]


def _segment_argmax_mask(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """True at the first maximum of each contiguous segment (ties go to the earlier sense)."""
    sizes = np.diff(np.r_[starts, len(values)])
    owner = np.repeat(np.arange(len(starts)), sizes)
    peak = np.maximum.reduceat(values, starts)[owner]
    is_peak = values >= peak
    position = np.arange(len(values))
    first = np.full(len(starts), len(values))
    np.minimum.at(first, owner[is_peak], position[is_peak])
    mask = np.zeros(len(values), dtype=bool)
    mask[first] = True
    return mask


# --------------------------------------------------------------------------- calibration
def semcor_calibration_words(
    model: PrimarySenseModel, min_count: int = 5, dominance: float = 2.0
) -> list[str]:
    """Polysemous words whose SemCor counts name a clear most-frequent sense.

    ``min_count`` tags in total and the top sense tagged at least ``dominance`` times as often as the
    runner-up: on these WordNet knows the primary meaning, so they can calibrate the embedding.
    """
    inv = model.inventory
    words = []
    for key, senses in inv.nouns.senses.items():
        if len(senses) < 2 or model.vectorizer is None or not model.vectorizer.has_vector(key):
            continue
        counts = sorted((inv.semcor_count(w, key) for w in senses), reverse=True)
        if sum(counts) >= min_count and counts[0] >= dominance * max(counts[1], 1):
            words.append(key)
    return words


def fit_temperature(model: PrimarySenseModel, words: Iterable[str]) -> dict[str, float]:
    """Maximum-likelihood softmax temperature of the embedding evidence on SemCor-labelled words.

    The label of a word is its SemCor most-frequent sense; returns temperature, the embedding's
    top-1 accuracy, the chance accuracy, and the number of words used.
    """
    frame = model.evidence(words)
    frame = frame[np.isfinite(frame["similarity"])]
    frame = frame[frame.groupby("word")["wnid"].transform("size") > 1].reset_index(drop=True)
    keys = frame["word"].to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sims = frame["similarity"].to_numpy()
    top = _segment_argmax_mask(frame["semcor_count"].to_numpy(dtype=np.float64), starts)
    sizes = np.diff(np.r_[starts, len(sims)])
    owner = np.repeat(np.arange(len(starts)), sizes)

    def negative_log_likelihood(log_t: float) -> float:
        logits = sims / np.exp(log_t)
        peak = np.maximum.reduceat(logits, starts)
        log_z = peak + np.log(np.add.reduceat(np.exp(logits - peak[owner]), starts))
        return float(log_z.sum() - logits[top].sum())

    best = minimize_scalar(negative_log_likelihood, bounds=(np.log(1e-3), np.log(10.0)), method="bounded")
    predicted = _segment_argmax_mask(sims, starts)
    return {
        "temperature": float(np.exp(best.x)),
        "accuracy": float(np.mean(predicted[top])) if len(starts) else float("nan"),
        "chance": float(np.mean(1.0 / sizes)) if len(starts) else float("nan"),
        "words": int(len(starts)),
    }
