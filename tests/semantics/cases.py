"""Shared test data of the semantics tests: real ImageNet classes with known label decisions."""

from __future__ import annotations

import numpy as np

#: wnid → its exclusion reasons under configs/labels.yaml (checked by hand; "" = kept)
CLASSES = {
    "n07273802": "",  # cairn, the stone memorial
    "n02096177": "secondary_meaning",  # cairn terrier (an ILSVRC-2012 class)
    "n02963159": "",  # cardigan (sweater)
    "n02113186": "secondary_meaning",  # Cardigan Welsh corgi
    "n01678343": "rare_label",  # chuckwalla
    "n00006024": "no_vector;rare_label",  # heterotroph
    "n02084071": "",  # dog
}


def tiny_keyed_vectors(words: dict[str, list[float]]):
    """A gensim KeyedVectors holding exactly ``words`` (hand-made vectors for rule tests)."""
    from gensim.models import KeyedVectors

    dim = len(next(iter(words.values())))
    kv = KeyedVectors(dim)
    kv.add_vectors(list(words), np.asarray(list(words.values()), dtype=np.float32))
    return kv
