"""The model registry object, apart from the models: light to import (no numpy, torch or scipy).

Why apart: every model module imports the registry to register into it, so the registry cannot
import them at start-up. The package's ``__init__`` names them instead (:data:`ModelRegistry.modules`,
dotted names), and the registry imports them through :func:`imagenet_zsl.registry.import_modules`
the first time it lists its models or misses a name. So importing the package, e.g. for its command
line, imports no model, while ``MODELS`` is complete whenever it is used (issue 27:
``imagenet-zsl --help`` in under a second).
"""

from __future__ import annotations

from typing import Any

from imagenet_zsl.registry import Registry, import_modules


class ModelRegistry(Registry[Any]):
    """A :class:`~imagenet_zsl.registry.Registry` that first imports its ``modules`` (once), then
    loads the entry-point plugins as any registry does."""

    def __init__(self, what: str, group: str | None = None):
        super().__init__(what, group)
        #: the toolkit's model modules, dotted (set by ``imagenet_zsl.models``: a module named here
        #: imports this one, so only the package may name them)
        self.modules: tuple[str, ...] = ()
        self._modules_imported = False
        self._importing = False

    def load_plugins(self) -> None:
        if not self._modules_imported and not self._importing:
            self._importing = True  # a lookup while a model module is importing must not recurse
            try:
                import_modules(self.modules)
            finally:
                self._importing = False
            self._modules_imported = True  # only once all imported: a failure surfaces again
        super().load_plugins()


def describe(cls: type) -> str:
    """First line of the class docstring."""
    return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


#: model name → model class; filled by ``@MODELS.register`` in each model module
MODELS = ModelRegistry("model")
