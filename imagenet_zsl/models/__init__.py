"""models stage: the zero-shot models, each registered in :data:`imagenet_zsl.models.base.MODELS`.

Importing the package imports no model module (issue 27: ``imagenet-zsl --help`` stays fast): it
names them in :data:`MODEL_MODULES`, which the registry imports the first time it lists its models
or is asked for a name it does not hold yet, so it is complete whenever it is used.
"""

from imagenet_zsl.models.catalog import MODELS

#: every model module of the toolkit: each registers its models (``@MODELS.register``) when imported.
#: Named here, not in the catalog, because each of them imports the catalog (through ``base``).
MODEL_MODULES = (
    "imagenet_zsl.models.closed_form",
    "imagenet_zsl.models.conse",
    "imagenet_zsl.models.embedding",
    "imagenet_zsl.models.gcn",
    "imagenet_zsl.models.generative",
    "imagenet_zsl.models.lampert",
    "imagenet_zsl.models.ranking",
    "imagenet_zsl.models.sync",
    "imagenet_zsl.models.trivial",
    "imagenet_zsl.models.vision_language",
)
MODELS.modules = MODEL_MODULES
