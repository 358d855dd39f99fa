"""Issue 44 §1: no image lost without a count. Every store read writes a ledger per source (members
seen, images indexed, metadata read, skipped by reason, bytes unread, damage) into the index, and
one summary line; a damaged shard is never fatal and never silent; a store that lacks what it
declares is one error line unless --allow-incomplete; one image id in two shards is an error
naming both. Each case here was silently wrong before (the counts hand-computed)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.images.store import open_store

JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 600  # 604 bytes: two 512-byte blocks of data
W0, W1 = "n01440764", "n01443537"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))


def _tar(path: Path, members: list[tuple[str, bytes]], links: dict[str, str] | None = None) -> None:
    """An uncompressed tar of ``members`` (name, bytes); ``links``: hard-link name → target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.LNKTYPE, target
            tar.addfile(info)


def _sample(key: str, wnid: str, cls: int, image: bytes = JPEG, ext: str = "jpg") -> list[tuple[str, bytes]]:
    meta = json.dumps({"class_name": wnid, "label": cls}).encode()
    return [(f"{key}.{ext}", image), (f"{key}.cls", str(cls).encode()), (f"{key}.json", meta)]


def _shard(path: Path, keys: list[str], wnid: str = W0, cls: int = 0) -> None:
    _tar(path, [m for key in keys for m in _sample(key, wnid, cls)])


def _headers(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return tar.getmembers()


def _count(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["images", "count", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _ledger(store, source: str) -> dict:
    entry = next(e for e in store.ledger if e["source"] == source)
    assert entry["members"] == entry["images"] + entry["metadata"] + sum(entry["skipped"].values())
    return entry


# ----------------------------------------------------------------------------- truncation


def test_a_wds_shard_cut_at_a_member_header_is_counted_not_read_as_complete(tmp_path, caplog):
    """9 samples, cut after the 4th (at a header, no end-of-archive blocks): the 5 after it were
    indexed as if the shard were complete, exit 0, no word."""
    root = tmp_path / "wds"
    _shard(root / "s-0000.tar", [f"a{i}" for i in range(3)])
    _shard(root / "s-0001.tar", [f"k{i}" for i in range(9)])
    cut = _headers(root / "s-0001.tar")[12].offset  # the header of the 5th sample's image
    os.truncate(root / "s-0001.tar", cut)
    store = open_store(root, progress=False)
    assert store.counts() == {W0: 3 + 4}
    assert [(p["source"], p["kind"]) for p in store.problems] == [("s-0001.tar", "damaged-tar")]
    entry = _ledger(store, "s-0001.tar")
    assert (entry["members"], entry["images"], entry["metadata"], entry["bytes_unread"]) == (12, 4, 8, 0)
    assert entry["damage"] == "truncated after 12 members (no end-of-archive blocks)"
    summary = (
        "store: 2 shards, 7 images indexed; 1 shard damaged (s-0001.tar: truncated after 12 members "
        "(no end-of-archive blocks))"
    )
    assert summary in caplog.text  # as docs/guides/features.md shows it
    assert _ledger(store, "s-0000.tar")["damage"] is None


def test_a_fall11_tar_cut_at_a_member_header_is_counted(tmp_path, capsys, caplog):
    root = tmp_path / "fall11"
    _tar(root / f"{W0}.tar", [(f"{W0}_{i}.JPEG", JPEG) for i in range(8)])
    _tar(root / f"{W1}.tar", [(f"{W1}_{i}.JPEG", JPEG) for i in range(2)])
    os.truncate(root / f"{W0}.tar", _headers(root / f"{W0}.tar")[4].offset)  # 4 of 8 left
    code, out, _ = _count(capsys, ["--store", root])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t4", f"{W1}\t2"]
    assert (
        f"store: 2 tars, 6 images indexed; 1 tar damaged ({W0}.tar: truncated after 4 members" in caplog.text
    )


def test_a_wds_shard_cut_inside_an_image_is_counted_not_a_missing_wnid(tmp_path, capsys, caplog):
    """Cut inside the data of k3.jpg: the store was refused with 'sample k3: no wnid' (its .cls and
    .json were never written); now the sample is counted as cut, the bytes after k2 unread."""
    root = tmp_path / "wds"
    _shard(root / "s-0000.tar", [f"k{i}" for i in range(5)])
    image = _headers(root / "s-0000.tar")[9]  # k3.jpg
    os.truncate(root / "s-0000.tar", image.offset_data + 100)
    code, out, _ = _count(capsys, ["--store", root])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t3"]
    entry = _ledger(open_store(root, progress=False), "s-0000.tar")
    assert entry["skipped"] == {"truncated": 1} and entry["images"] == 3 and entry["members"] == 10
    assert entry["bytes_unread"] == 512 + 100  # k3.jpg's header and the 100 bytes of its data
    assert "truncated inside member k3.jpg after 9 complete members, 612 bytes unread" in caplog.text


def test_a_sample_whose_labels_the_cut_lost_is_counted_as_cut(tmp_path):
    root = tmp_path / "wds"
    _shard(root / "s-0000.tar", ["k0", "k1", "k2"])
    os.truncate(root / "s-0000.tar", _headers(root / "s-0000.tar")[7].offset)  # after k2.jpg only
    store = open_store(root, progress=False)
    entry = _ledger(store, "s-0000.tar")
    assert entry["images"] == 2 and entry["skipped"] == {"cut-by-damage": 1}
    assert sorted(store.member.tolist()) == ["k0.jpg", "k1.jpg"]


def test_a_zero_filled_tail_of_a_preallocated_download_is_damage(tmp_path):
    root = tmp_path / "fall11"
    _tar(root / f"{W0}.tar", [(f"{W0}_{i}.JPEG", JPEG) for i in range(3)])
    path = root / f"{W0}.tar"
    data = path.read_bytes()
    cut = _headers(path)[2].offset
    path.write_bytes(data[:cut] + b"\0" * (2 << 20))  # the rest never arrived: zeros
    store = open_store(root, progress=False)
    assert [p["kind"] for p in store.problems] == ["damaged-tar"]
    entry = _ledger(store, f"{W0}.tar")
    assert entry["images"] == 2 and entry["bytes_unread"] == 2 << 20
    assert "zero bytes" in entry["damage"] and "preallocated" in entry["damage"]


# ----------------------------------------------------------------------------- what is read


def test_one_sample_with_a_jpg_and_a_png_is_one_image(tmp_path, capsys):
    root = tmp_path / "wds"
    members = _sample("k0", W0, 0) + [("k0.png", JPEG)] + _sample("k1", W0, 0)
    _tar(root / "s-0000.tar", members)
    code, out, _ = _count(capsys, ["--store", root])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t2"]  # was 3
    store = open_store(root, progress=False)
    assert _ledger(store, "s-0000.tar")["skipped"] == {"extra-image-in-sample": 1}
    assert sorted(store.member.tolist()) == ["k0.jpg", "k1.jpg"]


def test_fifos_named_like_shards_are_recorded_never_opened(tmp_path, capsys, caplog):
    root = tmp_path / "wds"
    _shard(root / "s-0000.tar", ["k0", "k1"])
    os.mkfifo(root / "s-0001.tar")
    code, out, _ = _count(capsys, ["--store", root])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t2"]
    assert "1 shard damaged (s-0001.tar: a FIFO, not a regular file: not read)" in caplog.text
    pq_root = tmp_path / "pq"
    make_store(pq_root, "parquet", {W0: 3}, oddities=False)
    os.mkfifo(pq_root / "data" / "train-1.parquet")
    code, out, _ = _count(capsys, ["--store", pq_root])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t3"]
    assert "data/train-1.parquet: a FIFO, not a regular file: not read" in caplog.text


def test_hard_link_members_and_oversized_json_are_counted_by_name(tmp_path, capsys, caplog):
    caplog.set_level("INFO")
    root = tmp_path / "wds"
    big = json.dumps({"class_name": W0, "pad": "x" * (1 << 20)}).encode()
    members = _sample("k0", W0, 0) + [("k1.jpg", JPEG), ("k1.cls", b"0"), ("k1.json", big)]
    _tar(root / "s-0000.tar", members, links={"k2.jpg": "k0.jpg"})
    (root / "imagenet22k_synsets.txt").write_text(f"{W0}\n")
    code, out, _ = _count(capsys, ["--store", root])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t2"]  # k1 labelled by its .cls
    store = open_store(root, progress=False)
    entry = _ledger(store, "s-0000.tar")
    assert entry["skipped"] == {"link": 1, "metadata-too-large": 1} and entry["metadata"] == 3
    records = {p["kind"]: p for p in store.problems}
    assert records["link"]["examples"] == ["k2.jpg"]
    assert records["metadata-too-large"]["examples"] == ["k1.json"]
    assert "2 members skipped (link 1, metadata-too-large 1)" in caplog.text


# ----------------------------------------------------------------------------- forced layouts


def test_a_forced_layout_never_leaves_the_other_kind_of_tar_out_silently(tmp_path, cli_error):
    root = tmp_path / "mixed"
    _shard(root / "s-0000.tar", ["k0"])
    _tar(root / f"{W1}.tar", [(f"{W1}_1.JPEG", JPEG)])
    cli_error(["images", "count", "--store", root, "--layout", "tars"], "s-0000.tar", inputs=[root])
    cli_error(["images", "count", "--store", root, "--layout", "wds"], f"{W1}.tar: sample {W1}_1: no wnid")


# ----------------------------------------------------------------------------- one id, two shards


def test_one_wds_key_in_two_shards_is_an_error_naming_both(tmp_path, cli_error):
    root = tmp_path / "wds"
    _shard(root / "s-0000.tar", ["k0", "k1"], W0, 0)
    _shard(root / "s-0001.tar", ["k1", "k2"], W1, 1)  # k1 again, labelled otherwise
    line = cli_error(["images", "count", "--store", root], ["k1", "s-0000.tar", "s-0001.tar"], inputs=[root])
    assert "in both s-0000.tar and s-0001.tar" in line


def test_one_parquet_image_name_in_two_files_is_an_error_naming_both(tmp_path, cli_error):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "pq"
    meta = {"huggingface": json.dumps({"info": {"features": {"label": {"names": [W0, W1]}}}})}
    for part, (names, labels) in {
        "a": (["x.jpg", "y.jpg"], [0, 0]),
        "b": (["y.jpg", "z.jpg"], [1, 1]),
    }.items():
        image = pa.array([{"bytes": JPEG, "path": n} for n in names])
        table = pa.table({"image": image, "label": pa.array(labels)}).replace_schema_metadata(meta)
        root.mkdir(exist_ok=True)
        pq.write_table(table, root / f"{part}.parquet")
    cli_error(["images", "count", "--store", root], ["y.jpg", "a.parquet", "b.parquet"], inputs=[root])


def _feature_dir(root: Path, ids_per_shard: list[list[str]]) -> Path:
    records = []
    for index, ids in enumerate(ids_per_shard):
        labels = np.array([0 if i.startswith(W0) else 1 for i in ids])
        block = np.ones((len(ids), 4), np.float16)
        records.append(write_shard(root, shard_name(0, index), block, labels, ids))
    write_manifest(root, {"classes": [W0, W1], "dim": 4, "shards": records})
    return root


def test_one_image_id_in_two_shards_of_a_feature_directory_is_an_error(tmp_path, cli_error):
    """26 + 27 rows, one id in both shards: it was read (and scored) as 53 images, not 52."""
    first = [f"{W0}/a{i}.JPEG" for i in range(26)]
    second = [f"{W1}/b{i}.JPEG" for i in range(26)] + [f"{W0}/a7.JPEG"]
    root = _feature_dir(tmp_path / "feats", [first, second])
    culprits = [f"{W0}/a7.JPEG", "s000000", "s000001"]
    cli_error(
        ["labels", "visual-prototypes", "--features", root, "--out", tmp_path / "p.npz"],
        culprits,
        inputs=[root],
        not_created=[tmp_path / "p.npz"],
    )
    twice = _feature_dir(tmp_path / "twice", [first + [first[3]]])
    with pytest.raises(Exception, match="twice in shard r000-s000000"):
        FeatureDir(twice).labels()
    assert len(FeatureDir(_feature_dir(tmp_path / "ok", [first, second[:-1]])).labels()) == 52


# ----------------------------------------------------------------------------- incomplete stores


def test_a_gap_in_a_numbered_shard_series_is_an_error_unless_allowed(tmp_path, cli_error, capsys, caplog):
    root = tmp_path / "wds"
    for n in (0, 1, 2, 4):  # s-0003.tar never arrived
        _shard(root / f"s-{n:04d}.tar", [f"k{n}_{i}" for i in range(2)])
    cli_error(["images", "count", "--store", root], ["s-0003.tar is missing", "--allow-incomplete"])
    code, out, _ = _count(capsys, ["--store", root, "--allow-incomplete"])
    assert code == 0 and out.splitlines()[1:] == [f"{W0}\t8"]
    assert "INCOMPLETE, read with --allow-incomplete: s-0003.tar is missing" in caplog.text


def test_a_parquet_series_short_of_its_of_n_total_is_an_error(tmp_path, cli_error):
    store = make_store(tmp_path / "pq", "parquet", {W0: 4, W1: 2}, oddities=False)
    (store.root / "data" / "train-00001-of-00002.parquet").unlink()
    cli_error(["images", "count", "--store", store.root], "data/train-00001-of-00002.parquet is missing")


def test_a_store_short_of_its_nshards_txt_is_an_error(tmp_path, cli_error):
    """CLIP_benchmark's layout: 0.tar .. N-1.tar and nshards.txt; one shard of 2 is an error."""
    root = tmp_path / "wds"
    _shard(root / "0.tar", ["k0", "k1"])
    (root / "nshards.txt").write_text("2\n")
    cli_error(["images", "count", "--store", root], ["nshards.txt declares 2 shards, the store holds 1"])
    _shard(root / "1.tar", ["k2"])
    assert open_store(root, progress=False).counts() == {W0: 3}


def test_a_shard_short_of_its_info_json_length_is_an_error_but_a_damaged_one_is_counted(tmp_path, cli_error):
    root = tmp_path / "wds"
    _shard(root / "s-0000.tar", ["k0", "k1", "k2"])
    _shard(root / "s-0001.tar", ["k3", "k4"])
    info = {
        "splits": {"train": {"name": "train", "num_samples": 6, "filenames": ["s-0000.tar", "s-0001.tar"]}}
    }
    info["splits"]["train"]["shard_lengths"] = [3, 3]
    (root / "_info.json").write_text(json.dumps(info))
    cli_error(["images", "count", "--store", root], "s-0001.tar holds 2 samples, ")
    _shard(root / "s-0001.tar", ["k3", "k4", "k5"])
    os.truncate(root / "s-0001.tar", _headers(root / "s-0001.tar")[6].offset)  # damaged: counted
    store = open_store(root, progress=False)
    assert store.counts() == {W0: 5} and not store.incomplete
    info["splits"]["train"]["filenames"].append("s-0002.tar")
    info["splits"]["train"]["shard_lengths"].append(1)
    (root / "_info.json").write_text(json.dumps(info))
    cli_error(["images", "count", "--store", root], "s-0002.tar is listed in")


def test_a_store_short_of_its_dataset_card_count_is_an_error(tmp_path, cli_error):
    store = make_store(tmp_path / "pq", "parquet", {W0: 4, W1: 2}, oddities=False)
    card = "---\ndataset_info:\n  splits:\n  - name: train\n    num_examples: 7\n---\n"
    (store.root / "README.md").write_text(card)
    cli_error(
        ["images", "count", "--store", store.root], ["split train", "declares 7 images, the store holds 6"]
    )
    (store.root / "README.md").write_text(card.replace("7", "6"))
    assert sum(open_store(store.root, progress=False).counts().values()) == 6
