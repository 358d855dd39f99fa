"""The label filters in a split's candidate pool: per-filter counts and agreement with `labels build`."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.splits.pool import PoolContext, available_filters, run_pool
from tests.semantics.cases import CLASSES

STEPS = [
    {"filter": "has_vector", "vectors": "glove-6b-50d"},
    {"filter": "min_word_frequency", "min_count": 50},
    {"filter": "primary_meaning", "min_confidence": 0.5},
]


def _ctx() -> PoolContext:
    return PoolContext(graph=ClassGraph.from_edges([], nodes=list(CLASSES)), train=[], counts={})


def test_filters_are_registered():
    assert {"has_vector", "min_word_frequency", "primary_meaning"} <= set(available_filters())


def test_pipeline_counts_and_agreement_with_label_tables(sense_model):
    ctx = _ctx()
    pool, steps = run_pool(list(CLASSES), STEPS, ctx)
    assert [(s.filter, s.before, s.after) for s in steps] == [
        ("has_vector", 7, 6),  # heterotroph has no vector
        ("min_word_frequency", 6, 5),  # chuckwalla is rare
        ("primary_meaning", 5, 3),  # the terrier and the corgi are secondary meanings
    ]
    assert pool == [w for w, reasons in CLASSES.items() if not reasons]
    # expensive objects are memoised for the rest of the build
    assert {key[0] for key in ctx.cache} == {
        "semantics.class_vectors",
        "semantics.frequencies",
        "semantics.sense_model",
    }
    again, _ = run_pool(list(CLASSES), STEPS, ctx)
    assert again == pool


def test_thresholds_are_parameters(tmp_path):
    ctx = _ctx()
    # wordfreq Zipf: cairn 2.87, cardigan 3.21, chuckwalla 1.12, heterotroph 0, dog 5.10
    strict, _ = run_pool(list(CLASSES), [{"filter": "min_word_frequency", "zipf_min": 3.0}], ctx)
    assert strict == ["n02963159", "n02113186", "n02084071"]
    table = tmp_path / "counts.tsv"
    table.write_text("cairn\t60\ncardigan\t49\ndog\t1000\n")
    kept, _ = run_pool(list(CLASSES), [{"filter": "min_word_frequency", "table": str(table)}], ctx)
    assert kept == ["n07273802", "n02096177", "n02084071"]  # >= 50 counts: cairn (both) and dog
    everything, _ = run_pool(list(CLASSES), [{"filter": "primary_meaning", "min_confidence": 0.0}], ctx)
    confident, _ = run_pool(list(CLASSES), [{"filter": "primary_meaning", "min_confidence": 0.99}], ctx)
    assert set(confident) < set(everything)
    assert "n02096177" not in everything  # a secondary meaning stays out whatever the threshold


def test_bad_parameters():
    with pytest.raises(UserInputError, match="primary_meaning: unknown parameter"):
        run_pool(["n02084071"], [{"filter": "primary_meaning", "confidence": 0.5}], _ctx())
    with pytest.raises(UserInputError, match="min_confidence must be in"):
        run_pool(["n02084071"], [{"filter": "primary_meaning", "min_confidence": 5}], _ctx())
    with pytest.raises(UserInputError, match="min_word_frequency"):
        run_pool(["n02084071"], [{"filter": "min_word_frequency", "zipf": 3}], _ctx())


def test_real_pool_matches_label_tables_on_a_sample(sense_model):
    """On 400 random candidates with > 300 images, the pool keeps exactly the `kept` classes."""
    from imagenet_zsl.data import fall11_counts
    from imagenet_zsl.hierarchy.universe import candidate_wnids
    from imagenet_zsl.semantics.config import load_label_config
    from imagenet_zsl.semantics.labels import build_label_tables

    counts = fall11_counts()
    big = [w for w in candidate_wnids() if counts[w] > 300]
    sample = sorted(np.random.default_rng(0).choice(big, size=400, replace=False).tolist())
    pool, _ = run_pool(sample, STEPS, _ctx())
    tables = build_label_tables(load_label_config(None), sample, model=sense_model)
    assert pool == tables.classes.loc[tables.classes["kept"], "wnid"].tolist()
    assert 0.5 < len(pool) / len(sample) < 0.9


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_has_vector_with_a_class_vector_file(tmp_path, suffix):
    """A `labels encode|vectors` output works where GloVe does: the pool keeps the classes it lists."""
    from imagenet_zsl.semantics.class_vectors import ClassVectors
    from imagenet_zsl.semantics.vector_files import save_class_vectors

    listed = ["n07273802", "n02084071"]
    path = save_class_vectors(ClassVectors(listed, np.eye(2, 3)), tmp_path / f"cv{suffix}")
    pool, steps = run_pool(list(CLASSES), [{"filter": "has_vector", "vectors": str(path)}], _ctx())
    assert pool == [w for w in CLASSES if w in listed] and steps[0].after == 2
