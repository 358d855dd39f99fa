"""Work splitting under torchrun and merging of the per-rank shards into one manifest.

Extraction needs no process group: ``torchrun`` (any number of processes and nodes) sets
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and every rank takes a contiguous block of the global shard
list, so shard *g* always holds the same images whoever writes it. Ranks write
``r<rank>-s<g>`` shards into the same directory; the last rank to finish (or
``imagenet-zsl extract --merge DIR``) checks that every shard 0..G-1 is finished and writes
``manifest.json`` (:func:`~imagenet_zsl.features.shard_files.write_manifest`). A resumed run may
use a different number of processes: finished shards are recognised by their global index
whatever rank wrote them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.scored_shards import UNSTORED_KEY
from imagenet_zsl.features.shard_files import FORMAT, check_head_file, finished_shard, write_manifest
from imagenet_zsl.manifests import read_manifest_verified

RUN_FILE = "run.json"
RUN_FORMAT = "imagenet-zsl/extract-run-v1"
_DONE_RE = re.compile(r"^r(\d+)-s(\d+)\.done\.json$")
#: temp files of shard files a killed run left behind (``.r000-s000001.features.npy.XXXX.tmp``)
_SHARD_TEMP_RE = re.compile(r"^\.r\d+-s\d+\..*\.tmp$")


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a torchrun job (all defaults: a plain single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_env(cls) -> RankInfo:
        def read(name: str, default: int) -> int:
            value = os.environ.get(name, str(default))
            if not value.isdigit():
                raise UserInputError(f"environment variable {name}={value!r} is not an integer")
            return int(value)

        info = cls(read("RANK", 0), read("WORLD_SIZE", 1), read("LOCAL_RANK", 0), read("LOCAL_WORLD_SIZE", 1))
        if not 0 <= info.rank < info.world_size:
            raise UserInputError(f"RANK={info.rank} is outside WORLD_SIZE={info.world_size}")
        return info


def shard_range(num_shards: int, rank: int, world_size: int) -> range:
    """The contiguous block of global shard indices that ``rank`` owns (balanced to ±1 shard)."""
    return range(num_shards * rank // world_size, num_shards * (rank + 1) // world_size)


def finished_shards(out_dir: str | Path) -> dict[int, list[str]]:
    """Global shard index → names of finished shards (``.done.json`` present) for that index."""
    found: dict[int, list[str]] = {}
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return found
    for entry in os.scandir(out_dir):
        match = _DONE_RE.match(entry.name)
        if match:
            found.setdefault(int(match.group(2)), []).append(entry.name[: -len(".done.json")])
    return {g: sorted(names) for g, names in found.items()}


def skipped_path(out_dir: str | Path, name: str) -> Path:
    """Sidecar listing a shard's skipped files; written before the shard's ``.done.json``."""
    return Path(out_dir) / f"{name}.skipped.json"


def read_run(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / RUN_FILE
    if not path.exists():
        raise UserInputError(f"{path}: missing; {out_dir} is not an 'imagenet-zsl extract' output directory")
    run = json.loads(path.read_text())
    if run.get("format") != RUN_FORMAT:
        raise UserInputError(f"{path}: format {run.get('format')!r}, expected {RUN_FORMAT!r}")
    return run


def merge(out_dir: str | Path, verify: bool = True, require_complete: bool = True) -> Path | None:
    """Check that every shard is finished (and, with ``verify``, that its sha256s match) and write
    ``manifest.json``. Returns its path; None when shards are missing and not ``require_complete``.
    """
    out_dir = Path(out_dir)
    run = read_run(out_dir)
    num_shards = int(run["num_shards"])
    done = finished_shards(out_dir)
    missing = [g for g in range(num_shards) if g not in done]
    if missing:
        if not require_complete:
            return None
        raise UserInputError(
            f"{out_dir}: {len(missing)} of {num_shards} shards are unfinished (first: s{missing[0]:06d});"
            " re-run the same extract command (any number of processes) to finish them"
        )
    strays = sorted(g for g in done if g >= num_shards)
    if strays:
        raise UserInputError(f"{out_dir}: shard s{strays[0]:06d} is beyond this run's {num_shards} shards")
    records, skipped, problems = [], [], []
    for g in range(num_shards):
        candidates = [finished_shard(out_dir, name, verify=verify) for name in done[g]]
        good = [r for r in candidates if r is not None]
        if not good:
            problems.append(f"{done[g][0]}: sha256 mismatch or missing file")
            continue
        if len({json.dumps(r["sha256"], sort_keys=True) for r in good}) > 1:
            problems.append(f"shard s{g:06d} was written twice with different content: {done[g]}")
            continue
        record = good[0]
        kept = {"name": record["name"], "rows": record["rows"], "sha256": record["sha256"]}
        if UNSTORED_KEY in record:  # a scored shard (fused path): its features were never stored
            kept[UNSTORED_KEY] = record[UNSTORED_KEY]
        records.append(kept)
        sidecar = skipped_path(out_dir, record["name"])
        if sidecar.exists():
            skipped.extend(json.loads(sidecar.read_text()))
    if problems:
        raise UserInputError(
            f"{out_dir}: {len(problems)} shard(s) failed the check, e.g. {problems[0]}; delete those "
            "shards' .done.json files and re-run the extract command to redo them"
        )
    manifest = dict(run["manifest"])
    if manifest.get("head") is not None:
        problem = check_head_file(out_dir, manifest["head"])
        if problem:
            raise UserInputError(f"{problem}; re-run the same extract command to rewrite it")
    manifest["shards"] = records
    manifest["skipped"] = skipped
    manifest["counts"] = {
        "work_items": int(run["num_items"]),
        "images": sum(r["rows"] for r in records),
        "skipped": len(skipped),
        "shards": num_shards,
    }
    _remove_shard_temps(out_dir)
    return _write_settled(out_dir, manifest)


def _remove_shard_temps(out_dir: Path) -> None:
    """Every shard is finished: temp files of shard files are debris of killed runs (the manifest
    lists every file, so none may stay to be deleted later)."""
    for entry in os.scandir(out_dir):
        if entry.is_file() and _SHARD_TEMP_RE.match(entry.name):
            Path(entry.path).unlink(missing_ok=True)


def _write_settled(out_dir: Path, manifest: dict[str, Any], attempts: int = 3) -> Path:
    """Write the manifest, then check every listed size again: a torchrun rank that finished its
    shards a moment earlier may still have been closing its log file; if so, list it again."""
    for _ in range(attempts - 1):
        path = write_manifest(out_dir, manifest)
        try:
            read_manifest_verified(out_dir, FORMAT, hash_files=False)
            return path
        except UserInputError:
            continue
    return write_manifest(out_dir, manifest)
