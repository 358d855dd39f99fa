import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.data import ilsvrc2012_wnids, read_wnid_counts
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.images import store as store_mod
from imagenet_zsl.images.store import LAYOUTS, detect_layout, open_store, read_val_labels

CLASSES = {"n01440764": 9, "n02084071": 3, "n03000134": 2}


def _expected_counts(generated):
    """Hand count: every generated file except the zero-byte one."""
    counts = {}
    for image_id, kind in generated.kinds.items():
        if kind != "empty":
            wnid = image_id.split("/")[0]
            counts[wnid] = counts.get(wnid, 0) + 1
    return counts


@pytest.mark.parametrize("layout", ["tars", "tree", "flat"])
def test_every_layout_indexes_every_image_with_stable_ids(tmp_path, layout):
    generated = make_store(tmp_path / "s", layout, CLASSES)
    store = open_store(generated.root, val_labels=generated.labels, progress=False)
    assert store.layout == layout
    assert sorted(store.image_ids().tolist()) == sorted(generated.ids)
    assert store.classes == sorted(CLASSES)
    assert store.counts() == _expected_counts(generated)
    assert store.counts() == {"n01440764": 8, "n02084071": 3, "n03000134": 2}
    assert store.counts(include_empty=True)["n01440764"] == 9


@pytest.mark.parametrize("layout", ["tars", "tree", "flat"])
def test_reader_returns_the_exact_bytes_written(tmp_path, layout):
    generated = make_store(tmp_path / "s", layout, {"n01440764": 4, "n02084071": 2}, oddities=False)
    store = open_store(generated.root, val_labels=generated.labels, progress=False)
    reader = store.reader()
    ids = store.image_ids()
    for row in range(len(store)):
        data = reader.read(
            int(store.source_index[row]), store.member[row], int(store.offset[row]), int(store.size[row])
        )
        wnid, name = ids[row].split("/")
        if layout == "tars":
            with tarfile.open(generated.root / f"{wnid}.tar") as tar:
                expected = tar.extractfile(name).read()
        elif layout == "tree":
            expected = (generated.root / wnid / name).read_bytes()
        else:
            expected = (generated.root / name).read_bytes()
        assert data == expected and len(data) == store.size[row]
    reader.close()


def test_tar_offsets_allow_reading_in_place_in_tar_order(tmp_path):
    generated = make_store(tmp_path / "s", "tars", {"n01440764": 5}, oddities=False)
    store = open_store(generated.root, progress=False)
    assert np.all(np.diff(store.offset) > 0)  # sequential reads within a tar
    assert np.all(store.offset % 512 == 0)  # tar data blocks are 512-aligned


def test_index_is_cached_and_rebuilt_when_the_store_changes(tmp_path, monkeypatch):
    generated = make_store(tmp_path / "s", "tars", {"n01440764": 3, "n02084071": 2}, oddities=False)
    first = open_store(generated.root, progress=False)
    cached = list((tmp_path / "index-cache" / "index").glob("*.parquet"))
    assert [p.stem for p in cached] == [first.key]

    def no_build(*args, **kwargs):
        raise AssertionError("index rebuilt although cached")

    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "build_index", no_build)
        again = open_store(generated.root, progress=False)
    assert again.image_ids().tolist() == first.image_ids().tolist()
    assert np.array_equal(again.offset, first.offset)

    # a new tar changes the key: the index is rebuilt and sees the new class
    make_store(tmp_path / "more", "tars", {"n03000134": 4}, oddities=False, seed=5)
    os.replace(tmp_path / "more" / "n03000134.tar", generated.root / "n03000134.tar")
    grown = open_store(generated.root, progress=False)
    assert grown.key != first.key
    assert grown.counts()["n03000134"] == 4


def test_broken_cache_file_is_rebuilt_not_trusted(tmp_path):
    generated = make_store(tmp_path / "s", "tree", {"n01440764": 3}, oddities=False)
    first = open_store(generated.root, progress=False)
    path = tmp_path / "index-cache" / "index" / f"{first.key}.parquet"
    path.write_bytes(b"garbage")
    assert len(open_store(generated.root, progress=False)) == 3


def test_devkit_ground_truth_maps_ids_through_the_packaged_wnid_list(tmp_path):
    wnids = ilsvrc2012_wnids()
    path = tmp_path / "gt.txt"
    path.write_text("1\n490\n1000\n")
    labels = read_val_labels(path)
    assert labels == {
        "ILSVRC2012_val_00000001.JPEG": "n02119789",  # devkit id 1 (kit fox)
        "ILSVRC2012_val_00000002.JPEG": wnids[489],
        "ILSVRC2012_val_00000003.JPEG": wnids[999],
    }
    path.write_text("1\n1001\n")
    with pytest.raises(UserInputError, match=r"gt.txt:2: ILSVRC2012_ID 1001"):
        read_val_labels(path)


def test_devkit_flat_store_end_to_end(tmp_path):
    chosen = sorted(ilsvrc2012_wnids())[:2]
    generated = make_store(
        tmp_path / "s", "flat", dict.fromkeys(chosen, 3), oddities=False, labels_format="devkit"
    )
    store = open_store(generated.root, val_labels=generated.labels, progress=False)
    assert sorted(store.image_ids().tolist()) == sorted(generated.ids)


def test_tab_labels_file_and_its_errors(tmp_path):
    path = tmp_path / "labels.tsv"
    path.write_text("a.JPEG\tn01440764\nsub/b.JPEG\tn02084071\n")
    assert read_val_labels(path) == {"a.JPEG": "n01440764", "b.JPEG": "n02084071"}
    path.write_text("a.JPEG\tn01440764\nb.JPEG\n")
    with pytest.raises(UserInputError, match=r"labels.tsv:2: expected 'filename<TAB>wnid'"):
        read_val_labels(path)
    path.write_text("a.JPEG\tn01440764\na.JPEG\tn02084071\n")
    with pytest.raises(UserInputError, match="labelled twice"):
        read_val_labels(path)


def test_flat_store_with_unlabelled_images_is_refused(tmp_path):
    generated = make_store(tmp_path / "s", "flat", {"n01440764": 3}, oddities=False)
    generated.labels.write_text(generated.labels.read_text().splitlines()[0] + "\n")
    with pytest.raises(UserInputError, match="2 images have no label"):
        open_store(generated.root, val_labels=generated.labels, progress=False)


def test_layout_detection_errors_name_the_fix(tmp_path):
    with pytest.raises(UserInputError, match="not found"):
        detect_layout(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="no <wnid>.tar files"):
        detect_layout(tmp_path / "empty")
    flat = make_store(tmp_path / "flat", "flat", {"n01440764": 2}, oddities=False)
    with pytest.raises(UserInputError, match="needs labels: pass --val-labels"):
        detect_layout(flat.root)
    mixed = make_store(tmp_path / "mixed", "tree", {"n01440764": 2}, oddities=False)
    make_store(tmp_path / "mixed", "tars", {"n02084071": 2}, oddities=False)
    with pytest.raises(UserInputError, match="pass --layout tars or --layout tree"):
        detect_layout(mixed.root)
    assert open_store(mixed.root, layout="tars", progress=False).classes == ["n02084071"]
    assert open_store(mixed.root, layout="tree", progress=False).classes == ["n01440764"]


def test_single_synset_tar_and_flat_tar_are_stores(tmp_path):
    generated = make_store(tmp_path / "s", "tars", {"n01440764": 3}, oddities=False)
    single = open_store(generated.root / "n01440764.tar", progress=False)
    assert single.counts() == {"n01440764": 3}
    # a flat tar (like ILSVRC2012_img_val.tar) with a labels file
    val_tar = tmp_path / "val.tar"
    with tarfile.open(val_tar, "w") as tar:
        for name in ("x1.JPEG", "x2.JPEG", "notes.txt"):
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    labels = tmp_path / "val_labels.tsv"
    labels.write_text("x1.JPEG\tn01440764\nx2.JPEG\tn02084071\n")
    flat = open_store(val_tar, val_labels=labels, progress=False)
    assert sorted(flat.image_ids().tolist()) == ["n01440764/x1.JPEG", "n02084071/x2.JPEG"]


def test_compressed_tar_is_refused_with_a_fix(tmp_path):
    (tmp_path / "s").mkdir()
    with tarfile.open(tmp_path / "s" / "n01440764.tar", "w:gz") as tar:
        info = tarfile.TarInfo("a.JPEG")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(UserInputError, match="compressed archive.*decompress it first"):
        open_store(tmp_path / "s", progress=False)


def test_damaged_tar_keeps_the_members_before_the_damage(tmp_path, caplog):
    generated = make_store(tmp_path / "s", "tars", {"n01440764": 3, "n02084071": 2}, oddities=False)
    path = generated.root / "n01440764.tar"
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    os.truncate(path, last.offset_data + 100)  # a download cut inside the last image
    (generated.root / "n03000134.tar").write_bytes(b"<html>404</html>")  # not a tar at all
    store = open_store(generated.root, progress=False)
    assert store.counts() == {"n01440764": 2, "n02084071": 2}  # the cut member is counted, not indexed
    assert last.name not in store.member.tolist()
    cut, html = store.ledger[0], store.ledger[2]
    assert (cut["members"], cut["images"], cut["skipped"]) == (3, 2, {"truncated": 1})
    assert cut["bytes_unread"] == last.offset_data + 100 - last.offset  # its header and 100 bytes
    assert "truncated inside member n01440764_3.JPEG after 2 complete members" in cut["damage"]
    assert (html["members"], html["bytes_unread"]) == (0, 16) and "not a readable tar" in html["damage"]
    assert "damaged tar" in caplog.text and "n03000134.tar" in caplog.text


def test_hidden_files_and_non_images_are_ignored(tmp_path):
    generated = make_store(tmp_path / "s", "tree", {"n01440764": 2}, oddities=False)
    (generated.root / "n01440764" / "._n01440764_1.JPEG").write_bytes(b"\0" * 10)
    (generated.root / "n01440764" / "README.txt").write_text("hi")
    assert open_store(generated.root, progress=False).counts() == {"n01440764": 2}


def test_images_count_cli_writes_the_packaged_counts_format(tmp_path, capsys):
    generated = make_store(tmp_path / "s", "tars", CLASSES)
    out = tmp_path / "counts.tsv"
    assert main(["images", "count", "--store", str(generated.root), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.splitlines()[0] == "wnid\tnum_images"
    assert text == "wnid\tnum_images\nn01440764\t8\nn02084071\t3\nn03000134\t2\n"
    assert read_wnid_counts(out) == _expected_counts(generated)
    assert "1 zero-byte files not counted" in capsys.readouterr().err
    # stdout when no --out
    assert main(["images", "count", "--store", str(generated.root)]) == 0
    assert capsys.readouterr().out == text


def test_images_count_cli_reports_bad_store_as_one_line(tmp_path, capsys):
    assert main(["images", "count", "--store", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "image store not found" in err and "\n" not in err


def test_select_rows_keeps_store_order(tmp_path):
    generated = make_store(tmp_path / "s", "tree", CLASSES, oddities=False)
    store = open_store(generated.root, progress=False)
    rows = store_mod.select_rows(store, ["n03000134", "n01440764"])
    assert np.all(np.diff(rows) > 0)
    assert {i.split("/")[0] for i in store.image_ids(rows)} == {"n03000134", "n01440764"}
    assert len(rows) == 11


def test_paths_are_resolved(tmp_path, monkeypatch):
    generated = make_store(tmp_path / "s", "tree", {"n01440764": 2}, oddities=False)
    monkeypatch.chdir(tmp_path)
    store = open_store(Path("s"), progress=False)
    assert store.root == generated.root.resolve()


def _tar_of(path: Path, names: list[str], payload: bytes = b"\xff\xd8jpeg\xff\xd9") -> list[tarfile.TarInfo]:
    with tarfile.open(
        path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape"
    ) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tar:
        return tar.getmembers()


def test_bad_member_header_is_recorded_with_the_members_it_hides(tmp_path, caplog):
    root = tmp_path / "s"
    root.mkdir()
    members = _tar_of(root / "n01440764.tar", [f"n01440764_{i}.JPEG" for i in range(5)])
    data = bytearray((root / "n01440764.tar").read_bytes())
    data[members[2].offset + 148 : members[2].offset + 156] = b"garbage!"  # checksum field
    (root / "n01440764.tar").write_bytes(bytes(data))
    store = open_store(root, progress=False)
    assert store.counts() == {"n01440764": 2}
    [problem] = store.problems
    assert problem["kind"] == "damaged-tar" and problem["source"] == "n01440764.tar"
    assert problem["offset"] == members[2].offset and problem["members_lost"] == 2
    assert "damaged tar" in caplog.text and "bad member header" in caplog.text
    # recorded in the cached index too
    again = open_store(root, progress=False)
    assert again.problems == store.problems


def test_tar_cut_inside_a_header_is_recorded(tmp_path, caplog):
    root = tmp_path / "s"
    root.mkdir()
    members = _tar_of(root / "n01440764.tar", [f"n01440764_{i}.JPEG" for i in range(3)])
    os.truncate(root / "n01440764.tar", members[2].offset + 200)
    store = open_store(root, progress=False)
    assert store.counts() == {"n01440764": 2}
    assert [p["kind"] for p in store.problems] == ["damaged-tar"]
    assert "cut inside a member header" in store.problems[0]["detail"]
    assert "damaged tar" in caplog.text


def test_non_utf8_member_names_in_tars_are_skipped_and_recorded(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    bad = b"n01440764_\xff.JPEG".decode("utf-8", "surrogateescape")
    _tar_of(root / "n01440764.tar", ["n01440764_1.JPEG", bad])
    store = open_store(root, progress=False)
    assert store.counts() == {"n01440764": 1}
    assert [p["kind"] for p in store.problems] == ["non-utf8-name"]


def test_dangling_symlinks_and_non_utf8_file_names_are_skipped_and_recorded(tmp_path):
    generated = make_store(tmp_path / "s", "tree", {"n01440764": 2}, oddities=False)
    folder = generated.root / "n01440764"
    os.symlink(folder / "gone.JPEG", folder / "link.JPEG")
    with open(os.fsencode(folder) + b"/n01440764_\xff.JPEG", "wb") as handle:
        handle.write(b"x")
    store = open_store(generated.root, progress=False)
    assert store.counts() == {"n01440764": 2}
    kinds = sorted(p["kind"] for p in store.problems)
    assert kinds == ["dangling-symlink", "non-utf8-name"]
    assert any(p.get("path") == "link.JPEG" for p in store.problems)


def test_layouts_are_chosen_in_one_place(tmp_path):
    assert LAYOUTS == ("tars", "tree", "flat", "wds", "parquet", "in21k-p")
    with pytest.raises(UserInputError, match=r"--layout 'zip': choose one of auto, tars, tree, flat, wds"):
        open_store(tmp_path, layout="zip")
    generated = make_store(tmp_path / "s", "tars", {"n01440764": 2}, oddities=False)
    archive = tmp_path / "photos.tar"
    os.replace(generated.root / "n01440764.tar", archive)
    # a tar not named <wnid>.tar: a webdataset shard when detected (its samples have no labels:
    # the error says a flat val tar needs labels); forced as tars or flat, one line
    with pytest.raises(UserInputError, match="--layout tars needs <wnid>.tar files, not photos.tar"):
        open_store(archive, layout="tars", progress=False)
    with pytest.raises(UserInputError, match="photos.tar: sample n01440764_1: no wnid.*needs --val-labels"):
        open_store(archive, progress=False)
    with pytest.raises(UserInputError, match="--layout flat needs --val-labels FILE"):
        open_store(archive, layout="flat", progress=False)


def test_a_tar_holding_one_name_twice_is_refused_naming_the_id(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    with tarfile.open(root / "n01440764.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for payload in (b"\xff\xd8first", b"\xff\xd8second", b"\xff\xd8other"):  # appended twice
            info = tarfile.TarInfo("other.JPEG" if payload.endswith(b"other") else "a.JPEG")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(UserInputError, match=r"image id n01440764/a\.JPEG is twice in n01440764\.tar \(1 "):
        open_store(root, progress=False)
