"""What ``imagenet-zsl run`` prints (issue 47 §1): by default a progress bar over the cells, the
warnings and errors (a warning repeated, up to its numbers, once) and the summary table; with
``-v`` every line of the log, as before (the stages' INFO records and progress lines).

The run's stages report through one ``echo`` callable; :func:`quiet_echo` keeps the lines a
researcher must see (warnings, failures, a cell computed again) and drops the progress chatter.
:func:`run_console` sets the log level for the run's duration and routes log records through tqdm
so that they do not break the bar.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Callable, Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

#: the lines of the run's stages shown without ``-v``: warnings, errors and failures, a cell whose
#: files changed and is computed again, how many cells are left, which backbone runs, the test
#: images being extracted, and (with ``--no-progress``, instead of the bar) one line per cell,
#: a data-parallel cell's shards (under torchrun) included
_KEPT = re.compile(
    "|".join(
        (
            r"^(warning|error)\b",
            r"\bfailed\b",
            r"\bcomputing it again\b",
            r"\bnot (scored|searched)\b",
            r"^test images: ",
            r"^\d+ cells: \d+ already done",
            r"^backbone \S+:$",
            r"^\s+\d+/\d+ \S+ \w+; ETA",
            r": searched \d+ test shards",
        )
    ),
    re.IGNORECASE,
)
#: how much of a warning identifies it once its numbers are blanked (the rest is its wnid list)
_KEY_CHARS = 80


def shown_quietly(line: str) -> bool:
    """Whether a stage's line is printed without ``-v``."""
    return bool(_KEPT.search(line))


def quiet_echo(echo: Callable[[str], None]) -> Callable[[str], None]:
    """``echo`` for the run's stages without ``-v``: only the lines :func:`shown_quietly` keeps."""

    def show(line: str) -> None:
        if shown_quietly(line):
            echo(line)

    return show


def bar_echo(line: str) -> None:
    """Print a line above a running tqdm bar (plain print when there is none)."""
    tqdm.write(line)


class _Once(logging.Filter):
    """On the console: drops the package's records below WARNING (a stage may lower the package's
    level for its own log file, as extraction does) and a record whose message, numbers blanked,
    was shown already (counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and record.name.startswith("imagenet_zsl"):
            return False
        key = (record.name, re.sub(r"\d+", "#", record.getMessage())[:_KEY_CHARS])
        if key in self.seen:
            self.dropped += 1
            return False
        self.seen.add(key)
        return True


@contextlib.contextmanager
def run_console(verbose: bool) -> Iterator[None]:
    """The log of a run: unchanged with ``verbose``; else the package's INFO records are not
    emitted, a warning repeated (up to its numbers) is shown once, log lines are written above
    the progress bar, and the number of repeats left out is said at the end."""
    if verbose:
        yield
        return
    package = logging.getLogger("imagenet_zsl")
    level = package.level
    package.setLevel(logging.WARNING)
    once = _Once()
    root = logging.getLogger()
    try:
        with logging_redirect_tqdm():
            handlers = list(root.handlers)
            for handler in handlers:
                handler.addFilter(once)
            try:
                yield
            finally:
                for handler in handlers:
                    handler.removeFilter(once)
    finally:
        package.setLevel(level)
        if once.dropped:
            s = "s" if once.dropped > 1 else ""
            print(f"({once.dropped} repeated warning{s} not shown; -v shows the whole log)", file=sys.stderr)
