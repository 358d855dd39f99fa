"""The on-disk feature format shared by extraction, simulation, filtering, models and evaluation.

A feature directory holds fixed-size shards plus one ``manifest.json``::

    DIR/manifest.json                 format, classes (the label space), dim, shards, provenance,
                                      files (path, bytes, sha256 of every other file)
    DIR/<shard>.features.npy          (n, D) float16 image features
    DIR/<shard>.labels.npy            (n,)   int32, index into manifest["classes"]
    DIR/<shard>.ids.npy               (n,)   unicode image ids, e.g. "n01440764/n01440764_10026.JPEG"
    DIR/<shard>.logits.npy            (n, K) float16, optional: backbone's 1K-class logits
    DIR/<shard>.done.json             written last: rows and sha256 of each file (resume marker)
    DIR/head.npz                      optional: the backbone's own classifier (weight (K, D), bias
                                      (K,), classes), its sha256 in manifest["head"]
    DIR/run.json, DIR/logs/           extraction only: the run's identity (resume), per-rank logs

Shard names sort in work order (``r{rank:03d}-s{index:06d}``). A shard exists only once its
``.done.json`` is written, so an interrupted run leaves at most temp files that are ignored. The
directory is written incrementally (resumable, several torchrun ranks), so it is not one
``atomic_directory``; its manifest is written last by :func:`write_manifest`
(:func:`imagenet_zsl.manifests.write_manifest`, shard sha256s reused) and read by :class:`FeatureDir`
(:func:`imagenet_zsl.manifests.read_manifest_verified`: every file's size, small files' sha256; a shard
file's sha256 is checked on its first use).

This module writes it; :mod:`.shard_checks` verifies it, :mod:`.feature_dir` reads it,
:mod:`.shared_blocks` shares its blocks in-process: each name is imported from its own module.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_save_npy, atomic_write_json
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.manifests import MANIFEST_NAME
from imagenet_zsl.manifests import write_manifest as write_directory_manifest

#: v2: the manifest is the one manifest (manifests.write_manifest): ``files`` lists every file, ``command``
FORMAT = "imagenet-zsl/features-v2"
SHARD_FILES = ("features", "labels", "ids", "logits")
#: the shard files every shard has (logits are optional)
REQUIRED_FILES = ("features", "labels", "ids")
#: what a reader of a damaged feature directory is told to do
RERUN = "re-run the extraction (or 'imagenet-zsl extract --merge DIR'), or 'imagenet-zsl simulate'"
#: the standard manifest keys a caller of :func:`write_manifest` may give among its fields
_PASSED_ON = ("inputs", "parameters")
_COMPUTED = ("format", "command", "software", "files")


def shard_name(rank: int, index: int) -> str:
    return f"r{rank:03d}-s{index:06d}"


def shard_file(name: str, kind: str) -> str:
    """The file name of ``kind`` (one of :data:`SHARD_FILES`) of shard ``name``."""
    return f"{name}.{kind}.npy"


@dataclass
class FeatureBlock:
    """A block of rows: features (n, D) float32, labels (n,) int64, ids (n,), logits or None."""

    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    logits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)


def write_shard(
    out_dir: str | Path,
    name: str,
    features: np.ndarray,
    labels: np.ndarray,
    ids: Sequence[str] | np.ndarray,
    logits: np.ndarray | None = None,
) -> dict[str, Any]:
    """Write one shard atomically (each file temp+rename, ``.done.json`` last); return its record
    ``{name, rows, sha256: {kind: digest}}``."""
    out_dir = Path(out_dir)
    n = len(labels)
    if features.ndim != 2 or features.shape[0] != n or len(ids) != n:
        raise ValueError(
            f"shard {name}: features {features.shape}, labels {len(labels)}, ids {len(ids)} disagree"
        )
    arrays = {
        "features": np.asarray(features, dtype=np.float16),
        "labels": np.asarray(labels, dtype=np.int32),
        "ids": np.asarray(ids, dtype=np.str_),
    }
    if logits is not None:
        arrays["logits"] = np.asarray(logits, dtype=np.float16)
    record: dict[str, Any] = {"name": name, "rows": int(n), "sha256": {}}
    for kind, array in arrays.items():
        path = out_dir / shard_file(name, kind)
        atomic_save_npy(path, array)
        record["sha256"][kind] = sha256_file(path)
    atomic_write_json(out_dir / f"{name}.done.json", record)
    return record


def encode_head(head: BackboneHead) -> bytes:
    """The bytes of ``head.npz``: ``weight`` (K, D) float32, ``bias`` (K,) float32, ``classes``
    (K,) unicode; the same head always gives the same bytes (no timestamps)."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        weight=np.ascontiguousarray(head.weight, dtype=np.float32),
        bias=np.ascontiguousarray(head.bias, dtype=np.float32),
        classes=np.asarray(head.classes, dtype=np.str_),
    )
    return buffer.getvalue()


def check_head_file(out_dir: str | Path, record: Any) -> str | None:
    """What is wrong with the head file that manifest record ``record`` describes (None: fine)."""
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        return "the manifest's 'head' record has no sha256"
    if record.get("file", HEAD_FILE) != HEAD_FILE:
        return f"the manifest's head file must be {HEAD_FILE!r}, not {record.get('file')!r}"
    path = Path(out_dir) / HEAD_FILE
    if not path.is_file():
        return f"{path}: the backbone head listed in the manifest is missing"
    if sha256_file(path) != record["sha256"]:
        return f"{path}: sha256 does not match the manifest (the head was changed after extraction)"
    return None


def finished_shard(out_dir: str | Path, name: str, verify: bool = False) -> dict[str, Any] | None:
    """The shard's record if it was completely written (and, with ``verify``, its hashes match)."""
    marker = Path(out_dir) / f"{name}.done.json"
    if not marker.exists():
        return None
    record = json.loads(marker.read_text())
    if verify:
        for kind, digest in record["sha256"].items():
            path = Path(out_dir) / shard_file(name, kind)
            if not path.exists() or sha256_file(path) != digest:
                return None
    return record


def known_digests(fields: Mapping[str, Any]) -> dict[str, str]:
    """Relative path → sha256 of the shard files (and head) that ``fields`` already records, so
    the manifest does not hash multi-GB shards again."""
    known = {
        shard_file(shard["name"], kind): digest
        for shard in fields.get("shards", [])
        for kind, digest in (shard.get("sha256") or {}).items()
    }
    head = fields.get("head")
    if isinstance(head, dict) and isinstance(head.get("sha256"), str):
        known[HEAD_FILE] = head["sha256"]
    return known


def write_manifest(out_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """Write the feature directory's ``manifest.json`` with :func:`imagenet_zsl.manifests.write_manifest`
    (call it last). ``manifest`` holds the feature fields (``classes``, ``dim`` and ``shards`` are
    required) and may give ``tool`` (default: ``imagenet-zsl simulate`` for simulated features,
    else ``imagenet-zsl extract``), ``inputs`` and ``parameters``; ``format``, ``command``,
    ``software`` and ``files`` are computed. Shard sha256s are taken from the shard records."""
    for key in ("classes", "dim", "shards"):
        if key not in manifest:
            raise ValueError(f"feature manifest needs '{key}'")
    fields = {k: v for k, v in manifest.items() if k not in (*_PASSED_ON, *_COMPUTED, "tool")}
    default_tool = "imagenet-zsl simulate" if manifest.get("simulated") else "imagenet-zsl extract"
    write_directory_manifest(
        out_dir,
        format=FORMAT,
        tool=manifest.get("tool", default_tool),
        inputs=manifest.get("inputs"),
        parameters=manifest.get("parameters"),
        fields=fields,
        known_sha256=known_digests(fields),
    )
    return Path(out_dir) / MANIFEST_NAME
