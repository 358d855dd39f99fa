"""argparse helpers shared by every stage's command line: ``type=`` converters, lazy help/choices.

A bad number (``--batch-size 0``, ``--workers -1``, ``--block-rows x``) must be a one-line
``error:`` and exit status 2 before any work starts, never a silent default or a traceback later.
argparse turns the ``argparse.ArgumentTypeError`` raised here into
``imagenet-zsl <command>: error: argument --batch-size: 0: must be at least 1`` (exit 2).

Light: every ``cli`` module imports this at start-up (the standard library and
:func:`imagenet_zsl.registry.load_target`, which resolves a lazy part given as a dotted target).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from imagenet_zsl.registry import load_target

#: a lazy value: a function, or a dotted target (``"imagenet_zsl.splits.pretraining:LABEL_SET_FILES"``)
#: naming a function (called) or a value (a string, or a collection listed with ", ")
Lazy = Callable[[], Any] | str


def _integer(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r}: not an integer") from None


def positive_int(text: str) -> int:
    """An integer ≥ 1 (batch sizes, shard sizes, block rows, counts)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An integer ≥ 0 (worker processes: 0 means in the main process; seeds)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 0 or more")
    return value


#: the largest ``--seed``: numpy's legacy RandomState, torch and Python's random all accept
#: 0 .. 2**32 - 1 (numpy's default_rng takes more, but one bound serves every command);
#: ``config.MAX_SEED`` is the same bound for recipes
MAX_SEED = 2**32 - 1


def seed(text: str) -> int:
    """A seed: an integer in 0 .. 2**32 - 1 (``--seed -1`` or ``--seed 2e70`` is a usage error)."""
    value = _integer(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text[:40]}: a seed must be an integer in 0..{MAX_SEED}")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """A converter accepting integers ≥ ``low`` (e.g. an image size of at least 16 pixels)."""

    def convert(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {low}")
        return value

    convert.__name__ = f"int_at_least_{low}"
    return convert


#: ``--overwrite``: the one definition, added by every command that replaces an --out directory
OVERWRITE_HELP = (
    "replace an existing --out written by this command even if a file its manifest lists was "
    "edited since (the edit is lost); without it such an --out is refused, naming the file"
)


def overwrite_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--overwrite`` to a command that writes its --out directory in one rename (``cli.main``
    hands it to :func:`imagenet_zsl.errors.allow_overwrite`, which ``safe_output.check_out_dir`` reads)."""
    parser.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)


#: ``--allow-incomplete``: the one definition, added by every command that reads an image store
#: (``images count``, ``splits coverage``, ``extract``, ``validate``, the fine-tuners ``images filter
#: --finetune-last-block`` and ``finetune-dgp``), handed to ``images.store.open_store(allow_incomplete=...)``
ALLOW_INCOMPLETE_HELP = (
    "read a store that lacks what it declares (a gap in a numbered shard series, fewer shards "
    "or images than its nshards.txt, _info.json or dataset card say): without it that is an "
    "error; with it, what is missing is printed (and recorded in the manifest of a command that "
    "writes one)"
)


def allow_incomplete_flag(parser: argparse._ActionsContainer) -> None:
    """Add ``--allow-incomplete`` to a command (or an argument group of one) that opens an image store."""
    parser.add_argument("--allow-incomplete", action="store_true", help=ALLOW_INCOMPLETE_HELP)


# --- lazy help and choices --------------------------------------------------------------------
# ``imagenet-zsl --help`` must start in well under a second, so a stage's ``cli`` module imports
# none of the stage at start-up. A flag whose help text, default or choices live in a heavy module
# (the registered backbones, a factor table) gets them through these wrappers, as a dotted target:
# the module is imported only when that flag's help is shown or the flag is given.


def resolve_lazy(make: Lazy) -> Any:
    """The value a lazy part stands for: a dotted target is loaded (and called if callable)."""
    value = load_target(make) if isinstance(make, str) else make
    return value() if callable(value) else value


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return ", ".join(str(item) for item in value)
    return str(value)


class LazyText:
    """Text built on first ``str()``: ``make`` runs once, when argparse formats the help."""

    def __init__(self, make: Lazy):
        self._make = make
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = _as_text(resolve_lazy(self._make))
        return self._text


def lazy_help(action: argparse.Action, template: str, **parts: Lazy) -> argparse.Action:
    """Give ``action`` the help ``template`` whose ``%(name)s`` fields are ``parts[name]``, resolved
    only when ``--help`` shows it (argparse fills ``%(...)s`` from the action's attributes).

    ``lazy_help(p.add_argument("--backbone"), "one of %(names)s",
    names="imagenet_zsl.features.backbones:list_backbones")``.
    """
    for name, make in parts.items():
        if name in vars(action):
            raise ValueError(f"bug: lazy help field {name!r} would hide the action's own attribute")
        setattr(action, name, LazyText(make))
    action.help = template
    return action


class LazyChoices:
    """``choices=`` for argparse whose values come from ``make()`` on first use: a parse that
    gives the flag checks against them; ``--help`` lists them (``%(choices)s``). Pass a
    ``metavar``: argparse would otherwise list the choices when the flag is added."""

    def __init__(self, make: Lazy):
        self._make = make
        self._values: tuple[object, ...] | None = None

    def _get(self) -> tuple[object, ...]:
        if self._values is None:
            self._values = tuple(resolve_lazy(self._make))
        return self._values

    def __contains__(self, value: object) -> bool:
        return value in self._get()

    def __iter__(self) -> Iterator[object]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


# --- the command tree handed to each stage's ``register`` ------------------------------------


class CommandTree:
    """Hands out argparse sub-parsers so stages can add commands without editing this file."""

    def __init__(self, parser: argparse.ArgumentParser):
        self._top = parser.add_subparsers(dest="command", metavar="COMMAND")
        self._groups: dict[str, argparse._SubParsersAction] = {}

    def command(self, name: str, help: str, **kwargs) -> argparse.ArgumentParser:
        """A top-level command, e.g. ``imagenet-zsl extract``."""
        return self._top.add_parser(name, help=help, description=help, **kwargs)

    def group(self, name: str, help: str | None = None) -> argparse._SubParsersAction:
        """The sub-parsers of a command group, e.g. ``imagenet-zsl splits``.

        The stage that owns the group creates it with its ``help``; a later stage that adds a
        command to it asks for it by name only (one help text, stated once)."""
        if name in self._groups and help is not None:
            raise ValueError(f"bug: command group {name!r} is created twice (give its help once)")
        if name not in self._groups:
            if help is None:
                raise ValueError(f"bug: command group {name!r} used before its stage created it")
            parser = self._top.add_parser(name, help=help, description=help)
            self._groups[name] = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
            parser.set_defaults(func=lambda p=parser: no_command(p))
        return self._groups[name]


def no_command(parser: argparse.ArgumentParser) -> int:
    """``imagenet-zsl`` (or a group such as ``imagenet-zsl splits``) without a command: the usage
    line and one ``error:`` line listing the commands, on stderr, exit status 2 (argparse's
    convention for a missing argument); ``--help`` prints the full help."""
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names.extend(action.choices)
    sys.stderr.write(parser.format_usage())
    print(
        f"error: no command given ({parser.prog}): choose one of {', '.join(names)}; "
        f"see '{parser.prog} --help'",
        file=sys.stderr,
    )
    return 2
