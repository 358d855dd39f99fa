"""Pool filter ``image_quality``: keep classes that survived ``imagenet-zsl images filter``.

    pool:
      - {filter: image_quality, path: filt/candidates}   # the filter run's output directory

A class the filter run kept stays; a class it dropped (too few correctly classified images, or
held-out accuracy below the threshold) goes, and so does a class the run never judged — a
benchmark class must have been vetted. Set ``require_judged: false`` to keep unjudged classes.
"""

from __future__ import annotations

import csv
from pathlib import Path

from imagenet_zsl.images.quality import kept_classes_from
from imagenet_zsl.splits.pool import PoolContext, pool_filter


@pool_filter("image_quality")
def image_quality(candidates: list[str], ctx: PoolContext, path: str,
                  require_judged: bool = True) -> list[str]:
    """Keep candidates the ambiguous-image filter kept (see module docstring)."""
    kept = kept_classes_from(path)
    if require_judged:
        return [w for w in candidates if w in kept]
    classes_csv = Path(path) / "classes.csv" if Path(path).is_dir() else Path(path)
    with open(classes_csv, encoding="utf-8", newline="") as handle:
        judged = {row["wnid"] for row in csv.DictReader(handle)}
    return [w for w in candidates if w in kept or w not in judged]
