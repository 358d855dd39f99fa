"""The candidate-pool pipeline: core filters, the filter registry and its entry-point plugins."""

from __future__ import annotations

import subprocess
import sys

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.splits.pool import POOL_FILTERS, PoolContext, available_filters, run_pool
from tests.toy import TOY_TRAIN

CANDIDATES = ["root", "A", "B", "a2", "a3", "a31", "b1", "b11", "m"]


def _ctx(toy_graph) -> PoolContext:
    return PoolContext(toy_graph, list(TOY_TRAIN), counts={w: 10 * i for i, w in enumerate(CANDIDATES)})


def test_core_filters_count_each_step(toy_graph):
    steps = [
        {"filter": "not_training"},
        {"filter": "min_images", "min": 30},
        {"filter": "not_related_to_training"},
    ]
    pool, log = run_pool([*CANDIDATES, "a1"], steps, _ctx(toy_graph))
    # a1 is a training class; root, A and B hold < 30 images; the rest are no ancestor or descendant
    # of the training classes a1 and b2
    assert [(s.filter, s.before, s.after, s.removed) for s in log] == [
        ("not_training", 10, 9, 1),
        ("min_images", 9, 6, 3),
        ("not_related_to_training", 6, 6, 0),
    ]
    assert pool == ["a2", "a3", "a31", "b1", "b11", "m"]


def test_unknown_filter_is_one_line_with_the_closest_name(toy_graph):
    with pytest.raises(UserInputError) as err:
        run_pool(CANDIDATES, [{"filter": "min_image"}], _ctx(toy_graph), where="cfg.pool")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("cfg.pool[0]: unknown pool filter 'min_image'; did you mean 'min_images'?")


def test_bad_step_and_bad_parameters(toy_graph):
    with pytest.raises(UserInputError, match=r"pool\[0\]: each pool step needs a 'filter' key"):
        run_pool(CANDIDATES, ["not_training"], _ctx(toy_graph))
    with pytest.raises(UserInputError, match=r"pool\[0\] \(min_images\): bad parameters"):
        run_pool(CANDIDATES, [{"filter": "min_images", "minimum": 3}], _ctx(toy_graph))


def test_downstream_filters_come_from_entry_points():
    names = set(available_filters())
    assert {"not_training", "min_images", "connected", "not_related_to_training"} <= names
    assert {"has_vector", "min_word_frequency", "primary_meaning", "image_quality"} <= names
    assert POOL_FILTERS.get("has_vector").__module__ == "imagenet_zsl.semantics.pool_filters"


def test_splits_never_imports_the_stages_that_register_filters():
    code = (
        "import sys, imagenet_zsl.splits.build, imagenet_zsl.splits.cli\n"
        "bad = [m for m in sys.modules if m.startswith(('imagenet_zsl.semantics', 'imagenet_zsl.images',"
        " 'imagenet_zsl.image_filter'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
