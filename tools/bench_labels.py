"""Speed of label curation against simple reference implementations, measured in the same run.

    .venv/bin/python tools/bench_labels.py              # timings + ratios
    .venv/bin/python tools/bench_labels.py --calibrate [--vectors PATH]  # also refit the temperature

1. GloVe 6B 50-d into gensim KeyedVectors: direct fill vs ``KeyedVectors.add_vectors``.
2. Class vectors of the 21,842 classes: one sparse averaging product vs a per-class numpy loop
   (results compared).
3. Primary-sense evidence of all polysemous ImageNet labels: the vectorised model vs a per-sense
   loop computing the same context vectors (results compared).
``--calibrate`` fits the embedding temperature on SemCor-labelled words (semantics.senses).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import universe_wnids
from imagenet_zsl.semantics.labels import chosen_labels
from imagenet_zsl.semantics.lemma_vectors import (
    LemmaVectorizer,
    class_vectors_from_lemmas,
    vectorizer_for,
)
from imagenet_zsl.semantics.senses import (
    CONTEXT_GROUPS,
    PrimarySenseModel,
    fit_temperature,
    semcor_calibration_words,
    word_key,
)
from imagenet_zsl.semantics.word_vectors import load_npy_parquet, load_word_vectors, packaged_glove_dir


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def bench_load() -> None:
    import pandas as pd
    from gensim.models import KeyedVectors

    folder = packaged_glove_dir()
    ours, t_ours = _timed(load_npy_parquet, folder)

    def reference():
        matrix = np.load(next(folder.glob("*.npy")))
        words = pd.read_parquet(next(folder.glob("*.parquet")))["index"].tolist()
        kv = KeyedVectors(matrix.shape[1])
        kv.add_vectors(words, matrix)
        return kv

    ref, t_ref = _timed(reference)
    assert ref.index_to_key == ours.index_to_key
    print(
        f"load GloVe 6B 50d (400,000 words): {t_ours:.2f} s vs add_vectors {t_ref:.2f} s "
        f"-> {t_ref / t_ours:.1f}x"
    )


def bench_class_vectors() -> None:
    nouns = load_wordnet_nouns()
    wnids = universe_wnids()
    lemmas = [nouns.lemmas[nouns.index[w]] for w in wnids]
    kv = load_word_vectors("glove-6b-50d")
    warm = LemmaVectorizer(kv)
    for group in lemmas:  # both sides get the same memoised lemma → rows lookups
        for lemma in group:
            warm.tokens(lemma)
    ours, t_ours = _timed(class_vectors_from_lemmas, warm, wnids, lemmas, "mean")

    def reference():
        out = {}
        for wnid, group in zip(wnids, lemmas, strict=True):
            vecs = []
            for lemma in group:
                rows = warm.tokens(lemma)[0]
                if rows:
                    words = np.stack([kv.vectors[r] / np.linalg.norm(kv.vectors[r]) for r in rows])
                    mean = words.mean(axis=0)
                    vecs.append(mean / np.linalg.norm(mean))
            if vecs:
                mean = np.mean(vecs, axis=0)
                out[wnid] = mean / np.linalg.norm(mean)
        return out

    ref, t_ref = _timed(reference)
    assert sorted(ref) == sorted(ours.wnids)
    err = float(np.abs(ours.get(list(ref)) - np.stack(list(ref.values()))).max())
    print(
        f"class vectors, 21,842 classes: {t_ours:.3f} s vs per-class loop {t_ref:.3f} s "
        f"-> {t_ref / t_ours:.1f}x (max |diff| {err:.1e})"
    )


def bench_senses() -> None:
    vectorizer = vectorizer_for("glove-6b-50d")
    words = sorted({word_key(x) for x in chosen_labels(universe_wnids())})
    warm = PrimarySenseModel(vectorizer)
    warm.evidence(words)  # fills the lookup memos both sides share
    model = PrimarySenseModel(vectorizer)
    model.group_items_memo, model.excluded_memo = warm.group_items_memo, warm.excluded_memo
    frame, t_ours = _timed(model.evidence, words)
    kv = vectorizer.kv

    def unit(x):
        n = np.linalg.norm(x)
        return x / n if n > 0 else x

    def reference():
        sims = []
        for row in frame.itertuples(index=False):
            label = vectorizer.tokens(row.word)[0]
            if row.n_senses < 2 or not label:
                sims.append(np.nan)
                continue
            v = unit(np.mean([unit(kv.vectors[r]) for r in label], axis=0))
            excluded = warm.excluded_rows(row.word)
            context = np.zeros(kv.vector_size)
            for group in CONTEXT_GROUPS:
                rows = [
                    t
                    for item in warm.group_items(warm.inventory.nouns.index[row.wnid], group)
                    for t in item
                    if t not in excluded
                ]
                if rows:
                    context += unit(np.mean([unit(kv.vectors[r]) for r in rows], axis=0))
            sims.append(float(unit(context) @ v) if context.any() else np.nan)
        return np.asarray(sims)

    ref, t_ref = _timed(reference)
    ours = frame["similarity"].to_numpy()
    err = float(np.nanmax(np.abs(ours - ref)))
    print(
        f"sense evidence, {len(words):,} labels / {len(frame):,} senses: {t_ours:.2f} s vs per-sense loop "
        f"{t_ref:.2f} s -> {t_ref / t_ours:.1f}x (max |diff| {err:.1e})"
    )


def calibrate(vectors: str) -> None:
    model = PrimarySenseModel(vectorizer_for(vectors))
    words = semcor_calibration_words(model)
    fit = fit_temperature(model, words)
    print(
        f"calibration on {fit['words']:,} SemCor-labelled polysemous words: temperature "
        f"{fit['temperature']:.3f}; embedding alone finds the SemCor-most-frequent sense in "
        f"{fit['accuracy']:.1%} of words (chance {fit['chance']:.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", action="store_true", help="also fit the sense-model temperature")
    parser.add_argument(
        "--vectors",
        default="glove-6b-50d",
        help="vector set to calibrate (name or path); put the result in polysemy.temperature",
    )
    args = parser.parse_args()
    bench_load()
    bench_class_vectors()
    bench_senses()
    if args.calibrate:
        calibrate(args.vectors)


if __name__ == "__main__":
    main()
