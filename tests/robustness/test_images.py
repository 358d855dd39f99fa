"""Bad image stores through `imagenet-zsl images count|coverage`: one `error:` line, exit 2,
nothing written; damaged tars, dangling symlinks and non-UTF-8 names are skipped with a warning and
recorded (exit 0), never a traceback or a silent partial index."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.synthetic_store import make_store


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))


def _missing(tmp: Path) -> tuple[list[str], str]:
    return ["--store", str(tmp / "nowhere")], "nowhere"


def _gzip_tar(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "store"
    root.mkdir()
    (root / "n01440764.tar").write_bytes(b"\x1f\x8b\x08\x00" + b"\0" * 600)
    return ["--store", str(root)], "n01440764.tar"


def _flat_without_labels(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    return ["--store", str(root)], "--val-labels"


def _bad_val_id(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    labels = tmp / "labels.txt"
    labels.write_text("1001\n")
    return ["--store", str(root), "--val-labels", str(labels)], "labels.txt:1"


def _tars_and_dirs(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "store"
    (root / "n01443537").mkdir(parents=True)
    (root / "n01440764.tar").write_bytes(b"\0" * 1024)
    return ["--store", str(root)], "--layout"


def _empty_store(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "store"
    root.mkdir()
    return ["--store", str(root)], "store"


def _bad_layout(tmp: Path) -> tuple[list[str], str]:
    return ["--store", str(tmp), "--layout", "zip"], "--layout"


BAD_STORES = {
    "missing-store": _missing,
    "compressed-tar": _gzip_tar,
    "flat-folder-without-labels": _flat_without_labels,
    "val-label-out-of-range": _bad_val_id,
    "tars-and-folders-mixed": _tars_and_dirs,
    "empty-store": _empty_store,
    "unknown-layout": _bad_layout,
}


@pytest.mark.parametrize("case", BAD_STORES, ids=list(BAD_STORES))
def test_bad_store(cli_error, tmp_path: Path, case: str) -> None:
    flags, culprit = BAD_STORES[case](tmp_path)
    out = tmp_path / "counts.tsv"
    cli_error(
        ["images", "count", *flags, "--out", out], culprit=culprit, inputs=[tmp_path], not_created=[out]
    )


def test_coverage_split_with_bad_wnid(cli_error, tmp_path: Path) -> None:
    store = make_store(tmp_path / "s", "tars", {"n01440764": 2}, oddities=False)
    split = tmp_path / "split.txt"
    split.write_text("n01440764\ndog\n")
    cli_error(
        ["images", "coverage", "--store", store.root, "--split", split],
        culprit="split.txt",
        inputs=[tmp_path],
    )


def test_count_flag_show_negative(cli_error, tmp_path: Path) -> None:
    store = make_store(tmp_path / "s", "tars", {"n01440764": 2}, oddities=False)
    split = tmp_path / "split.txt"
    split.write_text("n01440764\n")
    cli_error(
        ["images", "coverage", "--store", store.root, "--split", split, "--show", "-1"],
        culprit="--show",
        inputs=[tmp_path],
    )


# ----------------------------------------------------------------------------- recorded, not fatal


def _bad_header(root: Path) -> str:
    path = root / "n01440764.tar"
    with tarfile.open(path) as tar:
        third = tar.getmembers()[2]
    data = bytearray(path.read_bytes())
    data[third.offset + 148 : third.offset + 156] = b"garbage!"
    path.write_bytes(bytes(data))
    return "bad member header"


def _cut_in_header(root: Path) -> str:
    path = root / "n01440764.tar"
    with tarfile.open(path) as tar:
        third = tar.getmembers()[2]
    os.truncate(path, third.offset + 100)
    return "cut inside a member header"


def _dangling_symlink(root: Path) -> str:
    os.symlink(root / "missing.JPEG", root / "n01440764" / "link.JPEG")
    return "dangling symlink"


def _non_utf8_name(root: Path) -> str:
    with open(os.fsencode(root / "n01440764") + b"/bad_\xff.JPEG", "wb") as handle:
        handle.write(b"x")
    return "non utf8 name"


#: the file each folder-store warning must name (issue 26: it named only the folder)
NAMED_FILE = {
    "dangling-symlink": "n01440764/link.JPEG",
    "non-utf8-file-name": "n01440764/bad_\\xff.JPEG",
}


SKIPPED = {
    "tar-bad-member-header": ("tars", _bad_header),
    "tar-cut-inside-header": ("tars", _cut_in_header),
    "dangling-symlink": ("tree", _dangling_symlink),
    "non-utf8-file-name": ("tree", _non_utf8_name),
}


@pytest.mark.parametrize("case", SKIPPED, ids=list(SKIPPED))
def test_damage_is_recorded_and_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, case: str
) -> None:
    layout, damage = SKIPPED[case]
    store = make_store(tmp_path / "s", layout, {"n01440764": 4, "n01443537": 2}, oddities=False)
    warning = damage(store.root)
    out = tmp_path / "counts.tsv"
    capsys.readouterr()
    assert main(["images", "count", "--store", str(store.root), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "1 damaged or skipped entries" in err
    assert warning in caplog.text.replace("-", " ")
    if case in NAMED_FILE:
        assert f"{store.root}/{NAMED_FILE[case]}: " in caplog.text
    index = next((tmp_path / "cache" / "index").glob("*.parquet"))
    import pyarrow.parquet as pq

    problems = json.loads(pq.read_schema(index).metadata[b"imagenet_zsl"])["problems"]
    assert len(problems) == 1 and problems[0]["source"] in ("n01440764.tar", "n01440764")


# ----------------------------------------------------------------------------- issue 26: --out files
def test_count_out_inside_the_store_is_refused(cli_error, tmp_path: Path) -> None:
    """`images count --store st --out st/n01440764.tar` replaced an image tar with a TSV."""
    store = make_store(tmp_path / "s", "tars", {"n01440764": 2}, oddities=False)
    tar = store.root / "n01440764.tar"
    line = cli_error(["images", "count", "--store", store.root, "--out", tar], str(tar), inputs=[store.root])
    assert "is the input" not in line and "inside the input" in line
    with tarfile.open(tar) as archive:
        assert len(archive.getmembers()) == 2


def test_count_out_equal_to_the_val_labels_is_refused(cli_error, tmp_path: Path) -> None:
    root = tmp_path / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    labels = tmp_path / "labels.txt"
    labels.write_text("ILSVRC2012_val_00000001.JPEG\tn01440764\n")
    argv = ["images", "count", "--store", root, "--val-labels", labels, "--out", labels]
    cli_error(argv, "is the input", inputs=[root, labels])


def test_count_out_is_someone_elses_file(cli_error, tmp_path: Path) -> None:
    store = make_store(tmp_path / "s", "tars", {"n01440764": 2}, oddities=False)
    notes = tmp_path / "notes.tsv"
    notes.write_text("my notes\n")
    line = cli_error(["images", "count", "--store", store.root, "--out", notes], "notes.tsv", inputs=[notes])
    assert "not a counts table" in line


def test_count_replaces_its_own_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = make_store(tmp_path / "s", "tars", {"n01440764": 2}, oddities=False)
    out = tmp_path / "counts.tsv"
    out.write_text("wnid\tnum_images\nn01443537\t7\n")
    assert main(["images", "count", "--store", str(store.root), "--out", str(out)]) == 0
    assert out.read_text() == "wnid\tnum_images\nn01440764\t2\n"
