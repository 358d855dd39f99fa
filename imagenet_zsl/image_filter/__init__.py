"""image_filter stage: drop ambiguous images with a cross-fitted classifier (``images filter``).

It sits above ``features`` (it reads feature directories, and its fine-tuning path reuses the
extraction's backbones and data loading) and below ``models``/``evaluation`` (which read its
``kept.csv``). Modules: :mod:`.params` (what shapes the decisions), :mod:`.folds`,
:mod:`.classifiers`, :mod:`.crossfit`, :mod:`.outputs` (writing and reading a run's tables),
:mod:`.quality` (the whole run), :mod:`.cli` (flags), :mod:`.commands` (the handler) and
:mod:`.pool_filters` (the split builder's ``image_quality``). The in-memory copy of a feature
directory (:mod:`imagenet_zsl.features.in_memory`) and the last-block fine-tuner
(:mod:`imagenet_zsl.features.finetune`) live in ``features``.
"""
