"""Read finished runs: one ``imagenet-zsl evaluate`` directory or an ``imagenet-zsl run`` directory.

A batch run keeps one evaluation run per (model, split) under ``RUN_DIR/cells/<model>__<split>/``,
each laid out exactly as ``evaluate`` writes it (``imagenet_zsl.evaluation.run.writer.write_run``):
``metrics.json``, ``per_class.csv`` and ``topk/`` with ``classes.json``,
``test.labels.npy`` (n,) int32 index into the split's classes, ``test.unseen.ids.npy`` /
``test.unseen.scores.npy`` (n, m) top-m lists among the split's classes, ``test.rows.npy``
(n,) row numbers in the feature directory and ``test.true_above.npy`` / ``test.true_tied.npy``
(n,) the true class's exact tie ranks over all split classes (runs written before the tie-fair
metrics lack them; their ranks are then derived from the lists); a ``--gzsl`` cell adds the seen
lists and each list's tail ``X.SPACE.tail.npy`` (runs written before issue 45 lack the tails: a
tie group running past a list is then a miss, as they were evaluated). The analyses only read these
files, and only after :func:`~imagenet_zsl.evaluation.run.verify.verify_run_directory` (the one
run-directory verifier) has checked every one of them against the size and sha256 that ``evaluate``
recorded in the cell's ``manifest.json``: an edited list or table is refused, never silently
analysed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.run.verify import METRICS_NAME, verify_run_directory
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.identity import check_same_features, describe_identity
from imagenet_zsl.manifests import MANIFEST_NAME

log = logging.getLogger(__name__)

CELLS_DIR = "cells"
#: the GZSL lists' tail files (``topk/X.SPACE.tail.npy``), in :class:`GZSLLists`' field order
TAIL_NAMES = ("test.seen", "test.unseen", "seen.seen", "seen.unseen")


@dataclass
class GZSLLists:
    """The stored GZSL lists of a cell evaluated with ``--gzsl`` (all from ``topk/``).

    ``seen_classes``: the seen (training) classes. ``test_seen_ids`` / ``test_seen_scores``
    (n, m): each test image's top-m among the seen classes (ids index ``seen_classes``).
    ``labels`` (n_s,) index ``seen_classes`` for the held-out seen images; ``seen_ids`` /
    ``seen_scores`` and ``unseen_ids`` / ``unseen_scores`` (n_s, m) their top-m among the seen and
    the test classes; ``above`` / ``tied`` (n_s,) their true class's tie ranks among the seen
    classes. The ``*_tail`` (n,) / (n_s,) int64: per image, the classes of that space left off its
    list that score exactly the list's last score (``topk/X.SPACE.tail.npy``; ``test_unseen_tail``
    belongs to the cell's own ZSL lists), so a tie group running past a list is counted whole;
    None where the run directory predates them (such an image is then a miss, as before)."""

    seen_classes: list[str]
    test_seen_ids: np.ndarray
    test_seen_scores: np.ndarray
    labels: np.ndarray
    seen_ids: np.ndarray
    seen_scores: np.ndarray
    unseen_ids: np.ndarray
    unseen_scores: np.ndarray
    above: np.ndarray
    tied: np.ndarray
    test_seen_tail: np.ndarray | None = None
    test_unseen_tail: np.ndarray | None = None
    seen_tail: np.ndarray | None = None
    unseen_tail: np.ndarray | None = None

    @property
    def has_tails(self) -> bool:
        """Whether every list's tail was stored (runs written before issue #45's tails: False)."""
        tails = (self.test_seen_tail, self.test_unseen_tail, self.seen_tail, self.unseen_tail)
        return all(t is not None for t in tails)


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
    gzsl: GZSLLists | None = None

    def tie_ranks(self) -> M.TieRanks:
        """The true class's :class:`~imagenet_zsl.scoring.TieRanks` over all split classes: the
        stored counts, or (older runs) counted from the lists, ties assumed to end with the list."""
        if self.above is not None and self.tied is not None:
            return M.TieRanks(self.above, self.tied)
        return M.true_ranks(self.labels, topk_ids=self.ids, topk_scores=self.scores)

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

    @property
    def feature_identity(self) -> dict[str, Any] | None:
        """Identity of the test features the cell was evaluated on: as ``evaluate`` recorded it in
        metrics.json (``provenance.features.identity``), else from the feature directory if it is
        still there, else None (unknown: not compared)."""
        provenance = self.metrics.get("provenance")
        blocks = [provenance.get("features") if isinstance(provenance, dict) else None]
        blocks += [self.metrics.get("features"), self.metrics.get("inputs", {}).get("features")]
        for block in blocks:
            if isinstance(block, dict) and isinstance(block.get("identity"), dict):
                return block["identity"]
        path = self.metrics.get("inputs", {}).get("features", {}).get("path")
        if path is None or not (Path(path) / MANIFEST_NAME).is_file():
            return None
        try:
            return FeatureDir(path).identity
        except UserInputError:
            return None

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
    except RecursionError:  # json builds nested values recursively
        raise UserInputError(f"{path}: not a run's JSON file: it is nested too deeply") from None
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


def _check_listed(path: Path, listed: list[str], names: list[str]) -> None:
    """Every file the analyses read must be one the manifest vouches for."""
    for name in names:
        if (path / name).is_file() and name not in listed:
            raise UserInputError(
                f"{path / name}: not listed in {path / MANIFEST_NAME}, so it cannot be verified; "
                "re-run the evaluation"
            )


def _refuse_counted_misses(path: Path, metrics: dict[str, Any]) -> None:
    """The analyses recompute hit@K from the stored top-k lists; images counted as misses
    (``missing_semantics: count_as_miss``) have none, so such a cell would be analysed without them."""
    block = metrics.get("count_as_miss") if isinstance(metrics, dict) else None
    images = int(block.get("images", 0) or 0) if isinstance(block, dict) else 0
    if images:
        raise UserInputError(
            f"{path}: {images} test images of {len(block.get('classes') or [])} classes were counted as "
            "misses (missing_semantics: count_as_miss) and have no ranked list to analyse; re-run with "
            "missing_semantics: drop"
        )


def read_cell(path: str | Path) -> RunCell:
    """One evaluation run directory (see the module docstring), its files verified first."""
    path = Path(path)
    manifest = verify_run_directory(path, hash_topk=True)  # the lists are read: hash them too
    listed = [record["path"] for record in manifest["files"]]
    topk_names = sorted(str(p.relative_to(path)) for p in (path / "topk").glob("*") if p.is_file())
    _check_listed(path, listed, [METRICS_NAME, "per_class.csv", *topk_names])
    metrics = _read_json(path / METRICS_NAME)
    _refuse_counted_misses(path, metrics)
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
    cell = RunCell(path, metrics, [str(c) for c in classes], labels, ids, scores, rows, above, tied)
    cell.gzsl = _gzsl_lists(topk, cell)
    return cell


def _gzsl_lists(topk: Path, cell: RunCell) -> GZSLLists | None:
    """The GZSL lists of a ``--gzsl`` run (None when the cell was evaluated without it)."""
    if not (topk / "test.seen.ids.npy").is_file():
        return None
    seen_classes = _read_json(topk / "classes.json").get("seen")
    if not isinstance(seen_classes, list) or not seen_classes:
        raise UserInputError(f"{topk / 'classes.json'}: GZSL lists but no 'seen' class list")
    arrays = {
        name: _load_array(topk / f"{name}.npy")
        for name in (
            "test.seen.ids", "test.seen.scores", "seen.labels", "seen.seen.ids", "seen.seen.scores",
            "seen.unseen.ids", "seen.unseen.scores", "seen.true_above", "seen.true_tied",
        )
    }  # fmt: skip
    n, n_seen = len(cell.labels), len(arrays["seen.labels"])
    shapes = {
        "test.seen.ids": (n, cell.ids.shape[1]),
        "test.seen.scores": (n, cell.ids.shape[1]),
        "seen.seen.scores": arrays["seen.seen.ids"].shape,
        "seen.unseen.ids": arrays["seen.seen.ids"].shape,
        "seen.unseen.scores": arrays["seen.seen.ids"].shape,
        "seen.true_above": (n_seen,),
        "seen.true_tied": (n_seen,),
    }
    for name, shape in shapes.items():
        if arrays[name].shape != shape or arrays["seen.seen.ids"].shape[0] != n_seen:
            raise UserInputError(f"{topk / (name + '.npy')}: shape {arrays[name].shape}, expected {shape}")
    labels = arrays["seen.labels"].astype(np.int64)
    if n_seen and (labels.min() < 0 or labels.max() >= len(seen_classes)):
        raise UserInputError(
            f"{topk / 'seen.labels.npy'}: labels outside the {len(seen_classes)} seen classes"
        )
    return GZSLLists(
        [str(c) for c in seen_classes],
        arrays["test.seen.ids"].astype(np.int64),
        arrays["test.seen.scores"].astype(np.float32),
        labels,
        arrays["seen.seen.ids"].astype(np.int64),
        arrays["seen.seen.scores"].astype(np.float32),
        arrays["seen.unseen.ids"].astype(np.int64),
        arrays["seen.unseen.scores"].astype(np.float32),
        arrays["seen.true_above"].astype(np.int64),
        arrays["seen.true_tied"].astype(np.int64),
        *(_tail(topk, name, n if name.startswith("test.") else n_seen) for name in TAIL_NAMES),
    )


def _tail(topk: Path, name: str, n: int) -> np.ndarray | None:
    """``topk/NAME.tail.npy`` as (n,) int64 non-negative counts; None when the run has none."""
    path = topk / f"{name}.tail.npy"
    if not path.is_file():
        return None
    tail = _load_array(path)
    if tail.shape != (n,) or tail.dtype.kind not in "iu" or tail.min(initial=0) < 0:
        raise UserInputError(f"{path}: shape {tail.shape} {tail.dtype}, expected ({n},) non-negative counts")
    return tail.astype(np.int64)


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
        return _note_missing_tails([read_cell(run_dir)])
    cells_dir = run_dir / CELLS_DIR
    found = (
        sorted(p for p in cells_dir.glob("*") if (p / METRICS_NAME).is_file()) if cells_dir.is_dir() else []
    )
    if not found:
        raise UserInputError(
            f"{run_dir}: no evaluated run here (neither {METRICS_NAME} nor {CELLS_DIR}/*/{METRICS_NAME}); "
            "give the --out of `imagenet-zsl run` or `imagenet-zsl evaluate`"
        )
    return _note_missing_tails([read_cell(p) for p in found])


def _note_missing_tails(cells: list[RunCell]) -> list[RunCell]:
    """Say once (one log line for all cells) which GZSL cells predate the lists' tails: their
    credit keeps the rule they were evaluated with (a tie group running past a stored list is a
    miss), so their figures stay those of their metrics.json, not of a re-evaluation."""
    old = [str(c.path) for c in cells if c.gzsl is not None and not c.gzsl.has_tails]
    if old:
        log.warning(
            "%d GZSL cell(s) have no stored list tails (topk/*.tail.npy, written since issue 45): %s; "
            "a tie group running past a stored list counts as a miss there, as when they were "
            "evaluated (re-run `imagenet-zsl evaluate` for the exact tie-fair credit)",
            len(old),
            preview(old),
        )
    return cells


def check_cell_features(cells: list[RunCell], allow_mismatch: bool = False) -> list[dict[str, Any]]:
    """Refuse to combine cells evaluated on different features (``--allow-feature-mismatch``
    overrides). Cells of unknown identity are not compared. Returns the override records (empty
    when every known identity agrees)."""
    known = [c for c in cells if c.feature_identity]
    overrides = []
    for cell in known[1:]:
        record = check_same_features(
            known[0].feature_identity,
            cell.feature_identity,
            f"cell {known[0].path}",
            f"cell {cell.path}",
            allow_mismatch,
        )
        if record is not None:
            overrides.append(record)
    return overrides


def mismatch_note(overrides: list[dict]) -> str:
    """The line under a table that combined cells of different features (``--allow-feature-mismatch``)."""
    if not overrides:
        return ""
    shown = "; ".join(
        " vs ".join(f"{k} ({v})" for k, v in o.items() if k.startswith("cell ")) for o in overrides
    )
    return f"\nFEATURE MISMATCH allowed (--allow-feature-mismatch): {shown}\n"


def cell_backbone(cell: RunCell) -> str:
    """The backbone of a cell's test features, as the tables name it (``SIMULATED @…`` for
    simulated ones, ``unknown`` when the run does not record it)."""
    return describe_identity(cell.feature_identity)


def features_note(cells: list[RunCell]) -> str:
    """The lines above an analysis table: which backbone(s) the features come from, and a loud
    mark when they are SIMULATED (numbers that test the pipeline, not results of a backbone)."""
    names = sorted({cell_backbone(c) for c in cells})
    lines = [f"Features: {', '.join(names)} (backbone of the test features @ weights sha256 prefix)."]
    if any((c.feature_identity or {}).get("simulation") for c in cells):
        lines.append(
            "**SIMULATED features** (`imagenet-zsl simulate`): synthetic features that exercise the "
            "pipeline; these numbers are not results of any backbone."
        )
    return "\n\n".join(lines) + "\n\n"
