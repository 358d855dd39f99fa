"""What produced an output: the versions of the libraries that shape it and the command line."""

from __future__ import annotations

import contextlib
import functools
import platform
import sys
from importlib import metadata
from pathlib import Path

VERSIONED_PACKAGES = tuple(
    "imagenet-zsl numpy scipy networkx nltk pandas gensim wordfreq torch torchvision timm faiss-cpu "
    "faiss-gpu-cu12".split()
)


def software_versions(packages: tuple[str, ...] = VERSIONED_PACKAGES) -> dict[str, str]:
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
