"""Constants shared by the label-curation modules (the bottom of the semantics stage).

``config`` validates user settings against them, ``lemma_vectors`` and ``senses`` implement them,
and ``pool_filters`` uses them as defaults; keeping them here (importing nothing) is what lets
``config`` be imported by ``lemma_vectors`` without a cycle.
"""

from __future__ import annotations

#: how a synset's class vector is made from its lemmas' vectors (``semantics.lemma_vectors``)
LEMMA_RULES = ("mean", "first")
#: ``semantics.senses.PrimarySenseModel`` parameters and their defaults
SENSE_DEFAULTS = {"temperature": 0.16, "order_decay": 0.5, "prior_strength": 1.0}
#: a class is kept if it is its label's primary meaning with at least this posterior
DEFAULT_MIN_CONFIDENCE = 0.5
