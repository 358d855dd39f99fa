"""Headless Chromium for the tests that look at a page (the docs site, `report --html`): Debian's
``chromium``, which ``make test`` installs as root. Where it is missing a test skips saying how to
get it, and fails under CI, where it must be there."""

from __future__ import annotations

import os
import re
import shutil

import pytest


def chromium() -> str:
    """The Chromium binary (skips, or fails under CI, when there is none)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "chromium is missing: 'make test' installs it as root, else 'sudo apt-get install chromium'"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def console_messages(stderr: str) -> list[str]:
    """Chromium's log lines for console output (errors, failed loads, uncaught exceptions)."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
