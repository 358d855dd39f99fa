import numpy as np

from imagenet_zsl.evaluation.demo import hierarchical_vectors
from imagenet_zsl.hierarchy.graph import ClassGraph


def test_demo_vectors_follow_the_hierarchy():
    # two deep chains under one root: nodes are nearer their own chain than the other chain
    edges = [("root", "a0"), ("root", "b0")]
    edges += [(f"a{i}", f"a{i + 1}") for i in range(5)] + [(f"b{i}", f"b{i + 1}") for i in range(5)]
    graph = ClassGraph.from_edges(edges)
    vectors = hierarchical_vectors(graph, 256, np.random.default_rng(0), step=0.3)
    again = hierarchical_vectors(graph, 256, np.random.default_rng(0), step=0.3)
    np.testing.assert_array_equal(vectors, again)  # seeded: same bytes

    def v(w):
        return vectors[graph.index[w]]

    for i in range(1, 6):
        parent_gap = np.linalg.norm(v(f"a{i}") - v(f"a{i - 1}"))
        cousin_gap = np.linalg.norm(v(f"a{i}") - v(f"b{i}"))
        assert parent_gap < cousin_gap
        # a child is its parent plus N(0, 0.3²) noise per dimension
        assert abs(parent_gap - 0.3 * np.sqrt(256)) < 1.0
