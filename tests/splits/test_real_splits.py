"""The default build on the real WordNet / ImageNet-21K graph: sizes, invariants, exact bytes."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.hierarchy.universe import training_wnids
from imagenet_zsl.splits.build import build_splits
from imagenet_zsl.splits.io import read_wnid_list

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "splits"


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("build") / "splits"
    build_splits(REPO / "configs" / "default.yaml", out, progress=False)
    return out


def test_rebuild_gives_the_committed_bytes(rebuilt):
    committed = sorted(p.name for p in COMMITTED.iterdir())
    assert sorted(p.name for p in rebuilt.iterdir()) == committed
    _, mismatch, errors = filecmp.cmpfiles(COMMITTED, rebuilt, committed, shallow=False)
    assert mismatch == [] and errors == []


def test_split_sizes_and_invariants(rebuilt):
    split = {p.stem: set(read_wnid_list(p)) for p in rebuilt.glob("*.txt")}
    train = set(training_wnids())
    # literature: Frome et al.'s "2-hops" has 1,549 classes (1,548 here: WordNet 3.0 graph)
    assert len(split["hop1"]) == 1_548
    assert len(split["hop2"]) == 5_989
    assert len(split["hop3"]) == 9_704
    assert len(split["all"]) == 20_842
    assert split["hop1"] < split["hop2"] < split["hop3"] < split["all"]
    for name, wnids in split.items():
        assert not wnids & train, name
    for n, tag in ((500, "500"), (1000, "1k"), (5000, "5k")):
        assert len(split[f"mp{tag}"]) == n and len(split[f"lp{tag}"]) == n
        assert split[f"mp{tag}"] <= split["all"] and split[f"lp{tag}"] <= split["all"]
    assert split["mp500"] < split["mp1k"] < split["mp5k"]
    counts = fall11_counts()
    # cross-check from the data's provenance: GBU's "most populated 500" is cut at 1,576 images
    assert min(counts[w] for w in split["mp500"]) == 1_576
    assert max(counts[w] for w in split["lp500"]) <= min(counts[w] for w in split["all"] - split["lp500"])


def test_benchmark_split_is_consistent_and_beats_every_standard_split(rebuilt):
    manifest = json.loads((rebuilt / "manifest.json").read_text())
    records = manifest["splits"]
    bench = records["benchmark"]
    assert bench["n_classes"] == 500
    assert bench["consistent"] and bench["pairs_within"] == 0 and bench["pairs_with_train"] == 0
    assert all(fall11_counts()[w] > 300 for w in read_wnid_list(rebuilt / "benchmark.txt"))
    assert bench["structural_ratio"] > max(
        r["structural_ratio"] for n, r in records.items() if n != "benchmark"
    )
    assert [s["filter"] for s in bench["pool"]][:2] == ["not_training", "min_images"]
    assert bench["pool"][1]["after"] == sum(
        1 for w, c in fall11_counts().items() if c >= 301 and w not in set(training_wnids())
    )
    for name, record in records.items():
        assert record["sha256"] and record["n_classes"] > 0, name
    assert "benchmark" in (rebuilt / "report.md").read_text()


def test_every_committed_benchmark_is_certified_optimal(rebuilt):
    records = json.loads((rebuilt / "manifest.json").read_text())["splits"]
    benches = {n: r for n, r in records.items() if r["kind"] == "benchmark"}
    assert set(benches) == {"benchmark", "benchmark1k", "curated", "curated1k", "benchmark_in12k"}
    for name, record in benches.items():
        assert record["optimizer"] == "exact" and record["gap"] <= 1e-6, name
        assert record["upper_bound"] == pytest.approx(record["structural_ratio"], abs=1e-6), name
        assert record["consistent"], name
        assert "has_vector" in [s["filter"] for s in record["pool"]], name
    assert records["benchmark_in12k"]["leakage"]["in12k"]["seen_classes"] == 0
