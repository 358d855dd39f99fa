"""The ladder's evaluated GZSL rung reads each stored list's tail (issue #45 §1 follow-up): a tie
group running past a stored top-m list is counted whole, as ``evaluate`` counts it, so the rung
equals metrics.json exactly; a run directory written without the tails keeps the old rule (such an
image is a miss) and the ladder says so in one log line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.ladder_gzsl import joint_cells
from imagenet_zsl.analysis.ladder_steps import corrected_bounds, group_credit
from imagenet_zsl.analysis.runs import GZSLLists, RunCell, read_cell
from imagenet_zsl.cli import main
from imagenet_zsl.manifests import read_manifest, write_manifest
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import write_feature_dir

UNSEEN = [f"n0000001{i}" for i in range(5)]  # u0..u4, the split (the GZSL unseen space)
SEEN = [f"n0000002{i}" for i in range(5)]  # s0..s4, the seen space
CLASSES = UNSEEN + SEEN
# scores (unseen u0..u4 | seen s0..s4) of each image, K = 3, so m = 4 classes per list and space
TEST_SCORES = [
    # u1: seen [2, 2, 2, 3, 3] -> the seen list is [3, 3, 2, 2] and s2 (2) is left off it (tail 1).
    # Joint: 2 above (s3, s4), 3 tied (s0, s1, s2): credit (3 - 2) / (3 + 1) = 1/4; strict 0
    [0, 2, 1, 0, 1, 2, 2, 2, 3, 3],
    [3, 1, 1, 1, 1, 0, 0, 0, 0, 0],  # u0: a hit
    [1, 1, 1, 2, 1, 0, 0, 0, 0, 1],  # u3: a hit
]
TEST_LABELS = [1, 0, 3]
SEEN_SCORES = [
    # s0 scores 2, as all five unseen classes: the unseen list [2, 2, 2, 2] leaves one off (tail 1).
    # Joint: 0 above, 5 tied: credit 3 / 6 = 1/2; strict 0
    [2, 2, 2, 2, 2, 2, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 3, 0, 0, 0],  # s1: a hit
    [0, 0, 0, 0, 0, 0, 0, 3, 0, 0],  # s2: a hit
    [0, 0, 0, 0, 0, 0, 0, 0, 3, 0],  # s3: a hit
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 3],  # s4: a hit
]
SEEN_LABELS = [5, 6, 7, 8, 9]  # joint indices: s0 .. s4, one image each
# hand-computed: flat u = (1/4 + 1 + 1) / 3, per class over u0, u1, u3 the same; s = (1/2 + 4) / 5
UNSEEN_HIT3, SEEN_HIT3 = 0.75, 0.9


@pytest.fixture
def tied_gzsl_run(tmp_path: Path) -> tuple[Path, Path]:
    """`evaluate --gzsl --k 1 3` where each image's scores are the hand-made rows above: image i's
    feature is the i-th unit vector and class c's prototype holds column c of the score table (one
    more coordinate keeps the prototypes distinct). Small integers: every score exact."""
    scores = np.array(TEST_SCORES + SEEN_SCORES, np.float32)  # (8 images, 10 classes)
    n_images = len(scores)
    features = np.eye(n_images + 1, dtype=np.float32)[:n_images]
    prototypes = np.hstack([scores.T, np.arange(len(CLASSES), dtype=np.float32)[:, None]])
    n_test = len(TEST_LABELS)
    test = write_feature_dir(tmp_path / "test", np.array(TEST_LABELS), features[:n_test], classes=CLASSES)
    seen = write_feature_dir(tmp_path / "seen", np.array(SEEN_LABELS), features[n_test:], classes=CLASSES)
    ClassVectors(CLASSES, prototypes).save(tmp_path / "protos.npz")
    (tmp_path / "split.txt").write_text("\n".join(UNSEEN) + "\n")
    (tmp_path / "seen.txt").write_text("\n".join(SEEN) + "\n")
    run = tmp_path / "run"
    argv = ["evaluate", "--features", test, "--split", tmp_path / "split.txt", "--prototypes"]
    argv += [tmp_path / "protos.npz", "--gzsl", "--seen-features", seen, "--seen-classes"]
    argv += [tmp_path / "seen.txt", "--k", "1", "3", "--out", run, "--graph", "none", "--no-plots"]
    assert main([str(a) for a in [*argv, "--no-label-frequency"]]) == 0
    labels = pd.DataFrame(
        {
            "wnid": UNSEEN,
            "label": list("abcde"),
            "label_zipf": [3.0] * 5,
            "label_rare": [False] * 5,
            "is_primary": [True] * 5,
            "primary_confidence": [1.0] * 5,
        }
    )
    labels.to_csv(tmp_path / "classes.csv", index=False)
    (tmp_path / "counts.tsv").write_text("".join(f"{w}\t500\n" for w in UNSEEN))
    (tmp_path / "edges.tsv").write_text("".join(f"root\t{w}\n" for w in CLASSES))
    return tmp_path, run


def _ladder(tmp_path: Path, run: Path, out: str) -> pd.DataFrame:
    argv = ["analyze", "ladder", run, "--labels", tmp_path / "classes.csv", "--graph", tmp_path / "edges.tsv"]
    argv += ["--counts", tmp_path / "counts.tsv", "--k", "1", "3", "--out", tmp_path / out]
    assert main([str(a) for a in argv]) == 0
    table = pd.read_csv(tmp_path / out / "ladder.csv")
    return table[table["setting"] == "gzsl"].set_index("step")


def test_evaluated_rung_counts_a_tie_group_past_the_stored_list(tied_gzsl_run, caplog) -> None:
    tmp_path, run = tied_gzsl_run
    topk = run / "topk"
    # the case is exercised (the other images' lists end below their true scores: no matter)
    assert np.load(topk / "test.seen.tail.npy").tolist() == [1, 1, 1]
    assert np.load(topk / "seen.unseen.tail.npy").tolist() == [1, 1, 1, 1, 1]
    gzsl = json.loads((run / "metrics.json").read_text())["gzsl"]
    assert gzsl["flat"]["3"]["unseen"] == pytest.approx(UNSEEN_HIT3)  # evaluate's own, by hand
    assert gzsl["flat"]["3"]["seen"] == pytest.approx(SEEN_HIT3)
    with caplog.at_level(logging.INFO):
        rung = _ladder(tmp_path, run, "ladder").loc["evaluated"]
    assert "tail" not in caplog.text  # every tail file was there: nothing to say
    assert rung["hit@3"] == pytest.approx(UNSEEN_HIT3)
    assert rung["seen_hit@3"] == pytest.approx(SEEN_HIT3)
    assert rung["H@3"] == pytest.approx(2 * 0.75 * 0.9 / 1.65)
    for suffix in ("", "_strict"):  # exactly metrics.json, both tie rules, flat and per class
        flat, per = gzsl[f"flat{suffix}"]["3"], gzsl[f"per_class{suffix}"]["3"]
        assert rung[f"hit@3{suffix}"] == pytest.approx(flat["unseen"], abs=1e-6)
        assert rung[f"seen_hit@3{suffix}"] == pytest.approx(flat["seen"], abs=1e-6)
        assert rung[f"per_class_hit@3{suffix}"] == pytest.approx(per["unseen"], abs=1e-6)
        assert rung[f"seen_per_class_hit@3{suffix}"] == pytest.approx(per["seen"], abs=1e-6)
        assert rung[f"H@3{suffix}"] == pytest.approx(per["H"], abs=1e-6)
    assert rung["hit@3_strict"] == pytest.approx(2 / 3)  # r + t = 5 >= 3 for the tied image


def test_a_run_without_tail_files_keeps_the_old_rule_and_says_so(tied_gzsl_run, caplog) -> None:
    """An older run directory (no ``*.tail.npy``, its manifest listing none): the tie group past the
    list is undecided, a miss (u = 2/3, s = 4/5), and one log line says why."""
    tmp_path, run = tied_gzsl_run
    manifest = read_manifest(run)
    for path in sorted((run / "topk").glob("*.tail.npy")):
        path.unlink()
    keep = {k: manifest[k] for k in ("inputs", "parameters")}
    fields = {
        k: v
        for k, v in manifest.items()
        if k not in {"format", "tool", "command", "software", "files", *keep}
    }
    write_manifest(run, format=manifest["format"], tool=manifest["tool"], **keep, fields=fields)
    assert read_cell(run).gzsl is not None
    with caplog.at_level(logging.INFO):
        rung = _ladder(tmp_path, run, "old").loc["evaluated"]
    lines = [r.getMessage() for r in caplog.records if "tail" in r.getMessage()]
    assert len(lines) == 1 and str(run) in lines[0], lines
    assert rung["hit@3"] == pytest.approx(2 / 3)
    assert rung["seen_hit@3"] == pytest.approx(4 / 5)


def _space_lists(full: np.ndarray, labels: np.ndarray, m: int) -> tuple[np.ndarray, ...]:
    """One space's stored lists as ``evaluate`` keeps them: top-m ids and scores (ties by id),
    the true class's exact tie ranks (labels -1: not of this space) and the list's tail."""
    n, size = full.shape
    ids = np.lexsort((np.tile(np.arange(size), (n, 1)), -full), axis=1)[:, :m]
    scores = np.take_along_axis(full, ids, axis=1)
    true = full[np.arange(n), np.maximum(labels, 0)][:, None]
    return ids, scores, (full > true).sum(axis=1), (full == true).sum(axis=1) - 1, M.tail_ties(full, scores)


def _random_gzsl_cell(
    rng: np.random.Generator, with_tails: bool, m: int = 3
) -> tuple[RunCell, np.ndarray, np.ndarray]:
    """A GZSL cell of 6 unseen and 5 seen classes, top-m lists, integer scores in 0..3 (ties
    everywhere); returns it with the full joint scores of its test and of its seen images."""
    n, n_u, n_s = 300, 6, 5
    test_full = rng.integers(0, 4, (n, n_u + n_s)).astype(np.float32)
    seen_full = rng.integers(0, 4, (n, n_u + n_s)).astype(np.float32)
    labels, seen_labels = rng.integers(0, n_u, n), rng.integers(0, n_s, n)
    ids, scores, above, tied, _ = _space_lists(test_full[:, :n_u], labels, m)
    cell = RunCell(
        Path("r"), {}, [f"u{i}" for i in range(n_u)], labels, ids, scores, np.arange(n), above, tied
    )
    t_s_ids, t_s_scores, _, _, t_s_tail = _space_lists(test_full[:, n_u:], np.full(n, -1), m)
    s_ids, s_scores, s_above, s_tied, s_tail = _space_lists(seen_full[:, n_u:], seen_labels, m)
    u_ids, u_scores, _, _, u_tail = _space_lists(seen_full[:, :n_u], np.full(n, -1), m)
    tails = (t_s_tail, np.zeros(n, np.int64), s_tail, u_tail) if with_tails else (None,) * 4
    cell.gzsl = GZSLLists(
        [f"s{i}" for i in range(n_s)], t_s_ids, t_s_scores, seen_labels, s_ids, s_scores, u_ids, u_scores,
        s_above, s_tied, *tails,
    )  # fmt: skip
    return cell, test_full, seen_full


def test_joint_ranks_with_tails_are_exact_and_the_bounds_hold() -> None:
    """Brute force over the full joint scores: every image the joint ranks call exact has the joint
    space's true tie ranks; the tails make more images exact (a tie group running past the other
    space's list); the later rungs' bounds bracket the true credit of the corrected label space,
    also where the true class is left off its own list (its joint ranks then unknown: the upper
    bound must allow it to tie the last listed score; it once did not)."""
    n_classes = 11
    pairs = [(0, 6), (6, 0), (1, 2), (2, 1), (3, 9), (9, 3)]  # parent-child, across the spaces too
    related = np.unique([i * n_classes + i for i in range(n_classes)] + [a * n_classes + b for a, b in pairs])
    actives = [np.ones(n_classes, bool), np.r_[[True, False, True, True, False, True], np.ones(5, bool)]]
    for seed, m in ((0, 2), (1, 3), (2, 4)):
        counts = {}
        for with_tails in (False, True):
            cell, test_full, seen_full = _random_gzsl_cell(np.random.default_rng(seed), with_tails, m)
            test, exact, seen, seen_exact = joint_cells(cell)
            counts[with_tails] = int(exact.sum() + seen_exact.sum())
            for joint, mask, full in ((test, exact, test_full), (seen, seen_exact, seen_full)):
                true = full[np.arange(len(full)), joint.labels][:, None]
                assert ((full > true).sum(axis=1)[mask] == joint.above[mask]).all()
                assert ((full == true).sum(axis=1)[mask] - 1 == joint.tied[mask]).all()
                for active in actives:
                    for rel in (None, related):
                        bounds = corrected_bounds(joint, active, rel, mask)
                        correct = np.zeros(full.shape, bool)
                        correct[np.arange(len(full)), joint.labels] = True
                        if rel is not None:
                            for x, y in zip(*np.divmod(rel, n_classes), strict=True):
                                correct[joint.labels == x, y] = True
                        correct &= active
                        wrong = active & ~correct
                        best = np.where(correct, full, -np.inf).max(axis=1)[:, None]
                        r, c = (wrong & (full > best)).sum(axis=1), (correct & (full == best)).sum(axis=1)
                        w = (wrong & (full == best)).sum(axis=1)
                        keep = active[joint.labels]
                        for k in (1, 2):
                            for rule in ("expected", "strict"):
                                truth = group_credit(k, r, c, w, tie_rule=rule)[keep]
                                low, high = (x[keep] for x in bounds.credit(k, rule))
                                assert (low <= truth + 1e-12).all() and (truth <= high + 1e-12).all()
        assert counts[True] > counts[False], counts
