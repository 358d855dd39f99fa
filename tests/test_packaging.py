"""Installable into a researcher's environment (issue 34 §5): ``pyproject.toml`` states ranges, so
``pip install imagenet-zsl`` keeps a CUDA build of torch already there; the exact versions live
only in ``tools/requirements-lock.txt``, which ``make install`` passes to pip as constraints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "tools" / "requirements-lock.txt"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements() -> list[Requirement]:
    project = _project()
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in [*project["dependencies"], *extras]]


def _lock() -> dict[str, Version]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"lock line without an exact pin: {line!r}"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = Version(version)
    return pins


def _key(req: Requirement) -> str:
    return re.sub(r"[-_.]+", "-", req.name).lower()


def test_no_dependency_is_pinned_exactly():
    pinned = [str(r) for r in _requirements() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert pinned == []


@pytest.mark.parametrize(
    ("name", "today", "previous"), [("torch", "2.14.1", "2.13.0"), ("torchvision", "0.29.1", "0.28.0")]
)
def test_torch_ranges_take_todays_and_the_previous_minor_release(name, today, previous):
    (req,) = [r for r in _requirements() if _key(r) == name]
    assert req.specifier.contains(today) and req.specifier.contains(previous)
    assert req.specifier.contains("2.15.0" if name == "torch" else "0.30.0")  # the next minor too
    assert not req.specifier.contains("3.0.0" if name == "torch" else "1.0.0")  # not a new major


def test_the_lock_pins_every_dependency_exactly_within_the_ranges():
    lock = _lock()
    assert lock["torch"] == Version("2.14.1") and lock["torchvision"] == Version("0.29.1")
    for req in _requirements():
        assert _key(req) in lock, f"{req.name} is not in {LOCK.name}"
        assert req.specifier.contains(lock[_key(req)], prereleases=True), (str(req), lock[_key(req)])


def test_make_install_uses_the_lock_as_constraints():
    install = [line for line in (ROOT / "Makefile").read_text().splitlines() if "pip install" in line]
    assert any("-c tools/requirements-lock.txt" in line and "-e " in line for line in install), install


def test_the_notebook_extra_brings_jupyterlab_and_the_page_says_how_to_open_it():
    """Issue 47 §4: the docs say how to open the notebook; the extra and ``pip install jupyterlab``
    are the same thing (a range here, the resolved version in the lock)."""
    (req,) = [Requirement(r) for r in _project()["optional-dependencies"]["notebook"]]
    assert _key(req) == "jupyterlab" and req.specifier.contains(_lock()["jupyterlab"])
    page = (ROOT / "docs" / "tutorials" / "notebook.md").read_text()
    assert "pip install jupyterlab" in page and "pip install -e '.[notebook]'" in page
    assert "jupyter lab docs/tutorials/notebook.ipynb" in page
