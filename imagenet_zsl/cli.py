"""The ``imagenet-zsl`` command line: each stage registers its own sub-commands.

A stage's ``cli`` module defines ``register(tree: CommandTree)``; it adds top-level commands
with ``tree.command(...)`` or commands inside a group (``imagenet-zsl splits build``) with
``tree.group(...)``. Each command's handler is ``func(args) -> int | None``.

The stages' ``cli`` modules are the entry points of the group ``imagenet_zsl.commands``
(``pyproject.toml``), so this module never imports a stage: installing a package that declares
an entry point there is enough to add its commands.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from importlib import metadata

from imagenet_zsl import __version__
from imagenet_zsl.errors import UserInputError

COMMAND_GROUP = "imagenet_zsl.commands"
#: ``--help`` lists the stages in flow order (entry-point names); unknown names follow, sorted
COMMAND_ORDER = (
    "splits",
    "labels",
    "images",
    "image_filter",
    "features",
    "models",
    "evaluation",
    "batch",
    "analysis",
    "attributes",
)


class CommandTree:
    """Hands out argparse sub-parsers so stages can add commands without editing this file."""

    def __init__(self, parser: argparse.ArgumentParser):
        self._top = parser.add_subparsers(dest="command", metavar="COMMAND")
        self._groups: dict[str, argparse._SubParsersAction] = {}

    def command(self, name: str, help: str, **kwargs) -> argparse.ArgumentParser:
        """A top-level command, e.g. ``imagenet-zsl extract``."""
        return self._top.add_parser(name, help=help, description=help, **kwargs)

    def group(self, name: str, help: str) -> argparse._SubParsersAction:
        """The sub-parsers of a command group, e.g. ``imagenet-zsl splits``; created once."""
        if name not in self._groups:
            parser = self._top.add_parser(name, help=help, description=help)
            self._groups[name] = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
            parser.set_defaults(func=lambda args, p=parser: (p.print_help(), 2)[1])
        return self._groups[name]


def command_modules() -> list[str]:
    """The modules of the ``imagenet_zsl.commands`` entry points, in ``COMMAND_ORDER``."""
    found = metadata.entry_points(group=COMMAND_GROUP)
    entries = {entry.name: entry.value.split(":", 1)[0] for entry in found}
    if not entries:
        raise RuntimeError(
            f"no {COMMAND_GROUP!r} entry points: reinstall with `pip install -e .` (a stale "
            "imagenet_zsl.egg-info in the working directory also hides the installed metadata)"
        )
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
    return [entries[name] for name in sorted(entries, key=lambda n: (rank.get(n, len(rank)), n))]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="imagenet-zsl",
        description="Zero-shot-learning benchmarks on ImageNet-21K and the attribute datasets.",
    )
    parser.add_argument("--version", action="version", version=f"imagenet-zsl {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    tree = CommandTree(parser)
    for module_name in command_modules():
        importlib.import_module(module_name).register(tree)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished work is kept; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
