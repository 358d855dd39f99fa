import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import distributed, extract_record
from imagenet_zsl.features.distributed import RankInfo, shard_range
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.synthetic_store import make_store

CLASSES = {"n01440764": 9, "n01443537": 5, "n01484850": 6}  # 20 items → shards of 6: 4 shards
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("store"), "tars", CLASSES)


@pytest.mark.parametrize("num_shards", [0, 1, 4, 7, 100])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shard_ranges_cover_every_shard_once_in_order(num_shards, world):
    ranges = [shard_range(num_shards, r, world) for r in range(world)]
    assert [g for r in ranges for g in r] == list(range(num_shards))
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


def test_rank_info_reads_torchrun_variables(monkeypatch):
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    assert RankInfo.from_env() == RankInfo(3, 4, 1, 2)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(UserInputError, match="RANK=4 is outside WORLD_SIZE=4"):
        RankInfo.from_env()


def _as_rank(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))


def _same_content(a: Path, b: Path) -> None:
    """Identical rows, and identical bytes shard by shard (names carry the writer's rank)."""
    one, two = FeatureDir(a), FeatureDir(b)
    x, y = one.load(), two.load()
    assert x.ids.tolist() == y.ids.tolist() and np.array_equal(x.labels, y.labels)
    assert np.array_equal(x.features, y.features)
    assert [s["sha256"] for s in one.shards] == [s["sha256"] for s in two.shards]
    assert one.manifest["skipped"] == two.manifest["skipped"]
    # shard names carry the writer's rank, logs a timestamp, the command line its launcher
    strip = {"shards", "files", "command"}
    assert {k: v for k, v in one.manifest.items() if k not in strip} == {
        k: v for k, v in two.manifest.items() if k not in strip
    }

    def whole_run_files(manifest: dict) -> dict[str, str]:
        return {
            r["path"]: r["sha256"]
            for r in manifest["files"]
            if not r["path"].startswith(("logs/", "r0")) and r["path"] != "manifest.json"
        }

    assert whole_run_files(one.manifest) == whole_run_files(two.manifest)
    assert set(whole_run_files(one.manifest)) == {"run.json", "head.npz"}


def test_ranks_split_the_work_and_the_last_one_merges(tmp_path, store, monkeypatch, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "single")
    out = tmp_path / "split"
    _as_rank(monkeypatch, 1, 2)
    first = fx.extract(store, classes, out)
    assert first.manifest is None and first.shards_written == 2
    assert main(["extract", "--merge", str(out)]) == 2  # rank 0's shards are missing
    _as_rank(monkeypatch, 0, 2)
    last = fx.extract(store, classes, out)
    assert last.manifest == out / "manifest.json"
    names = [s["name"] for s in FeatureDir(out).shards]
    assert names == ["r000-s000000", "r000-s000001", "r001-s000002", "r001-s000003"]
    _same_content(tmp_path / "single", out)
    # resuming with another world size reuses every finished shard
    _as_rank(monkeypatch, 2, 3)
    again = fx.extract(store, classes, out)
    assert again.shards_written == 0 and again.shards_already_done == 2  # shards 2, 3
    assert main(["extract", "--merge", str(out)]) == 0


def test_merge_reports_missing_shards_in_one_line(tmp_path, store, monkeypatch, capsys, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    _as_rank(monkeypatch, 0, 2)
    fx.extract(store, classes, tmp_path / "out")
    assert main(["extract", "--merge", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "2 of 4 shards are unfinished (first: s000002)" in err and "\n" not in err
    assert main(["extract", "--merge", str(tmp_path / "nothing")]) == 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_two_processes_equal_one_process(tmp_path, store, fx):
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    fx.extract(store, classes, tmp_path / "single")
    args = [
        "extract",
        "--store",
        str(store.root),
        "--classes",
        str(classes),
        "--backbone",
        "tiny-test",
        "--weights",
        "random",
        "--device",
        "cpu",
        "--workers",
        "0",
        "--batch-size",
        "4",
        "--shard-size",
        "6",
        "--resize",
        "64",
        "--crop",
        "56",
        "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        "-m",
        "imagenet_zsl.cli",
        *args,
        "--out",
        str(tmp_path / "torchrun"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "torchrun"
    assert {p.name.split("-")[0] for p in out.glob("*.done.json")} == {"r000", "r001"}
    assert "complete: 4 shards" in done.stdout
    _same_content(tmp_path / "single", out)
    # shard files are byte-identical to the single-process run, whoever wrote them
    single = fx.all_files(tmp_path / "single")
    for name, data in fx.all_files(out).items():
        if name.endswith(".npy"):
            assert single[name.replace("r001-", "r000-")] == data


def test_a_log_still_growing_while_the_manifest_is_written_is_listed_again(tmp_path, store, monkeypatch, fx):
    """Another rank may close its log just after the merging rank listed it: the merge re-checks
    the sizes it wrote and writes the manifest again, so the directory opens."""
    classes = fx.write_classes(tmp_path / "c.txt", list(CLASSES))
    out = tmp_path / "out"
    fx.extract(store, classes, out)
    real, calls = distributed.write_manifest, []

    def racing(out_dir, manifest):
        path = real(out_dir, manifest)
        calls.append(path)
        if len(calls) == 1:  # the other rank's last log line lands after the listing
            with open(out / "logs" / "extract.r000.log", "a") as log:
                log.write("late line\n")
        return path

    monkeypatch.setattr(distributed, "write_manifest", racing)
    assert main(["extract", "--merge", str(out)]) == 0
    assert len(calls) == 2 and FeatureDir(out).verify() == []


def test_a_run_record_written_by_another_rank_while_this_one_looks_is_checked(tmp_path, monkeypatch):
    """Rank 0 writes run.json and then its other files between rank 1's two looks at ``--out``
    (no record yet, then files): rank 1 checks the record now there instead of refusing the
    directory as a stranger's."""
    record = {
        "format": distributed.RUN_FORMAT,
        "identity": {"compile": False, "mode": "fast", "backbone": "b"},
    }
    out = tmp_path / "out"
    out.mkdir()
    real = os.scandir

    def racing(path):
        extract_record.write_run(out, record)  # the other rank, just now
        (out / "logs").mkdir(exist_ok=True)
        return real(path)

    monkeypatch.setattr(extract_record.os, "scandir", racing)
    assert extract_record.check_run(out, record) is False
    monkeypatch.setattr(extract_record.os, "scandir", real)
    # a record of another extraction is still refused, and so are files without a record
    with pytest.raises(UserInputError, match="holds a different extraction"):
        extract_record.check_run(out, {**record, "identity": {**record["identity"], "backbone": "c"}})
    (out / "run.json").unlink()
    with pytest.raises(UserInputError, match="is not empty and is not an extraction directory"):
        extract_record.check_run(out, record)
