"""One attribute dataset ready for the GBU protocol: images, class split and validation splits.

Where files come from (first hit wins), so ``--root`` may be the xlsa17 ``data`` folder, one
dataset's folder, or the unpacked xlsa17 archive:

* ``res101.mat``: ``ROOT/res101.mat``, ``ROOT/<D>/res101.mat``, ``ROOT/data/<D>/res101.mat``.
* ``att_splits.mat``: ``--att-splits`` if given, else beside ``res101.mat``, else the packaged copy.
* Proposed Split (PS) class lists: split-file fields (``seen_classes``, ``val_classes{k}``), else
  the ``*classes*.txt`` files beside ``att_splits.mat``, else the packaged lists.
* Standard Split (SS) class lists (not redistributable here): ``--ss-dir``, else
  ``ROOT/standard_split/<D>/`` or ``ROOT/../standard_split/<D>/`` (the xlsa17 archive layout).

Seen/unseen classes are read off the image labels at the location lists and must agree with the
class lists; any disagreement is an error naming the classes, never silently fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imagenet_zsl.attributes.outputs import SPLIT_FORMAT
from imagenet_zsl.attributes.xlsa17 import (
    DATASETS,
    VAL_SPLITS,
    AttSplits,
    ClassLists,
    Res101,
    load_att_splits,
    load_res101,
    read_class_lists,
)
from imagenet_zsl.data import xlsa17_root
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest_verified
from imagenet_zsl.models.selection import holdout_images
from imagenet_zsl.paths import regular_input_file

SPLITS = ("ps", "ss")


def packaged_dir(dataset: str) -> Path:
    """Folder of the packaged class-level files of ``dataset`` (APY, AWA1, AWA2, CUB, SUN)."""
    return xlsa17_root() / check_dataset_name(dataset)


def check_dataset_name(dataset: str) -> str:
    name = dataset.upper()
    if name not in DATASETS:
        raise UserInputError(f"unknown attribute dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    return name


def find_res101(dataset: str, root: Path) -> Path:
    candidates = [root / "res101.mat", root / dataset / "res101.mat", root / "data" / dataset / "res101.mat"]
    for path in candidates:
        if path.exists() or path.is_symlink():  # a FIFO or link loop is named as such, not "not found"
            return regular_input_file(path, "res101.mat")
    raise UserInputError(
        f"{dataset}: res101.mat not found under {root} (looked at "
        f"{', '.join(str(p) for p in candidates)}); download xlsa17 (Xian et al.) and pass "
        "--root xlsa17/data"
    )


def find_ss_dir(dataset: str, root: Path | None, ss_dir: Path | None) -> Path:
    if ss_dir is not None:
        if not (ss_dir / "trainvalclasses.txt").is_file():
            raise UserInputError(f"{ss_dir}: --ss-dir must hold trainvalclasses.txt/testclasses.txt")
        return ss_dir
    candidates = []
    if root is not None:
        candidates = [
            root / "standard_split" / dataset,
            root.parent / "standard_split" / dataset,
            root.parent.parent / "standard_split" / dataset,
        ]
    for path in candidates:
        if (path / "trainvalclasses.txt").is_file():
            return path
    raise UserInputError(
        f"{dataset}: Standard Split class lists not found (looked at "
        f"{', '.join(str(p) for p in candidates) or 'nothing: no --root'}); pass --ss-dir with the "
        "xlsa17 standard_split/<DATASET> folder (trainvalclasses.txt, testclasses.txt, "
        "trainclasses{1,2,3}.txt, valclasses{1,2,3}.txt)"
    )


def given_split_file(att_splits: str | Path) -> Path:
    """The ``att_splits.mat`` of an ``--att-splits`` file or folder. A folder with a manifest is an
    ``attributes split`` output: it is verified first (format, sizes and sha256 of every file), so
    a split that was changed or half-copied is refused; a plain xlsa17 file or folder is read as is."""
    path = Path(att_splits)
    if path.is_dir():
        path = path / "att_splits.mat"
    if (path.parent / MANIFEST_NAME).is_file():
        read_manifest_verified(path.parent, SPLIT_FORMAT, rerun="re-run 'imagenet-zsl attributes split'")
    return path


def _names(split: AttSplits, classes: np.ndarray) -> list[str]:
    return [split.class_names[i] for i in classes]


def lists_from_split_file(split: AttSplits) -> ClassLists | None:
    """Class lists stored inside a toolkit-written split file, or None for a plain xlsa17 file."""
    if split.seen_classes is None or split.unseen_classes is None:
        return None
    seen = set(split.seen_classes.tolist())
    train = {
        k: _names(split, np.array(sorted(seen - set(v.tolist())), dtype=np.int64))
        for k, v in split.val_classes.items()
    }
    lists = ClassLists(
        trainval=_names(split, split.seen_classes),
        test=_names(split, split.unseen_classes),
        train=train,
        val={k: _names(split, v) for k, v in split.val_classes.items()},
        source=str(split.path),
    )
    lists.check()
    return lists


def ps_class_lists(dataset: str, split: AttSplits) -> ClassLists:
    """Class lists of a split file: its own fields, else the lists beside it, else packaged."""
    lists = lists_from_split_file(split)
    if lists is not None:
        return lists
    folder = packaged_dir(dataset)
    if split.path is not None and (split.path.parent / "trainvalclasses.txt").is_file():
        folder = split.path.parent
    return read_class_lists(folder, split.class_names)


@dataclass
class Task:
    """One fit-then-test configuration (class and image indices are 0-based, sorted).

    ``test_seen`` is None where the protocol has no seen test images (Standard Split).
    """

    seen: np.ndarray
    unseen: np.ndarray
    train: np.ndarray
    test_unseen: np.ndarray
    test_seen: np.ndarray | None


@dataclass
class AttributeDataset:
    """Images (features, labels) plus the class-level split of one xlsa17 dataset."""

    name: str
    images: Res101
    split: AttSplits
    ps_lists: ClassLists
    ss_lists: ClassLists | None = None

    @property
    def class_names(self) -> list[str]:
        return self.split.class_names

    def class_index(self, names: list[str]) -> np.ndarray:
        index = {n: i for i, n in enumerate(self.class_names)}
        return np.array(sorted(index[n] for n in names), dtype=np.int64)

    def lists(self, protocol: str) -> ClassLists:
        if protocol not in SPLITS:
            raise UserInputError(f"unknown split {protocol!r}; choose ps or ss")
        if protocol == "ss":
            if self.ss_lists is None:
                raise UserInputError(f"{self.name}: no Standard Split class lists loaded; pass --ss-dir")
            return self.ss_lists
        return self.ps_lists

    def images_of(self, classes: np.ndarray, within: np.ndarray | None = None) -> np.ndarray:
        """Sorted image indices whose label is in ``classes`` (optionally among ``within``)."""
        pool = np.arange(self.images.num_images) if within is None else np.sort(within)
        return pool[np.isin(self.images.labels[pool], classes)]

    def seen_test_fraction(self) -> float:
        """Share of a seen class's images held out for testing in the PS (0.2 for AWA2)."""
        locs = self.split.locs
        n_test, n_train = locs["test_seen_loc"].size, locs["trainval_loc"].size
        return n_test / (n_test + n_train) if n_test else 0.2

    def task(self, protocol: str = "ps") -> Task:
        """The final benchmark: fit on trainval classes, test on the test classes."""
        lists = self.lists(protocol)
        seen, unseen = self.class_index(lists.trainval), self.class_index(lists.test)
        if protocol == "ps":
            locs = self.split.locs
            return Task(
                seen,
                unseen,
                np.sort(locs["trainval_loc"]),
                np.sort(locs["test_unseen_loc"]),
                np.sort(locs["test_seen_loc"]),
            )
        return Task(seen, unseen, self.images_of(seen), self.images_of(unseen), None)

    def val_task(self, protocol: str = "ps", val_split: int = 1, seed: int = 0) -> Task:
        """Hyper-parameter selection: fit on train classes, test on val classes (never test data).

        Images come from the training images only (PS ``trainval_loc``), so test-seen images never
        steer a choice. A seeded, per-class share of the train classes' images (the dataset's
        seen-test fraction) is held out as validation-seen data for GZSL calibration.
        """
        lists = self.lists(protocol)
        if val_split not in lists.val:
            raise UserInputError(
                f"{lists.source}: validation split {val_split} missing "
                f"(trainclasses{val_split}.txt/valclasses{val_split}.txt); have {sorted(lists.val)}"
            )
        train_classes = self.class_index(lists.train[val_split])
        val_classes = self.class_index(lists.val[val_split])
        pool = self.task(protocol).train
        train_images = self.images_of(train_classes, pool)
        held = holdout_images(self.images.labels[train_images], self.seen_test_fraction(), seed)
        return Task(
            seen=train_classes,
            unseen=val_classes,
            train=train_images[~held],
            test_unseen=self.images_of(val_classes, pool),
            test_seen=train_images[held],
        )


def _check_against_labels(ds: AttributeDataset) -> None:
    """Seen/unseen read off the labels at the PS location lists must match the class lists."""
    labels, locs = ds.images.labels, ds.split.locs
    if labels.max() >= ds.split.num_classes:
        raise UserInputError(
            f"{ds.images.path}: label {labels.max() + 1} but {ds.split.path} has only "
            f"{ds.split.num_classes} classes"
        )
    seen = set(ds.class_index(ds.ps_lists.trainval).tolist())
    unseen = set(ds.class_index(ds.ps_lists.test).tolist())
    for loc_name, expected, word in (
        ("trainval_loc", seen, "seen"),
        ("test_seen_loc", seen, "seen"),
        ("test_unseen_loc", unseen, "unseen"),
    ):
        found = set(np.unique(labels[locs[loc_name]]).tolist())
        stray = sorted(found - expected)
        if stray:
            raise UserInputError(
                f"{ds.split.path}: {loc_name} holds images of classes that are not {word} in "
                f"{ds.ps_lists.source}: {preview(_names(ds.split, np.array(stray)))}"
            )
    for loc_name, expected in (("trainval_loc", seen), ("test_unseen_loc", unseen)):
        absent = sorted(expected - set(np.unique(labels[locs[loc_name]]).tolist()))
        if absent:
            raise UserInputError(
                f"{ds.split.path}: {loc_name} has no image of {len(absent)} classes: "
                f"{preview(_names(ds.split, np.array(absent)))}"
            )


def load_dataset(
    dataset: str,
    root: str | Path | None = None,
    *,
    att_splits: str | Path | None = None,
    ss_dir: str | Path | None = None,
    images: Res101 | None = None,
    need_ss: bool = False,
) -> AttributeDataset:
    """Load and cross-validate one dataset (see the module docstring for file lookup)."""
    name = check_dataset_name(dataset)
    root = Path(root) if root is not None else None
    if images is None:
        if root is None:
            raise UserInputError(f"{name}: --root with res101.mat is required")
        images = load_res101(find_res101(name, root))
    if att_splits is not None:
        split_path = given_split_file(att_splits)
    elif images.path is not None and (images.path.parent / "att_splits.mat").is_file():
        split_path = images.path.parent / "att_splits.mat"
    else:
        split_path = packaged_dir(name) / "att_splits.mat"
    split = load_att_splits(split_path)
    split.check_images(images.num_images)
    lists = ps_class_lists(name, split)
    ss_lists = None
    if need_ss:
        ss_lists = read_class_lists(
            find_ss_dir(name, root, Path(ss_dir) if ss_dir else None), split.class_names
        )
    ds = AttributeDataset(name=name, images=images, split=split, ps_lists=lists, ss_lists=ss_lists)
    _check_against_labels(ds)
    if ss_lists is not None:
        present = set(np.unique(ds.images.labels).tolist())
        empty = [n for n in ss_lists.trainval + ss_lists.test if ds.class_names.index(n) not in present]
        if empty:
            raise UserInputError(
                f"{ss_lists.source}: {len(empty)} Standard Split classes have no image in "
                f"{ds.images.path}: {preview(empty)}"
            )
    return ds


__all__ = ["AttributeDataset", "Task", "load_dataset", "VAL_SPLITS"]
