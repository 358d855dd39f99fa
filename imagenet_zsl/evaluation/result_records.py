"""One self-describing JSON record per (backbone, model, split), as CLIP_benchmark writes one per
(dataset, model, task): the row's names, its ``protocol`` (label space and its size, the hit rule,
K, images, classes, seeds, package versions, the feature identity's and the weights' digests) and
its ``metrics`` (every table column, fractions), so that results from many runs and machines merge
into one table with ``imagenet-zsl report``.

``run`` writes ``OUT/results/BACKBONE__MODEL__SPLIT.json`` (:func:`result_file_name`); ``report``
reads those files, directories of them, and ``evaluate`` run directories (their metrics.json made
into the same record, :func:`result_record`), then merges them (:func:`merge_results`): the same
row (backbone identity, model, split, protocol) given twice is reported once when its metrics are
the same, and refused in one line when they differ (two different results for one row: no table
picks one silently).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import label_space_text, metric_columns
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.scoring import bootstrap

RESULT_FORMAT = "imagenet-zsl/result-v1"
#: the directory of a ``run`` that holds its result records
RESULTS_DIR = "results"
#: the keys every record has
RECORD_KEYS = ("format", "backbone", "model", "split", "protocol", "metrics")

log = logging.getLogger(__name__)


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def label_space_of(metrics: dict, given: dict | None = None) -> dict[str, Any]:
    """The row's label space: ``given`` (a ``run`` cell's ``label_space`` record: name, size, full,
    without_vector, missing_semantics), else read from metrics.json's ``label_space`` block (the
    classes that left it for want of a prototype make ``full``), with its table ``text``."""
    if given:
        space = {k: given.get(k) for k in ("name", "size", "full", "without_vector", "missing_semantics")}
    else:
        block = metrics.get("label_space") or {}
        spec = str(block.get("spec", "split"))
        size = block.get("classes_in_label_space", (metrics.get("zsl") or {}).get("classes"))
        if size is None:  # not recorded (a hand-made or truncated metrics.json)
            return {"name": None, "size": None, "full": None, "without_vector": None, "text": "–"}
        size = int(size)
        gone = int((block.get("without_prototype") or {}).get("classes", 0))
        name = spec if spec in ("split", "all") else Path(spec).stem
        space = {"name": name, "size": size, "full": size + gone, "without_vector": gone}
        space["missing_semantics"] = None
    return {**space, "text": label_space_text(str(space["name"]), int(space["size"]), space.get("full"))}


def _gzsl_protocol(metrics: dict) -> dict[str, Any] | None:
    gzsl = metrics.get("gzsl")
    if not gzsl:
        return None
    cal = gzsl.get("calibration") or None
    chosen = (cal or {}).get("chosen_by") or {}
    return {
        "classes": gzsl.get("classes"),
        "images": gzsl.get("images"),
        "calibration": None
        if cal is None
        else {
            "gamma": cal.get("gamma"),
            "k": cal.get("k"),
            "h_averaging": cal.get("h_averaging"),
            "validation_H": cal.get("validation_H"),
            "validation_images": cal.get("validation_images"),
            "seed": (chosen.get("seen_rows") or {}).get("seed"),
        },
    }


def _features_protocol(metrics: dict) -> dict[str, Any]:
    prov = metrics.get("provenance") or {}
    features = prov.get("features") or {}
    identity = features.get("identity")
    return {
        "backbone": features.get("backbone", "unknown"),
        "identity": identity,
        "identity_sha256": None if identity is None else _digest(identity),
        "weights_sha256": (identity or {}).get("weights_sha256"),
        "simulated": bool(((metrics.get("inputs") or {}).get("features") or {}).get("simulated")),
        "feature_mismatch": bool(prov.get("feature_mismatch")),
    }


def coverage_of(metrics: dict) -> dict[str, Any] | None:
    """A run's coverage of its split (``protocol.coverage``): the split's classes, those with test
    images (the classes the user's copy of ImageNet holds), its images and the list's sha256, from
    metrics.json's ``label_space`` block (None when absent). ``run`` records the coverage of the
    whole split list instead (its cells evaluate the classes every model can represent)."""
    block = metrics.get("label_space") or {}
    if "split_classes" not in block or "split_classes_without_test_images" not in block:
        return None
    total = int(block["split_classes"])
    held = total - int(block["split_classes_without_test_images"])
    split = (metrics.get("inputs") or {}).get("split") or {}
    images = (metrics.get("zsl") or {}).get("images")
    return {
        "classes": total,
        "held": held,
        "images": images,
        "complete": held == total,
        "split_sha256": split.get("sha256"),
    }


def protocol_block(
    metrics: dict, label_space: dict | None = None, classes: dict | None = None
) -> dict[str, Any]:
    """A record's ``protocol``: what its numbers were measured under, from metrics.json
    (``label_space``/``classes``: a ``run`` cell's own records of them)."""
    zsl, inputs = metrics.get("zsl") or {}, metrics.get("inputs") or {}
    params, split = metrics.get("parameters") or {}, inputs.get("split") or {}
    in_split = (classes or {}).get("in_split", split.get("classes"))
    model = metrics.get("model") or {}
    return {
        "label_space": label_space_of(metrics, label_space),
        "hit_rule": params.get("tie_rule"),
        "ks": params.get("ks"),
        "images": zsl.get("images"),
        "classes": {
            "in_split": in_split,
            "evaluated": (classes or {}).get("evaluated", split.get("classes")),
            "with_test_images": zsl.get("classes_with_test_images", zsl.get("classes")),
            "count_as_miss": len(
                (classes or {}).get("missed") or (metrics.get("count_as_miss") or {}).get("classes") or ()
            ),
        },
        "split": {"name": split.get("name"), "sha256": split.get("sha256")},
        "gzsl": _gzsl_protocol(metrics),
        "seed": {"bootstrap": bootstrap.SEED},
        "features": _features_protocol(metrics),
        "class_vectors": (metrics.get("provenance") or {}).get("class_vectors"),
        "model": {"name": model.get("name"), "manifest_sha256": model.get("manifest_sha256")},
        "coverage": coverage_of(metrics),
        "pretraining": {
            "test_classes_seen": (metrics.get("pretraining") or {}).get("test_classes_seen"),
            "label_sets": (metrics.get("pretraining") or {}).get("label_sets"),
        },
        "software": metrics.get("software"),
    }


def result_record(
    metrics: dict,
    *,
    label_space: dict | None = None,
    classes: dict | None = None,
    backbone: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The record of one run's metrics.json (every table column in ``metrics``, fractions).

    ``label_space``/``classes``: a ``run`` cell's records of them; ``backbone``: the row's backbone
    as its table names it (default: the test features' identity); ``source``: where the numbers
    are (the run directory, relative to the run)."""
    protocol = protocol_block(metrics, label_space, classes)
    return {
        "format": RESULT_FORMAT,
        "backbone": backbone or protocol["features"]["backbone"],
        "model": (metrics.get("model") or {}).get("name"),
        "split": (metrics.get("inputs") or {}).get("split", {}).get("name"),
        "protocol": protocol,
        "metrics": metric_columns(metrics, protocol["ks"] or None, gzsl=True),
        "interval": None,
        "source": source,
    }


def set_interval(record: dict, interval: Any) -> None:
    """Record the hit@1 interval its run computed (an
    :class:`~imagenet_zsl.evaluation.intervals.RowInterval`) and the rows of that run it is not
    significantly different from."""
    record["interval"] = {
        "metric": "hit@1",
        "method": bootstrap.INTERVAL_TEXT,
        "level": bootstrap.LEVEL,
        "low": interval.low,
        "high": interval.high,
        "text": interval.text,
        "not_significant": list(interval.peers),
        "not_significant_text": interval.not_significant,
    }


def row_key(record: dict) -> str:
    """What makes two records the same row: backbone identity, model, split and protocol (the
    package versions and the record's own source left out: the same row from another machine; the
    coverage too: a ``run``'s record counts the whole split list, its cell's metrics.json the
    classes it evaluated)."""
    protocol = {k: v for k, v in record["protocol"].items() if k not in ("software", "coverage")}
    identity = protocol["features"].get("identity_sha256") or record["backbone"]
    return _digest([identity, record["model"], record["split"], protocol])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"


def result_file_name(record: dict, backbone: str | None = None) -> str:
    """``BACKBONE__MODEL__SPLIT.json``: ``backbone`` (a recipe's name for its feature set) or the
    row's backbone identity, made a file name."""
    return f"{_slug(backbone or record['backbone'])}__{_slug(record['model'])}__{_slug(record['split'])}.json"


def read_result(path: Path) -> dict[str, Any]:
    """One record file, checked: its format and keys (one line naming the file otherwise)."""
    regular_input_file(path, "a result record")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserInputError(f"{path}: not a result record of 'imagenet-zsl run' ({err})") from err
    if not isinstance(record, dict) or record.get("format") != RESULT_FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise UserInputError(
            f"{path}: not a result record (format {found!r}, expected {RESULT_FORMAT!r}); give "
            "'imagenet-zsl run' results/*.json files or 'imagenet-zsl evaluate' run directories"
        )
    missing = [k for k in RECORD_KEYS if not record.get(k)]
    if missing:
        raise UserInputError(
            f"{path}: a result record without {', '.join(missing)}; re-run to write it again"
        )
    return record


def merge_results(records: Sequence[tuple[str, dict]]) -> tuple[list[dict], list[str]]:
    """The records (each with where it came from), each row once, and the legend's notes.

    The same row (:func:`row_key`) twice: kept once with a note when the metrics are the same;
    refused, naming both, when they differ."""
    kept: dict[str, tuple[str, dict]] = {}
    notes: list[str] = []
    for where, record in records:
        key = row_key(record)
        if key not in kept:
            kept[key] = (where, record)
            continue
        first, other = kept[key]
        if other["metrics"] != record["metrics"]:
            differ = next(c for c in record["metrics"] if other["metrics"].get(c) != record["metrics"][c])
            raise UserInputError(
                f"{where} and {first}: the same row ({record['model']} on {record['split']}, "
                f"{record['backbone']}, the same protocol) with different results ({differ}: "
                f"{other['metrics'].get(differ)} vs {record['metrics'][differ]}); report one of them"
            )
        notes.append(
            f"{record['model']} on {record['split']} ({record['backbone']}) given twice, "
            f"reported once: {first} and {where} hold the same results"
        )
        log.warning("%s is the row of %s again: reported once", where, first)
    return [record for _, record in kept.values()], notes
