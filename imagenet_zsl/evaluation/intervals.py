"""The hit@1 interval of a table row and the rows it is not significantly different from: one
paired, class-clustered bootstrap (:mod:`imagenet_zsl.scoring.bootstrap`) per split over the runs
scored on the same classes and images, from each run's stored true-class ranks (``topk/``).

Shared by ``run``'s summary and ``report``'s table, so both print the same interval for the same
run; a row without usable ranks (a result record read from JSON) keeps the interval its own run
computed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from imagenet_zsl.evaluation.run.run_report import pct
from imagenet_zsl.scoring import TieRanks
from imagenet_zsl.scoring.bootstrap import (
    FEW_CLASSES_NOTE,
    INTERVAL_TEXT,
    LEVEL,
    PairedBootstrap,
    paired_bootstrap,
)

#: the legend's sentence on the interval
BOOTSTRAP_NOTE = (
    f"hit@1 95% CI: {INTERVAL_TEXT}; each resample's flat hit@1 is its images' expected credit over "
    "its images, count-as-miss images included (n/a: no interval, the reason below)"
)
#: the legend's sentence on the "n.s. vs" column
NS_NOTE = (
    "n.s. vs: the models of the same split whose hit@1 differs from this row's by an amount whose "
    f"{LEVEL:.0%} paired interval (the same resamples for both) contains 0, i.e. not significantly "
    "different (none: every difference is significant; n/a: too few classes to tell)"
)


@dataclass
class RowInterval:
    """One row's interval: the table's text (``[low, high]`` in %, or ``n/a (why)``), the
    fractions (None without an interval) and the rows it is not significantly different from."""

    text: str = "–"
    low: float | None = None
    high: float | None = None
    not_significant: str = "–"
    peers: list[str] = field(default_factory=list)


def class_credit(run_dir: Path) -> dict[str, tuple[float, int]] | None:
    """One run's hit@1 credit (expected tie rule) summed per test class and its test images, by
    wnid, from the run's true-class ranks (count-as-miss classes: no credit); None when the run
    has no top-k lists or they do not fit together (the row then shows no interval)."""
    topk = run_dir / "topk"
    try:
        labels = np.load(topk / "test.labels.npy").astype(np.int64)
        ranks = TieRanks(*(np.load(topk / f"test.true_{f}.npy").astype(np.int64) for f in ("above", "tied")))
        classes = json.loads((topk / "classes.json").read_text())
    except (OSError, ValueError):
        return None
    space = classes.get("unseen") if isinstance(classes, dict) else None
    if not isinstance(space, list) or not len(labels) == len(ranks.above) == len(ranks.tied):
        return None
    if len(labels) and (labels.min() < 0 or labels.max() >= len(space)):
        return None
    sums = np.bincount(labels, weights=ranks.credit(1), minlength=len(space))
    counts = np.bincount(labels, minlength=len(space))
    credit = {w: (float(s), int(n)) for w, s, n in zip(space, sums, counts, strict=True) if n}
    credit.update({w: (0.0, int(n)) for w, n in (classes.get("count_as_miss") or {}).items() if n})
    return credit


def _no_interval(boot: PairedBootstrap) -> str:
    """The short cell of a row without an interval (the legend gives the whole reason)."""
    if boot.reason is not None:
        return f"n/a ({boot.classes} class{'es' if boot.classes != 1 else ''})"
    return "n/a (no spread)"


def _group_rows(
    boot: PairedBootstrap, members: Sequence[int], names: Sequence[str], out: list[RowInterval]
) -> None:
    for a, i in enumerate(members):
        row = out[i]
        if boot.has_interval(a):
            row.low, row.high = float(boot.low[a]), float(boot.high[a])
            row.text = f"[{pct(row.low)}, {pct(row.high)}]"
        else:
            row.text = _no_interval(boot)
        verdicts = {names[j]: boot.verdict(a, b) for b, j in enumerate(members) if b != a}
        row.peers = [name for name, verdict in verdicts.items() if verdict == "n.s."]
        if not verdicts:  # alone on its split's classes and images: nothing to compare with
            row.not_significant = "–"
        elif all(v == "n/a" for v in verdicts.values()):
            row.not_significant = _no_interval(boot)
        else:
            row.not_significant = ", ".join(row.peers) if row.peers else "none"


def _group_notes(
    split: str, boot: PairedBootstrap, members: Sequence[int], names: Sequence[str]
) -> list[str]:
    """The legend's lines on one bootstrap's rows without an interval, and why."""
    if boot.reason is not None:
        return [f"{split}: no hit@1 interval: {boot.reason}"]
    return [
        f"{split}, {names[i]}: no hit@1 interval: {boot.why_not(a)}"
        for a, i in enumerate(members)
        if not boot.has_interval(a)
    ]


def row_intervals(
    splits: Sequence[str], runs: Sequence[Path | None], names: Sequence[str]
) -> tuple[list[RowInterval], list[str]]:
    """Each row's :class:`RowInterval` (rows given by their split, their run directory (None: no
    ranks to read) and the name other rows call them by), and the legend's notes.

    One paired bootstrap per split over the rows whose runs hold the same test classes with the
    same image counts; a row whose ranks cannot be read keeps ``–``."""
    out = [RowInterval() for _ in splits]
    groups: dict[tuple, list[tuple[int, list[float]]]] = {}
    for i, (split, run) in enumerate(zip(splits, runs, strict=True)):
        credit = class_credit(run) if run is not None else None
        if not credit:
            continue
        wnids = sorted(credit)
        key = (split, tuple(wnids), tuple(credit[w][1] for w in wnids))
        groups.setdefault(key, []).append((i, [credit[w][0] for w in wnids]))
    notes: list[str] = []
    few: list[str] = []
    for (split, _, counts), members in groups.items():
        boot = paired_bootstrap(np.array([c for _, c in members]), np.array(counts))
        rows = [i for i, _ in members]
        _group_rows(boot, rows, names, out)
        notes += [n for n in _group_notes(split, boot, rows, names) if n not in notes]
        if boot.note and split not in few:
            few.append(split)
    if few:  # the same caveat for every split below 100 classes: one line
        notes.append(f"{', '.join(few)}: {FEW_CLASSES_NOTE}")
    return out, notes
