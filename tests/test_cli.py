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


@pytest.mark.parametrize(
    ("code", "advice"),
    [(errno.EFBIG, "ulimit -f"), (errno.EXDEV, "check the path, its permissions and the free disk space")],
)
def test_every_os_error_is_one_line_naming_the_file(monkeypatch, capsys, code, advice):
    """EFBIG (`ulimit -f`) and errors with no specific advice gave a full traceback (issue 26)."""
    _fail_with(monkeypatch, OSError(code, "simulated", "/data/out/shard.npy"))
    assert cli.main(["models"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: simulated (/data/out/shard.npy): ") and advice in line


def test_an_os_error_without_errno_is_a_bug_report_on_one_line(monkeypatch, capsys):
    _fail_with(monkeypatch, OSError("a library's own complaint\nwith a second line"))
    assert cli.main(["models"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("internal error: OSError: a library's own complaint | with a second line")


def test_a_multi_line_or_huge_user_error_is_one_bounded_line(monkeypatch, capsys):
    from imagenet_zsl.errors import UserInputError

    _fail_with(monkeypatch, UserInputError("first\nsecond " + "v" * 10_000))
    assert cli.main(["models"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: first | second vvv") and line.endswith("(8,015 more characters)")


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


def test_evaluate_takes_one_device_option():
    """``--device auto|cpu|cuda[:N]`` (default auto) replaced ``--gpu/--cpu``."""
    evaluate = cli.build_parser()._subparsers._group_actions[0].choices["evaluate"]
    options = {o for action in evaluate._actions for o in action.option_strings}
    assert "--device" in options and not {"--gpu", "--cpu"} & options
    args = evaluate.parse_args(["--features", "f", "--split", "s", "--prototypes", "p", "--out", "o"])
    assert args.device == "auto"
