"""A split's structurally closest complete replacement on an image store (``splits build
--store-counts``, the recipe's ``store:``): the same rule restricted to the classes the store holds,
hand-computed on the toy graph, with the original's size and R beside it; end to end on WordNet.

The toy graph (tests/toy.py) with its names spelt as wnids (a counts table holds wnids only)::

    root ── A ── a1 (train), a2, a3 ── a31
         └─ B ── b1 ── b11, b2 (train)          m: child of a2 and of b1
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.splits.build import build_on_store, input_files, store_steps
from imagenet_zsl.splits.config import (
    BenchmarkSplit,
    HopsSplit,
    ListSplit,
    PopulationSplit,
    StoreConfig,
    load_splits_config,
)
from imagenet_zsl.splits.pool import PoolContext, run_pool
from imagenet_zsl.splits.report import store_table
from tests.toy import TOY_EDGES, TOY_TRAIN

NAMES = ["root", "A", "B", "a1", "a2", "a3", "a31", "b1", "b11", "b2", "m"]
WNID = {name: f"n{i + 1:08d}" for i, name in enumerate(NAMES)}
NAME = {w: n for n, w in WNID.items()}
CANDIDATES = [WNID[n] for n in ["root", "A", "B", "a2", "a3", "a31", "b1", "b11", "m"]]
#: the recipe's counts (fall11's role): 0, 10, ..., 80 in CANDIDATES order
FALL11 = {w: 10 * i for i, w in enumerate(CANDIDATES)}


def _ctx() -> PoolContext:
    graph = ClassGraph.from_edges([(WNID[a], WNID[b]) for a, b in TOY_EDGES])
    return PoolContext(graph, [WNID[t] for t in TOY_TRAIN], dict(FALL11))


def _store(tmp_path: Path, held: dict[str, int], min_images: int) -> list[dict]:
    path = tmp_path / "held_counts.tsv"
    path.write_text("wnid\tnum_images\n" + "".join(f"{WNID[n]}\t{c}\n" for n, c in held.items()))
    return store_steps(StoreConfig(counts=str(path), min_images=min_images))


def _names(wnids: list[str]) -> list[str]:
    return sorted(NAME[w] for w in wnids)


def _on_store(spec, store):
    return build_on_store(spec, _ctx(), CANDIDATES, "toy", False, {}, store)


def test_held_by_store_keeps_classes_with_at_least_min_images(tmp_path):
    store = _store(tmp_path, {"A": 5, "a2": 1, "a3": 3, "b11": 7, "m": 2}, 2)
    pool, log = run_pool(CANDIDATES, store, _ctx())
    assert _names(pool) == ["A", "a3", "b11", "m"]  # a2 holds 1 < 2 images; the rest none
    assert [(s.filter, s.before, s.after) for s in log] == [("held_by_store", 9, 4)]
    with pytest.raises(UserInputError, match="min must be an integer of at least 1, got 0"):
        run_pool(CANDIDATES, [{**store[0], "min": 0}], _ctx())


def test_hop_replacement_is_the_hop_rule_on_the_held_classes(tmp_path):
    # held with >= 2 images: A, a3, b11, m (a2 holds 1)
    store = _store(tmp_path, {"A": 5, "a2": 1, "a3": 3, "b11": 7, "m": 2}, 2)
    split = _on_store(HopsSplit(name="hop2", kind="hops", k=2), store)
    # hop2 on every candidate: A, B (1 edge), root, a2, a3, b1 (2 edges); of these the store holds A, a3
    assert _names(split.wnids) == ["A", "a3"]
    # r(A) = d(A, a1) / d(A, a3) = 1/1, r(a3) = d(a3, a1) / d(a3, A) = 2/1: R = 1.5
    assert split.ratio == pytest.approx(1.5)
    # the original: r = 1 for A and B (a neighbour in the split one edge away), 2 for root, a2, a3
    # and b1 (2 edges from training, 1 from A or B): R = 10/6
    original = split.details["original"]
    assert (original["n_classes"], original["held"]) == (6, 2)
    assert original["structural_ratio"] == pytest.approx(10 / 6, abs=1e-6)
    assert original["n_images_fall11"] == 10 + 20 + 0 + 30 + 40 + 60
    assert split.details["on_store"] == {"images": 5 + 3, "dropped": 4, "added": 0}
    assert [(s.filter, s.before, s.after) for s in split.pool_steps] == [("held_by_store", 9, 4)]
    table = store_table([split])
    assert "| hop2 | 6 → 2 | 2 of 6 | 1.667 → 1.500 | 8 | 4 | 0 |" in table


def test_population_and_list_replacements(tmp_path):
    store = _store(tmp_path, {"A": 5, "a2": 1, "a3": 3, "b11": 7, "m": 2}, 2)
    most = _on_store(PopulationSplit(name="mp3", kind="population", n=3, most=True), store)
    # the 3 most populated candidates: m 80, b11 70, b1 60; of the held ones: m, b11, a3 40
    assert _names(most.wnids) == ["a3", "b11", "m"]
    assert most.details["on_store"] == {"images": 3 + 7 + 2, "dropped": 1, "added": 1}
    listed = tmp_path / "mine.txt"
    listed.write_text("".join(f"{WNID[n]}\n" for n in ["a3", "b1", "m"]))
    kept = _on_store(ListSplit(name="mine", kind="list", path=str(listed)), store)
    assert _names(kept.wnids) == ["a3", "m"] and kept.details["original"]["held"] == 2


def test_benchmark_replacement_is_optimised_on_the_held_pool(tmp_path):
    # held with >= 2 images: A, a2, a3, b11 (m holds 1); A is an ancestor of a1, so the pool is
    # a2, a3, b11. Pairs: {a2, a3} r = 2/2 + 2/2 -> R 1.0; {a2, b11} (2/3 + 3/3) / 2 = 0.833;
    # {a3, b11} (2/5 + 3/5) / 2 = 0.5. On every candidate the optimum is {b11, m}: R 1.5.
    store = _store(tmp_path, {"A": 9, "a2": 3, "a3": 3, "b11": 4, "m": 1}, 2)
    spec = BenchmarkSplit(name="bench", kind="benchmark", size=2)
    split = _on_store(spec, store)
    assert _names(split.wnids) == ["a2", "a3"] and split.ratio == pytest.approx(1.0)
    assert split.details["original"]["structural_ratio"] == pytest.approx(1.5)
    assert split.details["original"]["held"] == 1  # of b11, m: b11
    assert split.details["on_store"] == {"images": 6, "dropped": 2, "added": 2}
    assert split.pool_steps[0].filter == "held_by_store" and split.details["pool_size"] == 4


def test_build_on_a_store_end_to_end(tmp_path, capsys):
    hop1 = Path(__file__).resolve().parents[2] / "splits" / "hop1.txt"
    wnids = hop1.read_text().split()
    held = wnids[::10]  # every 10th hop1 class, 3 images each; one training class, 5 images
    counts = tmp_path / "held_counts.tsv"
    counts.write_text("wnid\tnum_images\n" + "".join(f"{w}\t3\n" for w in held) + "n01440764\t5\n")
    config = tmp_path / "small.yaml"
    config.write_text("splits:\n  - {name: hop1, kind: hops, k: 1}\n")
    out = tmp_path / "out"
    argv = ["splits", "build", str(config), "--out", str(out), "--no-progress", "--store-counts", str(counts)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (out / "hop1.txt").read_text().split() == sorted(held)
    manifest = read_manifest_verified(out, "imagenet-zsl/splits-v2")
    record = manifest["splits"]["hop1"]
    assert record["n_classes"] == len(held) == 155
    assert record["original"]["n_classes"] == 1_548 and record["original"]["held"] == 155
    assert record["on_store"] == {"images": 3 * 155, "dropped": 1_548 - 155, "added": 0}
    assert manifest["store"] == {"counts": str(counts), "min_images": 1, "candidates_held": 155}
    assert manifest["parameters"]["store"] == {"counts": str(counts), "min_images": 1}
    assert [r["path"] for r in manifest["inputs"]["recipe_files"]] == [str(counts)]
    row = f"| hop1 | 1,548 → 155 | 155 of 1,548 | {record['original']['structural_ratio']:.3f} → "
    assert row in printed and row in (out / "report.md").read_text()
    assert "## On your image store" in (out / "report.md").read_text()
    json.dumps(manifest)  # plain JSON


def test_store_min_images_without_counts_is_one_line(tmp_path, capsys):
    config = tmp_path / "small.yaml"
    config.write_text("splits:\n  - {name: hop1, kind: hops, k: 1}\n")
    argv = ["splits", "build", str(config), "--out", str(tmp_path / "o"), "--store-min-images", "3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--store-min-images needs --store-counts" in err


def test_the_store_counts_are_inputs_of_the_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "store: {counts: held.tsv, min_images: 2}\n"
        "splits:\n  - name: b\n    kind: benchmark\n    size: 5\n"
        "    pool: [{filter: held_by_store, counts: other.tsv, min: 3}]\n"
    )
    config = load_splits_config(recipe)
    assert config.store == StoreConfig(counts="held.tsv", min_images=2)
    assert input_files(config) == ["held.tsv", "other.tsv"]  # hashed in the manifest, never an --out
