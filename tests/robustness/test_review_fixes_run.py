"""``run`` from flags and from a recipe (review of issues #44-#47, items 3 and 5): an incomplete
test store is read with ``--allow-incomplete`` / ``features.test.allow_incomplete`` (the store's
error named a flag ``run`` did not have); the one-line run writes absolute paths into
``OUT/recipe.yaml`` (``--semantics`` too, ``--weights random`` stays a name), and an empty
``NAME=`` path is one line naming the flag, never the working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from imagenet_zsl.batch import scored_test_images as scored_spec
from imagenet_zsl.batch.flags import recipe_from_flags
from imagenet_zsl.batch.recipe import load_recipe
from imagenet_zsl.cli import build_parser, handler_config, main
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.registry import load_target

#: hop1 classes with GloVe vectors (never ILSVRC-2012 classes)
TEST = {"n01322898": 4, "n01323068": 3}


@pytest.fixture
def gapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A webdataset test store whose numbered series lacks -0001 (-0000, -0002), and its split."""
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    store = make_store(tmp_path / "wds", "wds", TEST, size=(40, 32), oddities=False)
    (store.root / "imagenet22k-train-0001.tar").rename(store.root / "imagenet22k-train-0002.tar")
    split = tmp_path / "a.txt"
    split.write_text("".join(f"{w}\n" for w in TEST))
    return {"store": store.root, "split": split}


def _flags(gapped: dict[str, Path], out: Path, *extra: str) -> list[str]:
    argv = ["run", "--models", "conse", "--splits", gapped["split"], "--store", gapped["store"]]
    argv += ["--backbones", "tiny-test", "--weights", "random", "--device", "cpu", "--workers", "0"]
    return [str(a) for a in [*argv, "--no-progress", "--out", out, *extra]]


def test_one_line_run_reads_an_incomplete_store_with_allow_incomplete(gapped, tmp_path, cli_error):
    message = cli_error(_flags(gapped, tmp_path / "o0"), "imagenet22k-train-0001.tar is missing")
    assert "--allow-incomplete" in message and "allow_incomplete: true under features.test" in message
    out = tmp_path / "o1"
    assert main(_flags(gapped, out, "--allow-incomplete")) == 0
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    test = recipe["features"]["test"]
    assert test["allow_incomplete"] is True and test["weights"] == "random" and test["workers"] == 0
    scored = json.loads((out / "test-images" / "scored" / "manifest.json").read_text())
    (gap,) = scored["store_ledger"]["incomplete"]
    assert gap["missing"] == ["imagenet22k-train-0001.tar"]
    # the recipe key is what the flag wrote: read back, it reaches the extraction; without it, the
    # recipe's run stops at the store with the same line
    spec = load_recipe(out / "recipe.yaml").features.test
    assert isinstance(spec, scored_spec.TestImages) and spec.allow_incomplete is True
    assert spec.extract_config(gapped["split"], tmp_path / "x").allow_incomplete is True
    del recipe["features"]["test"]["allow_incomplete"]
    (tmp_path / "strict.yaml").write_text(yaml.safe_dump(recipe))
    cli_error(
        ["run", str(tmp_path / "strict.yaml"), "--out", str(tmp_path / "o2"), "--no-progress"],
        ["imagenet22k-train-0001.tar is missing", "allow_incomplete: true under features.test"],
    )


def _recipe(argv: list[str]):
    args = build_parser().parse_args(["run", "--out", "o", *argv])
    return recipe_from_flags(handler_config(load_target(args.func), args))  # as the command layer does


def test_allow_incomplete_goes_with_store_and_not_with_a_recipe_file(tmp_path, cli_error):
    cli_error(
        ["run", "--models", "conse", "--splits", "hop1", "--features", str(tmp_path), "--allow-incomplete"]
        + ["--out", str(tmp_path / "o")],
        "--allow-incomplete go with --store",
    )
    (tmp_path / "r.yaml").write_text("features: {test: x}\nmodels: {t: {model: trivial}}\nsplits: [hop1]\n")
    cli_error(
        ["run", str(tmp_path / "r.yaml"), "--allow-incomplete", "--out", str(tmp_path / "o")], "not both"
    )


def test_one_line_paths_are_absolute_and_an_empty_one_is_one_line(tmp_path, monkeypatch, cli_error):
    monkeypatch.chdir(tmp_path)
    Path("vectors.npz").write_bytes(b"")  # a relative --semantics naming an existing file
    (tmp_path / "f").mkdir()
    base = ["--models", "conse", "--splits", "hop1"]
    recipe = _recipe([*base, "--features", "f", "--semantics", "vectors.npz"])
    assert recipe.models["conse"].semantics == str(tmp_path / "vectors.npz")
    assert _recipe([*base, "--features", "f", "--semantics", "glove-6b-50d"]).models["conse"].semantics == (
        "glove-6b-50d"
    )
    out = ["--out", str(tmp_path / "o")]
    cli_error(["run", *base, "--features", "a=,b=f", *out], "--features a=: no path after '='")
    cli_error(
        ["run", *base, "--store", "f", "--backbones", "tiny-test,resnet18", "--weights", "tiny-test=", *out],
        "--weights tiny-test=: no path after '='",
    )
