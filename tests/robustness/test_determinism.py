"""``evaluate`` writes the same bytes whatever the BLAS thread count and the CPUs it may use (issue
35 §1): every score comes from a GEMM call of one fixed shape, single-threaded
(:mod:`imagenet_zsl.evaluation.search`), so neither the threads nor the cuts change a bit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.features.shard_files import shard_name, write_manifest, write_shard
from imagenet_zsl.semantics.class_vectors import ClassVectors

ROOT = Path(__file__).resolve().parents[2]
#: more classes than two of the old class cuts (1,024 each) and more images than one product
CLASSES, IMAGES, DIM, SHARD_ROWS = 2_300, 700, 40, 256


def _inputs(root: Path) -> dict[str, Path]:
    """float16 features of random images, random prototypes, a split of synthetic wnids; a few
    images equal to their class's prototype, so some scores tie exactly."""
    rng = np.random.default_rng(35)
    wnids = [f"n{i:08d}" for i in range(CLASSES)]
    prototypes = rng.standard_normal((CLASSES, DIM)).astype(np.float16).astype(np.float32)
    features_dir = root / "features"
    features_dir.mkdir(parents=True)
    labels = rng.integers(0, CLASSES, IMAGES)
    features = rng.standard_normal((IMAGES, DIM)).astype(np.float16)
    features[:20] = prototypes[labels[:20]].astype(np.float16)
    records = []
    for index, start in enumerate(range(0, IMAGES, SHARD_ROWS)):
        rows = slice(start, start + SHARD_ROWS)
        ids = [f"{wnids[lab]}/{start + i}.JPEG" for i, lab in enumerate(labels[rows])]
        records.append(write_shard(features_dir, shard_name(0, index), features[rows], labels[rows], ids))
    write_manifest(features_dir, {"classes": wnids, "dim": DIM, "shards": records, "simulated": True})
    ClassVectors(wnids, prototypes).save(root / "protos.npz")
    (root / "split.txt").write_text("\n".join(wnids) + "\n")
    return {"features": features_dir, "prototypes": root / "protos.npz", "split": root / "split.txt"}


def _evaluate(
    paths: dict[str, Path], out: Path, threads: int, block_rows: int = 300, pin: bool = False
) -> dict[str, bytes]:
    """``imagenet-zsl evaluate`` in a fresh process with ``threads`` BLAS threads, blocks of
    ``block_rows`` images (``pin``: on CPU 0 only); returns every output file's bytes by path."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    env["MKL_NUM_THREADS"] = str(threads)
    command = [
        sys.executable,
        "-m",
        "imagenet_zsl.cli",
        "evaluate",
        *("--features", str(paths["features"]), "--split", str(paths["split"])),
        *("--prototypes", str(paths["prototypes"]), "--k", "1", "2", "5"),
        *("--graph", "none", "--no-label-frequency", "--device", "cpu", "--block-rows", str(block_rows)),
        *("--out", str(out)),
    ]
    if pin:
        command = ["taskset", "-c", "0", *command]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    shutil.rmtree(out)  # the next run writes the same --out: the manifest records the command
    return files


def _manifest_files(files: dict[str, bytes]) -> list:
    return json.loads(files["manifest.json"])["files"]


def test_evaluate_gives_the_same_bytes_with_one_or_two_blas_threads(tmp_path):
    """Same bytes with 1 and 2 BLAS threads; with other blocks (``--block-rows``, which the
    manifest's command records) on one CPU (taskset), the same bytes in every other file."""
    paths = _inputs(tmp_path / "in")
    one = _evaluate(paths, tmp_path / "out", 1)
    two = _evaluate(paths, tmp_path / "out", 2)
    assert sorted(one) == sorted(two) and "metrics.json" in one and "topk/test.unseen.scores.npy" in one
    for name, data in one.items():
        assert data == two[name], name
    pin = shutil.which("taskset") is not None and 0 in os.sched_getaffinity(0)
    other = _evaluate(paths, tmp_path / "out", 2, block_rows=97, pin=pin)
    assert _manifest_files(other) == _manifest_files(one)
    assert {n: d for n, d in other.items() if n != "manifest.json"} == {
        n: d for n, d in one.items() if n != "manifest.json"
    }


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_search_gives_the_same_bits_whatever_the_threads_and_the_blocks(threads, monkeypatch):
    """One searcher, queries cut into blocks of different sizes, its product run on 1, 2 or 3
    threads: scores, lists and tie ranks are the bits of one whole-matrix search on one thread;
    with faiss's candidates too (``--search faiss``, where faiss is installed)."""
    import importlib.util

    from imagenet_zsl.evaluation import numpy_search as search
    from imagenet_zsl.evaluation.search import TopKSearcher

    faiss = "faiss" if importlib.util.find_spec("faiss") is not None else "exact"

    rng = np.random.default_rng(threads)
    prototypes = rng.standard_normal((2 * search.PRODUCT_CLASSES + 77, 33)).astype(np.float32)
    prototypes[5] = prototypes[2]  # identical prototypes: scored once, tied
    queries = rng.standard_normal((2 * search.PRODUCT_ROWS + 41, 33)).astype(np.float32)
    labels = rng.integers(-1, len(prototypes), len(queries))
    monkeypatch.setattr(search, "_blas_threads", lambda: 1)
    expected = TopKSearcher(prototypes, 7, device="cpu").search_ranked(queries, labels)
    monkeypatch.setattr(search, "_blas_threads", lambda: threads)
    searcher = TopKSearcher(prototypes, 7, device="cpu")
    # blocks of 37 rows cut the chunks at odd places (one-row blocks, a padded 512-row call per row
    # and class block, would cost 8x the whole test)
    for block, mode in ((37, "exact"), (100, faiss), (search.PRODUCT_ROWS, "exact"), (len(queries), faiss)):
        parts = [
            searcher.search_ranked(queries[s : s + block], labels[s : s + block], row_offset=s, search=mode)
            for s in range(0, len(queries), block)
        ]
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), expected[0])
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), expected[1])
        np.testing.assert_array_equal(np.concatenate([p[2].above for p in parts]), expected[2].above)
        np.testing.assert_array_equal(np.concatenate([p[2].tied for p in parts]), expected[2].tied)


def test_the_torch_path_gives_the_same_bits_whatever_the_tiles_and_the_blocks(monkeypatch):
    """The device's code (run on the CPU): products in calls of DEVICE_PRODUCT_ROWS queries (made
    16 here), aligned to the set's rows; tiles of 7 rows; blocks of 3, 37 or all rows: the bits of
    one search of the whole set (random data: scores that are not exact)."""
    from imagenet_zsl.evaluation import torch_search
    from imagenet_zsl.evaluation.search import TopKSearcher

    rng = np.random.default_rng(7)
    prototypes = rng.standard_normal((90, 19)).astype(np.float32)
    queries = rng.standard_normal((60, 2 * 19)).astype(np.float32)
    labels = rng.integers(-1, 90, 60)
    monkeypatch.setattr(torch_search, "DEVICE_PRODUCT_ROWS", 16)
    searcher = TopKSearcher(prototypes, 4, device="cpu", torch_kernel=True, maps=2)
    expected = searcher.search_ranked(queries, labels)
    monkeypatch.setattr(torch_search, "DEVICE_TILE_ELEMENTS", 7 * 90)
    for block in (3, 37, len(queries)):
        parts = [
            searcher.search_ranked(queries[s : s + block], labels[s : s + block], row_offset=s)
            for s in range(0, len(queries), block)
        ]
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), expected[0])
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), expected[1])
        np.testing.assert_array_equal(np.concatenate([p[2].above for p in parts]), expected[2].above)
        np.testing.assert_array_equal(np.concatenate([p[2].tied for p in parts]), expected[2].tied)
