"""The output directories of the `attributes` commands: their formats, their readers, and how the
long ones (``attributes robustness``, ``attributes demo``) publish atomically yet resume.

Every directory is written inside :func:`imagenet_zsl.safe_output.atomic_directory` and ends with a manifest
from :func:`imagenet_zsl.manifests.write_manifest` (format ``imagenet-zsl/attribute-<kind>-v1``); every
reader checks it with :func:`imagenet_zsl.manifests.read_manifest_verified`.

A study of many runs must survive an interruption, yet its ``--out`` may only appear whole. So its
runs are made in a work directory beside ``--out`` (``.<out>.attributes.work``), which outlives an
interrupted command; finished runs there are reused when the command is run again, and a previous
output of the same command (verified) seeds the work directory, so re-running a finished study
recomputes nothing. When every run is done, the runs are hard-linked (copied where the file system
has no links) into the temporary directory of ``--out``, the summary and manifest are written, the
directory is renamed into place and the work directory is removed. What the runs depend on
beyond their own configuration (the features: ``--root`` of a study, ``--dim`` of the demo) is the
study's identity, kept in the work directory's ``study.json`` and the manifest's ``study`` field:
runs of another identity are never reused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_json, canonical_json
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest_verified
from imagenet_zsl.safe_output import atomic_directory, check_out_dir

log = logging.getLogger(__name__)

RESULTS_NAME = "results.json"
RUN_TOOL = "imagenet-zsl attributes run"
RUN_FORMAT = "imagenet-zsl/attribute-run-v1"
UPPER_BOUND_TOOL = "imagenet-zsl attributes upper-bound"
UPPER_BOUND_FORMAT = "imagenet-zsl/attribute-upper-bound-v1"
SPLIT_TOOL = "imagenet-zsl attributes split"
SPLIT_FORMAT = "imagenet-zsl/attribute-split-v1"
ROBUSTNESS_TOOL = "imagenet-zsl attributes robustness"
ROBUSTNESS_FORMAT = "imagenet-zsl/attribute-robustness-v1"
DEMO_TOOL = "imagenet-zsl attributes demo"
DEMO_FORMAT = "imagenet-zsl/attribute-demo-v1"
TABLE_TOOL = "imagenet-zsl attributes table"
TABLE_FORMAT = "imagenet-zsl/attribute-table-v1"
#: the directories whose results.json the tables read
RESULT_FORMATS = (RUN_FORMAT, UPPER_BOUND_FORMAT)
_RESULT_RERUN = "re-run 'imagenet-zsl attributes run' (or 'attributes upper-bound')"


# --------------------------------------------------------------------------- reading runs
def _results_only(relpath: str) -> bool:
    """Hash only results.json (what the readers use); other files are checked by size."""
    return relpath == RESULTS_NAME


def finished_results(out: Path, formats: str | Sequence[str], key: dict[str, Any]) -> dict[str, Any] | None:
    """results.json of a finished, verified run in ``out`` made with the configuration ``key``,
    else None (nothing there, another configuration, or a run that fails verification: then it is
    made again, replacing the old one)."""
    if not (out / MANIFEST_NAME).is_file():
        return None
    try:
        read_manifest_verified(out, formats, hash_files=_results_only)
        previous = json.loads((out / RESULTS_NAME).read_text(encoding="utf-8"))
    except (UserInputError, OSError, ValueError) as err:
        log.warning("%s: not reused (%s); running it again", out, err)
        return None
    if not isinstance(previous, dict) or previous.get("config") != key:
        return None
    log.info("%s: already finished with the same configuration, kept", out)
    return previous


def _hidden_below(path: Path, root: Path) -> bool:
    """Whether a folder between ``root`` and ``path`` is hidden (temporary or work directories)."""
    return any(part.startswith(".") for part in path.relative_to(root).parts[:-1])


def _result_files(given: Path) -> list[Path]:
    if given.is_file() and given.name == RESULTS_NAME:
        return [given]
    if not given.is_dir():
        raise UserInputError(f"{given}: not a run directory or results.json")
    files = [f for f in sorted(given.rglob(RESULTS_NAME)) if not _hidden_below(f, given)]
    if not files:
        raise UserInputError(f"{given}: no {RESULTS_NAME} below it (run `attributes run` first)")
    return files


def load_results(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """results.json of each run directory (searched recursively below each given path, skipping
    hidden folders); each directory's manifest is verified first."""
    found: list[dict[str, Any]] = []
    for given in paths:
        for file in _result_files(Path(given)):
            read_manifest_verified(file.parent, RESULT_FORMATS, hash_files=_results_only, rerun=_RESULT_RERUN)
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise UserInputError(f"{file}: not valid JSON: {err}") from err
            if not isinstance(data, dict) or not {"dataset", "model", "split", "zsl"} <= set(data):
                raise UserInputError(f"{file}: not an attributes run result")
            data["_path"] = str(file.parent)
            found.append(data)
    return found


# --------------------------------------------------------------------------- studies
def work_dir(out: str | Path) -> Path:
    """Where the runs of a study with this ``--out`` are made (kept across interruptions)."""
    out = Path(out)
    return out.parent / f".{out.name}.attributes.work"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of ``src`` made of hard links (no bytes copied where possible).
    Every writer replaces files by rename, so a linked file is never changed in place."""
    shutil.copytree(src, dst, copy_function=_link_or_copy, dirs_exist_ok=True)


def prepare_work(
    out: str | Path,
    *,
    tool: str,
    manifest_format: str,
    identity: Mapping[str, Any],
    inputs: Iterable[str | Path | None] = (),
) -> Path:
    """Check ``--out`` before anything long runs (see :func:`imagenet_zsl.safe_output.check_out_dir`) and
    return the study's work directory.

    ``identity`` (JSON values) is what the runs depend on beyond their own configuration (the
    image features): a work directory of another identity is emptied, and a previous output of
    ``manifest_format`` seeds an absent work directory only if it verifies and its manifest's
    ``study`` field is ``identity`` (the caller writes it there).
    """
    out = Path(out)
    check_out_dir(out, tool, inputs)
    work = work_dir(out)
    wanted = json.loads(canonical_json(dict(identity)))
    marker = work / "study.json"
    if work.is_dir() and _read_json(marker) != wanted:
        log.info("%s: left by another study, emptied", work)
        shutil.rmtree(work)
    if not work.is_dir() and (out / MANIFEST_NAME).is_file():
        try:
            previous = read_manifest_verified(out, manifest_format)
        except UserInputError as err:
            log.warning("%s: its runs are not reused (%s)", out, err)
        else:
            if previous.get("study") == wanted:
                link_tree(out, work)
                (work / MANIFEST_NAME).unlink()
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, wanted)
    return work


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def publish(
    out: str | Path,
    work: Path,
    parts: Iterable[str],
    *,
    tool: str,
    inputs: Iterable[str | Path | None] = (),
) -> Iterator[Path]:
    """``atomic_directory(out)`` holding the ``parts`` (paths relative to ``work``: the runs this
    study made); the caller adds its summary and manifest. On success the work directory goes."""
    with atomic_directory(out, tool=tool, inputs=inputs) as tmp:
        for part in parts:
            link_tree(work / part, tmp / part)
        yield tmp
    shutil.rmtree(work, ignore_errors=True)
