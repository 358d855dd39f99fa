"""The public Python API (``imagenet_zsl.__all__``, defined in :mod:`imagenet_zsl.api`) is pinned.

The rule: ``tests/public_api.txt`` holds one line per public name, its ``inspect.signature``
(``name(params) -> return``, or ``class Name(Bases)``), and CHANGELOG.md

* shows every current line verbatim (in backticks), so a changed signature needs a CHANGELOG line;
* names every removed function (a name once shown with a signature and no longer public) on a line
  that says ``removed``.

So removing or changing a public name fails here until both files say so. After an intended change:
``python tests/test_public_api.py --update`` rewrites the snapshot; write the CHANGELOG line by hand.
Then the notebook path itself runs end to end, through the same code as the command line: the model
and run directories it writes are byte-identical to the ones ``train`` and ``evaluate`` write.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT = REPO / "tests" / "public_api.txt"
CHANGELOG = REPO / "CHANGELOG.md"


class _Raw:
    """An annotation string shown without quotes (the modules use postponed annotations)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _plain(annotation: object) -> object:
    if annotation is inspect.Parameter.empty:
        return annotation
    return _Raw(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))


def describe(name: str, obj: object) -> str:
    """One snapshot line: ``name(params) -> return`` for a function, ``class Name(Bases)``."""
    if inspect.isclass(obj):
        return f"class {name}({', '.join(b.__name__ for b in obj.__bases__)})"
    sig = inspect.signature(obj)
    params = [p.replace(annotation=_plain(p.annotation)) for p in sig.parameters.values()]
    sig = sig.replace(parameters=params, return_annotation=_plain(sig.return_annotation))
    return f"{name}{sig}"


def current_api() -> dict[str, str]:
    import imagenet_zsl

    names = [name for name in imagenet_zsl.__all__ if name != "__version__"]
    return {name: describe(name, getattr(imagenet_zsl, name)) for name in names}


def read_snapshot(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {re.match(r"(?:class )?(\w+)", line).group(1): line for line in lines}


def api_problems(current: dict[str, str], snapshot: dict[str, str], changelog: str) -> list[str]:
    """Every way the API, its snapshot and the CHANGELOG disagree (empty: all agree)."""
    problems = []
    for name in sorted(set(snapshot) - set(current)):
        problems.append(f"{name}: removed from the public API but still in {SNAPSHOT.name}")
    for name in sorted(set(current) - set(snapshot)):
        problems.append(f"{name}: public but not in {SNAPSHOT.name} (new: {current[name]})")
    for name in sorted(set(current) & set(snapshot)):
        if current[name] != snapshot[name]:
            problems.append(f"{name}: signature changed: {snapshot[name]} -> {current[name]}")
    for name, line in sorted(current.items()):
        if f"`{line}`" not in changelog:
            problems.append(f"{name}: CHANGELOG.md does not show `{line}`")
    shown = set(re.findall(r"`(?:class )?(\w+)\(", changelog))
    removed_lines = [line for line in changelog.splitlines() if "removed" in line.lower()]
    for name in sorted(shown - set(current)):
        if not any(f"`{name}`" in line for line in removed_lines):
            problems.append(f"{name}: no longer public, and no CHANGELOG.md line says `{name}` was removed")
    return problems


def test_public_names_signatures_and_changelog_agree():
    problems = api_problems(current_api(), read_snapshot(SNAPSHOT.read_text()), CHANGELOG.read_text())
    assert not problems, (
        "the public API changed:\n  "
        + "\n  ".join(problems)
        + "\nif intended: python tests/test_public_api.py --update, and a CHANGELOG.md line for each name"
    )


# The checker, on hand-made cases: it must catch a removal, a change and a silent CHANGELOG.
API = {"load": "load(path: str) -> list[str]", "Err": "class Err(Exception)"}
LOG = "## Unreleased\n- added `load(path: str) -> list[str]` and `class Err(Exception)`\n"


def test_checker_accepts_an_api_that_matches_snapshot_and_changelog():
    assert api_problems(API, dict(API), LOG) == []


def test_checker_fails_when_a_name_is_removed():
    current = {"Err": API["Err"]}
    problems = api_problems(current, dict(API), LOG)
    assert any("load: removed from the public API" in p for p in problems)
    # the snapshot updated alone is not enough: the CHANGELOG must say it was removed
    assert api_problems(current, dict(current), LOG) == [
        "load: no longer public, and no CHANGELOG.md line says `load` was removed"
    ]
    assert api_problems(current, dict(current), LOG + "- removed `load`: use `Err`\n") == []


def test_checker_fails_when_a_signature_changes():
    current = {**API, "load": "load(path: str, strict: bool = True) -> list[str]"}
    assert any("signature changed" in p for p in api_problems(current, dict(API), LOG))
    assert api_problems(current, dict(current), LOG) == [
        "load: CHANGELOG.md does not show `load(path: str, strict: bool = True) -> list[str]`"
    ]


def test_checker_fails_on_a_new_name_not_in_the_snapshot():
    current = {**API, "save": "save(path: str) -> None"}
    assert "save: public but not in public_api.txt (new: save(path: str) -> None)" in api_problems(
        current, dict(API), LOG + "`save(path: str) -> None`"
    )


def test_the_root_re_exports_exactly_the_api_module_s_names():
    """The root lists the names it re-exports lazily (PEP 562: without importing the API module),
    so the two lists are written twice by necessity: they must agree, or a name added to the API
    would silently not be re-exported."""
    import imagenet_zsl
    from imagenet_zsl import api

    assert sorted(set(imagenet_zsl.__all__) - {"__version__"}) == sorted(api.__all__)


def test_every_public_name_is_documented_and_typed():
    import imagenet_zsl

    assert set(imagenet_zsl.__all__) <= set(dir(imagenet_zsl))
    for name in imagenet_zsl.__all__:
        obj = getattr(imagenet_zsl, name)
        if name == "__version__":
            continue
        assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
        if inspect.isfunction(obj):
            sig = inspect.signature(obj)
            untyped = [p for p, v in sig.parameters.items() if v.annotation is inspect.Parameter.empty]
            assert not untyped and sig.return_annotation is not inspect.Parameter.empty, name
    with pytest.raises(AttributeError, match="no attribute 'not_public'"):
        _ = imagenet_zsl.not_public


def test_every_public_function_states_its_parameters_types_and_defaults():
    """``help(zsl.evaluate)`` lists every option with its type and default: no public function
    shows a bare ``*args`` or ``**options``; evaluate's options are ``EvaluationConfig``'s fields."""
    import dataclasses

    import imagenet_zsl as zsl
    from imagenet_zsl.evaluation.run import EvaluationConfig

    for name in zsl.__all__:
        obj = getattr(zsl, name)
        if inspect.isfunction(obj):
            kinds = {p.kind for p in inspect.signature(obj).parameters.values()}
            assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, name
    parameters = inspect.signature(zsl.evaluate).parameters.values()
    options = {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    fixed = {"model", "features", "split", "out"}
    assert options == {f.name: f.default for f in dataclasses.fields(EvaluationConfig) if f.name not in fixed}
    assert "plots: 'bool' = True" in str(inspect.signature(zsl.evaluate))
    assert "seen_features: 'str | Path | None' = None" in str(inspect.signature(zsl.evaluate))


def test_import_imagenet_zsl_stays_light():
    """The package is imported by every module and the CLI: its public names load on first use."""
    code = (
        "import sys, imagenet_zsl; "
        "heavy = [m for m in ('torch', 'pandas', 'scipy', 'imagenet_zsl.api') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    """Tiny SIMULATED features: 1,000 training classes x 2 images, 12 hop1 classes x 3 images."""
    import imagenet_zsl as zsl
    from imagenet_zsl.semantics.lemma_vectors import load_class_vectors

    root = tmp_path_factory.mktemp("api")
    vectors = load_class_vectors("glove-6b-50d")
    test = [w for w in zsl.load_split("hop1") if w in vectors][:12]
    (root / "test.txt").write_text("".join(f"{w}\n" for w in test))
    config = {
        "seed": 0,
        "dim": 16,
        "graph": "wordnet",
        "semantics": "glove-6b-50d",
        "train": {"classes": ["training"], "images_per_class": 2},
        "seen_test": {"images_per_class": 1},
        "test": {"classes": [str(root / "test.txt")], "images_per_class": 3},
    }
    zsl.simulate_features(config, root / "sim")
    return root


def test_the_notebook_path_is_the_command_line_path(simulated):
    import imagenet_zsl as zsl
    from imagenet_zsl.cli import main

    root = simulated
    model = zsl.train("eszsl", root / "sim" / "train", root / "api-model", params={"gamma": 1.0})
    (root / "eszsl.yaml").write_text("model: eszsl\nparams: {gamma: 1.0}\n")
    argv = ["train", "--config", str(root / "eszsl.yaml"), "--features", str(root / "sim" / "train")]
    assert main([*argv, "--out", str(root / "cli-model")]) == 0
    weights = "weights.npz"
    assert (model / weights).read_bytes() == (root / "cli-model" / weights).read_bytes()

    run = zsl.evaluate(model, root / "sim" / "test", root / "test.txt", root / "api-run", plots=False)
    argv = ["evaluate", "--features", str(root / "sim" / "test"), "--split", str(root / "test.txt")]
    argv += ["--model", str(model), "--no-plots", "--out", str(root / "cli-run")]
    assert main(argv) == 0
    api_metrics = json.loads((run / "metrics.json").read_text())
    cli_metrics = json.loads((root / "cli-run" / "metrics.json").read_text())
    assert api_metrics["zsl"] == cli_metrics["zsl"]

    table = zsl.hit_at_k_table([run])
    assert list(table["model"]) == ["api-model"] and len(table) == 1
    for k, value in api_metrics["zsl"]["flat"].items():
        assert table.loc[0, f"hit@{k}"] == value
    assert 0 <= table.loc[0, "hit@1"] <= table.loc[0, "hit@5"] <= 1
    assert table.loc[0, "hit@20"] == 1.0  # 12 classes: every true class is within the top 20


def test_user_mistakes_are_one_line_errors(simulated):
    import imagenet_zsl as zsl

    with pytest.raises(zsl.UserInputError, match="split 'hop99' not found"):
        zsl.load_split("hop99")
    published = zsl.load_split("dgp-2hops")  # a published list by name, as in a run recipe
    assert len(published) == 1549 and published == sorted(published)
    with pytest.raises(zsl.UserInputError, match="unknown option 'k'"):
        zsl.evaluate("m", simulated / "sim" / "test", simulated / "test.txt", simulated / "x", k=[1])
    with pytest.raises(zsl.UserInputError, match="not_a_model"):
        zsl.train("not_a_model", simulated / "sim" / "train", simulated / "y")


def test_loaded_model_scores_are_the_dot_product(simulated):
    import numpy as np

    import imagenet_zsl as zsl

    directory = zsl.train("eszsl", simulated / "sim" / "train", simulated / "m2")
    model = zsl.load_model(directory)
    features = zsl.load_features(simulated / "sim" / "test")
    wnids = zsl.load_split(simulated / "test.txt")
    assert features.classes == wnids and features.dim == 16
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    scores = model.scores(x, wnids)
    assert scores.shape == (4, 12)
    np.testing.assert_allclose(scores, model.embed_images(x) @ model.class_prototypes(wnids).T, rtol=1e-5)


def test_run_batch_and_the_table_of_a_batch_directory(simulated):
    """``run_batch`` is ``imagenet-zsl run``; the table of its directory is the table of its cells."""
    import imagenet_zsl as zsl

    root = simulated
    recipe = root / "recipe.yaml"
    recipe.write_text(
        f"features: {{train: {root / 'sim' / 'train'}, test: {root / 'sim' / 'test'}}}\n"
        "semantics: glove-6b-50d\n"
        "models: {eszsl: {model: eszsl}, trivial: {model: trivial}}\n"
        f"splits: [{root / 'test.txt'}]\n"
        "gzsl: false\nplots: false\nlabel_frequency: false\n"
    )
    out = zsl.run_batch(recipe, root / "batch")
    table = zsl.hit_at_k_table(out)
    assert sorted(table["model"]) == ["eszsl", "trivial"] and set(table["split"]) == {"test"}
    cells = zsl.hit_at_k_table([out / "cells" / "eszsl__test", out / "cells" / "trivial__test"])
    assert table.equals(cells)
    summary = (out / "summary.csv").read_text()
    assert "eszsl" in summary and "trivial" in summary
    with pytest.raises(zsl.UserInputError, match="recipe|not found|missing"):
        zsl.run_batch(root / "no-such-recipe.yaml", root / "batch2")


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    lines = [current_api()[name] for name in sorted(current_api())]
    header = "# the public API (imagenet_zsl.__all__): tests/test_public_api.py; update with --update\n"
    SNAPSHOT.write_text(header + "".join(f"{line}\n" for line in lines))
    print(f"wrote {SNAPSHOT}: add a CHANGELOG.md line showing each changed signature")
