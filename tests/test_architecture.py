"""The import graph follows the data flow, and no two files import each other (even inside functions).

hierarchy → splits → semantics → images → features → image_filter → models → evaluation →
batch → attributes → analysis → cli, with the bottom utilities (errors, io, config, registry, ...)
below them all. A stage that needs something from further down the flow registers into a
registry of the upstream stage (entry points), never the other way round.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "imagenet_zsl"
STAGES = (
    "bottom",
    "hierarchy",
    "splits",
    "semantics",
    "images",
    "features",
    "image_filter",
    "models",
    "evaluation",
    "batch",
    "attributes",
    "analysis",
    "cli",
)
BOTTOM = {
    "__init__",
    "errors",
    "io",
    "config",
    "registry",
    "plotting",
    "devices",
    "scoring",
    "data",
    "cli_types",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "bottom"
    head = parts[1]
    if head in BOTTOM:
        return "bottom"
    assert head in STAGES, f"{module}: add its stage to STAGES in {__file__}"
    return head


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports() -> nx.DiGraph:
    """Module → imported package module, for every import of the package (top level and inside functions)."""
    graph = nx.DiGraph()
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    for name, path in modules.items():
        graph.add_node(name)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target.split(".")[0] != "imagenet_zsl":
                    continue
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name:
                    graph.add_edge(name, target)
                    break
    return graph


def test_imports_follow_the_data_flow():
    rank = {stage: i for i, stage in enumerate(STAGES)}
    against = [
        f"{a} ({stage_of(a)}) imports {b} ({stage_of(b)})"
        for a, b in imports().edges
        if rank[stage_of(b)] > rank[stage_of(a)]
    ]
    assert not against, "imports against the flow:\n" + "\n".join(sorted(against))


def test_no_import_cycles_between_files():
    graph = imports()
    # a package's __init__ importing its own submodules (timm-style registration) is not a cycle
    graph.remove_edges_from([(a, b) for a, b in graph.edges if b.startswith(a + ".")])
    cycles = sorted(sorted(c) for c in nx.simple_cycles(graph))
    assert not cycles, "file-level import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_a_planted_violation(tmp_path, monkeypatch):
    """The test above would fail on an import against the flow (so it cannot pass vacuously)."""
    assert stage_of("imagenet_zsl.models.base") == "models"
    graph = imports()
    assert graph.number_of_edges() > 50
    assert graph.has_edge("imagenet_zsl.splits.build", "imagenet_zsl.hierarchy.graph")
