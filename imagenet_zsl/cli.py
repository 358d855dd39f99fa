"""The ``imagenet-zsl`` command line: each stage registers its own sub-commands.

A stage's ``cli`` module defines ``register(tree: CommandTree)``; it adds top-level commands
with ``tree.command(...)`` or commands inside a group (``imagenet-zsl splits build``) with
``tree.group(...)``. Each command names its handler by dotted target
(``set_defaults(func="imagenet_zsl.splits.commands:build")``): the handler's module, which imports
its stage at module level, is imported only when that command runs.

A handler never sees argparse: it takes one typed config, ``build(options: BuildOptions) -> int``,
which :func:`handler_config` builds from the parsed flags, each flag's ``dest`` being the config
field of the same name. A flag carries no default: one left off the command line is absent from the
parsed values (``argument_default=SUPPRESS``), so the field's default applies. A flag is named once,
in its stage's ``cli`` module, and its default once, on the config (``tests/test_cli_configs.py``).

The stages' ``cli`` modules are the entry points of the group ``imagenet_zsl.commands``
(``pyproject.toml``), so this module never imports a stage: installing a package that declares
an entry point there is enough to add its commands.

Start-up stays cheap (``imagenet-zsl --help`` well under a second): this module and every stage's
``cli`` module import only the standard library and light helpers; no import hides in a function
(``tests/test_cli_startup.py``, ``tests/test_architecture.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import sys
import typing
from collections.abc import Callable
from typing import Any, NoReturn

from imagenet_zsl import __version__
from imagenet_zsl.cli_types import CommandTree, no_command
from imagenet_zsl.errors import UserInputError, allow_overwrite, last_output, note_output
from imagenet_zsl.registry import entry_points, load_target

COMMAND_GROUP = "imagenet_zsl.commands"
#: ``--help`` lists the stages in flow order (entry-point names); unknown names follow, sorted
COMMAND_ORDER = (
    "hierarchy",
    "splits",
    "labels",
    "images",
    "image_filter",
    "features",
    "models",
    "evaluation",
    "batch",
    "attributes",
    "analysis",
)


def command_modules() -> list[str]:
    """The modules of the ``imagenet_zsl.commands`` entry points, in ``COMMAND_ORDER``."""
    entries = {name: value.split(":", 1)[0] for name, value in entry_points(COMMAND_GROUP)}
    if not entries:
        raise RuntimeError(
            f"no {COMMAND_GROUP!r} entry points: reinstall with `pip install -e .` (a stale "
            "imagenet_zsl.egg-info in the working directory also hides the installed metadata)"
        )
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
    return [entries[name] for name in sorted(entries, key=lambda n: (rank.get(n, len(rank)), n))]


class _UsageError(Exception):
    """A command-line usage mistake (unknown flag, bad value): reported as one ``error:`` line."""

    def __init__(self, message: str, prog: str):
        super().__init__(message)
        self.prog = prog


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors become one ``error:`` line (exit 2) instead of usage + message.

    Sub-parsers inherit this class, so every stage's flags behave the same way. A flag left off
    the command line is left out of the parsed values (``argument_default=SUPPRESS``): the
    handler's config then takes its field's default, so a default is written once, in the config.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("argument_default", argparse.SUPPRESS)
        super().__init__(*args, **kwargs)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # an optional positional (nargs="?") left off: argparse would pass its SUPPRESS default
        # through ``type=`` (Path("==SUPPRESS==")); it is left out instead, as an absent flag is
        if not arg_strings and not action.option_strings and action.default is argparse.SUPPRESS:
            return argparse.SUPPRESS
        return super()._get_values(action, arg_strings)

    def error(self, message: str) -> NoReturn:  # noqa: D102 - argparse's hook
        raise _UsageError(message, self.prog)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every installed entry point's ``register`` adds its commands."""
    parser = ArgumentParser(
        prog="imagenet-zsl",
        description="Zero-shot-learning benchmarks on ImageNet-21K and the attribute datasets.",
    )
    parser.add_argument("--version", action="version", version=f"imagenet-zsl {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", default=False, help="debug logging")
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False,
        help="show the full traceback of an internal error (a bug: please report it)",
    )
    tree = CommandTree(parser)
    for module_name in command_modules():
        try:
            register = load_target(f"{module_name}:register")
        except (ImportError, AttributeError) as err:
            # a stale install's entry point (a module that moved, or no longer registers commands):
            # every other command still works, and the warning says how to refresh the metadata
            print(
                f"warning: skipping the commands of {module_name} ({err}): reinstall with "
                "`pip install -e .` (or `make install`) to refresh the entry points",
                file=sys.stderr,
            )
            continue
        register(tree)
    return parser


#: the parsed values the command layer consumes itself: the handler's target, the command names,
#: logging, tracebacks and ``--overwrite`` (handed to :func:`imagenet_zsl.errors.allow_overwrite`,
#: which the output checks read). A config that declares a field of one of these names gets its
#: value too (``run``'s ``verbose``: the global ``-v`` prints its whole log)
LAYER_DESTS = frozenset({"func", "command", "verbose", "debug", "overwrite"})


def command_options(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags of a command, by ``dest``: every value except the command layer's own
    (:data:`LAYER_DESTS` and the ``<group>_command`` names of command groups)."""
    return {
        name: value
        for name, value in vars(args).items()
        if name not in LAYER_DESTS and not name.endswith("_command")
    }


def handler_config_type(handler: Callable[..., Any]) -> type:
    """The typed config a handler takes: the annotation of its one parameter."""
    hints = {name: hint for name, hint in typing.get_type_hints(handler).items() if name != "return"}
    if len(hints) != 1:
        raise TypeError(f"bug: the handler {handler.__qualname__} must take one annotated config parameter")
    return next(iter(hints.values()))


def config_fields(config_type: type) -> frozenset[str]:
    """The field names of a config: a dataclass's fields or a pydantic model's."""
    if dataclasses.is_dataclass(config_type):
        return frozenset(field.name for field in dataclasses.fields(config_type))
    return frozenset(getattr(config_type, "model_fields", {}))


def config_defaults(config_type: type) -> dict[str, Any]:
    """The defaults of a config's fields (those that have one): what a flag left off takes."""
    if dataclasses.is_dataclass(config_type):
        return {
            field.name: field.default
            if field.default_factory is dataclasses.MISSING
            else field.default_factory()
            for field in dataclasses.fields(config_type)
            if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        }
    return {name: field.default for name, field in getattr(config_type, "model_fields", {}).items()}


def handler_config(handler: Callable[..., Any], args: argparse.Namespace) -> Any:
    """The handler's config built from the parsed flags (each ``dest`` is a field of that name)."""
    config_type = handler_config_type(handler)
    fields = config_fields(config_type)
    options = command_options(args)
    options.update({name: getattr(args, name) for name in LAYER_DESTS & fields if hasattr(args, name)})
    unknown = sorted(set(options) - fields)
    if unknown:
        raise TypeError(f"bug: {config_type.__qualname__} has no field for the flags {unknown}")
    return config_type(**options)


#: errno → what the user can do about it
_OS_ADVICE = {
    errno.ENOSPC: "the disk is full; free space or choose an --out on another disk",
    errno.EDQUOT: "the disk quota is exceeded; free space or choose an --out on another disk",
    errno.EFBIG: "the file grew past the file-size limit; raise it ('ulimit -f unlimited') or "
    "choose an --out on a file system that allows larger files",
    errno.EROFS: "the file system is read-only; choose a writable location",
    errno.EACCES: "permission denied; check the permissions, or choose a location you may write to "
    "or read from",
    errno.EPERM: "operation not permitted; check the permissions or choose another location",
    errno.ENOTDIR: "a path component is not a directory; check the path",
    errno.EISDIR: "a directory was given where a file is expected; check the path",
    errno.ENOENT: "no such file or directory; check the path",
    errno.EMFILE: "too many open files; lower --workers or raise 'ulimit -n'",
    errno.ENFILE: "too many open files on this machine; lower --workers or retry later",
    errno.ENAMETOOLONG: "the file name is too long; choose a shorter path",
    errno.ELOOP: "a symbolic-link loop; fix or remove the link that points back to itself",
    errno.EIO: "input/output error from the disk; check the disk and retry",
    errno.ENOMEM: "out of memory; lower --batch-size or --workers",
}
#: a message longer than this is cut: a value pasted into an error must not flood the terminal
MAX_ERROR_CHARS = 2000


def describe_os_error(err: OSError) -> str:
    """One line for an OSError the user's environment caused (disk full, file too large,
    read-only, missing path): what happened, which file, and what to do.

    The file is the error's own ``filename`` or, when the system gives none (a ``write`` to an
    open file fails with ENOSPC or EFBIG), the output this command is writing.
    """
    if err.filename is not None:
        where = str(err.filename) + (f" -> {err.filename2}" if err.filename2 is not None else "")
    elif last_output() is not None:
        where = f"while writing {last_output()}"
    else:
        where = "file unknown"
    advice = _OS_ADVICE.get(err.errno or -1, "check the path, its permissions and the free disk space")
    what = err.strerror or (str(err) if str(err) else type(err).__name__)
    return f"{what} ({where}): {advice}"


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` on one line (line breaks become ' | '), cut to ``limit`` characters."""
    text = " | ".join(part.strip() for part in str(message).splitlines() if part.strip())
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return text


def main(argv: list[str] | None = None) -> int:
    """Run ``imagenet-zsl ARGV``: 0 on success, 2 on a user's mistake (one ``error:`` line), 1 on a
    bug (one ``internal error:`` line; ``--debug`` shows the traceback), 130 when interrupted."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as err:
        print(f"error: {err} ({err.prog}): see '{err.prog} --help'", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not hasattr(args, "func"):
        return no_command(parser)
    note_output(None)
    allow_overwrite(getattr(args, "overwrite", False))  # the commands that replace a directory have it
    try:
        if not isinstance(args.func, str):  # a command group given without its command
            return int(args.func())
        handler = load_target(args.func)
        return int(handler(handler_config(handler, args)) or 0)
    except UserInputError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished work is kept; re-run the same command to resume", file=sys.stderr)
        return 130
    except MemoryError:
        if args.debug:
            raise
        print("error: out of memory (this machine): lower --batch-size or --block-rows", file=sys.stderr)
        return 2
    except OSError as err:
        if args.debug:
            raise
        if err.errno is None:  # raised by a library for its own reasons, not by the system
            return _internal_error(err)
        print(f"error: {one_line(describe_os_error(err))}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug: one line unless --debug asks for the traceback
        if args.debug:
            raise
        if isinstance(err, RuntimeError) and str(err).startswith("Symlink loop from"):
            # pathlib's resolve() on Python 3.11 (ELOOP, an OSError, on later versions)
            print(
                f"error: {one_line(str(err))}: fix or remove the link that points back to itself",
                file=sys.stderr,
            )
            return 2
        return _internal_error(err)
    finally:
        allow_overwrite(False)


def _internal_error(err: BaseException) -> int:
    print(
        f"internal error: {type(err).__name__}: {one_line(str(err))} — this is a bug; re-run with "
        "--debug for the traceback and report it",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
