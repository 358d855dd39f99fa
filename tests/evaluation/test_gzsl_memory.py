"""Memory-mapped top-k lists read block by block leave nothing resident (scoring.release_pages):
a pass over 12.9M images' lists would otherwise hold 4.3 GB of file pages in the peak RSS. The
data itself is never touched: shared mappings keep their writes, private ones are never dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import imagenet_zsl.scoring.gzsl_lists as gzsl_lists
import imagenet_zsl.scoring.ranks as ranks
from imagenet_zsl.evaluation.hierarchical_precision import hierarchical_precision
from imagenet_zsl.evaluation.hierarchy_errors import expected_error_breakdown
from imagenet_zsl.scoring import GZSLTopK, gzsl_metrics, release_pages

SMAPS = Path("/proc/self/smaps")
needs_smaps = pytest.mark.skipif(not SMAPS.exists(), reason="needs Linux /proc/self/smaps")


def resident_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path``."""
    total, inside = 0, False
    for line in SMAPS.read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = len(fields) >= 6 and fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def _lists(tmp_path: Path, n: int, m: int = 3) -> dict[str, np.ndarray]:
    """GZSL lists of n images as read-only memory maps: unseen classes 0..9, seen 10..14."""
    rng = np.random.default_rng(0)
    out = {}
    for name, low, high in (("seen", 10, 15), ("unseen", 0, 10)):
        scores = -np.sort(-rng.normal(size=(n, m)).astype(np.float32), axis=1)
        ids = (rng.integers(low, high, n)[:, None] + np.arange(m)) % (high - low) + low
        for field, array in (("scores", scores), ("ids", ids.astype(np.int32))):
            np.save(tmp_path / f"{name}_{field}.npy", array)
            out[f"{name}_{field}"] = np.load(tmp_path / f"{name}_{field}.npy", mmap_mode="r")
    return out


def _gz(lists: dict[str, np.ndarray], n: int) -> GZSLTopK:
    labels = np.where(np.arange(n) % 3 == 0, 10 + np.arange(n) % 5, np.arange(n) % 10)
    return GZSLTopK(**lists, labels=labels, seen_mask=np.arange(15) >= 10)


@needs_smaps
def test_blocked_passes_leave_no_list_page_resident(tmp_path, monkeypatch):
    monkeypatch.setattr(ranks, "SORT_BLOCK", 1000)
    n = 20_000  # 240 KB per list: 59 pages each
    lists = _lists(tmp_path, n)
    path = tmp_path / "unseen_scores.npy"
    expected = gzsl_metrics(_gz({k: np.array(v) for k, v in lists.items()}, n), [1, 2])
    assert gzsl_metrics(_gz(lists, n), [1, 2]) == expected  # the same floats from the maps
    assert resident_kb(path) == 0
    # the check can fail: without the release every page read stays resident
    monkeypatch.setattr(gzsl_lists, "release_pages", lambda *arrays: None)
    gzsl_metrics(_gz(lists, n), [1, 2])
    assert resident_kb(path) >= 200


@needs_smaps
def test_zsl_breakdown_and_hp_release_their_blocks(tmp_path, monkeypatch, graph):
    monkeypatch.setattr(ranks, "SORT_BLOCK", 1000)
    n = 20_000
    lists = _lists(tmp_path, n)
    ids, scores = lists["unseen_ids"], lists["unseen_scores"]
    wnids = sorted(graph.index)[:10]
    labels = np.arange(n) % 10
    heap_ids, heap_scores = np.array(ids), np.array(scores)
    want = expected_error_breakdown(graph, wnids, labels, heap_ids, heap_scores).counts
    want_hp = hierarchical_precision(graph, wnids, labels, (heap_scores, heap_ids), [1, 2])
    release_pages(ids, scores)  # the copies above read every page
    assert expected_error_breakdown(graph, wnids, labels, ids, scores).counts == want
    assert resident_kb(tmp_path / "unseen_ids.npy") == 0
    assert hierarchical_precision(graph, wnids, labels, (scores, ids), [1, 2]) == want_hp
    assert resident_kb(tmp_path / "unseen_scores.npy") == 0


def test_release_keeps_the_data_of_every_mapping(tmp_path):
    path = tmp_path / "a.npy"
    written = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(5000,))
    written[:] = np.arange(5000)
    release_pages(written[10:20])  # a view: its mapping's dirty pages go to the file, not away
    assert written[4999] == 4999
    written.flush()
    del written
    assert np.array_equal(np.load(path), np.arange(5000, dtype=np.float32))
    private = np.load(path, mmap_mode="c")  # copy-on-write: dropping its pages would lose the write
    private[0] = -1
    release_pages(private, np.asarray(private))
    assert private[0] == -1 and np.load(path)[0] == 0
    plain = np.ones(3)
    release_pages(plain, plain[1:])  # not mapped: left alone
    assert plain.sum() == 3


def test_sweep_by_brute_force_with_infinite_and_tied_thresholds():
    from imagenet_zsl.scoring.gzsl import _breakpoint_index, _swept

    inf = np.inf
    theta = np.array([-inf, 0.5, 0.5, inf, -1.0, 2.0, -inf, inf, 0.5, -1.0])
    seen_img = np.array([0, 0, 1, 0, 1, 1, 1, 1, 0, 0], bool)
    weights = np.array([0.1, 0.2, 0.05, 0.15, 0.1, 0.2, 0.25, 0.3, 0.25, 0.15])
    breakpoints, index = _breakpoint_index(theta)
    assert breakpoints.tolist() == [-1.0, 0.5, 2.0]
    seen, unseen = _swept(index, theta, weights, seen_img, len(breakpoints))
    # one γ inside each open interval (-inf, -1), (-1, .5), (.5, 2), (2, inf)
    for j, gamma in enumerate([-5.0, 0.0, 1.0, 9.0]):
        hit = np.where(seen_img, gamma < theta, gamma > theta)
        assert seen[j] == pytest.approx(weights[hit & seen_img].sum())
        assert unseen[j] == pytest.approx(weights[hit & ~seen_img].sum())
    # by hand at γ = 0: unseen -inf (0.1) and -1 (0.15); seen +inf (0.3) and 2 (0.2) and 0.5 (0.05)
    assert (seen[1], unseen[1]) == pytest.approx((0.55, 0.25))


def test_class_weights_are_the_image_weights_from_a_class_table():
    from imagenet_zsl.scoring.gzsl import class_weights, image_weights

    # unseen classes 0, 1 (images: 2 of class 0, 1 of class 1); seen classes 2, 3 (3 of class 3)
    scores = np.zeros((6, 2), np.float32)
    ids = np.array([[0, 1]] * 6)
    gz = GZSLTopK(
        scores, ids + 2, scores, ids, labels=np.array([0, 0, 1, 3, 3, 3]), seen_mask=np.arange(4) >= 2
    )
    assert class_weights(gz, True).tolist() == [1 / 4, 1 / 2, 0.0, 1 / 3]  # 1 / (n_class · classes)
    assert class_weights(gz, False).tolist() == [1 / 3, 1 / 3, 0.0, 1 / 3]  # 1 / n of the side
    for per_class in (True, False):
        assert np.array_equal(class_weights(gz, per_class)[gz.labels], image_weights(gz, per_class))
