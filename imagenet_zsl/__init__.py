"""imagenet-zsl: zero-shot-learning benchmarks on ImageNet-21K and the attribute datasets.

The public Python API (:mod:`imagenet_zsl.api`) is available here by name, imported on first use
so that ``import imagenet_zsl`` (done by every module and by the command line) stays light::

    import imagenet_zsl as zsl
    table = zsl.hit_at_k_table(zsl.evaluate(model_dir, features, "hop1", "out/run"))
"""

from __future__ import annotations

from typing import Any

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


def __getattr__(name: str) -> Any:
    """A public name of :mod:`imagenet_zsl.api`, imported when first asked for (PEP 562)."""
    if name in __all__:
        from imagenet_zsl import api

        return getattr(api, name)
    raise AttributeError(f"module 'imagenet_zsl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
