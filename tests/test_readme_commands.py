"""Every `imagenet-zsl ...` command shown in a code block of README.md or of the documentation site
(docs/**/*.md) is run by some test with small inputs.

``TESTED_BY`` maps each sub-command (as the pages show it, normalised to its command words, e.g.
``splits build``; ``torchrun ... -m imagenet_zsl.cli run`` counts as ``run``) to the test file that
runs it successfully through ``imagenet_zsl.cli.main``. The test fails when a page shows a
sub-command with no entry here, when the named file no longer runs it (a ``main([...])`` call with
those words not compared to an error status), or when an entry is no longer shown on any page (keep
the list honest). The Python snippets of the docs are run by tests/docs/test_notebook.py.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from imagenet_zsl.cli import build_parser

REPO = Path(__file__).resolve().parents[1]

TESTED_BY = {
    "setup": "tests/test_first_day.py",
    "run": "tests/batch/conftest.py",
    "splits leakage": "tests/batch/test_demo_recipe.py",
    "splits factor": "tests/batch/conftest.py",
    "analyze factor": "tests/analysis/test_factor_analysis.py",
    "analyze ladder": "tests/batch/test_demo_recipe.py",
    "splits build": "tests/splits/test_cli.py",
    "splits stats": "tests/splits/test_cli.py",
    "splits show": "tests/splits/test_named.py",
    "images count": "tests/images/test_store.py",
    "splits coverage": "tests/images/test_split_coverage.py",
    "labels encode": "tests/semantics/test_encode.py",
    "extract": "tests/features/test_distributed.py",
    "validate": "tests/test_real_weights.py",
    "train": "tests/test_pipeline_e2e.py",
    "evaluate": "tests/test_pipeline_e2e.py",
    "predict": "tests/test_predict.py",
    "report": "tests/test_pipeline_e2e.py",
    "attributes run": "tests/attributes/test_protocol.py",
    "attributes table": "tests/attributes/test_protocol.py",
    "attributes split": "tests/attributes/test_protocol.py",
    "attributes robustness": "tests/attributes/test_robustness.py",
}


def _groups() -> set[str]:
    """Top-level commands that are groups of sub-commands (``splits``, ``labels``, ...)."""
    parser = build_parser()
    top = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {
        name
        for name, sub in top.choices.items()
        if any(a.__class__.__name__ == "_SubParsersAction" for a in sub._actions)
    }


def pages() -> list[Path]:
    """README.md and every page of the documentation site."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _command_words(line: str) -> list[str] | None:
    """The words after ``imagenet-zsl`` (or ``python/torchrun ... -m imagenet_zsl.cli``), or None."""
    line = line.split(" #", 1)[0].strip()
    if line.startswith("imagenet-zsl "):
        return shlex.split(line)[1:]
    if "-m imagenet_zsl.cli " in line:
        return shlex.split(line.split("-m imagenet_zsl.cli ", 1)[1])
    return None


def readme_commands() -> list[str]:
    """The command words of every `imagenet-zsl` line inside a code block of README.md or docs/."""
    groups = _groups()
    found = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                words = _command_words(line)
                if not words or words[0].startswith("-") or words[0] == "...":
                    continue
                command = " ".join(words[:2]) if words[0] in groups and len(words) > 1 else words[0]
                found.append(command)
    return sorted(set(found))


def _runs_successfully(path: Path, words: list[str]) -> bool:
    """True if ``path`` calls ``main([*words, ...])`` other than in a comparison with an error code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "main" and node.args):
            continue
        argv = node.args[0]
        if not isinstance(argv, ast.List) or len(argv.elts) < len(words):
            continue
        head = [e.value if isinstance(e, ast.Constant) else None for e in argv.elts[: len(words)]]
        if head != words:
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value not in (0, None) for c in parent.comparators
        ):
            continue  # an error-path test
        return True
    return False


def test_readme_shows_commands():
    assert "run" in readme_commands()
    assert "splits stats" in readme_commands()  # shown only on a docs page: docs/ is scanned too
    assert _command_words("torchrun --nproc_per_node 4 -m imagenet_zsl.cli run r.yaml --out o") == [
        "run",
        "r.yaml",
        "--out",
        "o",
    ]
    report = ["report", "runs/*", "--out", "t.md"]
    assert _command_words("imagenet-zsl report runs/* --out t.md  # and .csv") == report
    assert _command_words("make demo") is None


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_is_run_by_a_test(command: str):
    assert command in TESTED_BY, (
        f"README.md shows 'imagenet-zsl {command}' but no test is mapped to it: add a test that runs it "
        f"with small inputs and map it in TESTED_BY ({__file__})"
    )
    path = REPO / TESTED_BY[command]
    assert path.is_file(), f"{TESTED_BY[command]} (mapped to '{command}') does not exist"
    assert _runs_successfully(path, command.split()), (
        f"{TESTED_BY[command]} no longer runs 'imagenet-zsl {command}' successfully through main([...])"
    )


def test_mapping_has_no_stale_entries():
    assert sorted(set(TESTED_BY) - set(readme_commands())) == []
