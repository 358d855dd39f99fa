"""The label space of an evaluation: split, all (the 'All' protocol) or a wnid list file."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.universe import training_wnids, universe_wnids
from imagenet_zsl.splits.label_space import check_label_space_spec, resolve_label_space

SPLIT = ["n00000003", "n00000001"]
SEEN = ["n00000010", "n00000011"]


def test_split_label_space_is_the_split_sorted() -> None:
    assert resolve_label_space("split", SPLIT, SEEN) == ["n00000001", "n00000003"]


def test_all_is_the_universe_less_the_seen_classes() -> None:
    seen = training_wnids()
    split = ["n00005787"]  # a fall11 candidate (not an ILSVRC class)
    space = resolve_label_space("all", split, seen)
    assert len(space) == 21_842 - 1_000  # 20,842 zero-shot candidates
    assert set(space) == set(universe_wnids()) - set(seen)
    assert "n00005787" in space and not set(space) & set(seen)


def test_all_keeps_split_classes_outside_the_universe() -> None:
    space = resolve_label_space("all", ["n99999999"], training_wnids())
    assert "n99999999" in space and len(space) == 20_843


def test_file_label_space_must_hold_every_split_class(tmp_path: Path) -> None:
    path = tmp_path / "space.txt"
    path.write_text("n00000001\nn00000002\nn00000003\nn00000010\n")
    # the seen class listed in the file never enters a zero-shot label space
    assert resolve_label_space(str(path), SPLIT, SEEN) == ["n00000001", "n00000002", "n00000003"]
    path.write_text("n00000001\n")
    with pytest.raises(UserInputError, match=r"lacks 1 of the split's classes \(n00000003\)"):
        resolve_label_space(str(path), SPLIT, SEEN)


def test_training_classes_listed_in_a_label_space_file_leave_it_with_one_counted_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #45: `--label-space FILE` drops its listed training classes, never without a word:
    one warning line with their count."""
    path = tmp_path / "space.txt"
    path.write_text("n00000001\nn00000002\nn00000003\nn00000010\nn00000011\n")
    with caplog.at_level("WARNING", logger="imagenet_zsl.splits.label_space"):
        space = resolve_label_space(str(path), SPLIT, SEEN)
    assert space == ["n00000001", "n00000002", "n00000003"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert f"{path}: 2 listed classes are training classes" in warnings[0]
    caplog.clear()
    path.write_text("n00000001\nn00000002\nn00000003\n")  # none listed: no warning
    with caplog.at_level("WARNING", logger="imagenet_zsl.splits.label_space"):
        resolve_label_space(str(path), SPLIT, SEEN)
    assert not caplog.records


def test_seen_classes_in_the_split_and_bad_specs_are_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="1 split classes are seen"):
        resolve_label_space("split", ["n00000010"], SEEN)
    with pytest.raises(UserInputError, match="neither 'split', 'all' nor an existing"):
        check_label_space_spec(str(tmp_path / "nope.txt"), "--label-space")
    check_label_space_spec("all", "--label-space")  # named spaces need no file
