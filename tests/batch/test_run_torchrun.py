"""`imagenet-zsl run` under torchrun (gloo, CPU): the same summary bytes as one process, and a
run resumed with another number of processes reuses every finished cell; and the held-out seen
and validation images are searched in the seen and validation label spaces once per model, not
once per split."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from threadpoolctl import threadpool_limits

from imagenet_zsl.batch import commands as batch_commands
from imagenet_zsl.batch.ranks import PeerFailed, Ranks, cell_phases, owner
from imagenet_zsl.batch.runner import run
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.run import cache, search_sets
from imagenet_zsl.features.distributed import RankInfo
from imagenet_zsl.features.feature_dir import FeatureDir

REPO = Path(__file__).resolve().parents[2]
#: files of a run that must be the same bytes however many processes wrote it
SHARED_FILES = (
    "summary.md",
    "summary.csv",
    "summary.tex",
    "hit_at_k.png",
    "classes_dropped.csv",
    "classes/seen.txt",
    "classes/calibration.txt",
    "classes/seen_training.txt",
)
CELLS = ("trivial__hop1", "trivial__benchmark", "eszsl__hop1", "eszsl__benchmark")


def test_cell_phases_spread_models_then_cells_round_robin():
    # three models over two ranks: a -> 0, b -> 1, c -> 0 (plan order); phase 0 holds each
    # model's first pending cell on its owner, phase 1 the rest, alternating ranks in order
    pending = [("a", "s1"), ("b", "s1"), ("c", "s1"), ("a", "s2"), ("b", "s2"), ("a", "s3")]
    assert [owner(i, 2) for i in range(3)] == [0, 1, 0]
    assert cell_phases(pending, ["a", "b", "c"], 2) == [
        [[("a", "s1"), ("c", "s1")], [("b", "s1")]],
        [[("a", "s2"), ("a", "s3")], [("b", "s2")]],
    ]
    # one process: everything on rank 0, first cells first
    assert cell_phases(pending, ["a", "b", "c"], 1) == [
        [[("a", "s1"), ("b", "s1"), ("c", "s1")]],
        [[("a", "s2"), ("b", "s2"), ("a", "s3")]],
    ]
    # a model whose cells are all finished has no first cell; more ranks than cells: idle ranks
    assert cell_phases([("b", "s2")], ["a", "b"], 3) == [[[], [("b", "s2")], []], [[], [], []]]


def _metrics(out: Path, cell: str) -> dict:
    """A cell's metrics, its run directory's path made ``OUT`` and the input manifests' sha256s
    dropped (they record the command line, which differs under torchrun)."""

    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k != "manifest_sha256"}
        return [strip(v) for v in obj] if isinstance(obj, list) else obj

    return strip(json.loads((out / "cells" / cell / "metrics.json").read_text().replace(str(out), "OUT")))


def _torchrun(recipe: Path, out: Path, processes: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command += ["-m", "imagenet_zsl.cli", "run", str(recipe), "--out", str(out), "--no-progress"]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def small_recipe(demo_inputs) -> Path:
    """The reduced demo with two trained models on two splits (GZSL, calibrated: γ chosen by each
    model's calibration copy, seen images searched by every cell), its features in shards of 100
    images (the test images in 2 shards, the seen ones in 10); hop1 scored data-parallel under
    torchrun."""
    sim = yaml.safe_load((demo_inputs.root / "sim.yaml").read_text())
    (demo_inputs.root / "sim_sharded.yaml").write_text(yaml.safe_dump({**sim, "shard_rows": 100}))
    models = {m: demo_inputs.data["models"][m] for m in ("trivial", "eszsl")}
    models["trivial"] = {**models["trivial"], "splits": ["hop1", "benchmark"]}
    return demo_inputs.write_recipe(
        "torchrun.yaml",
        features={"simulate": str(demo_inputs.root / "sim_sharded.yaml")},
        models=models,
        splits=["hop1", "benchmark"],
        plots=False,
        data_parallel=["hop1"],
    )


#: (query source, the image set's own space, the spaces searched, the shard)
Calls = list[tuple[str, str, tuple[str, ...], str]]


def _counted_run(recipe: Path, out: Path) -> Calls:
    """Run ``recipe`` in this process, recording every shard search."""
    calls: Calls = []
    original = search_sets.search_shard

    def counting(fd, shard_name, lookup, spaces, context, use_logits, own_space, kept_ids=None):
        calls.append((context.source.digest, own_space, tuple(sorted(spaces)), shard_name))
        return original(fd, shard_name, lookup, spaces, context, use_logits, own_space, kept_ids)

    # one BLAS thread, as each torchrun process has (OMP_NUM_THREADS=1): the scores' last bits
    # depend on the thread count (never on the ranks)
    with pytest.MonkeyPatch.context() as patch, threadpool_limits(limits=1):
        patch.setattr(search_sets, "search_shard", counting)
        result = run(recipe, out, progress=False, echo=lambda _: None)
    assert not result.failed and sorted(result.evaluated) == sorted(CELLS)
    return calls


def _per_shard(calls: Calls, out: Path, own: str) -> list[dict[str, list[tuple[str, ...]]]]:
    """For each model: held-out seen shard -> the spaces of each search of it (set: ``own``)."""
    shards = [s["name"] for s in FeatureDir(out / "features" / "seen_test").shards]
    assert len(shards) == 10
    sources = sorted({c[0] for c in calls if c[1] == own})
    return [
        {shard: [c[2] for c in calls if c[0] == source and c[1] == own and c[3] == shard] for shard in shards}
        for source in sources
    ]


@pytest.fixture(scope="module")
def single_run(small_recipe, tmp_path_factory) -> tuple[Path, Calls]:
    """One process: the run directory and its shard searches."""
    out = tmp_path_factory.mktemp("single") / "run"
    return out, _counted_run(small_recipe, out)


def test_seen_and_validation_images_are_searched_once_per_model(
    demo_inputs, small_recipe, single_run, tmp_path
):
    out, calls = single_run
    every = ("seen", "unseen")
    calibrating = [("seen", "val_unseen")]
    seen = _per_shard(calls, out, "seen")
    # held-out seen images, by each model: every space on the first split, on the second only the
    # split's; by each model's calibration copy: once, in the seen and validation spaces
    finals = [m for m in seen if all(searches == [every, ("unseen",)] for searches in m.values())]
    copies = [m for m in seen if all(searches == calibrating for searches in m.values())]
    assert len(finals) == len(copies) == 2 and len(seen) == 4
    for model in _per_shard(calls, out, "val_unseen"):
        # validation images (carved from the held-out seen images): once, by the calibration copy
        assert all(searches == calibrating for searches in model.values())
    # test images: every test shard once per split and model, in the split's and the seen space
    assert sorted(c[2:] for c in calls if c[1] == "unseen") == sorted(
        [(("seen", "unseen"), s["name"]) for s in FeatureDir(out / "features" / "test").shards] * 4
    )
    assert not (out / ".search-cache").exists()
    # the same cells as without the shared cache (every split searching everything itself)
    alone = tmp_path / "alone"
    with pytest.MonkeyPatch.context() as patch, threadpool_limits(limits=1):
        patch.setattr(cache, "shared_cache", lambda: None)
        assert not run(small_recipe, alone, progress=False, echo=lambda _: None).failed
    for cell in CELLS:
        assert _metrics(out, cell) == _metrics(alone, cell)
        files = sorted(p.relative_to(out / "cells" / cell) for p in (out / "cells" / cell).rglob("*.npy"))
        assert len(files) == 20  # test 10, seen 10 (labels, rows, ranks, 2 lists, 2 tails); γ is given
        for name in [*files, "per_class.csv"]:
            assert filecmp.cmp(out / "cells" / cell / name, alone / "cells" / cell / name, shallow=False), (
                name
            )
    # label_space: all is one test label space for every split: the seen images are searched once
    recipe = demo_inputs.write_recipe(
        "torchrun_all.yaml", **{**yaml.safe_load(small_recipe.read_text()), "label_space": "all"}
    )
    every_split = tmp_path / "all"
    calls = _counted_run(recipe, every_split)
    seen = _per_shard(calls, every_split, "seen")
    once = sorted(all(searches == [every] for searches in m.values()) for m in seen)
    assert once == [False, False, True, True]  # the models; their copies search for γ
    assert all(all(searches in ([every], calibrating) for searches in m.values()) for m in seen)


def test_two_processes_write_the_summary_of_one_and_resume_with_any_number(
    small_recipe, single_run, tmp_path
):
    single, _ = single_run
    spread = tmp_path / "spread"
    proc = _torchrun(small_recipe, spread, 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # rank 0 reports once, for both ranks; rank 1 speaks only through prefixed progress lines
    assert proc.stdout.count("trained 2 models; evaluated 4 cells, skipped 0 finished, 0 failed") == 1
    assert "[rank 1]" in proc.stdout
    # hop1 (data_parallel) is searched by both ranks, one of its 2 test shards each, then merged
    for cell in ("trivial__hop1", "eszsl__hop1"):
        assert f"\ncell {cell}: searched 1 test shards (data-parallel)" in proc.stdout
        assert f"[rank 1] cell {cell}: searched 1 test shards (data-parallel)" in proc.stdout
    for name in SHARED_FILES:
        assert filecmp.cmp(single / name, spread / name, shallow=False), name
    for cell in CELLS:
        assert _metrics(single, cell) == _metrics(spread, cell)
        files = [p.relative_to(single / "cells" / cell) for p in (single / "cells" / cell).rglob("*.npy")]
        for name in [*files, "per_class.csv"]:
            assert filecmp.cmp(
                single / "cells" / cell / name, spread / "cells" / cell / name, shallow=False
            ), (
                cell,
                name,
            )
    assert not (spread / ".search-cache").exists()

    # resumed by one process: the two ranks' cells are reused, the one removed is computed again
    shutil.rmtree(spread / "cells" / "eszsl__benchmark")
    (spread / "cells" / "eszsl__benchmark.json").unlink()
    before = (spread / "summary.md").read_bytes()
    (spread / "summary.md").unlink()
    again = run(small_recipe, spread, progress=False, echo=lambda _: None)
    assert again.evaluated == ["eszsl__benchmark"] and again.trained == []
    assert sorted(again.skipped) == sorted(set(CELLS) - {"eszsl__benchmark"})
    assert (spread / "summary.md").read_bytes() == before


class _Dist:
    """A stand-in for torch.distributed's broadcast: rank 0 records what it sends, another rank
    receives ``incoming``."""

    def __init__(self, incoming: tuple[str, Any] | None = None):
        self.incoming = incoming
        self.sent: list[Any] = []

    def broadcast_object_list(self, objects: list[Any], src: int, group: Any = None) -> None:
        assert src == 0
        if self.incoming is None:
            self.sent.append(objects[0])
        else:
            objects[0] = self.incoming


class _BrokenDist:
    """A stand-in whose collectives fail as gloo's do when another process has exited."""

    def barrier(self, group: Any = None) -> None:
        raise RuntimeError("Connection reset by peer")

    def all_gather_object(self, objects: list[Any], obj: Any, group: Any = None) -> None:
        raise RuntimeError("Connection closed by peer")


def test_a_collective_after_another_process_stopped_ends_quietly():
    """Rank 1 stopped with its own one-line error (e.g. a full disk): the others' barrier or
    gather fails in gloo, and they exit 2 without a traceback (PeerFailed), not with a bug."""
    ranks = Ranks(RankInfo(0, 2), _BrokenDist())
    with pytest.raises(PeerFailed, match="another process of the job stopped"):
        ranks.barrier()
    with pytest.raises(PeerFailed, match="another process of the job stopped"):
        ranks.gather(1)


def _never() -> int:
    raise AssertionError("only rank 0 does the work")


def test_rank_0_hands_its_result_or_its_one_line_error_to_the_others(tmp_path, capsys):
    assert Ranks(RankInfo(1, 2), _Dist(("ok", 5))).first(_never) == 5
    with pytest.raises(PeerFailed, match=r"^x.yaml: no split 'h'$"):
        Ranks(RankInfo(1, 2), _Dist(("error", "x.yaml: no split 'h'"))).first(_never)
    with pytest.raises(RuntimeError, match="rank 0 failed: KeyError"):
        Ranks(RankInfo(1, 2), _Dist(("bug", "KeyError: 'a'"))).first(_never)
    dist = _Dist()
    assert Ranks(RankInfo(0, 2), dist).first(lambda: 7) == 7
    with pytest.raises(UserInputError, match="bad") as caught:
        Ranks(RankInfo(0, 2), dist).first(lambda: (_ for _ in ()).throw(UserInputError("bad")))
    assert type(caught.value) is UserInputError  # rank 0 prints it: "error: bad", exit 2
    assert dist.sent == [("ok", 7), ("error", "bad")]
    # the other ranks exit 2 without printing it again
    assert not capsys.readouterr().err
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_commands, "run_recipe", lambda *a, **k: (_ for _ in ()).throw(PeerFailed("bad")))
        assert main(["run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == ""
    # rank 1 echoes its progress prefixed, rank 0 as it is
    lines: list[str] = []
    Ranks(RankInfo(1, 2)).echo(lines.append)("cell a ok")
    Ranks(RankInfo(0, 2)).echo(lines.append)("cell b ok")
    assert lines == ["[rank 1] cell a ok", "cell b ok"]
