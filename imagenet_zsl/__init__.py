"""imagenet-zsl: zero-shot-learning benchmarks on ImageNet-21K and the attribute datasets.

The public Python API (:mod:`imagenet_zsl.api`) is available here by name, imported on first use
so that ``import imagenet_zsl`` (done by every module and by the command line) stays light::

    import imagenet_zsl as zsl
    table = zsl.hit_at_k_table(zsl.evaluate(model_dir, features, "hop1", "out/run"))
"""

from __future__ import annotations

from typing import Any

from imagenet_zsl.registry import load_target as _load_target

__version__ = "0.1.0"

#: the public names (:mod:`imagenet_zsl.api`); everything else in the package is internal
__all__ = [
    "UserInputError",
    "__version__",
    "evaluate",
    "hit_at_k_table",
    "load_features",
    "load_model",
    "load_split",
    "run_batch",
    "simulate_features",
    "train",
]


#: the module the public names live in, imported on first use (the package's one upward edge)
_API_MODULE = "imagenet_zsl.api"


def __getattr__(name: str) -> Any:
    """A public name of :mod:`imagenet_zsl.api`, imported when first asked for (PEP 562)."""
    if name in __all__:
        return _load_target(f"{_API_MODULE}:{name}")
    raise AttributeError(f"module 'imagenet_zsl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
