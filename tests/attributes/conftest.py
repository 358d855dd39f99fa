"""Fixtures: the real packaged att_splits.mat files with generated res101.mat of the real layout.

Features are 4-dimensional (fast); there is one row per real image index and the labels at each
location list come from that list's class set (see imagenet_zsl.attributes.synthetic).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.attributes.dataset import packaged_dir
from imagenet_zsl.attributes.synthetic import save_res101, synthetic_images
from imagenet_zsl.attributes.xlsa17 import load_att_splits, read_class_lists

DATASETS = ("APY", "AWA1", "AWA2", "CUB", "SUN")


def make_root(root: Path, name: str, dim: int = 4, seed: int = 0) -> Path:
    """ROOT/<name>/res101.mat generated for the real class structure; returns ROOT."""
    folder = packaged_dir(name)
    split = load_att_splits(folder / "att_splits.mat")
    lists = read_class_lists(folder, split.class_names)
    save_res101(root / name / "res101.mat", synthetic_images(split, lists, dim=dim, seed=seed))
    return root


@pytest.fixture(scope="session")
def xlsa17_root(tmp_path_factory) -> Path:
    """A root folder with generated res101.mat for all five datasets."""
    root = tmp_path_factory.mktemp("xlsa17")
    for name in DATASETS:
        make_root(root, name)
    return root


@pytest.fixture(scope="session")
def apy_root(tmp_path_factory) -> Path:
    """aPY with 12-dimensional features carrying a clear attribute signal (protocol tests)."""
    return make_root(tmp_path_factory.mktemp("apy"), "APY", dim=12)
