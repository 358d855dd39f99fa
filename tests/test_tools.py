"""Every script under tools/ imports (without running its main): a renamed or removed function
that a tool uses fails here, not in front of a user."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = sorted((Path(__file__).resolve().parents[1] / "tools").glob("*.py"))


def test_there_are_tools():
    assert TOOLS


@pytest.mark.parametrize("path", TOOLS, ids=[p.stem for p in TOOLS])
def test_tool_imports(path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "argv", [str(path)])
    spec = importlib.util.spec_from_file_location(f"tools_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # runs top-level code only: main() is behind __name__ == "__main__"
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"
