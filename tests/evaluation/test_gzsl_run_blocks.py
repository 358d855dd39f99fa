"""End to end: evaluate's pinned outputs (tests/evaluation/test_golden.py) keep their bytes when
every blocked pass of the metrics (GZSL lists, thresholds, calibrated merge, both hierarchy
breakdowns) runs one or two images at a time, so that blocks cut every tie group and image set."""

import pytest

import imagenet_zsl.scoring.ranks as ranks
from tests.evaluation import test_golden


@pytest.mark.parametrize("block", [1, 2])
def test_golden_bytes_with_tiny_blocks(bench, graph, tmp_path, monkeypatch, block):
    monkeypatch.setattr(ranks, "SORT_BLOCK", block)
    test_golden.test_run_outputs_keep_their_bytes(bench, graph, tmp_path)
