"""Safe outputs: an ``--out`` that would destroy data (an input, a file the user added or edited, a
file another tool wrote) is refused, and a directory is replaced whole in one rename."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import honour_umask, remove_stale_temps
from imagenet_zsl.errors import UserInputError, note_output, overwrite_allowed, preview
from imagenet_zsl.manifests import MANIFEST_NAME, TIMINGS_NAME, file_difference, read_manifest
from imagenet_zsl.paths import resolve_path


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
        and file_difference(directory / path, record)
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
    honour_umask(tmp, directory=True)
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
