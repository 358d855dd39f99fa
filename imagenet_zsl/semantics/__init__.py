"""Semantics stage: word vectors, class vectors from WordNet lemmas, label frequency and polysemy.

The package itself exports nothing (importing it stays cheap); the entry points live in, and are
imported from, their defining modules:

* ``lemma_vectors.load_class_vectors(config_or_name="glove-6b-50d") -> ClassVectors``: word-vector
  semantics of all 21,842 ImageNet classes, cached on disk (``class_vectors.ClassVectors``);
* ``word_vectors.load_word_vectors(spec) -> gensim KeyedVectors``: any vector file or named set;
* ``labels.build_label_tables(config)``: the lemma/class tables behind ``imagenet-zsl labels build``
  (``config.load_label_config``, ``senses.PrimarySenseModel``);
* ``encode.encode_class_vectors(encoder, wnids, templates)`` with
  ``text_encoders.create_text_encoder("clip:..."|"sentence:...")``: class vectors from a text encoder
  (``imagenet-zsl labels encode``).
"""
