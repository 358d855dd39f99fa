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
