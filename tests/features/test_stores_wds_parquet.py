"""The stores researchers hold today (issue #34 §1): webdataset shards (jpg and webp, as timm's hub
datasets), the parquet release and ImageNet-21K-P's three folders give the same features as the
same image bytes in a folder store; `images count` detects them; a shard whose labels disagree
is one error line naming the shard and the key."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.images.store import open_store

CLASSES = {"n01440764": 9, "n01443537": 3, "n01484850": 4}

#: (layout, image format of the store, image format of the folder store with the same bytes/names)
CASES = [
    ("wds", "jpeg", "jpg"),
    ("wds", "webp", "webp"),
    ("parquet", "jpeg", "jpeg"),
    ("parquet", "webp", "webp"),
    ("in21k-p", "jpeg", "jpeg"),
]


def _features(tmp_path: Path, store, name: str, fx) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    classes = fx.write_classes(tmp_path / "classes.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / name)
    features = FeatureDir(tmp_path / name)
    block = features.load()
    skipped = {s["id"]: s["reason"] for s in features.manifest["skipped"]}
    return dict(zip(block.ids.tolist(), block.features, strict=True)), skipped


@pytest.mark.parametrize(("layout", "image_format", "folder_format"), CASES)
def test_extract_gives_the_features_of_the_same_images_in_a_folder_store(
    tmp_path, layout, image_format, folder_format, fx
):
    store = make_store(tmp_path / "store", layout, CLASSES, image_format=image_format)
    folder = make_store(tmp_path / "folder", "tree", CLASSES, image_format=folder_format)
    assert sorted(store.ids) == sorted(folder.ids)  # same names, same bytes (seeded)
    got, got_skipped = _features(tmp_path, store, "out", fx)
    want, want_skipped = _features(tmp_path, folder, "ref", fx)
    manifest = FeatureDir(tmp_path / "out").manifest
    assert manifest["inputs"]["store"]["layout"] == layout
    assert sorted(got) == sorted(want) == folder.good_ids
    assert got_skipped == want_skipped and sorted(got_skipped) == folder.broken_ids
    for image_id, row in want.items():  # same pixels, same network: the same numbers
        np.testing.assert_allclose(got[image_id], row, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("layout", "image_format", "_"), CASES)
def test_images_count_detects_the_layout_and_counts_per_wnid(tmp_path, layout, image_format, _, capsys):
    store = make_store(tmp_path / "store", layout, CLASSES, image_format=image_format, oddities=False)
    assert main(["images", "count", "--store", str(store.root)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["wnid\tnum_images", "n01440764\t9", "n01443537\t3", "n01484850\t4"]
    assert f"16 images in 3 classes ({layout} store" in err


def _shard(path: Path, samples: list[tuple[str, bytes, dict | None, str | None]]) -> None:
    """A webdataset shard: per sample (key, image bytes, .json or None, .cls text or None)."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, data, meta, cls in samples:
            members = [(f"{key}.jpg", data)]
            members += [(f"{key}.cls", cls.encode())] if cls is not None else []
            members += [(f"{key}.json", json.dumps(meta).encode())] if meta is not None else []
            for name, payload in members:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 60


def _error_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error")]  # not the progress bar
    assert len(lines) == 1 and "Traceback" not in err
    return lines[0]


def test_a_cls_that_disagrees_with_its_json_wnid_names_the_shard_and_key(tmp_path, capsys):
    root = tmp_path / "wds"
    root.mkdir()
    _shard(root / "in22k-train-0000.tar", [("a1", JPEG, {"class_name": "n01440764"}, "0")])
    _shard(root / "in22k-train-0001.tar", [("b7", JPEG, {"class_name": "n01443537"}, "0")])
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "in22k-train-0001.tar: sample b7: .cls 0 with .json n01443537" in line
    assert "in22k-train-0000.tar sample a1" in line


def test_the_class_index_file_is_checked_against_every_json(tmp_path, capsys):
    root = tmp_path / "wds"
    root.mkdir()
    (root / "imagenet22k_synsets.txt").write_text("n01440764\nn01443537\n")
    _shard(root / "s-0000.tar", [("a1", JPEG, {"class_name": "n01440764"}, "0"), ("a2", JPEG, None, "1")])
    store = open_store(root, progress=False)  # a2: its wnid from the class-index file
    assert store.counts() == {"n01440764": 1, "n01443537": 1}
    _shard(root / "s-0000.tar", [("a1", JPEG, {"class_name": "n01443537"}, "0")])
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "s-0000.tar: sample a1: .cls 0 is n01440764 in" in line and "the .json says n01443537" in line
    _shard(root / "s-0000.tar", [("a1", JPEG, {"class_name": "n01440764", "label": 1}, "0")])
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "s-0000.tar: sample a1: .cls says 0 but .json label says 1" in line


def test_a_sample_with_no_label_at_all_is_one_error_line(tmp_path, capsys):
    root = tmp_path / "wds"
    root.mkdir()
    _shard(root / "s-0000.tar", [("a1", JPEG, {"width": 3}, "5")])
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "s-0000.tar: sample a1: no wnid" in line
    _shard(root / "s-0000.tar", [("a1", JPEG, {"class_name": "dog"}, "5")])
    assert "not a wnid" in _error_line(capsys, ["images", "count", "--store", str(root)])


def test_parquet_label_names_come_from_the_dataset_card_when_the_files_carry_none(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "pq"
    root.mkdir()
    image = pa.array([{"bytes": JPEG, "path": f"x{i}.jpg"} for i in range(3)])
    pq.write_table(pa.table({"image": image, "label": pa.array([1, 0, 1])}), root / "train.parquet")
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "train.parquet: no class names for 'label'" in line
    card = "---\ndataset_info:\n  features:\n  - name: image\n    dtype: image\n  - name: label\n"
    card += "    dtype:\n      class_label:\n        names:\n"
    card += "          '0': n01443537\n          '1': n01440764\n"
    (root / "README.md").write_text(card + "---\n# ImageNet-21K-P\n")
    assert main(["images", "count", "--store", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["n01440764\t2", "n01443537\t1"]
    (root / "README.md").write_text(card.replace("n01443537", "tench") + "---\n")
    assert "label names must be wnids" in _error_line(capsys, ["images", "count", "--store", str(root)])
    (root / "imagenet21k_miil_w21_synsets.txt").write_text("n01484850\nn01440764\n")  # names → wnids
    assert main(["images", "count", "--store", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["n01440764\t2", "n01484850\t1"]


def test_in21k_p_is_one_store_and_an_image_in_two_folders_is_refused(tmp_path, capsys):
    store = make_store(tmp_path / "p", "in21k-p", CLASSES, oddities=False)
    parts = sorted(p.name for p in store.root.iterdir())
    assert parts == ["imagenet21k_small_classes", "imagenet21k_train", "imagenet21k_val"]
    assert open_store(store.root, progress=False).counts() == CLASSES
    twin = store.root / "imagenet21k_val" / "n01440764" / "n01440764_1.JPEG"
    twin.write_bytes((store.root / "imagenet21k_train" / "n01440764" / "n01440764_1.JPEG").read_bytes())
    line = _error_line(capsys, ["images", "count", "--store", str(store.root), "--rebuild-index"])
    assert "n01440764/n01440764_1.JPEG is in both imagenet21k_train/n01440764 and imagenet21k_val" in line


def test_a_folder_of_both_fall11_tars_and_shards_asks_for_the_layout(tmp_path):
    store = make_store(tmp_path / "s", "wds", {"n01440764": 2}, oddities=False)
    fall11 = make_store(tmp_path / "f", "tars", {"n01443537": 2}, oddities=False)
    (store.root / "n01443537.tar").write_bytes((fall11.root / "n01443537.tar").read_bytes())
    with pytest.raises(UserInputError, match="pass --layout tars or --layout wds"):
        open_store(store.root, progress=False)
    # forced, neither layout leaves the other kind of .tar out without a word
    with pytest.raises(UserInputError, match="--layout tars reads <wnid>.tar files, but imagenet22k-train"):
        open_store(store.root, layout="tars", progress=False)
    with pytest.raises(UserInputError, match="n01443537.tar: sample n01443537_1: no wnid"):
        open_store(store.root, layout="wds", progress=False)
    (store.root / "n01443537.tar").unlink()
    assert open_store(store.root, layout="wds", progress=False).layout == "wds"


@pytest.mark.parametrize("layout", ["wds", "parquet"])
def test_a_killed_run_resumes_to_the_same_bytes_with_worker_processes(tmp_path, layout, monkeypatch, fx):
    from imagenet_zsl.features import extract_loop

    store = make_store(tmp_path / "store", layout, CLASSES, image_format="webp")
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "whole", workers=2)  # readers pickled into workers
    real_write, calls = extract_loop.write_shard, []

    def dying_write(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while the second shard is being written
        return real_write(*args, **kwargs)

    monkeypatch.setattr(extract_loop, "write_shard", dying_write)
    with pytest.raises(KeyboardInterrupt):
        fx.extract(store, classes, tmp_path / "killed")
    monkeypatch.setattr(extract_loop, "write_shard", real_write)
    result = fx.extract(store, classes, tmp_path / "killed")
    assert result.shards_already_done == 1 and result.shards_written == 2
    assert fx.all_files(tmp_path / "killed") == fx.all_files(tmp_path / "whole")


def test_images_coverage_reads_a_webdataset_store(tmp_path, capsys):
    store = make_store(tmp_path / "s", "wds", {"n01440764": 3, "n01443537": 2}, oddities=False)
    split = tmp_path / "split.txt"
    split.write_text("n01440764\nn01443537\nn01484850\n")
    assert main(["images", "coverage", "--store", str(store.root), "--split", str(split)]) == 0
    out, err = capsys.readouterr()
    row = out.splitlines()[1].split("\t")
    assert row[1:4] == ["3", "2", "no"] and "classes missing: n01484850" in err


def _parquet(path: Path, paths: list[str | None], labels: list[int], names: list[str]) -> None:
    """A parquet file in the ``datasets`` image format, its label names in the schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = pa.array([{"bytes": JPEG + bytes([i]), "path": p} for i, p in enumerate(paths)])
    table = pa.table({"image": image, "label": pa.array(labels)})
    meta = {"info": {"features": {"label": {"names": names, "_type": "ClassLabel"}}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps(meta)}), path)


def test_parquet_rows_without_a_usable_path_get_ids_unique_across_files(tmp_path):
    root, names = tmp_path / "pq", ["n01440764", "n01443537"]
    for split in ("train", "validation"):  # saved from PIL images: no path
        _parquet(root / "data" / f"{split}-00000-of-00001.parquet", [None] * 4, [0, 0, 1, 1], names)
    store = open_store(root, progress=False)
    ids = store.image_ids().tolist()
    assert len(ids) == len(set(ids)) == 8
    assert "n01440764/data/train-00000-of-00001/row00000001" in ids
    assert "n01443537/data/validation-00000-of-00001/row00000003" in ids
    _parquet(root / "data" / "more.parquet", ["a.jpg", "a.jpg", "b.jpg"], [0, 1, 1], names)  # repeated
    ids = open_store(root, progress=False).image_ids().tolist()
    assert len(set(ids)) == 11 and "n01443537/data/more/row00000002" in ids


def test_a_store_with_one_id_in_two_sources_is_refused_up_front(tmp_path, capsys):
    root, names = tmp_path / "pq", ["n01440764", "n01443537"]
    _parquet(root / "data" / "train.parquet", ["x/a.jpg", "x/b.jpg"], [0, 1], names)
    _parquet(root / "data" / "validation.parquet", ["y/c.jpg", "y/b.jpg"], [0, 1], names)
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "n01443537/b.jpg" in line and "data/train.parquet" in line and "data/validation.parquet" in line


def test_an_imagenet_1k_train_val_folder_is_not_read_as_imagenet_21k_p(tmp_path, capsys):
    """``imagenet/train/<wnid>/`` + ``imagenet/val/<wnid>/`` (PyTorch's ImageNet-1k layout) are two
    stores: auto-detection asks which; ``--layout in21k-p`` still reads the bare names as one."""
    root = tmp_path / "imagenet"
    for part, wnid, name in [("train", "n01440764", "a.JPEG"), ("val", "n01443537", "b.JPEG")]:
        (root / part / wnid).mkdir(parents=True)
        (root / part / wnid / name).write_bytes(JPEG)
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert "train/ and val/" in line and "--layout in21k-p" in line and f"--store {root}/val" in line
    assert open_store(root, layout="in21k-p", progress=False).counts() == {"n01440764": 1, "n01443537": 1}
    assert open_store(root / "val", progress=False).counts() == {"n01443537": 1}
    (root / "small_classes" / "n01484850").mkdir(parents=True)  # only ImageNet-21K-P has this one
    (root / "small_classes" / "n01484850" / "c.JPEG").write_bytes(JPEG)
    assert open_store(root, progress=False).layout == "in21k-p"


def test_the_parquet_class_index_file_is_read_beside_the_files_or_in_the_store_folder(tmp_path, capsys):
    root, names = tmp_path / "pq", ["tench", "goldfish"]  # human-readable: wnids from the index
    _parquet(root / "data" / "train-00000-of-00001.parquet", ["a.jpg", "b.jpg", "c.jpg"], [1, 0, 1], names)
    assert "label names must be wnids" in _error_line(capsys, ["images", "count", "--store", str(root)])
    index = root / "data" / "imagenet21k_miil_w21_synsets.txt"
    index.write_text("n01440764\nn01443537\n")  # beside the files, as the hub's data/ holds them
    assert open_store(root, progress=False).counts() == {"n01440764": 1, "n01443537": 2}
    (root / index.name).write_text(index.read_text())  # the same file in the store folder too: fine
    assert open_store(root, progress=False).counts() == {"n01440764": 1, "n01443537": 2}
    (root / index.name).write_text("n01443537\nn01440764\n")  # two different ones: which?
    line = _error_line(capsys, ["images", "count", "--store", str(root)])
    assert str(index) in line and str(root / index.name) in line
    index.unlink()  # only in the store folder
    assert open_store(root, progress=False).counts() == {"n01440764": 2, "n01443537": 1}


def test_the_extraction_manifest_keeps_the_store_ledger_and_its_counts_add_up(tmp_path, fx, caplog, capsys):
    """#44 §1: a damaged shard is counted, never fatal, never silent: `extract` and `images count`
    print the same summary line, and the manifest keeps one ledger entry per shard whose counts
    add up (members = images + metadata + skipped) to the images the store indexed."""
    import tarfile

    store = make_store(tmp_path / "store", "wds", CLASSES, oddities=False)
    shard = store.root / "imagenet22k-train-0001.tar"
    with tarfile.open(shard) as tar:
        members = tar.getmembers()
    cut = members[9].offset_data + 10  # inside the 4th image of the shard: 3 whole samples kept
    shard.write_bytes(shard.read_bytes()[:cut])
    classes = fx.write_classes(tmp_path / "classes.txt", list(CLASSES))
    caplog.set_level("INFO")
    assert main(fx.extract_argv(store, classes, tmp_path / "out")) == 0
    extract_log = [r.getMessage() for r in caplog.records if r.getMessage().startswith("store: ")]
    caplog.clear()
    assert main(["images", "count", "--store", str(store.root)]) == 0
    count_log = [r.getMessage() for r in caplog.records if r.getMessage().startswith("store: ")]
    ledger = FeatureDir(tmp_path / "out").manifest["store_ledger"]
    assert extract_log == count_log == [ledger["summary"]]
    first, second = ledger["sources"]
    assert (first["source"], first["images"], first["metadata"], first["damage"]) == (
        "imagenet22k-train-0000.tar",
        8,
        16,
        None,
    )
    assert (second["members"], second["images"], second["metadata"], second["skipped"]) == (
        10,
        3,
        6,
        {"truncated": 1},
    )
    assert second["bytes_unread"] == cut - members[9].offset
    assert "truncated inside member" in second["damage"]
    for entry in ledger["sources"]:
        assert entry["members"] == entry["images"] + entry["metadata"] + sum(entry["skipped"].values())
    totals = ledger["totals"]
    assert totals["images"] == 11 == first["images"] + second["images"]
    assert totals["images"] == FeatureDir(tmp_path / "out").manifest["inputs"]["store"]["images_in_store"]
    assert (totals["sources"], totals["damaged"], ledger["incomplete"]) == (2, 1, [])
    assert "1 shard damaged (imagenet22k-train-0001.tar: truncated inside member" in ledger["summary"]
