"""Each flag is named once: its ``dest`` is a field of the handler's typed config, and no handler
reads ``argparse``'s Namespace (issue #49, "Each flag named once").

The command layer (:func:`imagenet_zsl.cli.handler_config`) builds a handler's one config argument
from the parsed flags by ``dest``; these tests walk the real parser of every installed command.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from pathlib import Path

import pytest

from imagenet_zsl import cli
from imagenet_zsl.registry import load_target

PACKAGE = Path(cli.__file__).resolve().parent


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every runnable command of ``parser``: ``"splits build"`` → its sub-parser."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                target = sub.get_default("func")
                if isinstance(target, str):
                    found[f"{prefix}{name}"] = sub
                found.update(_commands(sub, f"{prefix}{name} "))
    return found


COMMANDS = _commands(cli.build_parser())


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {
        action.dest
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
        and action.dest not in cli.LAYER_DESTS
    }


def test_every_command_is_walked():
    assert {"evaluate", "splits build", "extract", "train", "run", "report", "predict"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_maps_to_one_config_field(name):
    parser = COMMANDS[name]
    handler = load_target(parser.get_default("func"))
    config_type = cli.handler_config_type(handler)
    assert config_type is not argparse.Namespace, f"{name}: the handler still takes the Namespace"
    fields = cli.config_fields(config_type)
    missing = sorted(_dests(parser) - fields)
    assert not missing, f"{name}: flags without a field of {config_type.__qualname__}: {missing}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_flag_left_out_takes_the_config_default(name):
    """Every config field a flag does not require has a default: a flag left off the command line
    is absent from the parsed values (``SUPPRESS``), so the config's default is the only one."""
    parser = COMMANDS[name]
    config_type = cli.handler_config_type(load_target(parser.get_default("func")))
    if not dataclasses.is_dataclass(config_type):
        pytest.skip("a pydantic config states its required fields itself")
    required = {action.dest for action in parser._actions if action.required}
    for field in dataclasses.fields(config_type):
        no_default = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if no_default:
            assert field.name in required, f"{name}: field {field.name} has no default and no required flag"
    defaults = {
        action.dest: action.default
        for action in parser._actions
        if action.default is not argparse.SUPPRESS
        and action.dest not in cli.LAYER_DESTS
        and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
    }
    assert not defaults, f"{name}: defaults written on the flag instead of the config: {defaults}"


def test_the_parsed_flags_become_the_config(tmp_path):
    """``evaluate``'s flags, by hand: every given value lands in its field, the rest keep defaults."""
    from imagenet_zsl.evaluation.commands import evaluate

    args = cli.build_parser().parse_args(
        [
            "evaluate",
            "--features",
            "F",
            "--split",
            "S",
            "--prototypes",
            "P",
            "--out",
            str(tmp_path / "o"),
            "--k",
            "1",
            "5",
            "--no-plots",
            "--overwrite",
        ]
    )
    cfg = cli.handler_config(evaluate, args)
    assert (cfg.features, cfg.split, cfg.prototypes, cfg.model) == (Path("F"), Path("S"), Path("P"), None)
    assert list(cfg.ks) == [1, 5] and cfg.plots is False and cfg.label_frequency is True
    assert (cfg.graph, cfg.search, cfg.device, cfg.seed, cfg.val_seen_fraction) == (
        "auto",
        "exact",
        "auto",
        0,
        0.5,
    )


def _reads_of_args(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args"
    ]


def test_no_handler_reads_the_namespace():
    """Outside the command layer (``cli.py``, ``cli_types.py``, the stages' ``cli.py``), no module
    takes or reads an ``argparse.Namespace``: handlers get their validated config."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("cli.py", "cli_types.py"):
            continue
        text = path.read_text()
        tree = ast.parse(text)
        lines = _reads_of_args(tree)
        if "Namespace" in text or lines:
            offenders.append(f"{path.relative_to(PACKAGE)}: args. at lines {lines[:5]}")
    assert not offenders, offenders


_HELP_DEFAULT = re.compile(r"\(default:? (-?[0-9][0-9., e+-]*)\)")


def _numbers(text: str) -> list[float]:
    return [float(word.replace(",", "")) for word in text.split()]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_default_written_in_a_help_text_is_the_configs(name):
    """A help text that states a number as its default ("(default: 5)", "(default 0.5)", "(default:
    1 2 5 10 20)") states the config field's default: the flag carries none, so such a text is the
    one place a default is written twice, and this keeps the two equal."""
    parser = COMMANDS[name]
    defaults = cli.config_defaults(cli.handler_config_type(load_target(parser.get_default("func"))))
    checked = 0
    for action in parser._actions:
        match = _HELP_DEFAULT.search(str(action.help or ""))
        if match is None or action.dest not in defaults or "..." in match.group(1):
            continue  # no number, or an abbreviated list ("1.0,0.9,...,0.1")
        value = defaults[action.dest]
        values = list(value) if isinstance(value, tuple | list) else [value]
        assert _numbers(match.group(1).rstrip(".,")) == [float(v) for v in values], (name, action.dest)
        checked += 1
    if name in ("evaluate", "images filter", "analyze ladder"):
        assert checked, f"{name}: no default in a help text was checked"
