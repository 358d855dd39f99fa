"""One exception type for bad user input, so the CLI can print one clear line and exit 2."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path


class UserInputError(Exception):
    """Bad input from the user: the message names the file/wnid/field and what to do.

    The CLI prints ``error: <message>`` on one line and exits with status 2; library
    callers can catch it like any exception.
    """


def preview(items: Iterable[object], limit: int = 8) -> str:
    """Short comma-separated preview of offending items for an error message."""
    items = list(items)
    shown = ", ".join(str(x) for x in items[:limit])
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return shown + more


#: the --out most recently checked by ``safe_output.check_out_file``/``check_out_dir``: named by a
#: disk-full error raised where the operating system gives no file name (a write() to an open file)
_last_output: Path | None = None


def last_output() -> Path | None:
    """The output this process is writing (the last ``--out`` checked), or None."""
    return _last_output


def note_output(path: Path | None) -> None:
    """Record the output being written (None: forget it, as a new command starts)."""
    global _last_output
    _last_output = path


#: whether the running command was given ``--overwrite``: ``safe_output.check_out_dir`` then replaces an --out
#: whose listed files were edited since it was written (the edits are lost, as asked)
_overwrite = False


def allow_overwrite(allowed: bool) -> None:
    """Record the running command's ``--overwrite`` (``cli.main`` sets it per command and clears it
    after; a library caller may set it around a call)."""
    global _overwrite
    _overwrite = bool(allowed)


def overwrite_allowed() -> bool:
    """Whether an --out whose listed files were edited may be replaced (``--overwrite``)."""
    return _overwrite


@contextlib.contextmanager
def overwriting() -> Iterator[None]:
    """Allow replacing edited outputs inside the block (``run``'s own parts of its workspace, which
    it recomputes when their files no longer match their manifests); the setting before is restored."""
    before = _overwrite
    allow_overwrite(True)
    try:
        yield
    finally:
        allow_overwrite(before)
