"""models stage: the zero-shot models, each registered in :data:`imagenet_zsl.models.base.MODELS`.

Importing the package imports no model module (issue 27: ``imagenet-zsl --help`` stays fast): it
hands the registry :func:`_import_model_modules`, which the registry runs the first time it lists
its models or is asked for a name it does not hold yet, so it is complete whenever it is used.
"""

from imagenet_zsl.models.catalog import MODELS


def _import_model_modules() -> None:
    """Import every model module of the toolkit: each registers its models (@MODELS.register)."""
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


MODELS.loader = _import_model_modules
