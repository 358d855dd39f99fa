"""The one typed config layer: every YAML recipe is a pydantic model read by one strict loader.

A recipe is declared once as a :class:`Config` subclass (typed fields, ranges, defaults); the
loader rejects unknown keys (listing the allowed ones and suggesting the closest), wrong types and
out-of-range values with one line that names the file, the key path and the value::

    error: unknown key 'trian' (configs/x.yaml: trian): did you mean 'train'? allowed: graph, splits, train
    error: invalid value (configs/x.yaml: splits[4].n = -5): Input should be greater than or equal to 1

so a typo can never silently build a different benchmark.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file

C = TypeVar("C", bound="Config")
D = TypeVar("D")

#: the largest seed a recipe or ``--seed`` takes: numpy's legacy RandomState, torch and Python's
#: random all accept 0 .. 2**32 - 1 (``cli_types.seed`` is the command-line twin)
MAX_SEED = 2**32 - 1
#: a seed field of a recipe: an integer in 0 .. :data:`MAX_SEED`
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]


class Config(BaseModel):
    """Base of every recipe section: unknown keys are errors, instances are immutable, and a
    float is a finite number (``.nan`` or ``.inf`` in a recipe is an error naming the key)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, validate_default=True, allow_inf_nan=False
    )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (defaults included), for manifests and digests."""
        return self.model_dump(mode="json")


def shared_fields(target: type[D], source: Any, **given: Any) -> D:
    """The dataclass ``target`` built from the fields of the dataclass ``source`` that it shares by
    name, then ``given`` (which win): how a command's options become the library parameters they
    hold, each field copied by its name instead of written out once more."""
    names = {f.name for f in dataclasses.fields(target)} & {f.name for f in dataclasses.fields(source)}
    return target(**({name: getattr(source, name) for name in names} | given))


#: aliases may add at most this many values to a document beyond those written in it: a
#: recipe reuses a pool or a model once or twice, an alias bomb multiplies them by millions
MAX_ALIAS_EXPANSION = 100_000
#: longest value quoted in an error message
MAX_VALUE_CHARS = 200


#: the deepest nesting any YAML document read here may have: a recipe nests 4-5 levels, a dataset
#: card's header 6-8; a 50,000-deep card exhausted Python's stack while PyYAML composed it
MAX_YAML_DEPTH = 100


class _RecipeYAMLError(yaml.YAMLError):
    """A document PyYAML accepts but this project must not (a duplicate key, an alias bomb, a
    nesting deeper than :data:`MAX_YAML_DEPTH`). A ``yaml.YAMLError``, so every caller of
    :func:`parse_recipe_yaml` that reports bad YAML (``train --set``) reports it too."""


#: the public name of the budget errors (recipes and dataset cards alike)
YAMLBudgetError = _RecipeYAMLError


class BudgetedLoader(yaml.SafeLoader):
    """PyYAML's safe loader (no tags, no objects) with a nesting budget: composing a node deeper
    than :data:`MAX_YAML_DEPTH` is an error, raised before Python's recursion limit is near.
    :func:`parse_yaml_budgeted` adds the alias budget and the duplicate-key check."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _RecipeYAMLError(
                    f"line {mark.line + 1}: nested too deeply (over {MAX_YAML_DEPTH} levels); "
                    "flatten the document"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class RecipeLoader(BudgetedLoader):
    """The budgeted loader, stricter on what a recipe may hold.

    :func:`parse_yaml_budgeted` checks the composed document before building it:

    - a key given twice in one mapping is an error naming both lines (PyYAML keeps the last one,
      so a second ``ridge:`` model or ``ks:`` silently replaced the first); a key that a merge
      (``<<: *defaults``) brings in may be overridden, as YAML intends;
    - anchors and aliases (``&pool`` / ``*pool``) are allowed, but a document whose aliases expand
      to more than :data:`MAX_ALIAS_EXPANSION` extra values, or refer to themselves, is refused
      (a 527-byte "billion laughs" recipe took 238 MB to report).

    Its constructors read integers as decimals only, floats without YAML 1.1's ``1:30``, and
    ``yes``/``no``/``on``/``off`` as an error, not a boolean.
    """


#: YAML 1.2 floats with an exponent: PyYAML follows YAML 1.1, which reads ``1e-3`` or ``1.0e5``
#: (no dot, or no exponent sign) as a string; in a recipe they are numbers
_YAML12_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")
RecipeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_EXPONENT_FLOAT, list("-+0123456789."))

#: the only integers a recipe may hold: decimal, no leading zero, no ``_``. YAML 1.1 (PyYAML)
#: also reads ``010`` as 8 (octal), ``0x1f``, ``0b11``, ``1_000`` and ``1:30`` (= 90): a ``n: 010``
#: built a split of 8 classes
_DECIMAL_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
#: YAML 1.1 booleans that YAML 1.2 (and a reader) takes for words: refused, never guessed
_YAML11_ONLY_BOOLS = frozenset("yes Yes YES no No NO on On ON off Off OFF".split())


def _construct_decimal_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    """PyYAML's int constructor restricted to decimal integers (see :data:`_DECIMAL_INT`)."""
    text = str(node.value)
    if not _DECIMAL_INT.match(text):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{shorten(repr(text))} is not a decimal integer (YAML 1.1 would read it as "
            f"{_yaml11_int(loader, node)}); write it in decimal without leading zeros, '_' or ':', "
            "or quote it for a string",
            node.start_mark,
        )
    return int(text)


def _yaml11_int(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    try:
        return str(yaml.SafeLoader.construct_yaml_int(loader, node))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return "something else"


def _construct_plain_bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    """``true``/``false`` only: ``yes``/``no``/``on``/``off`` are an error, not a guess."""
    text = str(node.value)
    if text in _YAML11_ONLY_BOOLS:
        meaning = "true" if text.lower() in ("yes", "on") else "false"
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{text!r} is a YAML 1.1 boolean ({meaning}); write {meaning}, or quote it for a string",
            node.start_mark,
        )
    return bool(yaml.SafeLoader.construct_yaml_bool(loader, node))  # type: ignore[arg-type]


def _construct_decimal_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    """PyYAML's float constructor without YAML 1.1's ``1:30.5`` (= 90.5) and ``1_0.5``."""
    text = str(node.value)
    if ":" in text or "_" in text:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{shorten(repr(text))} is not a decimal number; write it without '_' or ':', or "
            "quote it for a string",
            node.start_mark,
        )
    value = float(yaml.SafeLoader.construct_yaml_float(loader, node))  # type: ignore[arg-type]
    mantissa = re.split(r"[eE]", text, maxsplit=1)[0]
    written_nonzero = any(c in "123456789" for c in mantissa)
    if (value == 0.0 and written_nonzero) or (math.isinf(value) and text.lstrip("+-")[:1] != "."):
        what = "0" if value == 0.0 else "infinity"
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{shorten(repr(text))} is out of the range of a float (it would become {what}); "
            "write a value within 1e-300..1e300",
            node.start_mark,
        )
    return value


RecipeLoader.add_constructor("tag:yaml.org,2002:int", _construct_decimal_int)
RecipeLoader.add_constructor("tag:yaml.org,2002:float", _construct_decimal_float)
RecipeLoader.add_constructor("tag:yaml.org,2002:bool", _construct_plain_bool)


def _check_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> None:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        try:
            key = loader.construct_object(key_node)
            first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: PyYAML reports it itself when it builds the mapping
            continue
        if first is not key_node:
            raise _RecipeYAMLError(
                f"duplicate key {shorten(repr(key))} (lines {first.start_mark.line + 1} and "
                f"{key_node.start_mark.line + 1}): a mapping holds each key once; remove or rename one"
            )


def _check_nodes(loader: yaml.SafeLoader, root: yaml.Node) -> int:
    """Check every mapping for duplicate keys; return how many more nodes the document has once
    every alias is expanded than as written.

    ``expanded(node)`` is memoised per node, so this costs one pass over the nodes as written,
    however large the expansion. A node that contains itself is an error.
    """
    expanded: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in open_nodes:
            raise _RecipeYAMLError(
                f"line {node.start_mark.line + 1}: an alias refers to the node that contains it "
                "(a recursive structure); a recipe cannot hold one"
            )
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            _check_duplicate_keys(loader, node)
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        expanded[key] = total
        return total

    try:
        return size(root) - len(expanded)
    except RecursionError:
        raise _RecipeYAMLError("the document is nested too deeply for a recipe") from None


def parse_yaml_budgeted(text: str, loader: type[BudgetedLoader] = BudgetedLoader) -> Any:
    """The one YAML load of the project (recipes, ``--set`` values, dataset cards): parse ``text``
    with ``loader`` (a :class:`BudgetedLoader`), refusing a nesting deeper than
    :data:`MAX_YAML_DEPTH`, aliases that expand the document by more than
    :data:`MAX_ALIAS_EXPANSION` values or refer to themselves, and a key given twice in one
    mapping, all before the document is built. YAML mistakes raise ``yaml.YAMLError``, the budgets
    :data:`YAMLBudgetError` (one of them)."""
    parser = loader(text)
    try:
        node = parser.get_single_node()
        if node is None:
            return None
        extra = _check_nodes(parser, node)
        if extra > MAX_ALIAS_EXPANSION:
            raise _RecipeYAMLError(
                f"its aliases (*name) expand it by {extra:,} values, more than the "
                f"{MAX_ALIAS_EXPANSION:,} a document may use; write the values out or reuse fewer"
            )
        return parser.construct_document(node)
    except RecursionError:  # a backstop: aliases may chain budgeted depths
        raise _RecipeYAMLError("the document is nested too deeply") from None
    finally:
        parser.dispose()


def parse_recipe_yaml(text: str) -> Any:
    """Parse YAML ``text`` as a recipe (:class:`RecipeLoader` through :func:`parse_yaml_budgeted`);
    YAML mistakes raise ``yaml.YAMLError``, duplicate keys and the budgets ``_RecipeYAMLError``."""
    return parse_yaml_budgeted(text, RecipeLoader)


def load_yaml_text(
    text: str, where: str | Path, what: str, loader: type[BudgetedLoader] = BudgetedLoader
) -> Any:
    """:func:`parse_yaml_budgeted` with every failure as one line naming ``where`` (a file) and
    ``what`` it is (``recipe``, ``dataset card``), at the line and column PyYAML gives."""
    try:
        return parse_yaml_budgeted(text, loader)
    except _RecipeYAMLError as err:
        raise UserInputError(f"invalid {what} ({where}): {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        place = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(where)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserInputError(f"invalid YAML ({place}): {shorten(problem)}") from None


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing file, unreadable bytes, bad YAML, a duplicate key or an
    alias bomb is a one-line error."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise UserInputError(f"config not found ({path}): check the path")
    regular_input_file(path, "config")  # a FIFO would block the read
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserInputError(
            f"config is not UTF-8 text ({path}, byte {err.start}): save it as UTF-8"
        ) from err
    return load_yaml_text(text, path, "recipe", RecipeLoader)


def shorten(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with how much was cut): values quoted in errors."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def load_config(path: str | Path, model: type[C]) -> C:
    """Read ``path`` as YAML and validate it strictly against ``model``."""
    data = read_yaml(path)
    if data is None:
        data = {}
    return validate_config(data, model, str(path))


def validate_config(data: Any, model: type[C], where: str) -> C:
    """Validate already-parsed ``data`` against ``model``; errors name ``where`` and the key path."""
    if not isinstance(data, Mapping):
        raise UserInputError(
            f"config must be a mapping of keys ({where}): got {type(data).__name__}; "
            "see the examples in configs/"
        )
    try:
        return model.model_validate(dict(data))
    except ValidationError as err:
        raise UserInputError(describe_error(err, model, data, where)) from None


def key_path(loc: tuple[Any, ...]) -> str:
    """('splits', 2, 'n') → 'splits[2].n'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def describe_error(
    err: ValidationError, model: type[BaseModel], data: Any, where: str, *, prefix: str = ""
) -> str:
    """One line for the first validation error: what, where (file: key path = value), what to do.
    ``prefix`` is the key path of ``data`` inside its file (``"params."``)."""
    first = err.errors(include_url=False)[0]
    loc = _data_loc(first["loc"], data)
    path = prefix + key_path(loc) if loc or not prefix else prefix.rstrip(".")
    if first["type"] == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1], data)
        name = str(loc[-1])
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return (
            f"unknown key {shorten(repr(name))} ({where}: {shorten(path)}): {hint}allowed: "
            f"{shorten(', '.join(allowed), 4 * MAX_VALUE_CHARS)}"
        )
    if first["type"] == "missing":
        return f"missing key ({where}: {shorten(path)}): add it (see the examples in configs/)"
    if first["type"] == "union_tag_invalid":
        ctx = first.get("ctx", {})
        key = str(ctx.get("discriminator", "kind")).strip("'")
        tag = shorten(repr(ctx.get("tag")))
        return (
            f"invalid value ({where}: {shorten(prefix + key_path((*loc, key)))} = {tag}): "
            f"expected one of {shorten(str(ctx.get('expected_tags')))}"
        )
    value = first.get("input")
    shown = repr(value) if not isinstance(value, Mapping) else "{...}"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    message = str(first["msg"]).removeprefix("Value error, ")  # a validator's own ValueError text
    return f"invalid value ({where}: {shorten(path)} = {shown}): {shorten(message)}"


def _data_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Drop the discriminator tags pydantic inserts in the location of tagged-union members."""
    out: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, Mapping):
            if part in node:
                out.append(part)
                node = node[part]
            elif isinstance(part, str) and part.startswith("function-"):
                continue
            elif any(v == part for v in node.values() if isinstance(v, str)):
                continue  # a tag value such as 'hops' in ('splits', 0, 'hops', 'kk')
            else:
                out.append(part)
                node = None
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(part, str) and node is not None and not isinstance(node, list):
            continue  # a union member's name such as "literal['all','none']" below a scalar value
        else:
            out.append(part)
            node = None
    return tuple(out)


def _allowed_keys(model: type[BaseModel], parent: tuple[Any, ...], data: Any) -> list[str]:
    """The field names of the model that validates the mapping at ``parent``."""
    target: Any = model
    node = data
    for part in parent:
        node = node[part] if isinstance(node, Mapping | list) else None
        target = _step(target, part, node)
        if target is None:
            return []
    target = _pick_member(target, node)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return sorted(f.alias or name for name, f in target.model_fields.items())
    return []


def _step(target: Any, part: Any, node: Any) -> Any:
    target = _pick_member(target, node if not isinstance(part, int) else None)
    if isinstance(target, type) and issubclass(target, BaseModel) and isinstance(part, str):
        field = target.model_fields.get(part)
        return None if field is None else field.annotation
    args = typing.get_args(target)
    origin = typing.get_origin(target)
    if origin in (list, tuple) and args:
        return args[0]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    if origin is typing.Annotated:
        return _step(args[0], part, node)
    return None


def _pick_member(target: Any, node: Any) -> Any:
    """For a union annotation, the member that fits ``node`` (by its tag field if it has one)."""
    if typing.get_origin(target) is typing.Annotated:
        target = typing.get_args(target)[0]
    if typing.get_origin(target) not in (typing.Union, types.UnionType):
        return target
    members = [m for m in typing.get_args(target) if isinstance(m, type) and issubclass(m, BaseModel)]
    if isinstance(node, Mapping):
        for member in members:
            for name, field in member.model_fields.items():
                literal = (
                    typing.get_args(field.annotation)
                    if typing.get_origin(field.annotation) is typing.Literal
                    else ()
                )
                if literal and node.get(name) in literal:
                    return member
    return members[0] if len(members) == 1 else (members[0] if members else target)
