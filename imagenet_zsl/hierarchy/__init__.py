"""Hierarchy stage: WordNet 3.0 through nltk, the ImageNet-21K class universe, ClassGraph."""

from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import (
    candidate_wnids,
    load_class_graph,
    training_wnids,
    universe_wnids,
)

__all__ = ["ClassGraph", "candidate_wnids", "load_class_graph", "training_wnids", "universe_wnids"]
