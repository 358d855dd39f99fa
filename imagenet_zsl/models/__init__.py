"""models stage: the zero-shot models, each registered in :data:`imagenet_zsl.models.base.MODELS`.

Importing the package imports every model module (as ``timm/models/__init__.py`` does), so the
registry lists every model as soon as anything of the package is imported.
"""

from imagenet_zsl.models import (  # noqa: F401 - imported for their @MODELS.register side effect
    closed_form,
    conse,
    embedding,
    gcn,
    generative,
    lampert,
    ranking,
    sync,
    trivial,
    vision_language,
)
