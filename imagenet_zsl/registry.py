"""One registry mechanism for every named thing: models, pool filters, backbones, commands (by
dotted target, :func:`load_target`).

timm's way: a thing registers itself where it is defined, and one ``create(name, **params)``
builds it::

    MODELS = Registry("model")

    @MODELS.register
    class ESZSL(ZSLModel):
        name = "eszsl"

    model = MODELS.create("eszsl", lam=1.0)

A registry lives in the stage that *consumes* the things (``splits`` owns the pool filters), and
stages further down the flow register into it. So that the consumer never imports its clients,
a registry also loads the Python entry points of its ``group`` (declared in ``pyproject.toml``,
e.g. ``[project.entry-points."imagenet_zsl.pool_filters"]``) the first time it is asked for a name
it does not hold: installing a package is enough to make its filters or models known. The command
line finds every stage's commands the same way (:func:`entry_points`, group ``imagenet_zsl.commands``).
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from imagenet_zsl.errors import UserInputError

T = TypeVar("T")


def load_target(target: str) -> Any:
    """The object a dotted target names, ``"package.module:attribute"`` (entry-point syntax),
    imported only now.

    This is how a command line registers a handler without importing it
    (``set_defaults(func="imagenet_zsl.splits.commands:build")``): the handler module imports its
    stage at module level, and only the command that runs pays for it. The other place that
    imports by name is :meth:`Registry.load_plugins` (a registry's modules and entry points).
    """
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"bug: {target!r} is not a 'package.module:attribute' target")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def entry_points(group: str) -> list[tuple[str, str]]:
    """(name, value) of every entry point of ``group`` that the distributions on ``sys.path``
    declare: what ``importlib.metadata.entry_points(group=group)`` finds (the first distribution of
    a name on the path wins; ``entry_points.txt`` read as it reads it), without importing
    importlib.metadata, whose import alone (email, zipfile, csv, ...) was a quarter of
    ``imagenet-zsl --help`` (issue 46).

    The metadata folders are the ``*.dist-info`` and ``*.egg-info`` folders of each directory on
    ``sys.path`` ('' is the working directory), as pip, setuptools' editable installs and
    ``egg_info`` write them."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for entry in sys.path:
        folder = entry or "."
        try:
            children = sorted(os.listdir(folder))
        except OSError:  # a missing folder, a zip file
            continue
        for child in children:
            stem, ext = os.path.splitext(child)
            if ext.lower() not in (".dist-info", ".egg-info"):
                continue
            distribution = re.sub(r"[-_.]+", "_", stem.partition("-")[0]).lower()
            if distribution in seen:
                continue
            seen.add(distribution)
            found += _section(os.path.join(folder, child, "entry_points.txt"), group)
    return found


def _section(path: str, group: str) -> list[tuple[str, str]]:
    """The ``name = value`` pairs under ``[group]`` in an ``entry_points.txt`` (none if absent),
    parsed as importlib.metadata's ``Sectioned`` parses it."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:  # no such file, or an egg-info that is a file
        return []
    pairs, section = [], None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == group:
            name, value = map(str.strip, line.split("=", 1))
            pairs.append((name, value))
    return pairs


def import_modules(names: Iterable[str]) -> None:
    """Import the modules named, dotted (``"imagenet_zsl.models.gcn"``), for what they register:
    a registry's :attr:`Registry.modules` and its entry points' modules."""
    for name in names:
        importlib.import_module(name)


def registered_name(obj: object) -> str:
    """The name an object registers under: its ``name`` attribute (a class's, a spec's), else
    ``__name__``."""
    name = getattr(obj, "name", None)
    if not isinstance(name, str):
        name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"bug: {obj!r} has neither a 'name' attribute nor a __name__ to register under")
    return name


class Registry(Generic[T]):
    """Name → object, filled by ``@register`` where each object is defined.

    ``what`` names the kind of thing in error messages ("unknown model 'esszl'; did you mean
    'eszsl'?"). ``group`` is the entry-point group whose modules are imported on first miss.
    """

    def __init__(self, what: str, group: str | None = None):
        self.what = what
        self.group = group
        #: the toolkit's own modules that register here, dotted, imported on first use like the
        #: entry-point group's (set where the registry cannot import them: they import it)
        self.modules: tuple[str, ...] = ()
        self._items: dict[str, T] = {}
        self._plugins_loaded = False
        self._loading = False

    def register(self, obj: T) -> T:
        """Decorator: register the decorated object under its one name (lower-case, unique).

        The name is written once, where the object is defined: a class's or a spec's ``name``
        attribute (``class ESZSL(ZSLModel): name = "eszsl"``, ``BackboneSpec("resnet50-v2", ...)``),
        else the function's own name (timm's ``@register_model def resnet50``)."""
        self.add(registered_name(obj), obj)
        return obj

    def add(self, name: str, obj: T) -> None:
        key = name.lower()
        if key in self._items and self._items[key] is not obj:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[key] = obj

    def load_plugins(self) -> None:
        """Import the modules this registry names (:attr:`modules`), then those its entry-point
        group names (once)."""
        if self._plugins_loaded or self._loading:
            return
        self._loading = True  # a plugin that looks a name up while importing must not recurse
        try:
            import_modules(self.modules)
            if self.group is not None:
                entries = sorted(entry_points(self.group))
                import_modules(value.split(":", 1)[0] for _, value in entries)
        finally:
            self._loading = False
        self._plugins_loaded = True  # only once every plugin imported: a failure surfaces again

    def get(self, name: str) -> T:
        """The object registered as ``name``; a one-line error with the closest names otherwise."""
        key = str(name).lower()
        if key not in self._items:
            self.load_plugins()
        if key not in self._items:
            raise UserInputError(self.unknown_message(name))
        return self._items[key]

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name).lower(), self.names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.what} {name!r}{hint} (available: {', '.join(self.names())})"

    def create(self, name: str, **params: Any) -> Any:
        """Call the registered factory/class with ``params``.

        Checking ``params`` is the factory's job: a model's typed ``Params`` turn a bad value into
        a one-line UserInputError naming it. Nothing is caught here, so a TypeError or ValueError
        raised by a bug inside the factory keeps its traceback instead of posing as a user error."""
        factory = self.get(name)
        return factory(**params)  # type: ignore[operator]

    def names(self) -> list[str]:
        self.load_plugins()
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        self.load_plugins()
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return str(name).lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
