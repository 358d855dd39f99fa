"""Readers of a filter run's outputs, apart from the code that writes them: the split builder's
``image_quality`` pool filter (:func:`class_verdicts`) and ``imagenet-zsl evaluate --kept-images``
(:func:`kept_image_ids`) read a run without loading the classifiers, the tables' writer or its plot.
"""

from __future__ import annotations

import csv
from pathlib import Path

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT
from imagenet_zsl.io import read_manifest_verified


def _check_columns(path: Path, header: list[str] | None, required: tuple[str, ...]) -> None:
    missing = [c for c in required if c not in (header or [])]
    if missing:
        raise UserInputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected a file written by "
            "'imagenet-zsl images filter'"
        )


def _output_file(path: str | Path, name: str) -> Path:
    """``path`` itself, or ``path / name`` when it is a filter output directory (verified against
    its manifest first); must exist."""
    path = Path(path)
    if path.is_dir():
        read_manifest_verified(path, OUTPUT_FORMAT, rerun="re-run 'imagenet-zsl images filter'")
        path = path / name
    if not path.exists():
        raise UserInputError(f"{path}: not found; run 'imagenet-zsl images filter' first")
    return path


def class_verdicts(path: str | Path) -> dict[str, bool]:
    """wnid → kept, for every class a filter run judged (its ``classes.csv``; ``path`` is the
    file or the run's output directory). A class absent from the result was never judged."""
    path = _output_file(path, "classes.csv")
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        _check_columns(path, reader.fieldnames, ("wnid", "kept"))
        rows = list(reader)
    bad = [r["wnid"] for r in rows if r["kept"] not in ("true", "false")]
    if bad:
        raise UserInputError(f"{path}: 'kept' must be true/false, bad rows: {preview(bad)}")
    return {r["wnid"]: r["kept"] == "true" for r in rows}


def kept_image_ids(path: str | Path) -> set[str]:
    """Image ids a filter run kept (its ``kept.csv``; ``path`` is the file or the run's output
    directory), for evaluating only kept images."""
    import pandas as pd  # deferred: only an image table (kept.csv) needs pandas, not class_verdicts

    path = _output_file(path, "kept.csv")
    with open(path, encoding="utf-8") as handle:
        _check_columns(path, handle.readline().rstrip("\n").split(","), ("image_id",))
    return set(pd.read_csv(path, usecols=["image_id"], dtype=str)["image_id"].tolist())
