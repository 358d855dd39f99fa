"""xlsa17 loaders on the real att_splits.mat files: split sizes, v5/v7.3, validation errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io

from imagenet_zsl.attributes.dataset import (
    load_dataset,
    packaged_dir,
)
from imagenet_zsl.attributes.synthetic import save_res101
from imagenet_zsl.attributes.xlsa17 import (
    Res101,
    load_att_splits,
    load_res101,
    save_att_splits,
)
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.selection import holdout_images

# Proposed Split facts (Xian et al.; data/PROVENANCE.md):
# images trainval / test seen / test unseen, classes seen / unseen, attributes, val split sizes
KNOWN = {
    "APY": ((5932, 1483, 7924), (20, 12), 64, (15, 5)),
    "AWA1": ((19832, 4958, 5685), (40, 10), 85, (27, 13)),
    "AWA2": ((23527, 5882, 7913), (40, 10), 85, (27, 13)),
    "CUB": ((7057, 1764, 2967), (150, 50), 312, (100, 50)),
    "SUN": ((10320, 2580, 1440), (645, 72), 102, (580, 65)),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_proposed_split_sizes_match_the_release(xlsa17_root, name):
    images, classes, attributes, (n_train, n_val) = KNOWN[name]
    ds = load_dataset(name, xlsa17_root)
    task = ds.task("ps")
    assert (task.train.size, task.test_seen.size, task.test_unseen.size) == images
    assert (task.seen.size, task.unseen.size) == classes
    assert ds.split.att.shape == (attributes, sum(classes))
    assert ds.images.num_images == sum(images)
    # labels at each location list come from the right class set
    assert set(ds.images.labels[task.train]) == set(task.seen.tolist())
    assert set(ds.images.labels[task.test_seen]) <= set(task.seen.tolist())
    assert set(ds.images.labels[task.test_unseen]) == set(task.unseen.tolist())
    for k in (1, 2, 3):
        val = ds.val_task("ps", k)
        assert (val.seen.size, val.unseen.size) == (n_train, n_val)
        used = np.concatenate([val.train, val.test_seen, val.test_unseen])
        # validation never touches test images, and its three parts are disjoint
        assert np.isin(used, task.train).all() and len(np.unique(used)) == used.size
        assert set(ds.images.labels[val.test_unseen]) == set(val.unseen.tolist())
        assert set(ds.images.labels[val.test_seen]) <= set(val.seen.tolist())
        share = val.test_seen.size / (val.test_seen.size + val.train.size)
        expected = images[1] / (images[0] + images[1])
        assert abs(share - expected) < 0.02


def test_xlsa17_train_and_val_loc_are_validation_split_1(xlsa17_root):
    """AWA2's released train_loc/val_loc hold all images of trainclasses1/valclasses1."""
    ds = load_dataset("AWA2", xlsa17_root)
    locs, labels = ds.split.locs, ds.images.labels
    assert (locs["train_loc"].size, locs["val_loc"].size) == (20218, 9191)
    val_classes = ds.class_index(ds.ps_lists.val[1])
    assert set(labels[locs["val_loc"]]) == set(val_classes.tolist())


def test_binary_attributes_reproduce_released_binary_att():
    split = load_att_splits(packaged_dir("AWA2") / "att_splits.mat")
    released = split.binary_att
    assert released is not None and released.shape == (85, 50)
    expected = (split.original_att > split.original_att.mean()).astype(float)
    np.testing.assert_array_equal(released, expected)
    split.binary_att = None
    np.testing.assert_array_equal(split.binary(), released)


def _write_v73(path: Path, variables: dict) -> None:
    """A MATLAB v7.3 file as MATLAB writes it: HDF5 after a 512-byte header, arrays transposed,
    cell arrays as object references into #refs#, chars as uint16 columns."""
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        for key, value in variables.items():
            if isinstance(value, list):  # cell array of strings, C x 1 in MATLAB
                ref_array = np.empty((1, len(value)), dtype=h5py.ref_dtype)
                for i, text in enumerate(value):
                    char = refs.create_dataset(
                        f"{key}{i}", data=np.array([[ord(c)] for c in text], dtype=np.uint16)
                    )
                    char.attrs["MATLAB_class"] = np.bytes_("char")
                    ref_array[0, i] = char.ref
                dset = f.create_dataset(key, data=ref_array)
                dset.attrs["MATLAB_class"] = np.bytes_("cell")
            else:
                dset = f.create_dataset(key, data=np.asarray(value, dtype=np.float64).T)
                dset.attrs["MATLAB_class"] = np.bytes_("double")
    with open(path, "r+b") as handle:
        handle.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: test HDF5 schema 1.00 .")


def test_v73_files_load_like_v5(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.standard_normal((7, 5)).astype(np.float32)  # N=7 images, D=5
    labels = np.array([0, 1, 2, 1, 0, 2, 2])
    files = [f"img{i}.jpg" for i in range(7)]
    v5 = save_res101(tmp_path / "v5.mat", Res101(features, labels, files))
    _write_v73(
        tmp_path / "v73.mat",
        {
            "features": features.T.astype(np.float64),
            "labels": (labels + 1).reshape(-1, 1),
            "image_files": files,
        },
    )
    a, b = load_res101(v5), load_res101(tmp_path / "v73.mat")
    np.testing.assert_array_equal(a.features, features)
    np.testing.assert_array_equal(b.features, features)
    np.testing.assert_array_equal(b.labels, labels)
    assert a.image_files == b.image_files == files

    real = packaged_dir("APY") / "att_splits.mat"
    source = load_att_splits(real)
    mat = scipy.io.loadmat(real)
    _write_v73(
        tmp_path / "att_splits.mat",
        {
            "att": mat["att"],
            "original_att": mat["original_att"],
            "allclasses_names": source.class_names,
            **{k: mat[k] for k in ("trainval_loc", "test_seen_loc", "test_unseen_loc")},
        },
    )
    loaded = load_att_splits(tmp_path / "att_splits.mat")
    np.testing.assert_array_equal(loaded.att, source.att)
    assert loaded.class_names == source.class_names
    for key in ("trainval_loc", "test_seen_loc", "test_unseen_loc"):
        np.testing.assert_array_equal(loaded.locs[key], source.locs[key])


def test_save_att_splits_round_trips_with_identical_bytes(tmp_path):
    split = load_att_splits(packaged_dir("AWA2") / "att_splits.mat")
    split.seen_classes = np.arange(40)
    split.unseen_classes = np.arange(40, 50)
    split.val_classes = {1: np.arange(5), 2: np.arange(5, 10), 3: np.arange(10, 15)}
    split.split_info = {"method": "test", "k": 3}
    first = save_att_splits(tmp_path / "a" / "att_splits.mat", split)
    second = save_att_splits(tmp_path / "b" / "att_splits.mat", split)
    assert sha256_file(first) == sha256_file(second)
    back = load_att_splits(first)
    np.testing.assert_array_equal(back.att, split.att)
    np.testing.assert_array_equal(back.binary_att, split.binary_att)
    np.testing.assert_array_equal(back.seen_classes, np.arange(40))
    np.testing.assert_array_equal(back.val_classes[2], np.arange(5, 10))
    assert back.split_info == {"method": "test", "k": 3}
    for key, loc in split.locs.items():
        np.testing.assert_array_equal(back.locs[key], loc)
    # 1-based on disk, as in the release
    raw = scipy.io.loadmat(first)
    assert raw["trainval_loc"].min() == split.locs["trainval_loc"].min() + 1


def _copy_apy(tmp_path: Path, xlsa17_root: Path) -> Path:
    folder = tmp_path / "APY"
    folder.mkdir()
    shutil.copy(xlsa17_root / "APY" / "res101.mat", folder / "res101.mat")
    return folder


def test_loc_beyond_the_images_is_reported(tmp_path, xlsa17_root):
    folder = _copy_apy(tmp_path, xlsa17_root)
    mat = scipy.io.loadmat(packaged_dir("APY") / "att_splits.mat")
    mat["test_unseen_loc"][0, 0] = 60000
    scipy.io.savemat(folder / "att_splits.mat", {k: v for k, v in mat.items() if not k.startswith("__")})
    with pytest.raises(UserInputError, match="test_unseen_loc refers to image 60000"):
        load_dataset("APY", folder)


def test_overlapping_and_missing_fields_are_reported(tmp_path):
    mat = scipy.io.loadmat(packaged_dir("APY") / "att_splits.mat")
    fields = {k: v for k, v in mat.items() if not k.startswith("__")}
    broken = dict(fields, test_seen_loc=fields["trainval_loc"][:3])
    scipy.io.savemat(tmp_path / "overlap.mat", broken)
    with pytest.raises(UserInputError, match="trainval_loc and test_seen_loc share 3 images"):
        load_att_splits(tmp_path / "overlap.mat")
    scipy.io.savemat(tmp_path / "missing.mat", {k: v for k, v in fields.items() if k != "att"})
    with pytest.raises(UserInputError, match="missing field.*att"):
        load_att_splits(tmp_path / "missing.mat")
    scipy.io.savemat(tmp_path / "shape.mat", dict(fields, att=fields["att"][:, :5]))
    with pytest.raises(UserInputError, match="32 allclasses_names"):
        load_att_splits(tmp_path / "shape.mat")


def test_label_from_the_wrong_class_set_is_reported(tmp_path, xlsa17_root):
    folder = _copy_apy(tmp_path, xlsa17_root)
    images = load_res101(folder / "res101.mat")
    split = load_att_splits(packaged_dir("APY") / "att_splits.mat")
    unseen_class = split.class_names.index("donkey")  # a PS test class of aPY
    images.labels[split.locs["trainval_loc"][0]] = unseen_class
    save_res101(folder / "res101.mat", images)
    with pytest.raises(UserInputError, match="trainval_loc holds images of classes.*donkey"):
        load_dataset("APY", folder)


def test_res101_shape_errors(tmp_path):
    scipy.io.savemat(tmp_path / "res101.mat", {"features": np.zeros((3, 5)), "labels": np.ones((4, 1))})
    with pytest.raises(UserInputError, match="'features' is 3 x 5 but 'labels' has 4"):
        load_res101(tmp_path / "res101.mat")
    scipy.io.savemat(tmp_path / "res101.mat", {"features": np.zeros((3, 4)), "labels": np.zeros((4, 1))})
    with pytest.raises(UserInputError, match="1-based"):
        load_res101(tmp_path / "res101.mat")
    with pytest.raises(UserInputError, match="res101.mat not found"):
        load_dataset("AWA2", tmp_path / "nowhere")


def test_standard_split_from_user_class_lists(tmp_path, xlsa17_root):
    """SS: all images of the trainval classes train, all images of the test classes test."""
    lampert_test = [
        "chimpanzee",
        "giant+panda",
        "leopard",
        "persian+cat",
        "pig",
        "hippopotamus",
        "humpback+whale",
        "raccoon",
        "rat",
        "seal",
    ]
    names = load_att_splits(packaged_dir("AWA2") / "att_splits.mat").class_names
    ss = tmp_path / "standard_split" / "AWA2"
    ss.mkdir(parents=True)
    trainval = [n for n in names if n not in lampert_test]
    (ss / "trainvalclasses.txt").write_text("\n".join(trainval) + "\n")
    (ss / "testclasses.txt").write_text("\n".join(lampert_test) + "\n")
    for k in (1, 2, 3):
        val = trainval[k * 5 : k * 5 + 13]
        (ss / f"valclasses{k}.txt").write_text("\n".join(val) + "\n")
        (ss / f"trainclasses{k}.txt").write_text("\n".join(n for n in trainval if n not in val))
    with pytest.raises(UserInputError, match="Standard Split class lists not found"):
        load_dataset("AWA2", xlsa17_root, need_ss=True)
    ds = load_dataset("AWA2", xlsa17_root, ss_dir=ss, need_ss=True)
    task = ds.task("ss")
    labels = ds.images.labels
    assert task.test_seen is None
    assert [ds.class_names[i] for i in task.unseen] == sorted(lampert_test, key=names.index)
    np.testing.assert_array_equal(task.test_unseen, np.flatnonzero(np.isin(labels, task.unseen)))
    assert task.train.size + task.test_unseen.size == ds.images.num_images
    val = ds.val_task("ss", 2)
    assert [ds.class_names[i] for i in val.unseen] == sorted(trainval[10:23], key=names.index)


def test_stratified_holdout_is_seeded_and_per_class():
    labels = np.repeat(np.arange(4), [10, 5, 2, 1])
    mask = holdout_images(labels, 0.2, seed=3)
    assert [int(mask[labels == c].sum()) for c in range(4)] == [2, 1, 1, 0]
    np.testing.assert_array_equal(mask, holdout_images(labels, 0.2, seed=3))
    assert not np.array_equal(mask, holdout_images(labels, 0.2, seed=4))
