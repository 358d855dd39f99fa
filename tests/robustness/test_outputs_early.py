"""``train`` and ``splits build`` refuse an ``--out`` they would not replace before any work (issue 44
§4 follow-up): a listed file edited since (or a file the user added to the directory) is one
``error:`` line naming it, and the features are never loaded, the recipe never built. Before, the
early check let both through and the refusal came at the final write, after the fit or the build."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.shard_files import write_manifest as write_feature_manifest
from imagenet_zsl.features.shard_files import write_shard
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.models import training
from imagenet_zsl.splits import build
from tests.models.problems import Problem


def _no_work(calls: list[str], what: str):
    def refuse(*args, **kwargs):
        calls.append(what)
        raise AssertionError(f"{what} started before --out was checked")

    return refuse


def _spoil(out: Path, how: str, listed: str) -> str:
    """Edit a file the manifest lists, or add one it does not; returns the name the error must give."""
    if how == "edited":
        (out / listed).write_text((out / listed).read_text() + " ")
        return listed
    (out / "notes.txt").write_text("my notes")
    return "notes.txt"


@pytest.fixture
def model_ws(tmp_path: Path) -> Path:
    """Seen-class features of a small generated problem, its class vectors and an ESZSL config."""
    problem = Problem()
    features, labels = problem.draw(problem.seen, images=5)
    feature_dir = tmp_path / "features"
    feature_dir.mkdir()
    ids = [f"{problem.seen[c]}/{i}" for i, c in enumerate(labels)]
    shards = [write_shard(feature_dir, "r000-s000000", features, labels, ids)]
    write_feature_manifest(feature_dir, {"classes": problem.seen, "dim": features.shape[1], "shards": shards})
    problem.semantics.save(tmp_path / "vectors.npz")
    (tmp_path / "eszsl.yaml").write_text(f"model: eszsl\nsemantics: {tmp_path / 'vectors.npz'}\n")
    return tmp_path


@pytest.mark.parametrize("how", ["edited", "added"])
def test_train_refuses_an_edited_model_directory_before_loading(cli_error, model_ws, monkeypatch, how):
    out = model_ws / "model"
    argv = ["train", "--config", model_ws / "eszsl.yaml", "--features", model_ws / "features", "--out", out]
    assert main([str(a) for a in argv]) == 0  # a model directory `train` wrote
    name = _spoil(out, how, "config.json")
    calls: list[str] = []
    monkeypatch.setattr(training, "load_seen_data", _no_work(calls, "loading the features"))
    line = cli_error(argv, culprit=[name], inputs=[out, model_ws / "features"])
    assert calls == [] and ("was edited since" in line) == (how == "edited")


@pytest.mark.parametrize("how", ["edited", "added"])
def test_splits_build_refuses_an_edited_directory_before_building(cli_error, tmp_path, monkeypatch, how):
    """A split directory as `splits build` leaves it (its manifest lists every file), then spoiled."""
    out = tmp_path / "splits"
    out.mkdir()
    (out / "hop1.txt").write_text("n01443537\n")
    (out / "report.md").write_text("# Splits\n")
    write_manifest(out, format=build.SPLITS_FORMAT, tool=build.BUILD_TOOL)
    name = _spoil(out, how, "report.md")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("splits:\n  - {name: hop1, kind: hops, k: 1}\n")
    calls: list[str] = []
    monkeypatch.setattr(build, "_recipe_context", _no_work(calls, "building the recipe"))
    line = cli_error(["splits", "build", recipe, "--out", out, "--no-progress"], culprit=[name], inputs=[out])
    assert calls == [] and ("was edited since" in line) == (how == "edited")
