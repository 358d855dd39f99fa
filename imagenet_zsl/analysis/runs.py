"""Read finished runs: one ``imagenet-zsl evaluate`` directory or an ``imagenet-zsl run`` directory.

A batch run keeps one evaluation run per (model, split) under ``RUN_DIR/cells/<model>__<split>/``,
each laid out exactly as ``evaluate`` writes it (``imagenet_zsl.evaluation.run.write_run``):
``metrics.json``, ``per_class.csv`` and ``topk/`` with ``classes.json``,
``test.labels.npy`` (n,) int32 index into the split's classes, ``test.unseen.ids.npy`` /
``test.unseen.scores.npy`` (n, m) top-m lists among the split's classes, ``test.rows.npy``
(n,) row numbers in the feature directory and ``test.true_above.npy`` / ``test.true_tied.npy``
(n,) the true class's exact tie ranks over all split classes (runs written before the tie-fair
metrics lack them; their ranks are then derived from the lists). The analyses only read these
files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.report import METRICS_NAME
from imagenet_zsl.features.shards import FeatureDir

CELLS_DIR = "cells"


@dataclass
class RunCell:
    """One evaluated (model, split): its metrics and the stored ZSL top-k lists of the test images.

    ``labels`` (n,) int64 index ``classes``; ``ids`` (n, m) int64 and ``scores`` (n, m) float32 are
    the top-m classes among ``classes`` per image (-1 / -inf padding). ``above`` / ``tied`` (n,)
    int64: classes scoring strictly above / exactly equal to the true class over *all* split
    classes, as ``evaluate`` stored them (None: not stored; :meth:`tie_ranks` derives them).
    """

    path: Path
    metrics: dict[str, Any]
    classes: list[str]
    labels: np.ndarray
    ids: np.ndarray
    scores: np.ndarray
    rows: np.ndarray
    above: np.ndarray | None = None
    tied: np.ndarray | None = None

    def tie_ranks(self) -> M.TieRanks:
        """The true class's :class:`~imagenet_zsl.scoring.TieRanks` over all split classes: the
        stored counts, or (older runs) counted from the lists, ties assumed to end with the list."""
        if self.above is not None and self.tied is not None:
            return M.TieRanks(self.above, self.tied)
        return M.tie_ranks(self.ids, self.labels, self.scores)

    @property
    def model(self) -> str:
        return str(self.metrics.get("model", {}).get("name", self.path.name.split("__")[0]))

    @property
    def split(self) -> str:
        return str(self.metrics.get("inputs", {}).get("split", {}).get("name", self.path.name))

    @property
    def split_path(self) -> Path | None:
        path = self.metrics.get("inputs", {}).get("split", {}).get("path")
        return None if path is None else Path(path)

    def image_ids(self) -> np.ndarray:
        """(n,) str image ids of the test images, read from the run's feature directory."""
        features = self.metrics.get("inputs", {}).get("features", {}).get("path")
        if features is None or not Path(features).is_dir():
            raise UserInputError(
                f"{self.path}: the run's feature directory {features} is not here; the image "
                "filter step needs it to map the stored rows to image ids"
            )
        ids = FeatureDir(features).ids().astype(str)  # the one shard reader: sha256 checked
        if len(ids) and self.rows.max(initial=-1) >= len(ids):
            raise UserInputError(f"{self.path}: stored rows exceed the {len(ids)} images of {features}")
        return ids[self.rows]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"{path}: not a readable JSON file ({err})") from err
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object")
    return data


def _load_array(path: Path) -> np.ndarray:
    if not path.is_file():
        raise UserInputError(f"{path}: missing; the run directory is incomplete (re-run the evaluation)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise UserInputError(f"{path}: not a readable .npy file ({err})") from err


def read_cell(path: str | Path) -> RunCell:
    """One evaluation run directory (see the module docstring)."""
    path = Path(path)
    metrics = _read_json(path / METRICS_NAME)
    topk = path / "topk"
    classes = _read_json(topk / "classes.json").get("unseen")
    if not isinstance(classes, list) or not classes:
        raise UserInputError(f"{topk / 'classes.json'}: no 'unseen' class list")
    labels = _load_array(topk / "test.labels.npy").astype(np.int64)
    ids = _load_array(topk / "test.unseen.ids.npy").astype(np.int64)
    scores = _load_array(topk / "test.unseen.scores.npy").astype(np.float32)
    rows = _load_array(topk / "test.rows.npy").astype(np.int64)
    if ids.ndim != 2 or ids.shape != scores.shape or len(ids) != len(labels) or len(rows) != len(labels):
        raise UserInputError(
            f"{topk}: top-k arrays disagree in shape (labels {labels.shape}, ids {ids.shape}, "
            f"scores {scores.shape}, rows {rows.shape})"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= len(classes)):
        raise UserInputError(f"{topk / 'test.labels.npy'}: labels outside the {len(classes)} split classes")
    above, tied = _tie_counts(topk, len(labels))
    return RunCell(path, metrics, [str(c) for c in classes], labels, ids, scores, rows, above, tied)


def _tie_counts(topk: Path, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The stored ``test.true_above.npy`` / ``test.true_tied.npy`` (None, None when absent)."""
    paths = [topk / "test.true_above.npy", topk / "test.true_tied.npy"]
    if not any(p.is_file() for p in paths):
        return None, None
    above, tied = (_load_array(p).astype(np.int64) for p in paths)
    if above.shape != (n,) or tied.shape != (n,) or min(above.min(initial=0), tied.min(initial=0)) < 0:
        raise UserInputError(f"{topk}: true_above/true_tied are not ({n},) non-negative counts")
    return above, tied


def read_cells(run_dir: str | Path) -> list[RunCell]:
    """Every evaluated cell of a run directory: itself (an ``evaluate`` run) or ``cells/*``.

    Cells without a ``metrics.json`` (failed or unfinished) are skipped; none at all is an error.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserInputError(f"{run_dir}: run directory not found")
    if (run_dir / METRICS_NAME).is_file():
        return [read_cell(run_dir)]
    cells_dir = run_dir / CELLS_DIR
    found = (
        sorted(p for p in cells_dir.glob("*") if (p / METRICS_NAME).is_file()) if cells_dir.is_dir() else []
    )
    if not found:
        raise UserInputError(
            f"{run_dir}: no evaluated run here (neither {METRICS_NAME} nor {CELLS_DIR}/*/{METRICS_NAME}); "
            "give the --out of `imagenet-zsl run` or `imagenet-zsl evaluate`"
        )
    return [read_cell(p) for p in found]
