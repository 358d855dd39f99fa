"""argparse ``type=`` converters shared by every stage's command line.

A bad number (``--batch-size 0``, ``--workers -1``, ``--block-rows x``) must be a one-line
``error:`` and exit status 2 before any work starts, never a silent default or a traceback later.
argparse turns the ``argparse.ArgumentTypeError`` raised here into
``imagenet-zsl <command>: error: argument --batch-size: 0: must be at least 1`` (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _integer(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r}: not an integer") from None


def positive_int(text: str) -> int:
    """An integer ≥ 1 (batch sizes, shard sizes, block rows, counts)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An integer ≥ 0 (worker processes: 0 means in the main process; seeds)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 0 or more")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """A converter accepting integers ≥ ``low`` (e.g. an image size of at least 16 pixels)."""

    def convert(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {low}")
        return value

    convert.__name__ = f"int_at_least_{low}"
    return convert
