"""Published splits by name (DGP's lists) and the one split-name resolver with its precedence."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.universe import candidate_wnids, training_wnids
from imagenet_zsl.splits import named
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.named import PUBLISHED_SPLITS, read_published_split, resolve_split

REPO = Path(__file__).resolve().parents[2]
ANIMAL = "n00015388"


@pytest.mark.parametrize(("name", "count"), [("dgp-2hops", 1549), ("dgp-3hops", 7860), ("dgp-all", 20842)])
def test_packaged_lists_match_their_recorded_count_and_sha256(name: str, count: int) -> None:
    split = PUBLISHED_SPLITS[name]
    wnids = read_published_split(name)
    assert len(wnids) == count == split.n_classes
    assert wnids == sorted(wnids)  # the project's split format: sorted, one a line
    assert hashlib.sha256(split.path.read_bytes()).hexdigest() == split.sha256
    assert not set(wnids) & set(training_wnids())


def test_dgp_lists_against_ours_by_hand() -> None:
    """The differences the report states: dgp-2hops = hop1 + animal.n.01, dgp-all = our 20,842,
    and DGP's 3-hops contains its 2-hops."""
    hop1 = read_wnid_list(REPO / "splits" / "hop1.txt")
    assert set(read_published_split("dgp-2hops")) == set(hop1) | {ANIMAL}
    assert read_published_split("dgp-all") == candidate_wnids()
    assert set(read_published_split("dgp-2hops")) < set(read_published_split("dgp-3hops"))


def test_splits_show_dgp_2hops_lists_1549_classes_and_the_difference(capsys) -> None:
    assert main(["splits", "show", "dgp-2hops", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["n_classes"] == 1549
    assert record["sha256"] == PUBLISHED_SPLITS["dgp-2hops"].sha256
    assert "yinboc/DGP" in record["source"] and "['2-hops']" in record["source"]
    assert record["licence"].startswith("MIT")
    for diff in record["differences"]:  # the same one class on both graphs, 3 edges away
        assert diff["ours"] == "hop1" and diff["n_ours"] == 1548
        assert diff["only_published"] == [{"wnid": ANIMAL, "name": "animal", "distance": 3}]
        assert diff["only_ours"] == []
    assert main(["splits", "show", "dgp-2hops"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("dgp-2hops: 1,549 classes\n")
    assert f"only in dgp-2hops: {ANIMAL} animal (d=3)" in text and "licence: MIT" in text


def test_splits_show_wnids_prints_the_list(capsys) -> None:
    assert main(["splits", "show", "dgp-2hops", "--wnids"]) == 0
    assert capsys.readouterr().out.split() == read_published_split("dgp-2hops")


def test_splits_show_a_committed_name_gives_count_and_sha256(capsys) -> None:
    assert main(["splits", "show", "hop1", "--splits-dir", str(REPO / "splits"), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["n_classes"] == 1548 and "source" not in record
    assert record["sha256"] == hashlib.sha256((REPO / "splits" / "hop1.txt").read_bytes()).hexdigest()


def test_resolve_published_committed_and_path(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("n00005787\n")
    assert resolve_split("dgp-3hops", tmp_path, "w") == PUBLISHED_SPLITS["dgp-3hops"].path
    assert resolve_split("mine", tmp_path, "w") == tmp_path / "mine.txt"
    assert resolve_split(tmp_path / "mine.txt", None, "w") == tmp_path / "mine.txt"


def test_a_different_committed_file_with_a_published_name_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "dgp-2hops.txt").write_text("n00005787\n")
    with pytest.raises(UserInputError, match=r"split 'dgp-2hops' is ambiguous \(w\).*holds other classes"):
        resolve_split("dgp-2hops", tmp_path, "w")


def test_a_published_name_wins_only_over_a_file_of_the_same_classes(tmp_path: Path) -> None:
    """Rule (``splits/named.py``): a published name wins over a committed file of that name only
    when both hold the same classes (as sets): a user's own 1,549-class ``dgp-2hops.txt`` that
    differs from DGP's in one class is an error, not silently replaced by the packaged list; the
    same classes in another order, with a comment, resolve to the packaged file."""
    published = read_published_split("dgp-2hops")
    assert len(published) == 1549
    swapped = [*published[1:], "n00005787"]  # one class replaced: still 1,549 classes
    assert "n00005787" not in published and len(set(swapped)) == 1549
    (tmp_path / "dgp-2hops.txt").write_text("".join(f"{w}\n" for w in sorted(swapped)))
    with pytest.raises(UserInputError, match=r"split 'dgp-2hops' is ambiguous \(w\).*holds other classes"):
        resolve_split("dgp-2hops", tmp_path, "w")
    (tmp_path / "dgp-2hops.txt").write_text("# mine\n" + "".join(f"{w}\n" for w in reversed(published)))
    assert resolve_split("dgp-2hops", tmp_path, "w") == PUBLISHED_SPLITS["dgp-2hops"].path


def test_an_identical_committed_copy_resolves_to_the_packaged_list(tmp_path: Path) -> None:
    shutil.copy(PUBLISHED_SPLITS["dgp-2hops"].path, tmp_path / "dgp-2hops.txt")
    assert resolve_split("dgp-2hops", tmp_path, "w") == PUBLISHED_SPLITS["dgp-2hops"].path


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "split 'nope' not found (w): neither a file nor"),
        ("dir/nope.txt", "split file dir/nope.txt not found (w): fix the path"),
        ("out/factor-frequency/frequency_1.txt", "imagenet-zsl splits factor configs/default.yaml"),
    ],
)
def test_missing_splits_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)  # relative specs: never the checkout's out/ that `make demo` writes
    with pytest.raises(UserInputError) as err:
        resolve_split(spec, tmp_path, "w")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_edited_packaged_list_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "dgp-2hops.txt"
    copy.write_text(PUBLISHED_SPLITS["dgp-2hops"].path.read_text() + "n00005787\n")
    monkeypatch.setattr(named, "PUBLISHED_DIR", tmp_path)
    with pytest.raises(UserInputError, match="was edited; reinstall"):
        read_published_split("dgp-2hops")


def test_show_unknown_name_exits_2(capsys) -> None:
    assert main(["splits", "show", "dgp-4hops"]) == 2
    err = capsys.readouterr().err
    assert "split 'dgp-4hops' not found" in err and "dgp-2hops" in err and err.count("\n") == 1


def test_the_stated_reason_for_dgp_3hops_holds() -> None:
    """The split report's "why": on ImageNet's tree our hop2 misses exactly animal.n.01 and 42 of its
    children (3-4 edges away), and holds 7 classes 2 edges away that DGP's list lacks."""
    from imagenet_zsl.hierarchy.universe import load_class_graph
    from imagenet_zsl.splits.published_report import published_difference

    diff = published_difference("dgp-3hops", "imagenet")
    assert diff["n_ours"] == 7824
    extra = {row["wnid"] for row in diff["only_published"]}
    children = set(load_class_graph("imagenet").children(ANIMAL))
    assert len(extra) == 43 and extra - children == {ANIMAL} and len(extra & children) == 42
    assert {row["distance"] for row in diff["only_published"]} <= {3, 4}
    assert len(diff["only_ours"]) == 7 and {row["distance"] for row in diff["only_ours"]} == {2}
