"""Checks behind :class:`~imagenet_zsl.features.feature_dir.FeatureDir`: the manifest (read with
:func:`imagenet_zsl.manifests.read_manifest_verified`, then its feature fields) and each shard file's
sha256, hashed once per file version."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.checksums import sha256_bytes, sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.head import HEAD_FILE
from imagenet_zsl.features.shard_files import FORMAT, REQUIRED_FILES, RERUN, SHARD_FILES
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest_verified
from imagenet_zsl.paths import cache_dir

#: in-process record of shard files whose sha256 matched the manifest, keyed by
#: (path, device, inode, size, mtime_ns, ctime_ns): a second read of an unchanged file is free
_VERIFIED: dict[tuple, str] = {}
_VERIFIED_CACHE_DIR = "verified-shards"


def _hashed_on_open(relpath: str) -> bool:
    """Small files (run record, shard markers, logs) are hashed when a directory is opened; shard
    arrays are hashed on first use (:func:`check_shard_file`) and the head by ``head()``."""
    return not relpath.endswith(".npy") and relpath != HEAD_FILE


def read_feature_manifest(path: Path) -> dict[str, Any]:
    """The verified manifest of feature directory ``path`` (every listed file present with its
    size; small files hashed) with valid feature fields; one-line UserInputError otherwise."""
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise UserInputError(
            f"{manifest_path}: no feature manifest; point to a directory written by "
            "'imagenet-zsl extract' or 'imagenet-zsl simulate' (after --merge for torchrun runs)"
        )
    manifest = read_manifest_verified(path, FORMAT, hash_files=_hashed_on_open, rerun=RERUN)
    problem = manifest_problem(manifest)
    if problem:
        raise UserInputError(
            f"{manifest_path}: {problem}; the feature manifest is incomplete or damaged: "
            "re-run the extraction (or 'imagenet-zsl extract --merge DIR')"
        )
    return manifest


def _shard_problem(i: int, shard: Any) -> str | None:
    if not isinstance(shard, dict) or not isinstance(shard.get("name"), str):
        return f"shards[{i}] has no 'name'"
    if not isinstance(shard.get("rows"), int) or shard["rows"] < 0:
        return f"shards[{i}] ({shard['name']}) has no row count 'rows'"
    if "/" in shard["name"] or shard["name"].startswith("."):
        return f"shards[{i}]: {shard['name']!r} is not a plain shard name"
    digests = shard.get("sha256")
    if digests is not None and not (
        isinstance(digests, dict)
        and all(k in SHARD_FILES and isinstance(v, str) and len(v) == 64 for k, v in digests.items())
    ):
        return f"shards[{i}] ({shard['name']}): 'sha256' must map each shard file kind to a hex digest"
    return None


#: a class name: a wnid, or the name of a class of a synthetic graph (``g0c3``, ``root``); no
#: space, no ``/`` (image ids are ``<class>/<member>``), no control character
CLASS_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,99}")
#: what a mistyped wnid looks like (``N01440764``, ``n1440764``): refused unless it is a wnid
_WNID_LIKE = re.compile(r"[nN][0-9]+")
#: a wnid, by ``fullmatch`` (``"n01440764\n"`` is not one)
_WNID = re.compile(r"n[0-9]{8}")


def class_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a class of a feature directory (None: it can): a wnid lookalike
    that is not a wnid, or a name with spaces, slashes or control characters, would match no
    split class, and its images would silently count for nothing."""
    if _WNID.fullmatch(name):
        return None
    if _WNID_LIKE.fullmatch(name):
        return f"{name[:60]!r}, which is not a wnid ('n' + 8 digits)"
    if not CLASS_NAME_RE.fullmatch(name):
        return f"{name[:60]!r}, which is not a class name (a wnid such as n01440764)"
    return None


def class_list_problem(classes: Any, key: str) -> str | None:
    """What is wrong with a class list (``key`` names it in the message): it must be a list of
    distinct class names (:func:`class_name_problem`), because labels and logit columns index it
    (a repeated class would split its images between two entries)."""
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return f"'{key}' must be a list of wnids"
    for name in classes:
        problem = class_name_problem(name)
        if problem:
            return f"'{key}' holds {problem}"
    seen: set[str] = set()
    for position, wnid in enumerate(classes):
        if wnid in seen:
            return f"'{key}' lists {wnid} twice (again at position {position})"
        seen.add(wnid)
    return None


def manifest_problem(manifest: Any) -> str | None:
    """What makes ``manifest`` unusable as a feature manifest (None when it is fine)."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    if manifest.get("classes") is None:
        return "no 'classes' list (the label space the shards' labels index)"
    problem = class_list_problem(manifest["classes"], "classes")
    if problem:
        return problem
    logits = manifest.get("logits")
    if isinstance(logits, dict) and logits.get("classes") is not None:
        problem = class_list_problem(logits["classes"], "logits.classes")
        if problem:
            return problem
    dim = manifest.get("dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        return "no integer 'dim' >= 1 (the feature dimension)"
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        return "no 'shards' list"
    names: set[str] = set()
    for i, shard in enumerate(shards):
        problem = _shard_problem(i, shard)
        if problem:
            return problem
        if shard["name"] in names:
            return f"shards[{i}]: shard {shard['name']!r} is listed twice (its images would count twice)"
        names.add(shard["name"])
    return None


def unverifiable(shards: list[dict[str, Any]]) -> list[str]:
    """Names of the shards whose manifest record lacks the sha256 of a required file (a shard
    scored while extracted, whose record has ``unstored_sha256``, stores no features to verify)."""
    return [s["name"] for s in shards if not all(k in (s.get("sha256") or {}) for k in _stored(s))]


def _stored(shard: dict[str, Any]) -> tuple[str, ...]:
    """The required files a shard's record says it stores."""
    return (
        tuple(k for k in REQUIRED_FILES if k != "features") if "unstored_sha256" in shard else REQUIRED_FILES
    )


def _file_key(path: Path) -> tuple:
    """What changes whenever a file's bytes may have changed (ctime cannot be set back by users)."""
    st = path.stat()
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _marker(key: tuple) -> Path | None:
    """The on-disk note that ``key``'s file was verified (shared between runs); None without a cache."""
    try:
        root = cache_dir() / _VERIFIED_CACHE_DIR
    except OSError:
        return None
    return root / sha256_bytes(repr(key).encode())[:40]


def _known_good(key: tuple, digest: str) -> bool:
    if _VERIFIED.get(key) == digest:
        return True
    marker = _marker(key)
    try:
        if marker is not None and marker.read_text() == digest:
            _VERIFIED[key] = digest
            return True
    except OSError:
        pass
    return False


def _remember_good(key: tuple, digest: str) -> None:
    _VERIFIED[key] = digest
    marker = _marker(key)
    if marker is None:
        return
    try:
        atomic_write_text(marker, digest)
    except OSError:  # a read-only cache only costs a re-hash next time
        pass


def check_shard_file(path: Path, digest: str) -> None:
    """Refuse a shard file whose sha256 is not ``digest`` (hashed once per file version, also
    noted in the cache directory so the next run does not hash it again)."""
    key = _file_key(path)
    if _known_good(key, digest):
        return
    if sha256_file(path) != digest:
        raise UserInputError(
            f"{path}: sha256 does not match the manifest: the shard is corrupted or was "
            "changed after extraction; restore it or re-extract (delete its .done.json and "
            "re-run the extract command)"
        )
    _remember_good(key, digest)


#: the dtypes a features or logits shard may have (numpy's ``dtype.str`` without the byte order)
FLOAT_DTYPES = ("f2", "f4", "f8")


def check_ids_match(path: Path, ids: np.ndarray, labels: np.ndarray, classes: Sequence[str]) -> None:
    """Refuse a shard whose labels contradict its image ids: an id ``"<wnid>/<member>"`` (what
    every image store writes) names the image's class, which must be ``classes[label]``. A
    manifest whose ``classes`` were reordered or swapped would otherwise relabel every image.
    Ids without a wnid prefix (a store that names images otherwise) are not checked."""
    if not len(ids):
        return
    prefix = np.asarray(ids).astype("U10")
    shaped = (np.char.str_len(prefix) == 10) & np.char.startswith(prefix, "n") & np.char.endswith(prefix, "/")
    wnids = prefix.astype("U9")
    shaped &= np.char.isdigit(np.char.lstrip(wnids, "n"))
    if not shaped.any():
        return
    named = np.asarray(classes, dtype=np.str_)[labels]
    wrong = shaped & (wnids != named)
    if wrong.any():
        row = int(np.argmax(wrong))
        raise UserInputError(
            f"{path}: row {row} is image {str(ids[row])[:80]!r} but its label {int(labels[row])} is "
            f"class {named[row]} in the manifest's 'classes': the class list was reordered or "
            "edited; restore the manifest or re-extract"
        )


#: odd 64-bit multipliers of :func:`id_hashes` (fixed: the same ids hash alike in every run)
_ID_MULTIPLIERS = np.random.default_rng(44).integers(1, 2**63, size=256, dtype=np.uint64) * 2 + 1


def id_hashes(ids: np.ndarray) -> np.ndarray:
    """(n,) uint64 hashes of n image ids (a linear hash of their code points with fixed odd
    multipliers, modulo 2**64): equal ids hash alike whatever the array's width; a collision of
    different ids is confirmed against the strings before anything is refused."""
    ids = np.ascontiguousarray(ids, dtype=np.str_)
    width = ids.dtype.itemsize // 4
    if not len(ids) or not width:
        return np.zeros(len(ids), np.uint64)
    multipliers = np.resize(_ID_MULTIPLIERS, width) + np.arange(width, dtype=np.uint64) * np.uint64(2)
    codes = ids.view(np.uint32).reshape(len(ids), width).astype(np.uint64)
    return (codes * multipliers).sum(axis=1, dtype=np.uint64)


#: feature directories (manifest file identity) whose image ids were found unique in this process
_UNIQUE_IDS: set[tuple] = set()


def check_unique_ids(path: Path, shards: Sequence[str], ids_of: Callable[[str], np.ndarray]) -> None:
    """Refuse a feature directory in which one image id is in two shards (or twice in one): its
    image would be scored twice. One line naming the id and both shards. Memory: 20 bytes per
    image (a hash, its shard, the sort order); checked once per manifest version and process."""
    key = _file_key(path / MANIFEST_NAME)
    if key in _UNIQUE_IDS:
        return
    hashes = [id_hashes(ids_of(shard)) for shard in shards]
    starts = np.cumsum([0] + [len(h) for h in hashes])
    flat = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
    order = np.argsort(flat, kind="stable")
    for hit in np.flatnonzero(flat[order][1:] == flat[order][:-1]):
        (a, row_a), (b, row_b) = (_locate(starts, int(order[i])) for i in (hit, hit + 1))
        same = str(ids_of(shards[a])[row_a])
        if same != str(ids_of(shards[b])[row_b]):
            continue  # a hash collision of two different ids
        where = f"twice in shard {shards[a]}" if a == b else f"in both shards {shards[a]} and {shards[b]}"
        raise UserInputError(
            f"{path}: image id {same[:120]!r} is {where}: its image would be scored twice; "
            "re-extract into an empty directory, or remove one shard from the manifest"
        )
    _UNIQUE_IDS.add(key)


def _locate(starts: np.ndarray, position: int) -> tuple[int, int]:
    """(shard, row) of a position in the shards' concatenation (``starts``: their offsets)."""
    shard = int(np.searchsorted(starts, position, side="right")) - 1
    return shard, position - int(starts[shard])


def head_problem(weight: np.ndarray, bias: np.ndarray, classes: np.ndarray) -> str | None:
    """What is wrong with the arrays of ``head.npz`` (None: fine): float weights and bias with no
    NaN or ±inf, and distinct wnids (the classes of the head's outputs)."""
    for name, array in (("weight", weight), ("bias", bias)):
        if array.dtype.str[1:] not in FLOAT_DTYPES:
            return f"{name} must be float32, not {array.dtype}"
        if not np.isfinite(array).all():
            return f"{name} holds NaN or infinity"
    if classes.dtype.kind != "U" or classes.ndim != 1:
        return f"classes must be a list of wnids, not {classes.dtype} {classes.shape}"
    return class_list_problem([str(c) for c in classes], "classes")
