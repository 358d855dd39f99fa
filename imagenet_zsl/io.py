"""Atomic writes, checksums and manifests: nothing is half-written, every output is traceable."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.checksums import listed_sha256, sha256_file
from imagenet_zsl.checksums import sha256_bytes as sha256_bytes  # re-exported: the stages import it here
from imagenet_zsl.errors import UserInputError, note_output, overwrite_allowed, preview

MANIFEST_NAME = "manifest.json"
#: seconds things took: never hashed by a manifest (the rest of an output is the same bytes each time)
TIMINGS_NAME = "timings.json"
CACHE_ENV = "IMAGENET_ZSL_CACHE"


def cache_dir() -> Path:
    """Where derived data is cached (created on first use): ``$IMAGENET_ZSL_CACHE``, else
    ``$XDG_CACHE_HOME/imagenet-zsl`` (default ``~/.cache/imagenet-zsl``)."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV]).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imagenet-zsl"
    root.mkdir(parents=True, exist_ok=True)
    return root


def current_umask() -> int:
    """The process umask, read without changing it where the system allows (Linux ``/proc``)."""
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
        with open("/proc/self/status", encoding="ascii") as handle:
            return next(int(line.split()[1], 8) for line in handle if line.startswith("Umask:"))
    mask = os.umask(0o022)  # elsewhere: set and restore (not atomic, but only on other systems)
    os.umask(mask)
    return mask


def _honour_umask(path: str | os.PathLike, directory: bool = False) -> None:
    """mkstemp/mkdtemp create 0600/0700 whatever the umask; give outputs the modes the user's
    umask asks for (files 0666 & ~umask, directories 0777 & ~umask), as ``open``/``mkdir`` do."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def _temp_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    _honour_umask(tmp)
    return Path(tmp)


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator:
    """Binary handle on a temp file beside ``path``; renamed over ``path`` only on success. An
    OSError without a file name (ENOSPC, EFBIG from ``write``) gets ``path``'s, for the user."""
    tmp = _temp_sibling(path)
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    path = Path(path)
    with _atomic_file(path) as handle:
        handle.write(data)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, 2-space indent, trailing newline) so same input → same bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    converters = ((np.integer, int), (np.floating, float), (np.ndarray, np.ndarray.tolist), (Path, str))
    for kind, convert in (*converters, (set | frozenset, sorted)):
        if isinstance(obj, kind):
            return convert(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, canonical_json(obj))


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> Path:
    """np.save through a temp file + rename (never a truncated .npy on interrupt)."""
    path = Path(path)
    with _atomic_file(path) as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
    return path


def read_manifest(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed ``manifest.json`` of ``directory``, or None if it has none (or it is unreadable)."""
    path = Path(directory) / MANIFEST_NAME
    try:  # not a regular file (a FIFO would block): no manifest
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


_LOOP = "symbolic-link loop; fix or remove the link that points back to itself"


def resolve_path(path: str | os.PathLike) -> Path:
    """``Path(path).resolve()``, with a symbolic-link loop (RuntimeError on Python 3.11, ELOOP
    later) a one-line UserInputError naming the path instead of an internal error."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as err:  # RuntimeError: "Symlink loop from '...'"
        if isinstance(err, OSError) and err.errno != errno.ELOOP:
            raise
        raise UserInputError(f"{path}: {_LOOP}") from None


#: what a path that is not a regular file is, by its mode
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
_KINDS += ((stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def regular_input_file(path: str | os.PathLike, what: str = "input file") -> Path:
    """``path`` once checked, without opening it, to be a regular file (or a link to one): every
    reader of a user's file calls this first, since opening a FIFO blocks and ``/dev/zero`` never
    ends. A missing path, a directory, FIFO, socket, device or link loop is one line naming it."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UserInputError(f"{path}: {what} not found; check the path") from None
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise UserInputError(f"{path}: {_LOOP}") from None
    if stat.S_ISREG(mode):
        return path
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise UserInputError(f"{path}: the {what} is {kind}, not a regular file; give the path of a file")


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def _overlap(resolved: Path, inputs: Iterable[str | os.PathLike | None], either_way: bool) -> tuple | None:
    """(given, resolved) of the first input that ``resolved`` is or lies inside (``either_way``:
    or that lies inside ``resolved``), or None."""
    for given in (g for g in inputs if g is not None):
        source = resolve_path(given)
        if _inside(resolved, source) or (either_way and _inside(source, resolved)):
            return given, source
    return None


def foreign_files(directory: Path, manifest: Mapping[str, Any]) -> list[str]:
    """What lies under ``directory`` that its manifest does not list (relative paths, sorted):
    files, links or empty folders the user put there, which replacing the directory would delete."""
    records = manifest.get("files") if isinstance(manifest.get("files"), list) else []
    listed = {MANIFEST_NAME} | {str(r.get("path")) for r in records if isinstance(r, dict)}
    folders = {str(parent) for path in listed for parent in Path(path).parents}
    junk = {".DS_Store", "Thumbs.db", "desktop.ini", ".ipynb_checkpoints", TIMINGS_NAME}  # a browser's, ours
    walk = os.walk(directory)
    paths = (
        Path(root, name).relative_to(directory).as_posix()
        for root, dirs, files in walk
        for name in dirs + files
    )
    return sorted(
        rel for rel in paths if rel not in listed and rel not in folders and not junk & set(rel.split("/"))
    )


def edited_files(directory: Path, manifest: Mapping[str, Any]) -> list[str]:
    """The files ``manifest`` lists that are in ``directory`` with another size or sha256 than it
    records: edited since the command wrote them (a missing one is not: nothing is left to lose)."""
    records = manifest.get("files") if isinstance(manifest.get("files"), list) else []
    listed = {r["path"]: r for r in records if isinstance(r, dict) and isinstance(r.get("path"), str)}
    return [
        path
        for path, record in listed.items()
        if _inside(resolve_path(directory / path), directory)
        and (directory / path).is_file()
        and _difference(directory / path, record)
    ]


def check_out_dir(
    final: str | os.PathLike,
    tool: str,
    inputs: Iterable[str | os.PathLike | None] = (),
    *,
    own_files: bool = False,
) -> Path:
    """Refuse an ``--out`` that would destroy data; returns it resolved (a symbolic link: the
    directory it names, written through, the link kept).

    The rule for every command that writes a directory:
    - an ``--out`` that contains, or lies inside, one of the command's ``inputs`` is refused;
    - an existing ``--out`` is replaced only if it is empty or its manifest says ``tool`` wrote it,
      and (``own_files``: the directory will be replaced whole) every file in it is one its
      manifest lists: a file the user added (``notes.txt``) is never deleted silently; and every
      listed file still has the sha256 the manifest records: a file edited since (``report.md``)
      is refused, naming it, unless the command was given ``--overwrite`` (``errors.allow_overwrite``);
    - an ``--out`` that is a file, or whose parent is not a writable directory, is refused.
    """
    final = Path(final)
    resolved = resolve_path(final)
    if clash := _overlap(resolved, inputs, either_way=True):
        raise UserInputError(
            f"--out {final} overlaps the input {clash[0]}: writing there could destroy it; "
            "choose an --out outside every input"
        )
    if resolved.exists() or resolved.is_symlink():
        if not resolved.is_dir():
            raise UserInputError(f"--out {final} exists and is not a directory; choose another path")
        manifest = read_manifest(resolved)
        empty = not any(resolved.iterdir())
        short = tool.removeprefix("imagenet-zsl ")
        if not empty and (manifest is None or manifest.get("tool") != tool):
            raise UserInputError(
                f"--out {final} exists and is not an output of '{short}'; choose another path or remove it"
            )
        whole = own_files and bool(manifest)  # the directory will be replaced whole
        foreign = foreign_files(resolved, manifest) if whole else []
        if foreign:
            raise UserInputError(
                f"--out {final} holds {preview(foreign, 1)}, which '{short}' did not write (its "
                "manifest does not list it); replacing the directory would delete it: move it out or "
                "choose another --out"
            )
        edited = edited_files(resolved, manifest) if whole and not overwrite_allowed() else []
        if edited:
            raise UserInputError(
                f"--out {final}: {preview(edited, 1)} was edited since '{short}' wrote it (its "
                "sha256 differs from the manifest); replacing the directory would lose the edit: move "
                "it out, choose another --out, or pass --overwrite to replace it"
            )
    _check_writable_parent(final, resolved)
    note_output(resolved)
    return resolved


def _check_writable_parent(final: Path, resolved: Path) -> None:
    """The nearest existing ancestor of ``--out`` must be a writable directory."""
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserInputError(f"--out {final}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserInputError(f"--out {final}: {parent} is not writable; choose a writable location")


def check_out_file(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    suffixes: tuple[str, ...] = (),
    *,
    replaces: Callable[[Path], bool] | None = None,
    what: str = "an output of this command",
) -> Path:
    """Refuse an ``--out`` file that would destroy data; returns it resolved.

    The rule for every command that writes one file (the file itself is then written atomically):
    - a wrong suffix, a directory, or a parent that is not a writable directory is refused;
    - an ``--out`` equal to, or inside, one of the command's ``inputs`` is refused (symbolic links
      are resolved first, so a link to an input is the input);
    - an existing ``--out`` is replaced only if it is a regular file and ``replaces(path)`` says
      it is in the format this command writes (``what``, e.g. "a class-vector file"): its own
      header or arrays, read without executing anything. Without ``replaces`` an existing file is
      never replaced. So a command can re-write its own output, but never a file another tool
      (or the user) wrote.
    """
    out = Path(out)
    if suffixes and out.suffix not in suffixes:
        raise UserInputError(f"--out {out}: must end in {' or '.join(suffixes)}")
    if out.is_dir():
        ending = f" ending in {' or '.join(suffixes)}" if suffixes else ""
        raise UserInputError(f"--out {out} is a directory; give a file name{ending}")
    resolved = resolve_path(out)
    if clash := _overlap(resolved, inputs, either_way=False):
        raise UserInputError(
            f"--out {out} {'is' if resolved == clash[1] else 'lies inside'} the input {clash[0]}: writing "
            "there would destroy it; choose an --out outside every input"
        )
    if out.is_symlink() or resolved.exists():
        _check_replaceable(out, resolved, replaces, what)
    _check_writable_parent(out, resolved)
    note_output(resolved)
    return resolved


def check_out_stem(out: str | os.PathLike, written: Iterable[str | os.PathLike]) -> None:
    """Refuse an ``--out`` naming several files by its stem (``report --out OUT`` writes
    ``OUT.md``, ``OUT.csv``, ``OUT.tex``: ``written``) that is a directory or a special file: the
    user meant the tables inside it, or on the device (``/dev/full``), not silently beside it."""
    out = Path(out)
    names = ", ".join(Path(p).name for p in written)
    if out.is_dir():
        raise UserInputError(
            f"--out {out} is a directory; give a file name, e.g. --out {out / 'report'} "
            f"(writes {names} there)"
        )
    if (out.exists() or out.is_symlink()) and not out.is_file():
        raise UserInputError(
            f"--out {out} exists and is not a regular file (a device, FIFO or broken link); "
            f"give a file name (writes {names})"
        )


def _check_replaceable(out: Path, resolved: Path, replaces: Callable[[Path], bool] | None, what: str) -> None:
    """An existing ``--out`` file may be replaced only if it is ``what`` (see check_out_file)."""
    if out.is_symlink():
        raise UserInputError(f"--out {out} is a symbolic link; choose another path or remove it")
    if not resolved.is_file():
        raise UserInputError(f"--out {out} exists and is not a regular file; choose another path")
    try:
        ours = replaces is not None and bool(replaces(resolved))
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise UserInputError(f"--out {out} exists and is not {what}; choose another path or remove it")


def remove_stale_temps(final: Path) -> None:
    """Remove temp siblings (``.NAME.XXXXXXXX[.old].tmp``, as mkdtemp/mkstemp name them here) that
    a killed run of the same output left behind; never those of a sibling output whose name
    extends this one (``eszsl.v2``), whatever characters the name holds."""
    if not final.parent.is_dir():
        return
    own = re.compile(rf"\.{re.escape(final.name)}\.[a-z0-9_]{{8}}(\.old)?\.tmp")
    for leftover in (p for p in final.parent.iterdir() if own.fullmatch(p.name)):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_directory(
    final: str | os.PathLike, *, tool: str, inputs: Iterable[str | os.PathLike | None] = ()
) -> Iterator[Path]:
    """Yield a temp directory next to ``final``; on success it replaces ``final`` in one rename.

    ``tool`` is the command writing the directory (``"imagenet-zsl evaluate"``): its manifest must
    carry it as ``"tool"``, and an existing ``final`` is only replaced if written by the same
    tool, with no file added or edited since (see :func:`check_out_dir`). A ``final`` that is a
    symbolic link is written through: the directory it names is replaced, the link stays. On any
    exception the temp directory is removed: a failed run leaves the previous output untouched.
    """
    final = check_out_dir(final, tool, inputs, own_files=True)
    remove_stale_temps(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    _honour_umask(tmp, directory=True)
    try:
        yield tmp
        written = read_manifest(tmp)
        if written is not None and written.get("tool") != tool:
            raise ValueError(f"bug: manifest of {final} says tool {written.get('tool')!r}, not {tool!r}")
        if final.exists():
            check_out_dir(final, tool, own_files=True)  # still ours: nothing added or edited meanwhile
            backup = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old.tmp", dir=final.parent))
            os.replace(final, backup / "old")
            os.replace(tmp, final)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_VERSIONED_PACKAGES = tuple(
    "imagenet-zsl numpy scipy networkx nltk pandas gensim wordfreq torch torchvision timm faiss-cpu "
    "faiss-gpu-cu12".split()
)


def software_versions(packages: tuple[str, ...] = _VERSIONED_PACKAGES) -> dict[str, str]:
    """Versions of the libraries that shape outputs (for manifests): a new dict each call."""
    return dict(_installed_versions(packages))


@functools.cache
def _installed_versions(packages: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(name, version) of Python and each installed package, looked up once per process."""
    versions = {"python": platform.python_version()}
    for name in packages:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = package_version(name)
    return tuple(versions.items())


def package_version(name: str) -> str:
    """``importlib.metadata.version(name)`` from METADATA's ``Version:`` header, not the email
    parser's reading of the whole file (a third of the time); else ``metadata.version``."""
    distribution = metadata.distribution(name)
    for line in (distribution.read_text("METADATA") or "").splitlines():
        if line.startswith("Version:"):
            return line.removeprefix("Version:").strip()
        if not line:  # the headers end at the first empty line
            break
    return distribution.version


def command_line() -> str:
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])


def file_record(path: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """{path, bytes, sha256} for a manifest's inputs/outputs list."""
    path = Path(path)
    shown = str(path.relative_to(root)) if root is not None else str(path)
    return {"path": shown, "bytes": path.stat().st_size, "sha256": sha256_file(path)}


# ----------------------------------------------------------------------------- the one manifest

#: ``imagenet-zsl/<kind>-v<N>``: a reader refuses a format (or a version) it does not know
FORMAT_PATTERN = re.compile(r"^imagenet-zsl/[a-z0-9][a-z0-9-]*-v[0-9]+$")
#: the keys every manifest has; a stage's own fields (``classes``, ``splits`` ...) sit beside them
MANIFEST_KEYS = ("format", "tool", "command", "inputs", "parameters", "software", "files")


def directory_files(
    directory: str | os.PathLike, known_sha256: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """{path, bytes, sha256} of every file under ``directory`` but its manifest and timings
    (:data:`TIMINGS_NAME`), sorted by path. ``known_sha256`` (relative path → digest) skips
    re-hashing files the caller has just written and hashed (multi-GB feature shards)."""
    root = Path(directory)
    known = known_sha256 or {}
    records = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST_NAME or path.name == TIMINGS_NAME:
            continue
        digest = known.get(rel) or sha256_file(path)
        records.append({"path": rel, "bytes": path.stat().st_size, "sha256": digest})
    return records


def write_manifest(
    directory: str | os.PathLike,
    *,
    format: str,  # noqa: A002 - the manifest key
    tool: str,
    inputs: Any = None,
    parameters: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    known_sha256: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Write ``directory/manifest.json`` (atomically) and return it: the one manifest writer.

    Every output directory carries the same keys (:data:`MANIFEST_KEYS`): its versioned
    ``format``, the ``tool`` that wrote it (``"imagenet-zsl evaluate"``), the ``command`` line,
    the ``inputs`` (file records or a mapping of them), the ``parameters``, the ``software``
    versions and ``files``: path, size and sha256 of every other file in the directory. A stage's
    own fields (``fields``: the class list, the splits ...) are added beside them and may not
    shadow them. Call it last, once every other file is in place; :func:`read_manifest_verified`
    is its reader.
    """
    if not FORMAT_PATTERN.match(format):
        raise ValueError(f"bug: manifest format {format!r} is not 'imagenet-zsl/<kind>-v<N>'")
    if not tool.startswith("imagenet-zsl"):
        raise ValueError(f"bug: manifest tool {tool!r} does not name an imagenet-zsl command")
    if clash := set(fields or {}) & set(MANIFEST_KEYS):
        raise ValueError(f"bug: manifest fields {sorted(clash)} shadow the standard keys")
    manifest: dict[str, Any] = {
        "format": format,
        "tool": tool,
        "command": command_line(),
        "inputs": inputs if inputs is not None else [],
        "parameters": dict(parameters or {}),
        "software": software_versions(),
        **dict(fields or {}),
        "files": directory_files(directory, known_sha256),
    }
    atomic_write_json(Path(directory) / MANIFEST_NAME, manifest)
    return manifest


def _manifest_problem(path: Path, problem: str, rerun: str) -> UserInputError:
    return UserInputError(f"{path}: {problem}" + (f"; {rerun}" if rerun else ""))


def read_manifest_verified(
    directory: str | os.PathLike,
    formats: str | Iterable[str],
    *,
    hash_files: bool | Callable[[str], bool] = True,
    rerun: str = "",
) -> dict[str, Any]:
    """The manifest of ``directory`` after checking that the directory is what it says: the one
    manifest reader.

    Refused with one line naming the file: a missing or unreadable manifest, a ``format`` not in
    ``formats`` (a version this code does not read), a ``files`` list that is not records, a listed
    file that lies outside the directory, is missing, or differs in size or sha256. ``hash_files``
    may be a predicate on the relative path (False: check the size only, for files of gigabytes
    that the caller does not read). Files the manifest does not list are ignored. ``rerun`` is
    the advice appended to every message ("re-run 'imagenet-zsl evaluate'").
    """
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    accepted = {formats} if isinstance(formats, str) else set(formats)
    if not path.is_file():
        what = " or ".join(sorted(accepted))
        raise _manifest_problem(path, f"missing, so {directory} is not a verified {what} output", rerun)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise _manifest_problem(path, f"not a readable JSON manifest ({err})", rerun) from err
    except RecursionError:  # json builds nested values recursively
        raise _manifest_problem(path, "not a manifest: its JSON is nested too deeply", rerun) from None
    if not isinstance(manifest, dict):
        raise _manifest_problem(path, "not a JSON object", rerun)
    if manifest.get("format") not in accepted:
        found = str(manifest.get("format"))[:80]
        raise _manifest_problem(path, f"format {found!r}, expected {' or '.join(sorted(accepted))}", rerun)
    files = manifest.get("files")
    kinds = (("path", str), ("sha256", str), ("bytes", int))
    good = isinstance(files, list) and all(
        isinstance(r, dict) and all(isinstance(r.get(k), t) for k, t in kinds) for r in files
    )
    if not good:
        raise _manifest_problem(path, "no valid 'files' list of {path, bytes, sha256} records", rerun)
    root = resolve_path(directory)
    for record in files:
        _verify_file(directory, root, record, hash_files, rerun)
    return manifest


def _verify_file(
    directory: Path, root: Path, record: dict, hash_files: bool | Callable[[str], bool], rerun: str
) -> None:
    target = directory / record["path"]
    if root not in resolve_path(target).parents:
        raise _manifest_problem(
            directory / MANIFEST_NAME, f"lists {record['path']!r} outside {directory}", rerun
        )
    if not target.is_file():
        raise _manifest_problem(target, "missing, though the manifest lists it", rerun)
    check = hash_files(record["path"]) if callable(hash_files) else hash_files
    if differs := _difference(target, record, hashed=check):
        raise _manifest_problem(
            target, f"changed since it was written ({differs} differs from the manifest)", rerun
        )


def _difference(target: Path, record: Mapping[str, Any], hashed: bool = True) -> str | None:
    """``size`` or ``sha256`` when the file ``target`` is not the one ``record`` describes, else None."""
    if target.stat().st_size != record.get("bytes"):
        return "size"
    return "sha256" if hashed and listed_sha256(target) != record.get("sha256") else None
