"""Every output directory's manifest comes from the one writer (``manifests.write_manifest``).

Static checks over the package: no module but ``manifests`` writes a ``manifest.json`` itself, and every
manifest format string is versioned (``imagenet-zsl/<kind>-v<N>``). The end-to-end tests (the
reduced demo, ``tests/batch/test_demo_recipe.py``) verify each directory they write with the one
reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

from imagenet_zsl.manifests import FORMAT_PATTERN

PACKAGE = Path(__file__).resolve().parent.parent / "imagenet_zsl"
#: files whose manifest-shaped dicts are records of another kind, with the reason
NOT_MANIFESTS = {
    "imagenet_zsl/batch/records.py": "a run's per-cell status record (cells/NAME.json) beside the cell's own "
    "run directory, whose manifest evaluate writes with manifests.write_manifest",
}
WRITERS = {
    "atomic_write_json",
    "atomic_write_text",
    "atomic_write_bytes",
    "write_text",
    "write_bytes",
    "dump",
}


def _mentions_manifest(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "MANIFEST_NAME" in text or "manifest.json" in text


def _manifest_writes(tree: ast.AST) -> list[int]:
    """Lines that write a manifest file by hand: a writer called on a path naming the manifest,
    or a dict literal with the manifest's own keys (``format`` and ``tool``) built outside manifests."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"format", "tool"} <= keys:
                lines.append(node.lineno)
            continue
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in WRITERS:
            continue
        target = func.value if isinstance(func, ast.Attribute) and name.startswith("write_") else None
        subject = [target] if target is not None else node.args[:1]
        if any(_mentions_manifest(s) for s in subject):
            lines.append(node.lineno)
    return lines


def test_no_module_writes_a_manifest_by_hand():
    found = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in PACKAGE.rglob("*.py")
        if path.name != "manifests.py"
        and str(path.relative_to(PACKAGE.parent)) not in NOT_MANIFESTS
        and (lines := _manifest_writes(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert not found, f"manifests written outside manifests.write_manifest (file: lines): {found}"


def test_every_manifest_format_is_versioned():
    formats = {
        (str(path.relative_to(PACKAGE.parent)), node.value)
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("imagenet-zsl/")
    }
    unversioned = sorted(f"{where}: {value!r}" for where, value in formats if not FORMAT_PATTERN.match(value))
    assert len(formats) > 10
    assert not unversioned, "unversioned manifest formats:\n" + "\n".join(unversioned)


def test_the_checker_sees_a_hand_written_manifest():
    planted = (
        "atomic_write_json(tmp / MANIFEST_NAME, {'format': 'x'})\n(out / 'manifest.json').write_text('{}')\n"
    )
    assert _manifest_writes(ast.parse(planted)) == [1, 2]
    assert _manifest_writes(ast.parse("atomic_write_json(tmp / METRICS_NAME, {})\n")) == []
    assert _manifest_writes(ast.parse("m = {'format': FORMAT, 'tool': TOOL}\n")) == [1]
