"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift.

A page that holds one of the markers below gets it replaced by generated Markdown:

* ``<!-- generated: cli -->``: every command of ``imagenet-zsl`` with its flags, from the argparse
  parsers (``imagenet_zsl.cli.build_parser``), one section per command;
* ``<!-- generated: schemas -->``: every YAML recipe and config, from its pydantic model (key, type,
  default, description), nested sections as their own tables;
* ``<!-- generated: models -->``: every registered model with its typed hyper-parameters.
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from pathlib import Path
from typing import Any

#: the repository root (this file is docs/hooks/reference.py)
REPO = Path(__file__).resolve().parents[2]

SCHEMAS = [
    ("`run` recipe", "imagenet_zsl.batch.recipe", "Recipe", "configs/demo.yaml"),
    (
        "model config (`train`)",
        "imagenet_zsl.models.training",
        "TrainConfigFile",
        "configs/models/eszsl.yaml",
    ),
    ("split config (`splits build`)", "imagenet_zsl.splits.config", "SplitsConfig", "configs/default.yaml"),
    (
        "factor splits (`splits factor`)",
        "imagenet_zsl.analysis.factor_splits",
        "FactorSplitConfig",
        "configs/factors.yaml",
    ),
    (
        "label curation (`labels build`)",
        "imagenet_zsl.semantics.config",
        "LabelsRecipe",
        "configs/labels.yaml",
    ),
    (
        "simulation (`simulate`)",
        "imagenet_zsl.features.simulate",
        "SimulationRecipe",
        "configs/simulate.yaml",
    ),
]


def _cell(text: object) -> str:
    """Text for a table cell: no line break, no column bar, no ``[...]`` read as a link."""
    text = _code(text).replace("[", "\\[").replace("]", "\\]")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _code(text: object) -> str:
    """Text for a code span inside a table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands(parser: argparse.ArgumentParser, words: list[str]) -> list[tuple[list[str], Any]]:
    found = []
    for name, sub in _subparsers(parser).items():
        children = _commands(sub, [*words, name])
        found += children if children else [([*words, name], sub)]
    return found


def _config_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The defaults of a command's flags: its handler's config fields (a flag carries none: an
    absent flag takes the field's default, ``imagenet_zsl.cli.handler_config``)."""
    from imagenet_zsl.cli import config_defaults, handler_config_type
    from imagenet_zsl.registry import load_target

    target = parser.get_default("func")
    if not isinstance(target, str):
        return {}
    return config_defaults(handler_config_type(load_target(target)))


def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    defaults = _config_defaults(parser)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}` (positional)"
        default = defaults.get(action.dest)
        flag = action.nargs == 0  # --gzsl, --no-plots: what the flag does is its help
        unset = default is None or (isinstance(default, str | tuple | list) and not default)
        shown = "" if unset or flag or action.required else f"`{_code(_plain(default))}`"
        choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
        help_text = "" if action.help is None else parser._get_formatter()._expand_help(action)
        rows.append(f"| {name} | {_cell(help_text + choices)} | {shown} |")
    return rows


def _plain(value: Any) -> Any:
    """A default as a user types it: a tuple of K values as ``1 2 5``, a path as its text."""
    if isinstance(value, tuple | list):
        return " ".join(str(item) for item in value)
    return str(value) if isinstance(value, Path) else value


def cli_reference() -> str:
    """One section per command: its description and a table of its arguments."""
    from imagenet_zsl.cli import build_parser

    out = []
    for words, parser in _commands(build_parser(), []):
        out.append(f"## `imagenet-zsl {' '.join(words)}`\n")
        if parser.description:
            out.append(f"{parser.description}\n")
        rows = _flag_rows(parser)
        if rows:
            out += ["| argument | what | default |", "|---|---|---|", *rows, ""]
        if parser.epilog:
            out.append(f"```text\n{parser.epilog}\n```\n")
    return "\n".join(out)


def _type_name(annotation: Any) -> str:
    """A readable type: ``Annotated`` metadata dropped, unions as ``a | b``, literals as choices."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _yaml_comments(example: Path) -> dict[str, str]:
    """Top-level ``key: value  # comment`` lines of an example YAML file: key -> comment."""
    comments = {}
    if example.is_file():
        for line in example.read_text(encoding="utf-8").splitlines():
            match = re.match(r"(\w+):[^#]*#\s*(.+)", line)
            if match:
                comments.setdefault(match.group(1), match.group(2).strip())
    return comments


def _nested(annotation: Any) -> list[type]:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type] = []
    for arg in typing.get_args(annotation):
        found += [sub for sub in _nested(arg) if sub not in found]
    return found


def _schema_tables(model: type, title: str, seen: set[type], comments: dict[str, str]) -> list[str]:
    from pydantic_core import PydanticUndefined

    seen.add(model)
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    out = [
        f"#### {title}\n",
        f"{doc}\n" if doc else "",
        "| key | type | default | description (else the example file's comment) |",
        "|---|---|---|---|",
    ]
    nested: list[tuple[str, type]] = []
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else field.default
        if default is PydanticUndefined and field.default_factory is not None:
            default = field.default_factory()
        out.append(
            f"| `{name}` | {_cell(_type_name(field.annotation))} | `{_code(default)}` | "
            f"{_cell(field.description or comments.get(name, ''))} |"
        )
        subs = [sub for sub in _nested(field.annotation) if sub not in seen]
        nested += [(f"{title}.{name}" + (f" ({sub.__name__})" if len(subs) > 1 else ""), sub) for sub in subs]
    out.append("")
    for sub_title, sub in nested:
        out += _schema_tables(sub, sub_title, seen, {})
    return out


def schema_reference() -> str:
    """Every recipe and config file: its pydantic model's keys, types and defaults."""
    import importlib

    out = []
    for title, module, name, example in SCHEMAS:
        model = getattr(importlib.import_module(module), name)
        out += [
            f"## {title}\n",
            f"Example: `{example}`. Unknown keys are refused, with the closest key suggested.\n",
        ]
        out += _schema_tables(model, name, set(), _yaml_comments(REPO / example))
    return "\n".join(out)


def models_reference() -> str:
    """Every registered model: what it is, its hyper-parameters (type, range, default), its grid."""
    from imagenet_zsl.models.base import MODELS
    from imagenet_zsl.models.catalog import describe
    from imagenet_zsl.models.params import describe_params

    out = []
    for name, cls in MODELS.items():
        out += [f"## `{name}`\n", f"{describe(cls)}\n"]
        params = describe_params(cls.Params)
        if not params:
            out.append("No hyper-parameters.\n")
            continue
        out += ["| parameter | type | range or choices | default |", "|---|---|---|---|"]
        for key, info in sorted(params.items()):
            out.append(
                f"| `{key}` | {_cell(info['type'])} | {_cell(info['range'])} | `{_code(info['default'])}` |"
            )
        if cls.grid:
            grid = "; ".join(f"`{k}` in {v}" for k, v in sorted(cls.grid.items()))
            out.append(f"\nDefault `select` grid: {_cell(grid)}")
        out.append("")
    return "\n".join(out)


GENERATORS = {"cli": cli_reference, "schemas": schema_reference, "models": models_reference}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each ``<!-- generated: NAME -->`` marker with its generated Markdown."""
    return re.sub(r"<!-- generated: (\w+) -->", lambda m: GENERATORS[m.group(1)](), markdown)
