"""The README's "Reproducing the papers" table equals the freshly computed one (no drift)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.analysis.reproduction import render_reproduction

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- reproduction:start -->", "<!-- reproduction:end -->"


def test_readme_reproduction_table_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    if START not in text or END not in text:
        pytest.skip(f"README has no {START} … {END} block yet")
    block = text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert block == render_reproduction(), "regenerate: python -m imagenet_zsl.analysis.reproduction"
