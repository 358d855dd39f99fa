"""Pretraining leakage of a split, worked out by hand: the shares count the split's own classes
and images only.

Why: the label set and the counts table both hold many classes outside the split (the packaged
counts: all 21K classes; a label set: up to 22K). Summing images over every counted class, or
over every label-set class, gives a wrong share that only the sha256 snapshot of a built split
noticed; here classes outside the split carry most of the images, so either mistake shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagenet_zsl import cli
from imagenet_zsl.splits.leakage import split_leakage

SPLIT = ["n00000001", "n00000002", "n00000003", "n00000004", "n00000005"]
LABEL_SET = ["n00000001", "n00000002", "n00000009"]  # n00000009: a pretraining label outside the split
COUNTS = {
    "n00000001": 10,  # in the split and the label set
    "n00000002": 30,  # in the split and the label set
    "n00000003": 20,  # in the split only
    "n00000004": 40,  # in the split only
    # n00000005: in the split, no count: 0 images
    "n00000009": 900,  # label set only: not a test image
    "n00000010": 100,  # neither
}
# by hand: 2 of the 5 split classes are labels; their 10 + 30 = 40 images of the split's
# 10 + 30 + 20 + 40 + 0 = 100 test images
HAND = {
    "n_classes": 5,
    "seen_classes": 2,
    "class_share": 0.4,
    "n_images": 100,
    "seen_images": 40,
    "image_share": 0.4,
}


@pytest.fixture()
def label_file(tmp_path: Path) -> Path:
    path = tmp_path / "pretraining.txt"
    path.write_text("".join(f"{w}\n" for w in LABEL_SET))
    return path


def test_split_leakage_counts_the_split_s_own_images(label_file: Path):
    leak = split_leakage(SPLIT, str(label_file), COUNTS)
    assert {key: leak.as_dict()[key] for key in HAND} == HAND
    assert leak.label_set == str(label_file)


def test_leakage_command_reports_the_hand_shares(tmp_path: Path, label_file: Path, capsys):
    split = tmp_path / "split.txt"
    split.write_text("".join(f"{w}\n" for w in SPLIT))
    counts = tmp_path / "counts.tsv"
    counts.write_text("".join(f"{w}\t{n}\n" for w, n in COUNTS.items()))
    argv = ["splits", "leakage", str(split), "--pretraining", str(label_file), "--counts", str(counts)]
    assert cli.main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert {key: record[key] for key in HAND} == HAND
    assert cli.main(argv) == 0
    line = capsys.readouterr().out.strip()
    assert line == (f"{split}: 2/5 test classes (40.0%) and 40.0% of 100 test images are {label_file} labels")
