"""Label-curation filters for a benchmark's candidate pool (``splits.pool``).

::

    pool:
      - {filter: has_vector, vectors: glove-6b-50d}          # lemma_rule: mean|first, format: auto
      - {filter: has_vector, vectors: clip_vectors.npz}      # a `labels encode|vectors` output file
      - {filter: min_word_frequency}                         # label seen >= 50 times per 3e9 words
      - {filter: min_word_frequency, zipf_min: 2.0}          # ... or a Zipf threshold
      - {filter: min_word_frequency, table: counts.tsv}      # ... or a user's word<TAB>count table
      - {filter: primary_meaning, min_confidence: 0.5}

Each decides on the class's chosen label (its first WordNet lemma), exactly as ``labels build``
does, so a split's per-filter counts match the label tables. Expensive objects (class vectors,
frequency lists, the sense model) are memoised in ``ctx.cache`` for the rest of the build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.frequency import DEFAULT_MIN_COUNT, load_frequencies, rare_threshold
from imagenet_zsl.semantics.labels import chosen_labels, primary_decisions
from imagenet_zsl.semantics.lemma_vectors import load_class_vectors, vectorizer_for
from imagenet_zsl.semantics.senses import PrimarySenseModel
from imagenet_zsl.semantics.spec import DEFAULT_MIN_CONFIDENCE, SENSE_DEFAULTS
from imagenet_zsl.semantics.vector_files import is_class_vector_file, load_class_vector_file
from imagenet_zsl.semantics.word_vectors import DEFAULT_VECTORS, VectorSpec
from imagenet_zsl.splits.pool import POOL_FILTERS, PoolContext


def _memo(ctx: PoolContext, key: tuple, build: Callable[[], Any]) -> Any:
    if key not in ctx.cache:
        ctx.cache[key] = build()
    return ctx.cache[key]


def _labels(candidates: list[str]) -> list[str]:
    return chosen_labels(candidates)


@POOL_FILTERS.register
def has_vector(
    candidates: list[str],
    ctx: PoolContext,
    vectors: Any = DEFAULT_VECTORS,
    lemma_rule: str = "mean",
    format: str = "auto",
) -> list[str]:  # noqa: A002 - config key
    """Keep classes that have a class vector: from word vectors (none of their lemmas in vocabulary →
    out), or listed in a class-vector file (``labels vectors|encode`` output, .npz or .parquet)."""
    if is_class_vector_file(vectors):
        key = ("semantics.class_vector_file", str(vectors))
        table = _memo(ctx, key, lambda: load_class_vector_file(vectors))
        return [w for w in candidates if w in table]
    spec = VectorSpec.parse(vectors if format == "auto" else {"source": vectors, "format": format})
    config = {
        "vectors": {
            "source": spec.source,
            "format": spec.format,
            "dim": spec.dim,
            "trust_pickle": spec.trust_pickle,
        },
        "lemma_rule": lemma_rule,
    }
    table = _memo(ctx, ("semantics.class_vectors", spec, lemma_rule), lambda: load_class_vectors(config))
    return [w for w in candidates if w in table]


@POOL_FILTERS.register
def min_word_frequency(
    candidates: list[str],
    ctx: PoolContext,
    zipf_min: float | None = None,
    min_count: float | None = DEFAULT_MIN_COUNT,
    reference_tokens: float | None = None,
    table: str | None = None,
    lang: str = "en",
) -> list[str]:
    """Keep classes whose label is not rare (default: seen >= 50 times per 3e9 words, Hascoet et al.)."""
    source = table or "wordfreq"
    frequencies = _memo(ctx, ("semantics.frequencies", source, lang), lambda: load_frequencies(source, lang))
    threshold = rare_threshold(frequencies, zipf_min, min_count, reference_tokens)
    zipf = frequencies.zipf(_labels(candidates))
    return [w for w, z in zip(candidates, zipf, strict=True) if z >= threshold]


@POOL_FILTERS.register
def primary_meaning(
    candidates: list[str],
    ctx: PoolContext,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    vectors: Any = DEFAULT_VECTORS,
    **sense_params: float,
) -> list[str]:
    """Keep classes that are the primary meaning of their label, with posterior >= min_confidence."""
    unknown = set(sense_params) - set(SENSE_DEFAULTS)
    if unknown:
        raise UserInputError(
            f"primary_meaning: unknown parameter(s) {sorted(unknown)}; allowed: "
            f"min_confidence, vectors, {', '.join(sorted(SENSE_DEFAULTS))}"
        )
    if not 0 <= float(min_confidence) <= 1:
        raise UserInputError(f"primary_meaning: min_confidence must be in [0, 1], got {min_confidence}")
    spec = VectorSpec.parse(vectors)
    params = {**SENSE_DEFAULTS, **{k: float(v) for k, v in sense_params.items()}}
    model = _memo(
        ctx,
        ("semantics.sense_model", spec, tuple(sorted(params.items()))),
        lambda: PrimarySenseModel(vectorizer_for(spec), **params),
    )
    is_primary, confidence, _ = primary_decisions(_labels(candidates), candidates, model)
    keep = is_primary & (confidence >= float(min_confidence))
    return [w for w, k in zip(candidates, np.asarray(keep), strict=True) if k]
