"""GRAB splits on the real attribute matrices, checked against orderings computed here by loops."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from imagenet_zsl.attributes.dataset import load_dataset, packaged_dir
from imagenet_zsl.attributes.grab import (
    DEFAULT_K,
    Proportion,
    ccs_order,
    class_order,
    default_k,
    gcs_order,
    make_split,
    mas_order,
    mas_scores,
    pca_components,
    prop_counts,
    write_split_dir,
)
from imagenet_zsl.attributes.xlsa17 import load_att_splits
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError

DATASETS = ("APY", "AWA1", "AWA2", "CUB", "SUN")


def _class_rows(name: str) -> list[list[float]]:
    att = load_att_splits(packaged_dir(name) / "att_splits.mat").att
    return [list(map(float, att[:, c])) for c in range(att.shape[1])]


@pytest.mark.parametrize("name", DATASETS)
def test_gcs_sorts_classes_by_attribute_sum(name):
    rows = _class_rows(name)
    expected = sorted(range(len(rows)), key=lambda c: (-math.fsum(rows[c]), c))
    order = gcs_order(np.array(rows))
    # equal up to float ties: the sums along our order never increase and the sets agree
    sums = [math.fsum(rows[c]) for c in order]
    assert all(a >= b - 1e-12 for a, b in zip(sums, sums[1:], strict=False))
    assert order.tolist()[:10] == expected[:10]
    assert sorted(order.tolist()) == list(range(len(rows)))


@pytest.mark.parametrize("name", ("APY", "AWA2", "CUB"))
def test_ccs_sorts_classes_by_summed_distance(name):
    rows = _class_rows(name)
    totals = [sum(math.dist(a, b) for b in rows) for a in rows]
    expected = sorted(range(len(rows)), key=lambda c: (totals[c], c))
    order = ccs_order(np.array(rows)).tolist()
    assert order[:15] == expected[:15] and order[-5:] == expected[-5:]


@pytest.mark.parametrize("name", DATASETS)
def test_mas_keeps_the_least_co_occurring_attributes(name):
    split = load_att_splits(packaged_dir(name) / "att_splits.mat")
    binary = split.binary()  # (A, C)
    having = [set(np.flatnonzero(binary[a] > 0).tolist()) for a in range(binary.shape[0])]
    scores = {}
    for i, with_i in enumerate(having):
        if with_i:
            scores[i] = sum(
                Fraction(len(with_i & with_j), len(with_i)) for j, with_j in enumerate(having) if j != i
            )
    least = sorted(scores, key=lambda a: (scores[a], a))
    most = sorted(scores, key=lambda a: (-scores[a], a))
    empty = [a for a in range(len(having)) if not having[a]]
    assert mas_order(binary.T).tolist() == least + empty
    assert mas_order(binary.T, inverse=True).tolist() == most + empty
    if name == "CUB":  # the global-mean rule leaves CUB attributes that no class has
        assert len(empty) == 27


@pytest.mark.parametrize("name", ("APY", "AWA2", "SUN"))
def test_pas_matches_an_eigendecomposition_of_the_covariance(name):
    att = load_att_splits(packaged_dir(name) / "att_splits.mat").att.T  # (C, A)
    k = 5
    scores, components, ratio = pca_components(att, k)
    centred = att - att.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    top = np.argsort(values)[::-1][:k]
    for j, column in enumerate(top):
        vector = vectors[:, column]
        assert abs(abs(vector @ components[j]) - 1) < 1e-8  # same axis (sign is a convention)
        np.testing.assert_allclose(np.abs(scores[:, j]), np.abs(centred @ vector), atol=1e-8)
        assert components[j][np.abs(components[j]).argmax()] > 0
    np.testing.assert_allclose(ratio, values[top] / values.sum(), rtol=1e-8)


def test_gcs_split_file_describes_itself_and_loads(tmp_path, xlsa17_root):
    ds = load_dataset("AWA2", xlsa17_root)
    result = make_split(ds, "gcs", seed=1)
    path = write_split_dir(result, ds, tmp_path / "gcs")
    rows = _class_rows("AWA2")
    top40 = sorted(sorted(range(50), key=lambda c: (-math.fsum(rows[c]), c))[:40])
    new = load_dataset("AWA2", xlsa17_root, att_splits=path)
    task = new.task("ps")
    assert task.seen.tolist() == top40
    np.testing.assert_array_equal(new.split.seen_classes, top40)
    assert new.split.split_info["method"] == "gcs" and new.split.split_info["seed"] == 1
    labels = ds.images.labels
    # every image placed once; unseen images are exactly the unseen classes' images
    everything = np.concatenate([task.train, task.test_seen, task.test_unseen])
    assert np.array_equal(np.sort(everything), np.arange(ds.images.num_images))
    np.testing.assert_array_equal(task.test_unseen, np.flatnonzero(~np.isin(labels, top40)))
    # seen test images re-drawn in the original proportion, from every seen class
    share = task.test_seen.size / (task.test_seen.size + task.train.size)
    assert abs(share - 5882 / (5882 + 23527)) < 0.005
    assert set(labels[task.test_seen]) == set(top40)
    # validation splits come with the file and partition the new seen classes
    for k in (1, 2, 3):
        val = new.val_task("ps", k)
        assert val.unseen.size == 13 and set(val.seen) | set(val.unseen) == set(top40)
    assert (tmp_path / "gcs" / "trainclasses2.txt").is_file()
    # same seed, same bytes; another seed re-draws the seen test images only
    again = write_split_dir(make_split(ds, "gcs", seed=1), ds, tmp_path / "gcs2")
    assert sha256_file(path) == sha256_file(again)
    other = make_split(ds, "gcs", seed=2).split
    assert np.array_equal(other.seen_classes, top40)
    assert not np.array_equal(other.locs["test_seen_loc"], new.split.locs["test_seen_loc"])


def test_inverse_ccs_and_random_splits(xlsa17_root):
    ds = load_dataset("APY", xlsa17_root)
    rows = _class_rows("APY")
    totals = [sum(math.dist(a, b) for b in rows) for a in rows]
    by_distance = sorted(range(32), key=lambda c: (totals[c], c))
    tight = make_split(ds, "ccs").split
    loose = make_split(ds, "ccs", inverse=True).split
    assert tight.seen_classes.tolist() == sorted(by_distance[:20])
    assert loose.seen_classes.tolist() == sorted(by_distance[-20:])
    first, second = (make_split(ds, "random", seed=s).split for s in (0, 1))
    assert first.seen_classes.size == 20 and first.unseen_classes.size == 12
    assert not np.array_equal(first.seen_classes, second.seen_classes)
    np.testing.assert_array_equal(first.seen_classes, make_split(ds, "random", seed=0).split.seen_classes)


def test_attribute_subsets_keep_the_class_split(tmp_path, xlsa17_root):
    ds = load_dataset("AWA2", xlsa17_root)
    mas = make_split(ds, "mas", k=20)
    keep = np.sort(mas_order(ds.split.binary().T)[:20])
    np.testing.assert_array_equal(mas.split.original_att, ds.split.original_att[keep])
    np.testing.assert_allclose(np.linalg.norm(mas.split.att, axis=0), 1.0)
    np.testing.assert_array_equal(mas.split.binary_att, ds.split.binary()[keep])
    for key in ("trainval_loc", "test_seen_loc", "test_unseen_loc"):
        np.testing.assert_array_equal(mas.split.locs[key], ds.split.locs[key])
    loaded = load_dataset("AWA2", xlsa17_root, att_splits=write_split_dir(mas, ds, tmp_path / "m"))
    assert loaded.split.att.shape == (20, 50)
    np.testing.assert_array_equal(loaded.split.binary(), ds.split.binary()[keep])
    assert sorted(loaded.ps_lists.val[2]) == sorted(ds.ps_lists.val[2])
    pas = make_split(ds, "pas", k=7).split
    assert pas.att.shape == (7, 50) and pas.split_info["k"] == 7
    assert np.all(np.diff(pas.split_info["explained_variance_ratio"]) <= 0)


def test_bad_split_requests_are_user_errors(xlsa17_root):
    ds = load_dataset("APY", xlsa17_root)
    with pytest.raises(UserInputError, match="--inverse applies to gcs, ccs, mas"):
        make_split(ds, "pas", inverse=True)
    with pytest.raises(UserInputError, match="--k must be between 1 and 31"):
        make_split(ds, "pas", k=40)
    with pytest.raises(UserInputError, match="--k applies to mas and pas"):
        make_split(ds, "gcs", k=3)


def test_pas_normalises_the_class_vectors_before_centring():
    """GRAB's PAS normalises before centring: rescaling a class's raw attribute vector (e.g. the
    raw ``original_att`` against xlsa17's unit-norm ``att``) changes nothing; centring only does."""
    att = load_att_splits(packaged_dir("APY") / "att_splits.mat").att.T  # unit-norm class rows
    scale = np.linspace(0.5, 20.0, len(att))[:, None]
    for got, want in zip(pca_components(att * scale, 4), pca_components(att, 4), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-10)
    # by hand: rows (3, 4) and (6, 8) are the same direction → after normalising, zero variance
    scores, _, ratio = pca_components(np.array([[3.0, 4.0], [6.0, 8.0], [0.0, 1.0]]), 1)
    assert np.allclose(scores[0], scores[1]) and ratio[0] == pytest.approx(1.0)
    centred_only = pca_components(np.array([[3.0, 4.0], [6.0, 8.0], [0.0, 1.0]]), 1, normalise=False)[0]
    assert not np.allclose(centred_only[0], centred_only[1])


@pytest.mark.parametrize("share", [0.2, 0.4, 0.6, 0.8])
def test_proportion_splits_vary_the_seen_share(tmp_path, xlsa17_root, share):
    """The share-based option: round(S · 50) seen AWA2 classes from the seeded permutation of ``random``;
    validation classes carved from them (13 of 40 in the source, scaled); the split file loads
    and describes itself like every GRAB split."""
    ds = load_dataset("AWA2", xlsa17_root)
    result = make_split(ds, "proportion", proportion=Proportion(seen_share=share), seed=3)
    n_seen = round(share * 50)
    order = np.random.default_rng(3).permutation(50)
    assert result.split.seen_classes.tolist() == sorted(order[:n_seen].tolist())
    assert result.split.unseen_classes.tolist() == sorted(order[n_seen:].tolist())
    n_val = min(max(1, round(13 * n_seen / 40)), n_seen - 1)  # 10 seen: 3; 20: 6; 30: 10; 40: 13
    path = write_split_dir(result, ds, tmp_path / "p")
    new = load_dataset("AWA2", xlsa17_root, att_splits=path)
    assert new.split.split_info["method"] == "proportion" and new.split.split_info["seen_share"] == share
    for k in (1, 2, 3):
        val = new.val_task("ps", k)
        assert val.unseen.size == n_val and set(val.seen) | set(val.unseen) == set(order[:n_seen].tolist())
    task = new.task("ps")
    everything = np.concatenate([task.train, task.test_seen, task.test_unseen])
    assert np.array_equal(np.sort(everything), np.arange(ds.images.num_images))


def test_proportion_at_the_source_share_is_the_random_split(xlsa17_root):
    ds = load_dataset("AWA2", xlsa17_root)
    random_split = make_split(ds, "random", seed=4).split
    proportion = make_split(ds, "proportion", proportion=Proportion(seen_share=0.8), seed=4).split
    for key in ("trainval_loc", "test_seen_loc", "test_unseen_loc", "train_loc", "val_loc"):
        np.testing.assert_array_equal(proportion.locs[key], random_split.locs[key])
    for k in (1, 2, 3):
        np.testing.assert_array_equal(proportion.val_classes[k], random_split.val_classes[k])


@pytest.mark.parametrize(
    ("method", "proportion", "message"),
    [
        ("proportion", None, "--method proportion needs --prop 1..4"),
        ("proportion", Proportion(), "--method proportion needs --prop 1..4"),
        ("random", Proportion(seen_share=0.5), "--seen-share applies to --method proportion"),
        ("gcs", Proportion(prop=1), "--prop applies to --method proportion"),
        ("proportion", Proportion(prop=1, seen_share=0.5), "--prop and --seen-share"),
        ("proportion", Proportion(prop=5), "--prop 5"),
        ("proportion", Proportion(seen_share=1.0), "--seen-share 1"),
        ("proportion", Proportion(seen_share=0.01), "--seen-share 0.01"),
    ],
)
def test_bad_proportion_requests_are_user_errors(xlsa17_root, method, proportion, message):
    ds = load_dataset("APY", xlsa17_root)
    with pytest.raises(UserInputError, match=message):
        make_split(ds, method, proportion=proportion)


#: GRAB Table 3 / Sec. 4.2: (seen, unseen) of Prop 1..4 (AWA is AWA2 in the paper; FLO is not in xlsa17
#: as packaged here); aPY is not in the paper: 20/12 in the PS gives n_U = 6 by the same rule
GRAB_PROPS = {
    "AWA2": [(30, 5), (35, 5), (40, 5), (45, 5)],
    "AWA1": [(30, 5), (35, 5), (40, 5), (45, 5)],
    "CUB": [(100, 25), (125, 25), (150, 25), (175, 25)],
    "SUN": [(573, 36), (609, 36), (645, 36), (681, 36)],
    "APY": [(8, 6), (14, 6), (20, 6), (26, 6)],
}


def test_prop_counts_are_grab_table3():
    # the paper's FLO (82 seen / 20 unseen of 102 in its PS): 62/10, 72/10, 82/10, 92/10
    assert [prop_counts(p, 82, 20, 102) for p in (1, 2, 3, 4)] == [(62, 10), (72, 10), (82, 10), (92, 10)]
    with pytest.raises(UserInputError, match="--prop 1"):
        prop_counts(1, 3, 2, 6)  # n_U = 1, n_S = 3 - 2 = 1: fewer than a train and a val class
    with pytest.raises(UserInputError, match="--prop 4"):
        prop_counts(4, 5, 2, 6)  # n_U = 1, n_S = 6: 7 classes of 6


@pytest.mark.parametrize("name", sorted(GRAB_PROPS))
def test_prop_splits_fix_the_unseen_set_and_nest_the_seen_sets(tmp_path, xlsa17_root, name):
    """GRAB Table 3: the unseen classes (their set and number) are the same for Prop 1..4, each
    seen set contains the smaller ones, the rest of the classes is left out of every list."""
    ds = load_dataset(name, xlsa17_root)
    order = np.random.default_rng(7).permutation(ds.split.num_classes)
    previous: set[int] = set()
    for prop, (n_seen, n_unseen) in enumerate(GRAB_PROPS[name], start=1):
        result = make_split(ds, "proportion", proportion=Proportion(prop=prop), seed=7)
        split = result.split
        assert split.unseen_classes.tolist() == sorted(order[:n_unseen].tolist())
        assert split.seen_classes.tolist() == sorted(order[n_unseen : n_unseen + n_seen].tolist())
        assert previous < set(split.seen_classes.tolist())
        previous = set(split.seen_classes.tolist())
        left_out = sorted(order[n_unseen + n_seen :].tolist())
        assert result.info["left_out_classes"] == [ds.class_names[c] for c in left_out]
        assert result.info["design"] == "prop" and (result.info["n_seen"], result.info["n_unseen"]) == (
            n_seen,
            n_unseen,
        )
        if name != "AWA2" or prop != 2:
            continue
        new = load_dataset(name, xlsa17_root, att_splits=write_split_dir(result, ds, tmp_path / "p"))
        task = new.task("ps")
        used = np.concatenate([task.train, task.test_seen, task.test_unseen])
        assert np.array_equal(np.sort(used), np.sort(ds.images_of(np.union1d(task.seen, task.unseen))))
        assert not np.isin(ds.images.labels[used], left_out).any()
        assert new.val_task("ps", 1).unseen.size == round(13 * 35 / 40)  # the PS's 13 of 40, scaled


# --------------------------------------------------------------------------- the reference code
# grabzsl/splitter.py (github.com/luca-rossi/grabzsl, class Splitter), its logic rewritten here by
# hand from reading it, to pin where this toolkit agrees with it and where (documented in the
# module docstring of imagenet_zsl.attributes.grab) it does not.


def _reference_class_split(sums: list[float], n_seen: int, inverse: bool) -> tuple[list[int], list[int]]:
    """Splitter.greedy_class_split / clustered_class_split: sort the per-class sums ascending;
    inverse=False: the last n_S are seen, the first n_U unseen; inverse=True: the first n_S seen."""
    ascending = sorted(range(len(sums)), key=lambda c: (sums[c], c))
    n_unseen = len(sums) - n_seen
    if inverse:
        return sorted(ascending[:n_seen]), sorted(ascending[n_seen:])
    return sorted(ascending[n_unseen:]), sorted(ascending[:n_unseen])


def _distance_sums(rows) -> list[float]:
    return [sum(math.dist(a, b) for b in rows) for a in rows]


# five classes on a line (second attribute shared by all): distances are the coordinate gaps
LINE = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [7.0, 1.0], [12.0, 1.0]])


def test_ccs_hand_made_tight_cluster_is_seen_and_inverse_is_the_reference_default():
    # summed distances by hand: 0+1+2+7+12, 1+0+1+6+11, 2+1+0+5+10, 7+6+5+0+5, 12+11+10+5+0
    sums = [22.0, 19.0, 18.0, 23.0, 38.0]
    assert _distance_sums(LINE.tolist()) == sums
    assert ccs_order(LINE).tolist() == [2, 1, 0, 3, 4]
    # ours (the reference docstring): the 3 tightest classes are seen
    assert sorted(class_order("ccs", LINE)[:3].tolist()) == [0, 1, 2]
    # the reference code's default makes the 2 tightest unseen: seen {0, 3, 4}
    assert _reference_class_split(sums, 3, inverse=False) == ([0, 3, 4], [1, 2])
    assert sorted(class_order("ccs", LINE, inverse=True)[:3].tolist()) == [0, 3, 4]
    # and the reference code's inverse is our default
    assert _reference_class_split(sums, 3, inverse=True) == ([0, 1, 2], [3, 4])


@pytest.mark.parametrize(("name", "n_seen"), [("APY", 20), ("AWA2", 40), ("CUB", 150)])  # PS seen counts
def test_class_splits_against_the_reference_logic_on_the_real_matrices(name, n_seen):
    rows = _class_rows(name)
    by_sum = [math.fsum(r) for r in rows]
    by_distance = _distance_sums(rows)
    for method, sums in (("gcs", by_sum), ("ccs", by_distance)):
        for inverse in (False, True):
            seen = sorted(class_order(method, np.array(rows), inverse=inverse)[:n_seen].tolist())
            # gcs agrees with the reference code as is; ccs with it flipped
            reference_inverse = inverse if method == "gcs" else not inverse
            assert seen == _reference_class_split(sums, n_seen, reference_inverse)[0], (method, inverse)


def test_ccs_inverse_split_file_is_the_reference_code_default(xlsa17_root):
    ds = load_dataset("APY", xlsa17_root)
    seen, unseen = _reference_class_split(_distance_sums(_class_rows("APY")), 20, inverse=False)
    split = make_split(ds, "ccs", inverse=True).split
    assert split.seen_classes.tolist() == seen and split.unseen_classes.tolist() == unseen


# 5 classes x 4 attributes, 0/1; columns: b0 in class 0 only, b1 in all, b2 in class 4 only,
# b3 in classes 0-3
MAS_B = np.array(
    [
        [1, 1, 0, 1],
        [0, 1, 0, 1],
        [0, 1, 0, 1],
        [0, 1, 0, 1],
        [0, 1, 1, 0],
    ]
)


def test_mas_hand_made_co_occurrence_ratios_and_kept_set():
    # |i| = 1, 5, 1, 4; co-occurrences |i and j|: b0b1 1, b0b2 0, b0b3 1, b1b2 1, b1b3 4, b2b3 0
    # score_i = sum_{j != i} |i and j| / |i|:
    #   b0: (1 + 0 + 1) / 1 = 2,  b1: (1 + 1 + 4) / 5 = 6/5,  b2: (0 + 1 + 0) / 1 = 1,
    #   b3: (1 + 4 + 0) / 4 = 5/4
    np.testing.assert_array_equal(mas_scores(MAS_B), [2.0, 6 / 5, 1.0, 5 / 4])
    assert mas_order(MAS_B).tolist() == [2, 1, 3, 0]
    assert mas_order(MAS_B, inverse=True).tolist() == [0, 3, 1, 2]
    assert sorted(mas_order(MAS_B)[:2].tolist()) == [1, 2]  # k = 2 least correlated


def test_reference_mas_selection_is_not_the_k_least_correlated():
    """Splitter.minimal_attribute_split: s_i = sum_j np.correlate(a_i, a_j) (the dot product, j = i
    included), then keep i when argsort(s)[i] < k: argsort output read as ranks."""
    cols = MAS_B.T.astype(float)
    scores = [sum(float(np.dot(a, b)) for b in cols) for a in cols]
    # by hand: b0: 1+1+0+1, b1: 1+5+1+4, b2: 0+1+1+0, b3: 1+4+0+4
    assert scores == [3.0, 11.0, 2.0, 9.0]
    k = 2
    argsort = np.argsort(scores)
    assert argsort.tolist() == [2, 0, 3, 1]
    reference_keep = [i for i in range(4) if argsort[i] < k]
    reference_inverse_keep = [i for i in range(4) if argsort[i] >= 4 - k]
    least, most = sorted(argsort[:k].tolist()), sorted(argsort[-k:].tolist())
    assert least == [0, 2] and most == [1, 3]
    # the reference keeps the k MOST correlated by its own score, its inverse the k least
    assert reference_keep == most and reference_inverse_keep == least
    # what it keeps is {rank(j) : j < k}: ranks = [1, 3, 0, 2]
    ranks = np.argsort(argsort)
    assert sorted(ranks[:k].tolist()) == reference_keep
    # ours (binarised co-occurrence ratio, by rank) keeps neither
    assert sorted(mas_order(MAS_B)[:k].tolist()) == [1, 2]


def _centred_pca_scores(matrix: np.ndarray, k: int, reference: str) -> np.ndarray:
    """Centring-only PCA scores (C, k): sklearn's PCA as the reference code calls it, or an
    eigendecomposition of the scatter matrix written here."""
    if reference == "sklearn":
        decomposition = pytest.importorskip("sklearn.decomposition")
        return decomposition.PCA(n_components=k).fit(matrix).transform(matrix)
    centred = matrix - matrix.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    return centred @ vectors[:, np.argsort(values)[::-1][:k]]


def _equal_up_to_sign(ours: np.ndarray, theirs: np.ndarray, atol: float = 1e-9) -> bool:
    signs = np.sign(np.sum(ours * theirs, axis=0))
    return bool(np.all(signs != 0) and np.allclose(ours, theirs * signs, atol=atol))


def _unit_rows(rows: int, cols: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(rows, cols))
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.mark.parametrize("reference", ["sklearn", "numpy"])
def test_pas_is_centring_only_pca_up_to_sign_on_unit_norm_rows(reference):
    matrix = _unit_rows(12, 6, seed=0)
    ours = pca_components(matrix, 4)[0]
    assert _equal_up_to_sign(ours, _centred_pca_scores(matrix, 4, reference))
    # and on xlsa17's att (unit-norm class vectors) at the reference's k = 40
    att = load_att_splits(packaged_dir("AWA2") / "att_splits.mat").att.T
    np.testing.assert_allclose(np.linalg.norm(att, axis=1), 1.0)
    assert _equal_up_to_sign(pca_components(att, 40)[0], _centred_pca_scores(att, 40, reference), 1e-8)


@pytest.mark.parametrize("reference", ["sklearn", "numpy"])
def test_pas_differs_from_centring_only_pca_off_unit_norm(reference):
    unit = _unit_rows(12, 6, seed=1)
    scaled = unit * np.linspace(0.5, 5.0, 12)[:, None]
    ours = pca_components(scaled, 4)[0]
    assert not _equal_up_to_sign(ours, _centred_pca_scores(scaled, 4, reference), 1e-3)
    # ours is centring-only PCA of the normalised rows
    assert _equal_up_to_sign(ours, _centred_pca_scores(unit, 4, reference))


def test_default_k_is_the_reference_40_capped():
    assert DEFAULT_K == 40
    assert default_k("mas", 85, 50) == default_k("pas", 85, 50) == 40  # AWA2
    assert default_k("mas", 312, 200) == default_k("pas", 312, 200) == 40  # CUB
    assert default_k("mas", 64, 32) == 40 and default_k("pas", 64, 32) == 31  # aPY: C - 1
    assert default_k("mas", 30, 50) == 30 and default_k("pas", 30, 50) == 30  # A < 40
    assert default_k("pas", 30, 20) == 19


def test_default_k_in_split_files(tmp_path, xlsa17_root):
    awa2 = load_dataset("AWA2", xlsa17_root)  # 85 attributes, 50 classes
    mas = make_split(awa2, "mas")
    assert mas.info["k"] == 40 and mas.info["k_default"] is True
    assert mas.split.att.shape == (40, 50)
    assert mas.info["kept_attributes"] == sorted((mas_order(awa2.split.binary().T)[:40] + 1).tolist())
    pas = make_split(awa2, "pas")
    assert pas.split.att.shape == (40, 50) and pas.split.split_info["k_default"] is True
    explicit = make_split(awa2, "mas", k=20)
    assert explicit.info["k"] == 20 and explicit.info["k_default"] is False
    # capped: aPY has 32 classes, so PAS keeps at most 31 components
    apy = make_split(load_dataset("APY", xlsa17_root), "pas")
    assert apy.info["k"] == 31 and apy.split.att.shape == (31, 32)
    # a 20-attribute source (the MAS-20 split above): both defaults are capped at A = 20
    small = load_dataset("AWA2", xlsa17_root, att_splits=write_split_dir(explicit, awa2, tmp_path / "m"))
    for method in ("mas", "pas"):
        result = make_split(small, method)
        assert result.info["k"] == 20 and result.info["k_default"] is True
        assert result.split.att.shape == (20, 50)


def test_mas_continuous_scores_by_hand():
    """GRAB's experiments use continuous attributes: s(i, j) = sum_y a_i a_j / sum_y a_i."""
    a = np.array([[1.0, 0.5, 0.0], [0.5, 1.0, -0.2], [0.0, 0.5, 1.0]])  # (C, A); -0.2 counts as 0
    # column sums 1.5, 2.0, 1.0; a0·a1 = 0.5 + 0.5 = 1.0, a0·a2 = 0, a1·a2 = 0.5
    # s0 = (1.0 + 0) / 1.5 = 2/3, s1 = (1.0 + 0.5) / 2 = 3/4, s2 = (0 + 0.5) / 1 = 1/2
    np.testing.assert_allclose(mas_scores(a, continuous=True), [2 / 3, 3 / 4, 1 / 2])
    assert mas_order(a, continuous=True).tolist() == [2, 0, 1]
    # binarised, every ratio is 1 (|0| = 2, |1| = 3, |2| = 1; co 2, 0, 1): ties keep index order
    np.testing.assert_array_equal(mas_scores(a), [1.0, 1.0, 1.0])
    assert mas_order(a).tolist() == [0, 1, 2]
    # on 0/1 input the continuous ratio is the binary one
    np.testing.assert_allclose(mas_scores(MAS_B, continuous=True), mas_scores(MAS_B))


def test_mas_continuous_split_keeps_the_least_correlated_att_columns(xlsa17_root):
    ds = load_dataset("AWA2", xlsa17_root)
    result = make_split(ds, "mas", k=10, mas_attributes="continuous")
    keep = np.sort(mas_order(ds.split.att.T, continuous=True)[:10])
    assert result.info["kept_attributes"] == (keep + 1).tolist()
    assert result.info["mas_attributes"] == "continuous"
    assert result.info["kept_attributes"] != make_split(ds, "mas", k=10).info["kept_attributes"]
    with pytest.raises(UserInputError, match="--mas-attributes applies to mas"):
        make_split(ds, "gcs", mas_attributes="continuous")
    with pytest.raises(UserInputError, match="--mas-attributes must be one of"):
        make_split(ds, "mas", mas_attributes="fuzzy")


def test_split_cli_writes_a_prop_split(tmp_path, xlsa17_root, capsys):
    out = tmp_path / "prop2"
    argv = ["attributes", "split", "--dataset", "AWA2", "--root", str(xlsa17_root), "--method", "proportion"]
    assert main([*argv, "--prop", "2", "--seed", "7", "--out", str(out)]) == 0
    assert "35 seen / 5 unseen classes (10 left out)" in capsys.readouterr().out
    split = load_att_splits(out / "att_splits.mat")
    order = np.random.default_rng(7).permutation(50)
    assert split.unseen_classes.tolist() == sorted(order[:5].tolist())
    assert split.split_info["design"] == "prop" and split.split_info["prop"] == 2
