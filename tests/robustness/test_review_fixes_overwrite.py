"""``--overwrite`` exists wherever the refusal names it (review of issues #44-#47, item 4).

``safe_output.check_out_dir`` refuses to replace an ``--out`` whose listed files were edited "unless you pass
--overwrite". Every command that writes a directory through ``safe_output``
(``check_out_dir(..., own_files=True)`` or ``atomic_directory``) must take that flag: found here by
reading the package (each call's ``tool`` names its command, followed through the functions that
pass it on), not by a list someone must keep. ``splits coverage --out`` refuses a file the user
added before it scans the store."""

from __future__ import annotations

import argparse
import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.batch.head_only import write_head_only
from imagenet_zsl.cli import build_parser, main
from imagenet_zsl.errors import allow_overwrite, overwrite_allowed
from imagenet_zsl.evaluation import demo
from imagenet_zsl.features.head import BackboneHead
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.images import commands as image_commands
from tests.models.test_backbone_head import write_features

PACKAGE = Path(__file__).resolve().parents[2] / "imagenet_zsl"
#: the safe-output functions -> the position of ``tool`` among their positional arguments
SAFE_OUTPUT = {"check_out_dir": 1, "atomic_directory": None}
#: commands that write a directory without --overwrite, and why that is right
EXEMPT = {
    # a workspace written part by part: its --out is checked without own_files (edits are never
    # refused), and the parts it recomputes (cells, models, simulated features, head-only) are
    # replaced under errors.overwriting(), as its own
    "imagenet-zsl run": "workspace",
    # not a command: the script `python -m imagenet_zsl.evaluation.demo`, which takes --overwrite
    # (test_the_demo_script_takes_overwrite)
    "imagenet-zsl demo": "script",
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text())


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _tool_arg(call: ast.Call, position: int | None) -> ast.expr | None:
    given = next((k.value for k in call.keywords if k.arg == "tool"), None)
    if given is None and position is not None and len(call.args) > position:
        given = call.args[position]
    return given


def _own_files(call: ast.Call, name: str) -> bool:
    """atomic_directory always replaces the directory whole; check_out_dir does with own_files."""
    if name == "atomic_directory":
        return True
    flag = next((k.value for k in call.keywords if k.arg == "own_files"), None)
    return isinstance(flag, ast.Constant) and flag.value is True


def _follow(
    arg: ast.expr | None, func: ast.FunctionDef, mod: str, where: str
) -> tuple[str | None, tuple | None]:
    """(the tool string, or None) and (the function to follow and the tool's position in it: the
    tool is one of its parameters, or None)."""
    positional = [a.arg for a in func.args.args]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value, None
    if isinstance(arg, ast.Name) and arg.id in positional:
        return None, (func.name, positional.index(arg.id))
    if isinstance(arg, ast.Name) and arg.id in [a.arg for a in func.args.kwonlyargs]:
        return None, (func.name, None)
    if isinstance(arg, ast.Name):  # a module constant (TOOL, COVERAGE_TOOL ...)
        return getattr(importlib.import_module(mod), arg.id), None
    raise AssertionError(f"{where}: cannot read the tool of this call")


def safe_output_tools() -> dict[str, list[str]]:
    """{tool string: [where]} for every call that can refuse an edited --out; a ``tool`` that is a
    parameter of the enclosing function is followed to the callers of that function."""
    functions = [
        (mod, func)
        for mod, tree in _modules()
        if mod != "imagenet_zsl.safe_output"  # the safe-output functions themselves
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef)
    ]
    tools: dict[str, list[str]] = {}
    pending, done = list(SAFE_OUTPUT.items()), set()
    while pending:
        target, position = pending.pop()
        if (target, position) in done:
            continue
        done.add((target, position))
        for mod, func in functions:
            calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and _call_name(n) == target]
            for call in calls:
                if target == "check_out_dir" and not _own_files(call, target):
                    continue
                where = f"{mod}:{call.lineno}"
                tool, follow = _follow(_tool_arg(call, position), func, mod, where)
                if tool is not None:
                    tools.setdefault(tool, []).append(where)
                if follow is not None:
                    pending.append(follow)
    return tools


def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command's parser, by its words (("splits", "coverage"))."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[words] = parser
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, (*words, name))

    walk(build_parser(), ())
    return found


def _has_overwrite(parser: argparse.ArgumentParser) -> bool:
    return any("--overwrite" in a.option_strings for a in parser._actions)


def test_every_command_that_replaces_a_directory_takes_overwrite():
    tools = safe_output_tools()
    # the reader finds the known writers (a guard against it finding nothing)
    for known in ("imagenet-zsl evaluate", "imagenet-zsl train", "imagenet-zsl splits coverage"):
        assert known in tools
    parsers = _parsers()
    missing = []
    for tool, where in sorted(tools.items()):
        if tool in EXEMPT:
            continue
        words = tuple(tool.removeprefix("imagenet-zsl ").split())
        assert words in parsers, f"{tool} ({where[0]}) names no command"
        handler = parsers[words].get_default("func")
        # the command and every alias of it (the same handler: images coverage)
        for other, parser in parsers.items():
            if (other == words or parser.get_default("func") == handler) and not _has_overwrite(parser):
                missing.append(f"{' '.join(other)} (writes through {where[0]})")
    assert missing == []


def test_splits_coverage_refuses_an_added_file_before_it_scans_the_store(tmp_path, monkeypatch, cli_error):
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    store = make_store(tmp_path / "store", "tree", {"n01322898": 2}, size=(16, 16), oddities=False)
    (tmp_path / "a.txt").write_text("n01322898\n")
    out = tmp_path / "cov"
    argv = ["splits", "coverage", str(tmp_path / "a.txt"), "--store", str(store.root), "--out", str(out)]
    assert main(argv) == 0
    (out / "notes.txt").write_text("mine")
    scanned = []
    monkeypatch.setattr(
        image_commands, "open_store", lambda *a, **k: scanned.append(a) or pytest.fail("scan")
    )
    cli_error(argv, "notes.txt", inputs=[out])
    assert scanned == []
    # an edited file: refused naming --overwrite, which the command takes
    (out / "notes.txt").unlink()
    with (out / "coverage.tsv").open("a") as handle:
        handle.write("edited\n")
    monkeypatch.undo()
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    cli_error(argv, ["coverage.tsv was edited", "--overwrite"])
    assert main([*argv, "--overwrite"]) == 0
    assert "edited" not in (out / "coverage.tsv").read_text()


def test_the_demo_script_takes_overwrite(monkeypatch):
    seen = []
    monkeypatch.setattr(demo, "write_demo", lambda *a, **k: seen.append(overwrite_allowed()))
    try:
        assert demo.main(["out", "--overwrite"]) == 0 and seen == [True]
    finally:
        allow_overwrite(False)


def test_run_rewrites_its_own_head_only_directory_even_edited(tmp_path):
    """``run``'s exemption holds: its head-only directory, written anew for other test features,
    replaces an edited one (the run's own part) instead of naming an --overwrite run lacks."""
    head = BackboneHead(np.eye(2, 3), np.zeros(2), ["n01440764", "n01443537"])
    empty = np.zeros((0, 3), np.float32), np.zeros(0, np.int64)
    first = write_features(tmp_path / "a", ["n01322898"], *empty, head)
    second = write_features(tmp_path / "b", ["n01323068"], *empty, head)
    target = write_head_only(first, tmp_path / "out" / "head-only")
    (target / "head.npz").write_bytes(b"edited")
    write_head_only(second, target)
    assert (target / "head.npz").read_bytes() == (second / "head.npz").read_bytes()
