"""Hierarchy stage: WordNet 3.0 read from its own files (``nouns``, ``wordnet``), the ImageNet-21K
class universe (``universe``), ``ClassGraph`` (``graph``).

Import from the defining module. The package itself imports nothing, as every stage's package, so
that ``imagenet-zsl --help`` loading ``hierarchy.cli`` (the ``setup`` command) pays for no graph.
"""
