"""How a run meets failures: a failing model or cell is recorded as one line and the run goes on;
a full disk (or file-size limit, read-only disk) stops it at once, naming the file."""

from __future__ import annotations

import errno
from pathlib import Path

from imagenet_zsl.errors import UserInputError

#: OS errors that stop the whole run (every later cell would hit them too)
FATAL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})


def one_line(err: BaseException) -> str:
    """An exception as the one line a cell record and the summary table show."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if isinstance(err, UserInputError) else f"{type(err).__name__}: {text}"


def stop_on_fatal(err: BaseException, where: Path) -> None:
    """A full disk (or file-size limit, read-only disk) stops the run: one line naming the file."""
    if isinstance(err, OSError) and err.errno in FATAL_ERRNOS:
        name = err.filename if err.filename is not None else where
        raise UserInputError(
            f"{err.strerror or 'disk error'} ({name}): free space (or raise 'ulimit -f') and re-run "
            "the same command; finished cells are kept"
        ) from err
