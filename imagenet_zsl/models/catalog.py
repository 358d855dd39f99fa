"""The model registry object, apart from the models: light to import (no numpy, torch or scipy).

Why apart: every model module imports the registry to register into it, so the registry cannot
import them at start-up. The package's ``__init__`` names them instead (``MODELS.modules``, dotted
names), and the registry imports them the first time it lists its models or misses a name
(:meth:`imagenet_zsl.registry.Registry.load_plugins`). So importing the package, e.g. for its
command line, imports no model, while ``MODELS`` is complete whenever it is used (issue 27:
``imagenet-zsl --help`` in under a second).
"""

from __future__ import annotations

from typing import Any

from imagenet_zsl.registry import Registry


def describe(cls: type) -> str:
    """First line of the class docstring."""
    return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


#: model name → model class; filled by ``@MODELS.register`` in each model module
MODELS: Registry[Any] = Registry("model")
