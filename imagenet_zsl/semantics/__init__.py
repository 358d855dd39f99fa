"""Semantics stage: word vectors, class vectors from WordNet lemmas, label frequency and polysemy.

Main entry points (imported lazily so that ``import imagenet_zsl.semantics`` stays cheap):

* ``load_class_vectors(config_or_name="glove-6b-50d") -> ClassVectors``: word-vector semantics of
  all 21,842 ImageNet classes, cached on disk (``lemma_vectors``);
* ``load_word_vectors(spec) -> gensim KeyedVectors``: any vector file or named set (``word_vectors``);
* ``build_label_tables(config)``: the lemma/class tables behind ``imagenet-zsl labels build``;
* ``encode_class_vectors(encoder, wnids, templates)`` with ``create_text_encoder("clip:..."|
  "sentence:...")``: class vectors from a text encoder (``imagenet-zsl labels encode``).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ClassVectors": "imagenet_zsl.semantics.class_vectors",
    "load_class_vectors": "imagenet_zsl.semantics.lemma_vectors",
    "build_class_vectors": "imagenet_zsl.semantics.lemma_vectors",
    "load_word_vectors": "imagenet_zsl.semantics.word_vectors",
    "load_label_config": "imagenet_zsl.semantics.config",
    "build_label_tables": "imagenet_zsl.semantics.labels",
    "PrimarySenseModel": "imagenet_zsl.semantics.senses",
    "encode_class_vectors": "imagenet_zsl.semantics.encode",
    "create_text_encoder": "imagenet_zsl.semantics.text_encoders",
    "TEXT_ENCODERS": "imagenet_zsl.semantics.text_encoders",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
