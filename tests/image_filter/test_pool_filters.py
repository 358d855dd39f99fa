"""The split builder's `image_quality` pool filter reads an `images filter` run's classes.csv."""

from __future__ import annotations

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT, TOOL
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.splits.pool import PoolContext, run_pool


def test_image_quality_keeps_only_vetted_classes(tmp_path, toy_graph):
    run = tmp_path / "filter"
    run.mkdir()
    (run / "classes.csv").write_text(
        "wnid,images_before,images_after,heldout_accuracy,kept,reason\n"
        "a2,50,45,0.9,true,\n"
        "a3,50,2,0.1,false,held-out accuracy 0.10 < 0.5\n"
    )
    write_manifest(run, format=OUTPUT_FORMAT, tool=TOOL)  # a filter output directory is verified
    ctx = PoolContext(toy_graph, ["a1", "b2"], {})
    pool, steps = run_pool(["a2", "a3", "m"], [{"filter": "image_quality", "path": str(run)}], ctx)
    assert pool == ["a2"] and (steps[0].before, steps[0].after) == (3, 1)
    lenient = [{"filter": "image_quality", "path": str(run), "require_judged": False}]
    assert run_pool(["a2", "a3", "m"], lenient, ctx)[0] == ["a2", "m"]
    (run / "classes.csv").write_text("wnid,kept\na3,true\n")  # changed after the run: refused
    with pytest.raises(UserInputError, match="classes.csv: changed since it was written"):
        run_pool(["a3"], [{"filter": "image_quality", "path": str(run)}], ctx)


def test_image_quality_without_a_filter_run_says_what_to_do(tmp_path, toy_graph):
    ctx = PoolContext(toy_graph, ["a1"], {})
    with pytest.raises(UserInputError, match="images filter"):
        run_pool(["a2"], [{"filter": "image_quality", "path": str(tmp_path)}], ctx)
