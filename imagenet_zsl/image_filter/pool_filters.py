"""Pool filter ``image_quality``: keep classes that survived ``imagenet-zsl images filter``.

    pool:
      - {filter: image_quality, path: filt/candidates}   # the filter run's output directory

A class the filter run kept stays; a class it dropped (too few correctly classified images, or
held-out accuracy below the threshold) goes, and so does a class the run never judged — a
benchmark class must have been vetted. Set ``require_judged: false`` to keep unjudged classes.
"""

from __future__ import annotations

from imagenet_zsl.image_filter.filtered import class_verdicts
from imagenet_zsl.splits.pool import POOL_FILTERS, PoolContext


@POOL_FILTERS.register
def image_quality(
    candidates: list[str], ctx: PoolContext, path: str, require_judged: bool = True
) -> list[str]:
    """Keep candidates the ambiguous-image filter kept (see module docstring)."""
    verdicts = class_verdicts(path)
    if require_judged:
        return [w for w in candidates if verdicts.get(w, False)]
    return [w for w in candidates if verdicts.get(w, True)]
