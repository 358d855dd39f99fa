"""The real WordNet 3.0 / ImageNet-21K graph: sizes and invariants the literature documents."""

from __future__ import annotations

import numpy as np

from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import (
    candidate_wnids,
    load_class_graph,
    training_wnids,
    universe_wnids,
)


def test_wordnet_nouns_match_wordnet_30():
    nouns = load_wordnet_nouns()
    assert len(nouns.wnids) == 82_115
    assert len(nouns.hypernym_edges) == 75_850
    assert len(nouns.instance_edges) == 8_577
    dog = nouns.index["n02084071"]
    assert nouns.names[dog] == "dog.n.01"
    assert nouns.lexnames[dog] == "noun.animal"
    assert nouns.lemmas[dog][:2] == ("dog", "domestic_dog")
    assert nouns.lemma_counts[dog][0] == 42
    # sense order from index.noun: "cairn" the memorial comes before the terrier
    assert nouns.senses["cairn"] == ("n07273802", "n02096177")


def test_universe_sizes():
    assert len(universe_wnids()) == 21_842
    assert len(training_wnids()) == 1_000
    assert len(candidate_wnids()) == 20_842
    assert "n04399382" in universe_wnids()  # ILSVRC teddy bear, not a fall11 synset


def test_real_graph_contains_universe_with_ancestors(real_graph):
    universe = universe_wnids()
    assert all(w in real_graph for w in universe)
    assert len(real_graph) == 23_547
    # every node is a class or an ancestor of one
    idx = real_graph.indices(universe)
    covered = np.zeros(len(real_graph), bool)
    covered[idx] = True
    covered[real_graph.ancestor_matrix[idx].indices] = True
    assert covered.all()
    assert real_graph.ancestors("n02084071") >= {"n00001740", "n01317541"}  # entity, domestic animal


def test_imagenet_released_hierarchy_is_connected():
    graph = load_class_graph("imagenet")
    assert graph.roots == ["fall11"]
    assert all(w in graph for w in universe_wnids())


def test_the_cached_class_graph_is_the_built_one_and_a_bad_cache_is_rebuilt(
    real_graph, tmp_path, monkeypatch, caplog
):
    """Issue 46: evaluate reads the graph from a cache file instead of the WordNet noun table. The
    file gives back the graph built from WordNet (same nodes, same edges, same answers); it is
    found again by its key; a truncated file is rebuilt with a warning; other WordNet files are
    another key (another file), never the stale graph; a cache directory that cannot be written
    costs a warning, not the run."""
    import logging

    from imagenet_zsl.hierarchy import universe

    built = universe.build_class_graph("wordnet")
    assert built.wnids == real_graph.wnids and np.array_equal(built.edge_keys, real_graph.edge_keys)
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path))
    builds = []
    monkeypatch.setattr(universe, "build_class_graph", lambda *a: builds.append(a) or built)
    universe.load_class_graph.cache_clear()
    try:
        first = universe.load_class_graph()
        (path,) = tmp_path.glob("class-graph-wordnet-v*.npz")
        universe.load_class_graph.cache_clear()
        again = universe.load_class_graph()
        assert len(builds) == 1 and again is not first  # read from the file, not rebuilt
        assert again.wnids == built.wnids and np.array_equal(again.edge_keys, built.edge_keys)
        assert again.distance("n02084071", "n02121808") == built.distance("n02084071", "n02121808")
        path.write_bytes(path.read_bytes()[:1000])
        universe.load_class_graph.cache_clear()
        with caplog.at_level(logging.WARNING):
            assert universe.load_class_graph().wnids == built.wnids
        assert len(builds) == 2 and "unreadable class-graph cache" in caplog.text
        monkeypatch.setattr(universe, "wordnet_key", lambda: "another wordnet")
        universe.load_class_graph.cache_clear()
        universe.load_class_graph()
        assert len(builds) == 3 and len(list(tmp_path.glob("class-graph-wordnet-v*.npz"))) == 2

        def read_only(path, data):
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(universe, "atomic_write_bytes", read_only)
        monkeypatch.setattr(universe, "wordnet_key", lambda: "a third wordnet")
        universe.load_class_graph.cache_clear()
        with caplog.at_level(logging.WARNING):
            assert universe.load_class_graph().wnids == built.wnids  # a cache it cannot write
        assert "not written" in caplog.text
    finally:
        universe.load_class_graph.cache_clear()
