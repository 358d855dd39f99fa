"""Shared check of the robustness suite: a bad input is one `error:` line, exit 2, and no harm done."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from imagenet_zsl.cli import main


def snapshot(paths: Iterable[str | Path]) -> dict[str, str | None]:
    """sha256 of every file under each path (None for a path that does not exist)."""
    state: dict[str, str | None] = {}
    for root in map(Path, paths):
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for path in files:
            state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return state


class CliErrorCheck:
    """``check(argv, culprit, inputs=..., not_created=...)`` asserts the project's error contract."""

    def __init__(self, capsys: pytest.CaptureFixture[str]):
        self.capsys = capsys

    def __call__(
        self,
        argv: Sequence[str],
        culprit: str | Sequence[str],
        inputs: Iterable[str | Path] = (),
        not_created: Iterable[str | Path] = (),
    ) -> str:
        inputs = list(inputs)
        before = snapshot(inputs)
        not_created = [Path(p) for p in not_created]
        existed = {p: p.exists() for p in not_created}
        self.capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = self.capsys.readouterr()
        err_lines = [line for line in captured.err.splitlines() if line.strip()]
        assert code == 2, f"exit {code}, stderr: {captured.err}"
        assert "Traceback" not in captured.err + captured.out
        errors = [line for line in err_lines if line.startswith("error:")]
        assert len(errors) == 1, f"expected one 'error:' line, got: {err_lines}"
        for name in [culprit] if isinstance(culprit, str) else culprit:
            assert str(name) in errors[0], f"{name!r} not named in: {errors[0]}"
        assert snapshot(inputs) == before, "an input changed"
        for path in not_created:
            if not existed[path]:
                assert not path.exists(), f"{path} was created by a failing command"
        return errors[0]


@pytest.fixture
def cli_error(capsys: pytest.CaptureFixture[str]) -> CliErrorCheck:
    """Run ``imagenet-zsl ARGV`` and assert: exit 2, one ``error:`` line naming the culprit, no
    traceback, inputs byte-identical and the named outputs not created."""
    return CliErrorCheck(capsys)
