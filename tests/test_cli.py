"""The command line's error contract: user mistakes are one `error:` line and exit 2; bugs exit 1."""

from __future__ import annotations

import errno

import pytest

from imagenet_zsl import cli


def _fail_with(monkeypatch, exc: BaseException) -> None:
    """Make `imagenet-zsl models` raise ``exc`` from inside its handler."""
    parser = cli.build_parser()

    def build():
        return parser

    def boom(args):
        raise exc

    parser._subparsers._group_actions[0].choices["models"].set_defaults(func=boom)
    monkeypatch.setattr(cli, "build_parser", build)


def test_usage_error_is_one_line(capsys):
    assert cli.main(["splits", "build"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the following arguments are required")
    assert "imagenet-zsl splits build --help" in err[0]


def test_unknown_command_is_one_line(capsys):
    assert cli.main(["splts"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: argument COMMAND: invalid choice: 'splts'")


@pytest.mark.parametrize(
    ("code", "advice"),
    [(errno.ENOSPC, "disk is full"), (errno.EROFS, "read-only"), (errno.EACCES, "permission denied")],
)
def test_os_errors_from_the_environment_are_user_errors(monkeypatch, capsys, code, advice):
    _fail_with(monkeypatch, OSError(code, "simulated", "/data/out/shard.npy"))
    assert cli.main(["models"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: simulated (/data/out/shard.npy): ") and advice in line


def test_a_bug_is_reported_as_internal_and_debug_shows_the_traceback(monkeypatch, capsys):
    _fail_with(monkeypatch, KeyError("oops"))
    assert cli.main(["models"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("internal error: KeyError") and "--debug" in line
    with pytest.raises(KeyError):
        cli.main(["--debug", "models"])


def test_every_stage_registers_its_commands():
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert {
        "splits",
        "labels",
        "images",
        "extract",
        "train",
        "models",
        "simulate",
        "evaluate",
        "report",
        "attributes",
    } <= commands
