"""Start-up of the command line: building the parser and ``--help`` import no stage and no heavy library.

``imagenet-zsl --help`` used to take 3.5 s because every stage's ``cli`` module imported its whole
stage (scipy.optimize, pandas, torch, ...). A ``cli`` module now imports only the standard library
and light helpers and names each handler by dotted target (``"imagenet_zsl.splits.commands:build"``),
imported only when that command runs (issues 27 and 37). Each check runs in a
fresh interpreter and asserts on ``sys.modules`` (what was imported), never on timings.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from imagenet_zsl import registry

#: libraries that must not load before a command runs (seconds of import time between them)
HEAVY = ("torch", "scipy.optimize", "pandas", "matplotlib")
STAGES = (
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
)
#: PENDING: command modules still importing their stage at start-up, left out of these checks
#: until their owners make them lazy; empty since every command module is lazy (issue 27)
PENDING: set[str] = set()
#: stage modules a package's ``__init__`` imports on purpose, checked below to import nothing heavy
LIGHT_STAGE_MODULES = {
    "imagenet_zsl.models.catalog",  # the model registry, handed its module names by models/__init__.py
}
#: a command's full ``--help`` may import what its help text lists: ``extract --backbone`` names the
#: registered backbones (numpy only, no torch; backbones imports its weight fetching, hub_weights, whose
#: huggingface_hub and torch imports wait for a fetch)
HELP_IMPORTS = {
    "extract": {
        "imagenet_zsl.features.backbones",
        "imagenet_zsl.features.hub_weights",
        "imagenet_zsl.features.transforms",
    }
}

#: run in a fresh interpreter: build the parser, then show each top-level command's --help; prints
#: the modules loaded by the build and the ones each --help added
_PROBE = """
import contextlib, io, json, sys
from imagenet_zsl import cli

pending = set(json.loads(sys.argv[1]))
every = cli.command_modules
cli.command_modules = lambda: [m for m in every() if m not in pending]
before = set(sys.modules)
parser = cli.build_parser()
built = set(sys.modules) - before
commands = sorted(next(a for a in parser._actions if hasattr(a, "choices") and a.choices).choices)
shown = {}
for argv in [["--help"], *([c, "--help"] for c in commands)]:
    loaded = set(sys.modules)
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        cli.main(argv)
    assert "usage:" in out.getvalue(), argv
    shown[" ".join(argv[:-1]) or "imagenet-zsl"] = sorted(set(sys.modules) - loaded)
print(json.dumps({"build": sorted(built), "help": shown, "commands": commands, "entry_points": every()}))
"""


def offenders(modules: list[str], allowed: set[str] = frozenset()) -> list[str]:
    """The heavy libraries and the stage modules other than ``cli`` (and packages) in ``modules``."""
    bad = []
    for name in modules:
        parts = name.split(".")
        heavy = any(name == lib or name.startswith(lib + ".") for lib in HEAVY)
        stage = parts[0] == "imagenet_zsl" and len(parts) > 2 and parts[1] in STAGES and parts[2] != "cli"
        if (heavy or stage) and name not in allowed | LIGHT_STAGE_MODULES:
            bad.append(name)
    return bad


@pytest.fixture(scope="module")
def probe() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(sorted(PENDING))], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_checker_sees_heavy_and_stage_modules():
    modules = ["torch.nn", "scipy.sparse", "scipy.optimize._linprog", "pandas", "imagenet_zsl.splits.cli"]
    modules += ["imagenet_zsl.splits", "imagenet_zsl.splits.milp", "imagenet_zsl.scoring.ranks", "numpy"]
    assert offenders(modules) == ["torch.nn", "scipy.optimize._linprog", "pandas", "imagenet_zsl.splits.milp"]
    assert offenders(["imagenet_zsl.features.backbones"], {"imagenet_zsl.features.backbones"}) == []


@pytest.mark.parametrize("module", sorted(LIGHT_STAGE_MODULES))
def test_the_light_stage_modules_are_light(module):
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout)
    assert module in loaded and offenders(loaded) == [] and "numpy" not in loaded


def test_building_the_parser_imports_no_stage_and_no_heavy_library(probe):
    assert "imagenet_zsl.splits.cli" in probe["build"] and "imagenet_zsl.evaluation.cli" in probe["build"]
    # the command modules themselves (each stage's ``cli``) are all the parser imports
    assert offenders(probe["build"], set(probe["entry_points"])) == []


def test_help_of_every_command_imports_no_stage_and_no_heavy_library(probe):
    assert {"evaluate", "extract", "splits", "labels", "images", "attributes", "analyze"} <= set(
        probe["commands"]
    )
    bad = {
        command: offenders(added, HELP_IMPORTS.get(command, set()))
        for command, added in probe["help"].items()
    }
    assert {command: names for command, names in bad.items() if names} == {}
    assert "imagenet_zsl.features.backbones" in probe["help"]["extract"]  # its help lists them


_METADATA = """
import contextlib, io, json, sys
from imagenet_zsl import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    cli.main(["--help"])
print(json.dumps(sorted(m for m in ("importlib.metadata", "email", "zipfile", "csv") if m in sys.modules)))
"""


def test_listing_the_commands_reads_no_metadata_through_importlib():
    """``importlib.metadata`` and what it imports (email, zipfile, csv: ~25 ms, a quarter of
    ``imagenet-zsl --help``, issue 46) are not loaded: ``registry.entry_points`` reads the
    ``entry_points.txt`` files itself."""
    done = subprocess.run([sys.executable, "-c", _METADATA], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == []


def _importlib_entry_points(group: str) -> list[tuple[str, str]]:
    return sorted((e.name, e.value) for e in importlib.metadata.entry_points(group=group))


@pytest.mark.parametrize("group", ["imagenet_zsl.commands", "imagenet_zsl.pool_filters", "console_scripts"])
def test_entry_points_are_importlib_metadatas(group):
    """This environment's entry points, as importlib.metadata finds them."""
    ours = sorted(registry.entry_points(group))
    assert ours == _importlib_entry_points(group) and ours


def test_entry_points_of_hand_made_distributions(tmp_path, monkeypatch):
    """The first distribution of a name on sys.path wins (names compare normalised), comments and
    other groups are skipped, an egg-info counts, a folder without entry points or a path entry that
    is no folder are passed over; importlib.metadata agrees on every case."""
    first, second = tmp_path / "first", tmp_path / "second"
    files = {
        first / "alpha-1.0.dist-info": "[imagenet_zsl.commands]\nfoo = alpha.cli\n# a comment\n"
        "bar=alpha.bar:register [extra]\n\n[other]\nx = y\n",
        first / "Beta_Pkg.egg-info": "[imagenet_zsl.commands]\n  baz = beta.cli  \n",
        first / "gamma-2.0.dist-info": None,
        second / "alpha-0.9.dist-info": "[imagenet_zsl.commands]\nold = alpha.old\n",
        second / "beta.pkg-3.0.dist-info": "[imagenet_zsl.commands]\nshadowed = beta.other\n",
        second / "epsilon-1.0.dist-info": "[other]\nno = thing\n[imagenet_zsl.commands]\neps = epsilon.cli\n",
    }
    for folder, text in files.items():
        folder.mkdir(parents=True)
        if text is not None:
            (folder / "entry_points.txt").write_text(text)
    (tmp_path / "file.zip").write_bytes(b"")
    monkeypatch.setattr(
        sys, "path", [str(first), str(tmp_path / "file.zip"), str(tmp_path / "no"), str(second)]
    )
    expected = [
        ("bar", "alpha.bar:register [extra]"),
        ("baz", "beta.cli"),
        ("eps", "epsilon.cli"),
        ("foo", "alpha.cli"),
    ]
    assert sorted(registry.entry_points("imagenet_zsl.commands")) == expected
    assert _importlib_entry_points("imagenet_zsl.commands") == expected
    assert registry.entry_points("other") == [("x", "y"), ("no", "thing")]


_PLOT = """
import io, json, sys
from imagenet_zsl import plotting
loaded = "matplotlib" in sys.modules
fig, axes = plotting.subplots(1, 2, figsize=(6, 3), squeeze=False, layout="constrained")
axes[0, 0].plot([1, 2, 5], [3, 1, 2], "o-", label="flat")
axes[0, 0].legend()
axes[0, 1].bar(["a", "b"], [1, 2])
ours = io.BytesIO()
fig.savefig(ours, format="png", dpi=110, metadata={"Software": None})
pyplot_loaded = "matplotlib.pyplot" in sys.modules
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, axes = plt.subplots(1, 2, figsize=(6, 3), squeeze=False, layout="constrained")
axes[0, 0].plot([1, 2, 5], [3, 1, 2], "o-", label="flat")
axes[0, 0].legend()
axes[0, 1].bar(["a", "b"], [1, 2])
theirs = io.BytesIO()
fig.savefig(theirs, format="png", dpi=110, metadata={"Software": None})
same = ours.getvalue() == theirs.getvalue()
print(json.dumps({"at_import": loaded, "pyplot": pyplot_loaded, "same": same}))
"""


def test_plots_load_matplotlib_only_to_draw_and_skip_pyplot():
    """``evaluate --no-plots`` never pays for matplotlib, and a plot skips pyplot's import while
    writing the same PNG bytes as pyplot would."""
    done = subprocess.run([sys.executable, "-c", _PLOT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"at_import": False, "pyplot": False, "same": True}
