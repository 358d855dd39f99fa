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

    def boom():  # a callable target runs without a config (what a command group's usage does)
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
    from imagenet_zsl.evaluation.commands import evaluate as handler

    args = evaluate.parse_args(["--features", "f", "--split", "s", "--prototypes", "p", "--out", "o"])
    assert "device" not in vars(args) and cli.handler_config(handler, args).device == "auto"


def _subcommand(*names: str):
    parser = cli.build_parser()
    for name in names:
        parser = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]
    return parser


def test_lazy_help_is_built_only_when_shown():
    from imagenet_zsl.cli_types import lazy_help

    calls = []
    parser = cli.ArgumentParser(prog="x")
    lazy_help(
        parser.add_argument("--backbone", default="r50"),
        "one of %(names)s (default: %(default)s)",
        names=lambda: calls.append(1) or "a, b",
    )
    assert parser.parse_args([]).backbone == "r50" and calls == []  # parsing never builds it
    text = parser.format_help() + parser.format_help()
    assert "one of a, b (default: r50)" in " ".join(text.split()) and calls == [1]  # built once


def test_lazy_help_refuses_to_hide_an_action_attribute():
    from imagenet_zsl.cli_types import lazy_help

    parser = cli.ArgumentParser(prog="x")
    with pytest.raises(ValueError, match="'default'"):
        lazy_help(parser.add_argument("--k"), "%(default)s", default=lambda: "1")


def test_lazy_choices_are_loaded_when_the_flag_is_given_and_checked(capsys):
    from imagenet_zsl.cli_types import LazyChoices

    calls = []
    parser = cli.ArgumentParser(prog="x")
    parser.add_argument(
        "--mode", choices=LazyChoices(lambda: calls.append(1) or ("fast", "exact")), metavar="M"
    )
    assert "mode" not in vars(parser.parse_args([])) and calls == []  # left off: the config's default
    assert parser.parse_args(["--mode", "exact"]).mode == "exact" and calls == [1]
    with pytest.raises(cli._UsageError, match=r"invalid choice: 'slow' \(choose from 'fast', 'exact'\)"):
        parser.parse_args(["--mode", "slow"])
    assert calls == [1]


def test_defaults_kept_in_stage_modules_are_shown_in_help():
    """evaluate --k, analyze ladder --min-images and splits frontier --shares are left out of the
    parsed flags when not given (their defaults live in the configs, in heavy modules); help shows
    the values the configs apply."""
    from imagenet_zsl.analysis.ladder import DEFAULT_MIN_IMAGES
    from imagenet_zsl.evaluation.commands import evaluate as handler
    from imagenet_zsl.scoring import DEFAULT_KS

    assert DEFAULT_KS == (1, 2, 5, 10, 20) and DEFAULT_MIN_IMAGES == 301
    evaluate = _subcommand("evaluate")
    args = evaluate.parse_args(["--features", "f", "--split", "s", "--prototypes", "p", "--out", "o"])
    assert "ks" not in vars(args) and tuple(cli.handler_config(handler, args).ks) == DEFAULT_KS
    # written out in the help so that `evaluate --help` needs no numpy: it must follow DEFAULT_KS
    shown = " ".join(evaluate.format_help().split())
    assert f"hit@K values (default: {' '.join(map(str, DEFAULT_KS))})" in shown
    ladder = _subcommand("analyze", "ladder")
    assert "step 5 keeps classes with >= N (default: 301)" in " ".join(ladder.format_help().split())
    assert "parent-child, ancestor-descendant" in " ".join(ladder.format_help().split())


def test_choices_kept_in_stage_modules_still_refuse_a_bad_value():
    with pytest.raises(
        cli._UsageError, match=r"invalid choice: 'colour' \(choose from 'frequency', 'meaning'"
    ):
        _subcommand("splits", "factor").parse_args(["cfg", "--factor", "colour", "--out", "o"])
    split = _subcommand("attributes", "split")
    base = ["--dataset", "awa2", "--root", "r", "--method", "proportion", "--out", "o"]
    assert split.parse_args([*base, "--prop", "4", "--mas-attributes", "continuous"]).prop == 4
    with pytest.raises(cli._UsageError, match=r"invalid choice: 5 \(choose from 1, 2, 3, 4\)"):
        split.parse_args([*base, "--prop", "5"])


def test_help_lists_what_heavy_modules_register():
    leakage = " ".join(_subcommand("splits", "leakage").format_help().split())
    assert "label set: in1k, in12k, in21k-p, in21k-p-w21, in21k, in22k or a wnid-list FILE" in leakage
    encode = " ".join(_subcommand("labels", "encode").format_help().split())
    assert "repeatable (default: 'a photo of a {}.')" in encode
    extract = " ".join(_subcommand("extract").format_help().split())
    assert "resnet50: ResNet-50, torchvision ImageNet-1K V1 weights" in extract


def test_a_stale_entry_point_is_skipped_with_one_warning(monkeypatch, capsys):
    """An old install still lists a module that no longer registers commands (``predict`` before
    it moved into ``evaluation``): the other commands work, one warning says to reinstall."""
    real = cli.command_modules()
    monkeypatch.setattr(cli, "command_modules", lambda: [*real, "imagenet_zsl.errors", "imagenet_zsl.gone"])
    parser = cli.build_parser()
    assert parser.parse_args(["splits", "show", "dgp-2hops"]).name == "dgp-2hops"
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: skipping the commands of") for w in warnings)
    assert all("pip install -e ." in w for w in warnings) and "imagenet_zsl.gone" in warnings[1]
