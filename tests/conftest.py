"""Shared fixtures: the hand-made toy hierarchy and the real ImageNet-21K graph."""

from __future__ import annotations

import pytest

from imagenet_zsl.hierarchy.graph import ClassGraph
from tests.toy import TOY_EDGES


@pytest.fixture()
def toy_graph() -> ClassGraph:
    return ClassGraph.from_edges(TOY_EDGES)


@pytest.fixture(scope="session")
def real_graph() -> ClassGraph:
    from imagenet_zsl.hierarchy.universe import load_class_graph

    return load_class_graph("wordnet")
