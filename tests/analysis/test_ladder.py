"""The correction ladder's arithmetic on hand-made runs (numbers worked out by hand below)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.ladder_steps import (
    STEPS,
    ClassFlags,
    GroupBounds,
    cell_ladder,
    corrected_bounds,
    group_credit,
    related_keys,
)
from imagenet_zsl.analysis.runs import RunCell, read_cells
from imagenet_zsl.cli import main
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.image_filter.params import OUTPUT_FORMAT as FILTER_FORMAT
from imagenet_zsl.image_filter.params import TOOL as FILTER_TOOL
from imagenet_zsl.manifests import read_manifest_verified, write_manifest
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM, TEST, one_hot, write_feature_dir
from tests.toy import TOY_EDGES

# split classes a3, a31, b1, b11: related (parent-child) pairs a3-a31 and b1-b11
SPLIT = ["a3", "a31", "b1", "b11"]
LABELS = np.array([0, 1, 2, 3, 2])
IDS = np.array([[0, 1, 2], [0, 1, 3], [0, 1, 3], [3, 2, 0], [2, 0, 1]])
# image 3: its true class b11 ties with b1 at the top (r = 0, t = 1)
SCORES = np.array([[0.9, 0.5, 0.1], [0.9, 0.8, 0.1], [0.9, 0.8, 0.7], [0.5, 0.5, 0.1], [0.9, 0.3, 0.2]])


def toy_cell() -> RunCell:
    metrics = {"model": {"name": "toy"}, "inputs": {"split": {"name": "s"}}}
    return RunCell(Path("toy"), metrics, SPLIT, LABELS, IDS, SCORES.astype(np.float32), np.arange(5))


def brute_force_credit(k: int, r: int, c: int, w: int) -> float:
    """Share of the orders of a tie group (c correct, w wrong) with a correct class in the first k − r."""
    orders = list(itertools.permutations([True] * c + [False] * w))
    return sum(any(o[: max(k - r, 0)]) for o in orders) / len(orders)


@pytest.mark.parametrize(
    ("k", "r", "c", "w"), [(1, 0, 1, 0), (1, 0, 1, 3), (2, 0, 2, 2), (3, 1, 2, 3), (2, 2, 3, 1)]
)
def test_group_credit_is_the_expected_value_of_random_tie_breaking(k: int, r: int, c: int, w: int) -> None:
    one = np.array([r]), np.array([c]), np.array([w])
    assert group_credit(k, *one)[0] == pytest.approx(brute_force_credit(k, r, c, w))
    assert group_credit(k, *one, tie_rule="strict")[0] == float(r + w < k)


def test_group_credit_with_one_correct_class_is_the_evaluation_formula() -> None:
    r, t = np.array([0, 0, 1, 2, 4]), np.array([0, 3, 2, 0, 1])
    for k in (1, 2, 5):
        expected = M.TieRanks(r, t).credit(k)
        assert group_credit(k, r, np.ones_like(r), t) == pytest.approx(expected)


def test_evaluated_step_is_the_evaluation_tie_rule() -> None:
    cell = toy_cell()
    ranks = cell.tie_ranks()  # no stored counts here: derived from the lists
    assert ranks.above.tolist() == [0, 1, 3, 0, 0] and ranks.tied.tolist() == [0, 0, 0, 1, 0]
    low, high = GroupBounds.from_tie_ranks(ranks).credit(1)
    assert low.tolist() == high.tolist() == [1, 0, 0, 0.5, 1]


def test_related_predictions_count() -> None:
    cell = toy_cell()
    related = related_keys(ClassGraph.from_edges(TOY_EDGES), SPLIT)
    bounds = corrected_bounds(cell, np.ones(4, bool), related)
    r, c, w = bounds.worst
    assert r.tolist() == [0, 0, 2, 0, 0]
    assert c.tolist() == [1, 1, 1, 2, 1]  # image 3: b11 and b1 (related) tie at the top
    assert w.tolist() == [0] * 5
    assert [x.tolist() for x in bounds.best] == [x.tolist() for x in bounds.worst]  # all exact


def test_ladder_arithmetic() -> None:
    cell = toy_cell()
    related = related_keys(ClassGraph.from_edges(TOY_EDGES), SPLIT)
    flags = ClassFlags(
        rare=np.array([False, True, False, False]),  # a31 rare
        secondary=np.array([False, False, False, False]),
        images=np.array([500, 1000, 1000, 100]),  # b11 has few images
    )
    kept = np.array([True, True, True, True, False])
    rows = {r["step"]: r for r in cell_ladder(cell, related, flags, kept, ks=(1, 2), min_images=301)}
    expect = {
        # step: (classes, images, hit@1, strict hit@1, hit@2, per-class hit@1, per-class strict hit@1)
        # evaluated: credits (1, 0, 0, 1/2, 1) at K = 1; image 3's tie costs 1/2 (strict: all of it)
        "evaluated": (4, 5, 2.5 / 5, 2 / 5, 4 / 5, (1 + 0 + 0.5 + 0.5) / 4, (1 + 0 + 0.5 + 0) / 4),
        # image 3: both tied classes are correct now
        "structure": (4, 5, 4 / 5, 4 / 5, 4 / 5, (1 + 1 + 0.5 + 1) / 4, (1 + 1 + 0.5 + 1) / 4),
        "rare_labels": (3, 4, 3 / 4, 3 / 4, 1.0, (1 + 0.5 + 1) / 3, (1 + 0.5 + 1) / 3),
        "secondary_meaning": (3, 4, 3 / 4, 3 / 4, 1.0, (1 + 0.5 + 1) / 3, (1 + 0.5 + 1) / 3),
        # b11 leaves the label space: image 2's list keeps only a3 (above b1), b1 unlisted; every
        # unlisted class is dropped or b1 itself, so b1 ranks second: a miss at 1, a hit at 2 (exact)
        "few_images": (2, 3, 2 / 3, 2 / 3, 1.0, (1 + 0.5) / 2, (1 + 0.5) / 2),
        "ambiguous_images": (2, 2, 1 / 2, 1 / 2, 1.0, (1 + 0) / 2, (1 + 0) / 2),
    }
    assert list(rows) == list(expect)
    for step, values in expect.items():
        row = rows[step]
        names = ["classes", "images", "hit@1", "hit@1_strict", "hit@2", "per_class_hit@1"]
        got = tuple(row[n] for n in [*names, "per_class_hit@1_strict"])
        assert got == pytest.approx(values), step
        assert row["undetermined@2"] == row["undetermined@1"] == 0, step
        assert row["hit@2_upper"] == pytest.approx(row["hit@2"]), step


def tied_cell(above: int, tied: int) -> RunCell:
    """One image of class 0 among 6; lists hold 3 classes all tied at 0.5 (a trivial model)."""
    metrics = {"model": {"name": "tie"}, "inputs": {"split": {"name": "s"}}}
    ids = np.array([[0, 1, 2]]) if above == 0 else np.array([[1, 2, 3]])
    scores = np.full((1, 3), 0.5, np.float32)
    return RunCell(
        Path("tie"), metrics, list("abcdef"), np.array([0]), ids, scores, np.arange(1),
        np.array([above]), np.array([tied]),
    )  # fmt: skip


def test_stored_tie_ranks_size_the_tie_group_beyond_the_list() -> None:
    # classes a..e tie at the top (t = 4), f scores lower: evaluated hit@1 = 1/5, hit@2 = 2/5
    cell = tied_cell(above=0, tied=4)
    low, high = GroupBounds.from_tie_ranks(cell.tie_ranks()).credit(2)
    assert low[0] == high[0] == pytest.approx(2 / 5)
    # label space intact: the stored counts make the re-ranking exact
    bounds = corrected_bounds(cell, np.ones(6, bool))
    assert [int(x[0]) for x in bounds.worst] == [int(x[0]) for x in bounds.best] == [0, 1, 4]
    # drop d (unlisted): the group has 3 or 4 other members left, we cannot tell which were dropped
    active = np.array([True, True, True, False, True, True])
    low, high = corrected_bounds(cell, active).credit(1)
    assert (low[0], high[0]) == pytest.approx((1 / 5, 1 / 4))  # the truth, 1/4, is bracketed
    low, high = corrected_bounds(cell, active).credit(1, "strict")
    assert low[0] == high[0] == 0


def test_unlisted_true_class_in_the_last_tie_group() -> None:
    # a is unlisted but tied with the listed b, c, d (above = 0, tied = 3; e, f lower)
    cell = tied_cell(above=0, tied=3)
    cell.ids = np.array([[1, 2, 3]])
    low, high = corrected_bounds(cell, np.ones(6, bool)).credit(2)
    assert low[0] == high[0] == pytest.approx(2 / 4)
    # a below b, c, d (above = 3, tied = 0), all three dropped: a ranks first among a, e, f (exact)
    cell = tied_cell(above=3, tied=0)
    active = np.array([True, False, False, False, True, True])
    low, high = corrected_bounds(cell, active).credit(1)
    assert low[0] == high[0] == 1.0
    # with one more (unlisted) class above a, e or f: a ranks second, but which one is unknown
    cell = tied_cell(above=4, tied=0)
    low, high = corrected_bounds(cell, active).credit(1)
    assert (low[0], high[0]) == (0.0, 1.0)
    low, high = corrected_bounds(cell, active).credit(3)
    assert low[0] == high[0] == 1.0  # only 3 classes remain


def test_ladder_without_filter_has_five_steps() -> None:
    cell = toy_cell()
    flags = ClassFlags(np.zeros(4, bool), np.zeros(4, bool), np.full(4, 1000))
    rows = cell_ladder(cell, related_keys(ClassGraph.from_edges(TOY_EDGES), SPLIT), flags, None, (1,))
    assert [r["step"] for r in rows][-1] == "few_images" and len(rows) == 5
    assert rows[0]["hit@1"] == pytest.approx(rows[-1]["hit@1"] - (4 / 5 - 2.5 / 5))


@pytest.fixture
def finished_run(tmp_path):
    """`imagenet-zsl evaluate` on 6 one-hot classes; image 0 (n00000000) looks like its parent."""
    labels = np.repeat(np.arange(6), 2)
    features = one_hot(labels)
    features[0] = one_hot(np.array([1]))[0]
    feats = write_feature_dir(tmp_path / "features", labels, features)
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(tmp_path / "protos.npz")
    (tmp_path / "split.txt").write_text("\n".join(TEST) + "\n")
    edges = tmp_path / "edges.tsv"
    edges.write_text("root\tn00000001\nn00000001\tn00000000\nroot\tn00000003\nroot\tn00000002\n")
    run = tmp_path / "run"
    argv = ["evaluate", "--features", feats, "--split", tmp_path / "split.txt", "--prototypes"]
    argv += [tmp_path / "protos.npz", "--out", run, "--graph", edges, "--no-plots", "--no-label-frequency"]
    assert main([str(a) for a in argv]) == 0
    return tmp_path, run, edges


def _filter_dir(path: Path, kept: list[str]) -> Path:
    """An `images filter` output directory with only its kept.csv (and its manifest, which the
    filter step verifies)."""
    path.mkdir()
    (path / "kept.csv").write_text("image_id\n" + "".join(f"{i}\n" for i in kept))
    write_manifest(path, format=FILTER_FORMAT, tool=FILTER_TOOL)
    return path


def test_ladder_command_on_an_evaluated_run(finished_run, capsys) -> None:
    tmp_path, run, edges = finished_run
    labels = pd.DataFrame(
        {
            "wnid": TEST,
            "label": list("abcdef"),
            "label_zipf": [3.0] * 6,
            "label_rare": [False, False, True, False, False, False],  # n00000002 rare
            "is_primary": [True] * 5 + [False],  # n00000005 secondary
            "primary_confidence": [1.0] * 6,
        }
    )
    labels.to_csv(tmp_path / "classes.csv", index=False)
    (tmp_path / "counts.tsv").write_text("".join(f"{w}\t{500 if w != 'n00000004' else 3}\n" for w in TEST))
    _filter_dir(tmp_path / "filter", ["n00000001/2.JPEG", "n00000001/3.JPEG"])
    out = tmp_path / "ladder"
    argv = ["analyze", "ladder", run, "--labels", tmp_path / "classes.csv", "--graph", edges]
    argv += ["--counts", tmp_path / "counts.tsv", "--filter", tmp_path / "filter", "--out", out]
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    printed = capsys.readouterr().out
    assert "| evaluated |" in printed and "ladder.png" in printed
    table = pd.read_csv(out / "ladder.csv")
    assert table["step"].tolist() == [s for s, _ in STEPS]
    assert table.columns[2] == "backbone" and table["backbone"].nunique() == 1  # one cell, named
    assert (out / "ladder.md").read_text().startswith(f"Features: {table['backbone'][0]} (backbone")
    flat = json.loads((run / "metrics.json").read_text())["zsl"]["flat"]
    zsl = json.loads((run / "metrics.json").read_text())["zsl"]
    assert table["hit@1"][0] == pytest.approx(flat["1"])  # 11 of 12
    assert table["hit@1_strict"][0] == pytest.approx(zsl["flat_strict"]["1"])
    assert table["per_class_hit@5"][0] == pytest.approx(zsl["per_class"]["5"])
    assert (run / "topk" / "test.true_above.npy").is_file()  # step 1 used the stored tie ranks
    assert table["hit@1"].tolist() == pytest.approx([11 / 12, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert table["classes"].tolist() == [6, 6, 5, 4, 3, 1]
    assert table["images"].tolist() == [12, 12, 10, 8, 6, 2]
    manifest = read_manifest_verified(out, "imagenet-zsl/ladder-v2")  # the one writer, every file listed
    assert manifest["tool"] == "imagenet-zsl analyze ladder" and manifest["parameters"]["ks"] == [1, 5]
    assert [r["path"] for r in manifest["files"]] == ["ladder.csv", "ladder.md", "ladder.png"]
    assert len(read_cells(run)) == 1


def test_bounds_bracket_the_truth_on_random_tied_runs() -> None:
    """Lists of the top 3 of 8 classes with many ties: every bound holds, exact cases are exact."""
    rng = np.random.default_rng(0)
    n, n_classes, m = 400, 8, 3
    full = rng.integers(0, 4, (n, n_classes)).astype(np.float32)  # integer scores: many ties
    labels = rng.integers(0, n_classes, n)
    order = np.lexsort((np.tile(np.arange(n_classes), (n, 1)), -full), axis=1)[:, :m]
    ids, scores = order, np.take_along_axis(full, order, axis=1)
    true = full[np.arange(n), labels][:, None]
    above = (full > true).sum(axis=1)
    tied = (full == true).sum(axis=1) - 1
    cell = RunCell(Path("r"), {}, [f"c{i}" for i in range(n_classes)], labels, ids, scores, np.arange(n))
    cell.above, cell.tied = above, tied
    pairs = [(0, 1), (1, 0), (2, 3), (3, 2), (4, 5), (5, 4)]
    related = np.unique([i * n_classes + i for i in range(n_classes)] + [a * n_classes + b for a, b in pairs])
    for active in ([True] * 8, [True, True, False, True, True, False, True, True], [True, False] * 4):
        active = np.asarray(active)
        for rel in (None, related):
            bounds = corrected_bounds(cell, active, rel)
            is_correct = np.zeros((n, n_classes), bool)
            is_correct[np.arange(n), labels] = True
            if rel is not None:
                a, b = np.divmod(rel, n_classes)
                for x, y in zip(a, b, strict=True):
                    is_correct[labels == x, y] = True
            is_correct &= active
            wrong = active & ~is_correct
            best = np.where(is_correct, full, -np.inf).max(axis=1)[:, None]
            r = (wrong & (full > best)).sum(axis=1)
            c = (is_correct & (full == best)).sum(axis=1)
            w = (wrong & (full == best)).sum(axis=1)
            keep = active[labels]
            for k in (1, 2):
                for rule in ("expected", "strict"):
                    truth = group_credit(k, r, c, w, tie_rule=rule)[keep]
                    low, high = (x[keep] for x in bounds.credit(k, rule))
                    assert (low <= truth + 1e-12).all() and (truth <= high + 1e-12).all(), (k, rule)
            if rel is None and active.all():  # the label space as evaluated: exact
                assert (low == high).all()


def _label_table(path: Path) -> Path:
    labels = pd.DataFrame(
        {
            "wnid": TEST,
            "label": list("abcdef"),
            "label_zipf": [3.0] * 6,
            "label_rare": [False] * 6,
            "is_primary": [True] * 6,
            "primary_confidence": [1.0] * 6,
        }
    )
    labels.to_csv(path, index=False)
    return path


def test_classes_outside_wordnet_need_a_label_table(finished_run, capsys) -> None:
    """Labels are derived from WordNet; for other wnids the ladder asks for --labels (it used to
    stop with an internal KeyError)."""
    _, run, edges = finished_run
    out = run.parent / "ladder"
    capsys.readouterr()
    assert main(["analyze", "ladder", str(run), "--graph", str(edges), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not WordNet 3.0 noun synsets" in err[0] and "--labels" in err[0]
    assert not out.exists()


def test_filter_step_reads_image_ids_through_the_checked_reader(finished_run, capsys) -> None:
    """Step 6 maps stored rows to image ids from the run's feature directory: through FeatureDir,
    so an ids shard changed after the evaluation is a one-line error, not silently wrong ids."""
    tmp_path, run, edges = finished_run
    _filter_dir(tmp_path / "filter", ["n00000001/2.JPEG"])
    ids_file = next((tmp_path / "features").glob("*.ids.npy"))
    ids = np.load(ids_file)
    np.save(ids_file, ids[::-1].copy())  # same shape and dtype, other order: only sha256 tells
    argv = ["analyze", "ladder", run, "--graph", edges, "--filter", tmp_path / "filter"]
    argv += ["--labels", _label_table(tmp_path / "classes.csv"), "--out", tmp_path / "ladder"]
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and ids_file.name.split(".")[0] in err[0]
    assert not (tmp_path / "ladder").exists()


@pytest.fixture
def gzsl_run(tmp_path):
    """`evaluate --gzsl` on one-hot prototypes: 6 test classes (2 images each), 2 seen classes
    (2 held-out images each). Test image 0 (n00000000) looks like its seen parent n00000008; test
    image 2 (n00000001) looks like the unrelated seen class n00000009."""
    test_labels = np.repeat(np.arange(6), 2)
    features = one_hot(test_labels)
    features[0], features[2] = one_hot(np.array([8]))[0], one_hot(np.array([9]))[0]
    feats = write_feature_dir(tmp_path / "features", test_labels, features)
    seen_labels = np.repeat([8, 9], 2)
    seen = write_feature_dir(tmp_path / "seen", seen_labels, one_hot(seen_labels), shard_rows=4)
    ClassVectors(CLASSES, np.eye(DIM, dtype=np.float32)).save(tmp_path / "protos.npz")
    (tmp_path / "split.txt").write_text("\n".join(TEST) + "\n")
    edges = tmp_path / "edges.tsv"
    lines = ["root\tn00000008", "n00000008\tn00000000", "root\tn00000009"]
    lines += [f"root\tn0000000{i}" for i in range(1, 6)]
    edges.write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    argv = ["evaluate", "--features", feats, "--split", tmp_path / "split.txt", "--prototypes"]
    argv += [tmp_path / "protos.npz", "--gzsl", "--seen-features", seen, "--k", "1", "--out", run]
    argv += ["--graph", "none", "--no-plots", "--no-label-frequency"]
    assert main([str(a) for a in argv]) == 0
    labels = pd.DataFrame(
        {
            "wnid": TEST,
            "label": list("abcdef"),
            "label_zipf": [3.0] * 6,
            "label_rare": [False, True, False, False, False, False],  # n00000001 rare
            "is_primary": [True] * 6,
            "primary_confidence": [1.0] * 6,
        }
    )
    labels.to_csv(tmp_path / "classes.csv", index=False)
    (tmp_path / "counts.tsv").write_text("".join(f"{w}\t500\n" for w in TEST))
    return tmp_path, run, edges


def test_gzsl_ladder_by_hand(gzsl_run, capsys) -> None:
    tmp_path, run, edges = gzsl_run
    out = tmp_path / "ladder"
    argv = ["analyze", "ladder", run, "--labels", tmp_path / "classes.csv", "--graph", edges, "--k", "1"]
    argv += ["--counts", tmp_path / "counts.tsv", "--out", out]
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    assert "GZSL (test images among the test and seen classes" in capsys.readouterr().out
    table = pd.read_csv(out / "ladder.csv")
    gz = table[table["setting"] == "gzsl"].set_index("step")
    zsl = table[table["setting"] == "zsl"].set_index("step")
    # evaluated: images 0 and 2 go to a seen class (a miss), the other 10 hit; seen images all hit
    metrics = json.loads((run / "metrics.json").read_text())["gzsl"]
    assert gz.loc["evaluated", "per_class_hit@1"] == pytest.approx(metrics["per_class"]["1"]["unseen"])
    assert gz.loc["evaluated", "H@1"] == pytest.approx(metrics["per_class"]["1"]["H"])
    assert gz.loc["evaluated", "hit@1"] == pytest.approx(10 / 12)
    assert gz.loc["evaluated", "per_class_hit@1"] == pytest.approx((0.5 + 0.5 + 4) / 6)
    assert gz.loc["evaluated", "H@1"] == pytest.approx(10 / 11)  # 2 · 1 · 5/6 / (1 + 5/6)
    # structure: image 0's prediction is n00000000's seen parent, now correct; image 2 stays a miss
    assert gz.loc["structure", "hit@1"] == pytest.approx(11 / 12)
    assert gz.loc["structure", "per_class_hit@1"] == pytest.approx(5.5 / 6)
    assert gz.loc["structure", "seen_per_class_hit@1"] == pytest.approx(1.0)
    assert gz.loc["structure", "H@1"] == pytest.approx(22 / 23)
    # rare labels: n00000001 (and image 2) leave; every remaining test image is right
    assert gz.loc["rare_labels", "per_class_hit@1"] == pytest.approx(1.0)
    assert gz.loc["rare_labels", "classes"] == 5 and gz.loc["rare_labels", "images"] == 10
    assert (gz["undetermined@1"] == 0).all()
    # ZSL beside it: images 0 and 2 score 0 on every test class, a 6-way tie: 1/6 each
    assert zsl.loc["evaluated", "hit@1"] == pytest.approx((10 + 2 / 6) / 12)
    assert gz["seen_images"].tolist() == [4] * 5


def test_ladder_refuses_an_edited_topk_list(finished_run, capsys) -> None:
    """An edited `topk/*.ids.npy` is a one-line error naming it (not changed numbers)."""
    tmp_path, run, edges = finished_run
    path = run / "topk" / "test.unseen.ids.npy"
    ids = np.load(path)
    np.save(path, ids[:, ::-1].copy())
    out = tmp_path / "ladder"
    argv = ["analyze", "ladder", run, "--labels", _label_table(tmp_path / "classes.csv"), "--graph", edges]
    capsys.readouterr()
    assert main([str(a) for a in [*argv, "--out", out]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "test.unseen.ids.npy" in err[0] and "sha256" in err[0]
    assert not out.exists()


def test_gzsl_undetermined_counts_each_open_image_once() -> None:
    """An image whose credit is open under both tie rules is one undetermined image (as in the
    ZSL ladder), not two."""
    from types import SimpleNamespace

    from imagenet_zsl.analysis.ladder_gzsl import _gzsl_hits

    class Open:  # bounds: image 0 open under both rules, image 1 under the strict rule only
        def credit(self, k, rule="expected"):
            low = np.array([0.0, 1.0]) if rule == "expected" else np.array([0.0, 0.0])
            return low, np.array([1.0, 1.0])

    class Closed:
        def credit(self, k, rule="expected"):
            return np.array([1.0]), np.array([1.0])

    test = SimpleNamespace(classes=["a", "b"], labels=np.array([0, 1]))
    seen = SimpleNamespace(classes=["c"], labels=np.array([0]))
    row = _gzsl_hits(test, np.array([True, True]), Open(), seen, Closed(), [1])
    assert row["undetermined@1"] == 2
