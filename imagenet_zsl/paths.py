"""Paths: the cache directory, a user's path resolved (a link loop is a user error) and an input
file checked to be a regular file before anything opens it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from imagenet_zsl.errors import UserInputError

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
