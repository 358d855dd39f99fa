"""``splits coverage`` (alias ``images coverage``): exact class and image counts per split on a store
built from a subset of classes, published lists by name, the ``--out`` directory and its reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.data import fall11_counts
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.images.coverage import coverage_of, read_coverage
from imagenet_zsl.splits.named import read_published_split

REPO = Path(__file__).resolve().parents[2]
#: the store: two classes of both dgp-2hops and hop1, animal.n.01 (dgp-2hops only, not hop1) and
#: a training class (in no test split); fall11 counts: n00015388 1571, n01322898 1685,
#: n01323068 1444, n01439121 635, n01440764 1133
HELD = {"n00015388": 2, "n01322898": 1, "n01439121": 3, "n01440764": 2}


def test_coverage_of_by_hand():
    reference = {"a": 10, "b": 5, "c": 3, "d": 4}
    cov = coverage_of({"a": 12, "b": 2, "x": 4, "d": 0}, ["a", "b", "c", "d"], reference)
    assert (cov["total"], cov["held"], cov["complete"]) == (4, 2, False)
    # a holds more than fall11 (12 > 10): held as it is, nothing missing for it
    assert (cov["images_held"], cov["images_fall11"], cov["images_missing"]) == (14, 22, 3 + 3 + 4)
    assert cov["missing"] == ["c", "d"] and cov["short"] == ["b"]
    full = coverage_of({"a": 1, "b": 1}, ["b", "a"], reference)
    assert (full["total"], full["held"], full["complete"], full["images_held"]) == (2, 2, True, 2)


def _rows(text: str) -> dict[str, list[str]]:
    lines = text.splitlines()
    assert lines[0].split("\t") == [
        "split",
        "classes",
        "held",
        "complete",
        "images_held",
        "images_fall11",
        "images_missing",
        "share_missing",
    ]
    return {line.split("\t")[0]: line.split("\t")[1:7] for line in lines[1:]}


@pytest.mark.parametrize("layout", ["tree", "wds"])
def test_coverage_on_a_store_of_a_subset_of_classes_is_exact(tmp_path, capsys, layout):
    store = make_store(tmp_path / "store", layout, HELD, size=(16, 12), oddities=False).root
    mine = tmp_path / "mine.txt"
    mine.write_text("n01322898\nn01323068\nn01440764\n")
    whole = tmp_path / "whole.txt"
    whole.write_text("n01439121\nn01322898\n")
    names = ["dgp-2hops", "hop1", str(mine), str(whole)]
    assert (
        main(["splits", "coverage", "--store", str(store), "--splits-dir", str(REPO / "splits"), *names]) == 0
    )
    out, err = capsys.readouterr()
    rows = _rows(out)
    dgp = sum(fall11_counts()[w] for w in read_published_split("dgp-2hops"))
    hop1 = dgp - 1571  # hop1 is dgp-2hops without animal.n.01
    assert rows == {
        "dgp-2hops": ["1549", "3", "no", "6", str(dgp), str(dgp - 6)],
        "hop1": ["1548", "2", "no", "4", str(hop1), str(hop1 - 4)],
        str(mine): ["3", "2", "no", "3", "4262", str(1684 + 1444 + 1131)],
        str(whole): ["2", "2", "yes", "4", "2320", "2316"],
    }
    assert f"{mine}: 1 of 3 classes missing: n01323068" in err
    assert "dgp-2hops: 1,546 of 1,549 classes missing:" in err and str(whole) + ":" not in err
    # the alias prints the same table
    alias = ["images", "coverage", "--store", str(store), "--splits-dir", str(REPO / "splits")]
    assert main([*alias, "--split", *names]) == 0
    assert capsys.readouterr().out == out


def test_coverage_out_directory_is_verified_and_read_back(tmp_path, capsys):
    store = make_store(tmp_path / "store", "tree", HELD, size=(16, 12), oddities=False).root
    splits_dir = tmp_path / "splits"
    splits_dir.mkdir()
    (splits_dir / "hop1.txt").write_text("n01322898\nn01323068\n")
    out = tmp_path / "cov"
    argv = ["splits", "coverage", "--store", str(store), "--splits-dir", str(splits_dir), "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # the default: the three published lists, then the committed lists the splits dir holds
    assert list(_rows(printed)) == ["dgp-2hops", "dgp-3hops", "dgp-all", "hop1"]
    assert (out / "coverage.tsv").read_text() == printed
    counts, records = read_coverage(out)
    assert counts == HELD
    assert records["hop1"] == {
        "source": "file",
        "sha256": records["hop1"]["sha256"],
        "total": 2,
        "held": 1,
        "complete": False,
        "images_held": 1,
        "images_fall11": 1685 + 1444,
        "images_missing": 1684 + 1444,
        "short": 1,
    }
    assert records["dgp-all"]["held"] == 3 and records["dgp-all"]["source"] == "published"
    missing = (out / "missing.tsv").read_text().splitlines()
    assert missing[0] == "split\twnid\timages_held\timages_fall11"
    assert "hop1\tn01322898\t1\t1685" in missing and "hop1\tn01323068\t0\t1444" in missing
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "imagenet-zsl/coverage-v1" and manifest["store"]["images"] == 8
    (out / "store_counts.tsv").write_text("wnid\tnum_images\nn01322898\t1685\n")
    with pytest.raises(UserInputError, match="store_counts.tsv: changed since it was written"):
        read_coverage(out)


def test_unknown_split_is_one_line_before_the_store_is_read(tmp_path, capsys):
    argv = ["splits", "coverage", "--store", str(tmp_path / "absent"), "--splits-dir", str(tmp_path)]
    assert main([*argv, "dgp-4hops"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "split 'dgp-4hops' not found (splits coverage)" in err
