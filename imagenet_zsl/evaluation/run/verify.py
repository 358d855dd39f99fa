"""The one verifier of a run directory (``evaluate``, and each cell of ``run``), beside its writer.

``report``, ``run`` (on resume) and ``analyze`` read a run directory only after
:func:`verify_run_directory`: every file its manifest lists exists with its size and sha256 (the
top-k lists, gigabytes for ImageNet-21K, by size unless the caller reads them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest_verified

METRICS_NAME = "metrics.json"
#: the manifest format of a run directory (v2: the one manifest of
#: :func:`imagenet_zsl.manifests.write_manifest`)
EVALUATION_FORMAT = "imagenet-zsl/evaluation-v2"
RERUN = "re-run 'imagenet-zsl evaluate'"
#: run files checked by size only (large, and not read by ``report``)
SIZE_ONLY_PREFIX = "topk/"


def verify_run_directory(run_dir: str | Path, *, hash_topk: bool = False) -> dict[str, Any]:
    """The manifest of a run directory after checking its files (:func:`read_manifest_verified`):
    every listed file must exist with its size, and its sha256 must match, except for the top-k
    lists unless ``hash_topk`` (gigabytes for ImageNet-21K; ``report`` does not read them).
    ``metrics.json`` must be listed. One line naming the file on any difference."""
    run_dir = Path(run_dir)

    def hashed(relpath: str) -> bool:
        return hash_topk or not relpath.startswith(SIZE_ONLY_PREFIX)

    manifest = read_manifest_verified(run_dir, EVALUATION_FORMAT, hash_files=hashed, rerun=RERUN)
    if METRICS_NAME not in {record["path"] for record in manifest["files"]}:
        raise UserInputError(f"{run_dir / MANIFEST_NAME}: does not list {METRICS_NAME}; {RERUN}")
    return manifest


def load_metrics(run_dir: str | Path, verify: bool = True) -> dict:
    """A run's metrics.json, after :func:`verify_run_directory` (``verify``)."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        raise UserInputError(
            f"{run_dir}: no {METRICS_NAME}; pass directories written by 'imagenet-zsl evaluate'"
        )
    if verify:
        verify_run_directory(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"{path}: not valid JSON ({err})") from err
    except RecursionError:  # json builds nested values recursively
        raise UserInputError(f"{path}: not a metrics file: its JSON is nested too deeply; {RERUN}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object")
    return data
