"""``--search faiss`` (issue 38 §2): faiss's IndexFlatIP proposes the candidates, and the lists,
scores, tie counts and every file of a run are the exact search's, byte for byte: with planted
near-ties (scores one ulp apart), exact ties, identical prototypes, LATEM-style maps, and with
candidate lists that are wrong on purpose (they may only lower the threshold)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.numpy_search import select_above
from imagenet_zsl.evaluation.search import (
    FaissCandidates,
    FaissIndex,
    TopKSearcher,
    candidate_columns,
    faiss_gpus,
    first_columns,
)
from imagenet_zsl.evaluation.search_index import kth_best

faiss = pytest.importorskip("faiss")


def _planted(seed: int, n: int = 300, c: int = 200, e: int = 24) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random queries and prototypes with planted trouble: classes 1 and 2 copy class 0 (exact
    ties), class 4 is class 3 with its last bit moved (near-ties faiss may order otherwise), half
    the queries are near a few popular classes (crowded tops), labels cover every class."""
    rng = np.random.default_rng(seed)
    prototypes = rng.standard_normal((c, e)).astype(np.float32)
    prototypes[1] = prototypes[2] = prototypes[0]
    prototypes[4] = np.nextafter(prototypes[3], np.float32(np.inf))
    queries = rng.standard_normal((n, e)).astype(np.float32)
    popular = rng.integers(0, 6, n // 2)
    queries[: n // 2] = prototypes[popular] + 1e-3 * queries[: n // 2]
    queries[7] = 0.0  # every class ties with every other
    labels = rng.integers(0, c, n)
    return queries, prototypes, labels


def _both(searcher: TopKSearcher, queries: np.ndarray, labels: np.ndarray, **kwargs):
    exact = searcher.search_ranked(queries, labels, **kwargs)
    fast = searcher.search_ranked(queries, labels, search="faiss", **kwargs)
    return exact, fast


def _assert_same(exact, fast) -> None:
    (s1, i1, r1), (s2, i2, r2) = exact, fast
    assert s1.tobytes() == s2.tobytes()
    assert np.array_equal(i1, i2)
    assert np.array_equal(r1.above, r2.above) and np.array_equal(r1.tied, r2.tied)


@pytest.mark.parametrize("k", [1, 5, 20, 199, 200, 400])
def test_faiss_candidates_give_the_exact_lists_and_ranks(k):
    queries, prototypes, labels = _planted(k)
    searcher = TopKSearcher(prototypes, k, device="cpu")
    exact, fast = _both(searcher, queries, labels, row_offset=3)
    _assert_same(exact, fast)
    if k == 5:  # the planted ties are in the lists: class 0 before its copies 1 and 2
        row = int(np.flatnonzero(exact[1][:, 0] == 0)[0])
        assert exact[1][row, :3].tolist() == [0, 1, 2]
        assert (exact[2].tied[np.isin(labels, [0, 1, 2])] >= 2).all()  # the copies tie


def test_faiss_with_maps_takes_the_union_of_each_maps_candidates():
    queries, prototypes, labels = _planted(1, e=12)
    rng = np.random.default_rng(5)
    two = np.hstack([queries, rng.standard_normal(queries.shape).astype(np.float32)])
    searcher = TopKSearcher(prototypes, 10, device="cpu", maps=2)
    _assert_same(*_both(searcher, two, labels))


class _Wrong:
    """Candidate lists that are wrong on purpose: random ids, repeats and -1 padding."""

    def __init__(self, u: int, seed: int):
        self.u, self.rng = u, np.random.default_rng(seed)

    def __call__(self, queries: np.ndarray, count: int) -> np.ndarray:
        ids = self.rng.integers(-1, self.u, (len(queries), count))
        ids[:, 1] = ids[:, 0]  # a repeat
        return ids


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wrong_candidates_cannot_change_the_result(seed):
    """faiss only sets a threshold that at least k + 1 classes reach: bad candidates lower it."""
    queries, prototypes, labels = _planted(seed)
    searcher = TopKSearcher(prototypes, 10, device="cpu")
    exact = searcher.search_ranked(queries, labels)
    searcher._faiss = FaissCandidates(searcher.classes, _Wrong(len(searcher.classes.unique), seed))
    _assert_same(exact, searcher.search_ranked(queries, labels, search="faiss"))


def test_torch_path_with_faiss_equals_its_exact_search():
    pytest.importorskip("torch")
    queries, prototypes, labels = _planted(4)
    searcher = TopKSearcher(prototypes, 10, device="cpu", torch_kernel=True)
    _assert_same(*_both(searcher, queries, labels))
    searcher._faiss = FaissCandidates(searcher.classes, _Wrong(len(searcher.classes.unique), 4))
    _assert_same(
        searcher.search_ranked(queries, labels), searcher.search_ranked(queries, labels, search="faiss")
    )


def test_threshold_and_selection_by_hand():
    """Row [3, 1, 3, 2, 0], take 3: candidates {1 (score 1), 3 (score 2), 0 (score 3)} give the
    3rd best 1; classes >= 1 are 0, 1, 2, 3; the 3 best in tie order: 0, 2 (both 3), then 3."""
    scores = np.array([[3, 1, 3, 2, 0]], np.float32)
    candidates = np.array([[1, 3, 0, 3, -1]])
    first = first_columns(None, 5)

    def thresholds(scores, candidates, first, take):  # the numpy search's floor of each row
        columns, unused = candidate_columns(candidates, first)
        return kth_best(np.take_along_axis(scores, columns, axis=1), unused, take)

    limit = thresholds(scores, candidates, first, 3)
    assert limit.tolist() == [1.0]  # the repeated 3 and the -1 are not counted
    assert select_above(scores, limit, 3).tolist() == [[0, 2, 3]]
    # duplicate prototypes: class 2 repeats distinct row 0, so its column is class 0's
    assert first_columns(np.array([0, 1, 0, 2]), 4).tolist() == [0, 1, 3]
    too_few = thresholds(scores, np.array([[0, -1, -1]]), first, 3)
    assert too_few.tolist() == [-np.inf]  # every class passes: still exact


def test_unknown_search_and_missing_faiss_are_one_line_errors(monkeypatch):
    searcher = TopKSearcher(np.eye(3, dtype=np.float32), 1, device="cpu")
    with pytest.raises(UserInputError, match="--search 'annoy'"):
        searcher.search_ranked(np.eye(3, dtype=np.float32), None, search="annoy")
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(UserInputError, match="pip install faiss-cpu"):
        searcher.search_ranked(np.eye(3, dtype=np.float32), None, search="faiss")


def test_evaluate_with_faiss_writes_the_same_files(tmp_path):
    """`evaluate --search faiss` through the command line: metrics, per-class table, report and
    top-k lists byte for byte; the manifest differs only in the recorded command and parameter."""
    import json

    from imagenet_zsl.cli import main
    from imagenet_zsl.semantics.class_vectors import ClassVectors
    from tests.evaluation.evaluation_fixtures import write_feature_dir

    queries, prototypes, labels = _planted(9, n=240, c=120)
    wnids = [f"n{i:08d}" for i in range(len(prototypes))]
    features = write_feature_dir(tmp_path / "features", labels, queries, shard_rows=50, classes=wnids)
    ClassVectors(wnids, prototypes).save(tmp_path / "protos.npz")
    (tmp_path / "split.txt").write_text("\n".join(wnids) + "\n")
    outputs, manifests = {}, {}
    for search in ("exact", "faiss"):
        out = tmp_path / search
        argv = ["evaluate", "--features", features, "--split", tmp_path / "split.txt"]
        argv += ["--prototypes", tmp_path / "protos.npz", "--k", "1", "2", "5", "10", "--graph", "none"]
        argv += ["--no-label-frequency", "--no-plots", "--device", "cpu", "--block-rows", "64"]
        assert main([str(a) for a in [*argv, "--search", search, "--out", out]]) == 0
        outputs[search] = {
            str(p.relative_to(out)): p.read_bytes().replace(str(out).encode(), b"<out>")
            for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "manifest.json"
        }
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["parameters"]["search"] == search
        manifests[search] = manifest["files"]
    assert "topk/test.unseen.ids.npy" in outputs["exact"] and "per_class.csv" in outputs["exact"]
    assert outputs["faiss"] == outputs["exact"]
    assert manifests["faiss"] == manifests["exact"]  # every listed file: same size and sha256


def test_a_gpu_index_is_asked_for_only_where_faiss_has_gpus():
    """faiss-cpu (no GPU support): a CUDA search's index stays on the CPU and answers the same."""
    unique = np.eye(4, 3, dtype=np.float32)
    index = FaissIndex(unique, gpu=0)
    assert index.on_gpu is (faiss_gpus(faiss) > 0)
    if not index.on_gpu:
        assert index(np.array([[0, 0, 1]], np.float32), 2).tolist()[0][0] == 2
