"""The model registry object, apart from the models: light to import (no numpy, torch or scipy).

Why apart: the package's ``__init__`` hands the registry the function that imports every model
module (:data:`MODELS.loader`), and the registry calls it the first time it lists its models or
misses a name. So importing the package, e.g. for its command line, imports no model, while
``MODELS`` is complete whenever it is used (issue 27: ``imagenet-zsl --help`` in under a second).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from imagenet_zsl.registry import Registry


class ModelRegistry(Registry[Any]):
    """A :class:`~imagenet_zsl.registry.Registry` that first runs ``loader`` (once), then loads
    the entry-point plugins as any registry does."""

    def __init__(self, what: str, group: str | None = None):
        super().__init__(what, group)
        #: imports the toolkit's model modules (set by ``imagenet_zsl.models``); None once run
        self.loader: Callable[[], None] | None = None

    def load_plugins(self) -> None:
        loader, self.loader = self.loader, None  # None first: a lookup while importing must not recurse
        if loader is not None:
            try:
                loader()
            except BaseException:
                self.loader = loader  # a failed import surfaces again at the next lookup
                raise
        super().load_plugins()


def describe(cls: type) -> str:
    """First line of the class docstring."""
    return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


# ----------------------------------------------------------------------------- state capture


#: model name → model class; filled by ``@MODELS.register`` in each model module
MODELS = ModelRegistry("model")
