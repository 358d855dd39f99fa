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


def _val_labels_latin1(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    labels = tmp / "labels.txt"
    labels.write_bytes(b"# caf\xe9 notes\nILSVRC2012_val_00000001.JPEG\tn01440764\n")  # Latin-1 e-acute
    return ["--store", str(root), "--val-labels", str(labels)], "labels.txt:1"


def _val_labels_superscript(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    labels = tmp / "labels.txt"
    labels.write_text("1\n²\n", encoding="utf-8")  # '²'.isdigit() is True, int('²') fails
    return ["--store", str(root), "--val-labels", str(labels)], "labels.txt:2"


def _val_label_not_a_wnid(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    labels = tmp / "labels.txt"
    labels.write_text("ILSVRC2012_val_00000001.JPEG\ttench\n")
    return ["--store", str(root), "--val-labels", str(labels)], "labels.txt:1"


def _val_labels_fifo(tmp: Path) -> tuple[list[str], str]:
    root = tmp / "val"
    root.mkdir()
    (root / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"\xff\xd8")
    os.mkfifo(tmp / "labels.txt")  # was 'not found'; opening it would block
    flags = ["--store", str(root), "--val-labels", str(tmp / "labels.txt")]
    return flags, "labels.txt: the --val-labels file is a FIFO"


def _store_is_a_fifo(tmp: Path) -> tuple[list[str], str]:
    os.mkfifo(tmp / "pipe")
    return ["--store", str(tmp / "pipe")], "pipe"


BAD_STORES = {
    "val-labels-latin-1": _val_labels_latin1,
    "val-labels-superscript-digit": _val_labels_superscript,
    "val-label-not-a-wnid": _val_label_not_a_wnid,
    "val-labels-fifo": _val_labels_fifo,
    "store-is-a-fifo": _store_is_a_fifo,
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


# ----------------------------------------------------------------------------- issue 35: files not read
def _hang_guard(seconds: int = 60) -> None:
    """Fail (SIGALRM) instead of hanging forever if something opens a FIFO."""
    import signal

    def _fail(*_: object) -> None:
        raise AssertionError("blocked: a FIFO in the store was opened")

    signal.signal(signal.SIGALRM, _fail)
    signal.alarm(seconds)


def test_files_not_read_are_counted_and_summarised_in_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(tmp_path / "s", "tree", {"n01440764": 2, "n01443537": 1}, oddities=False)
    jpeg = (store.root / "n01440764" / "n01440764_1.JPEG").read_bytes()
    (store.root / "n01440764" / "photo.jfif").write_bytes(jpeg)  # a JPEG: read and counted
    (store.root / "n01440764" / "photo.heic").write_bytes(b"\0\0\0\x18ftypheic")
    (store.root / "n01440764" / "IMG_0001").write_bytes(jpeg)  # no suffix: not read
    (store.root / "n01443537" / "a.heic").write_bytes(b"\0\0\0\x18ftypheic")
    (store.root / "n01443537" / "._n01443537_1.JPEG").write_bytes(b"\0\x05\x16\x07")  # macOS fork
    os.mkfifo(store.root / "n01443537" / "stuck.JPEG")  # never opened
    _hang_guard()
    try:
        assert main(["images", "count", "--store", str(store.root)]) == 0
    finally:
        import signal

        signal.alarm(0)
    out, err = capsys.readouterr()
    assert out.splitlines()[1:] == ["n01440764\t3", "n01443537\t1"]
    assert "4 files not read as images (see the warning)" in err
    assert "1 damaged or skipped entries (not-a-regular-file)" in err
    summaries = [r.getMessage() for r in caplog.records if "files not read as images" in r.getMessage()]
    assert len(summaries) == 1 and "(hidden) 1, (none) 1, .heic 2" in summaries[0]
    assert any(
        "stuck.JPEG" in r.getMessage() and "not a regular file" in r.getMessage() for r in caplog.records
    )
    import pyarrow.parquet as pq

    index = next((tmp_path / "cache" / "index").glob("*.parquet"))
    problems = json.loads(pq.read_schema(index).metadata[b"imagenet_zsl"])["problems"]
    counted = {p["source"]: p["count"] for p in problems if p["kind"] == "skipped-files"}
    assert counted == {"n01440764": 2, "n01443537": 2}


def test_a_fifo_put_in_place_of_an_image_is_a_read_error_not_a_hang(tmp_path: Path) -> None:
    from imagenet_zsl.images.store import open_store

    store = make_store(tmp_path / "s", "tree", {"n01440764": 2}, oddities=False)
    opened = open_store(store.root, progress=False)
    image = store.root / "n01440764" / opened.member[0]
    image.unlink()
    os.mkfifo(image)  # replaced after indexing
    reader = opened.reader()
    _hang_guard()
    try:
        with pytest.raises(OSError, match="not a regular file"):
            reader.read(int(opened.source_index[0]), opened.member[0], -1, 0)
    finally:
        import signal

        signal.alarm(0)


def _png16(width: int, height: int, row: bytes) -> bytes:
    """A 16-bit greyscale PNG whose every row is ``row`` (big-endian uint16 values)."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, 0, 0, 0, 0)
    compressor = zlib.compressobj(1)
    body = b"".join(compressor.compress(b"\0" + row) for _ in range(height)) + compressor.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def test_16_bit_png_grey_levels_are_scaled_by_hand_in_strips(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from imagenet_zsl.images import decode

    values = [0, 257, 32768, 65535, 1000]  # → round(v * 255 / 65535): 0, 1, 128, 255, 4
    row = b"".join(v.to_bytes(2, "big") for v in values)
    monkeypatch.setattr(decode, "STRIP_PIXELS", 10)  # 2 rows a strip: 7 rows in 4 strips
    image = np.asarray(decode.decode_rgb(_png16(5, 7, row)))
    assert image.shape == (7, 5, 3)
    assert (image == np.array([0, 1, 128, 255, 4], np.uint8)[None, :, None]).all()


def test_a_36_megapixel_16_bit_png_decodes_and_a_bigger_one_is_a_tidy_skip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    from imagenet_zsl.images import decode

    data = _png16(6000, 6000, (32768).to_bytes(2, "big") * 6000)  # 36 M pixels, 72 MB decoded
    image = decode.decode_rgb(data, min_side=64)
    assert image.size == (6000, 6000) and image.mode == "RGB"
    assert np.asarray(image.crop((5990, 5990, 6000, 6000))).min() == 128
    del image
    monkeypatch.setattr(decode, "MAX_DECODED_BYTES", 64 << 20)  # as a 169 M pixel one meets 1 GB
    with pytest.raises(decode.DecodeFailure, match=r"too large to decode \(6000x6000 I;16: 68 MB decoded"):
        decode.decode_rgb(data)
