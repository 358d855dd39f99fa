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


class FakeTextEncoder:
    """A deterministic stand-in text encoder: ``table[text]`` if given, else a hash-seeded vector.

    Registered as ``fake`` in ``TEXT_ENCODERS`` by :func:`register_fake_encoder`, so the CLI can
    run ``labels encode --encoder fake:anything`` without any model library.
    """

    dim = 4

    def __init__(self, model: str = "", weights=None, device: str = "cpu", table=None):
        self.spec = f"fake:{model}"
        self.table = dict(table or {})
        self.calls: list[list[str]] = []

    def encode(self, texts):
        import hashlib

        self.calls.append(list(texts))
        rows = []
        for text in texts:
            if text in self.table:
                rows.append(np.asarray(self.table[text], dtype=np.float32))
            else:
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                rows.append(np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32) * 3)
        return np.stack(rows)

    def identity(self):
        return {"encoder": self.spec}


def register_fake_encoder() -> None:
    from imagenet_zsl.semantics.text_encoders import TEXT_ENCODERS

    if "fake" not in TEXT_ENCODERS:
        TEXT_ENCODERS.add("fake", FakeTextEncoder)
