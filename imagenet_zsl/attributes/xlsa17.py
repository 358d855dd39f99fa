"""Reading and writing Xian et al.'s xlsa17 files (``res101.mat``, ``att_splits.mat``, class lists).

Conventions of the release, kept exactly so files round-trip with every public codebase:

* ``res101.mat``: ``features`` D x N (one column per image), ``labels`` N x 1 (1-based into
  ``allclasses_names``), ``image_files`` N x 1 cell of paths.
* ``att_splits.mat``: ``att`` A x C (columns L2-normalised ``original_att``), ``allclasses_names``
  C x 1 cell, 1-based image indices ``trainval_loc``, ``test_seen_loc``, ``test_unseen_loc`` and,
  in some copies, ``train_loc``/``val_loc``. Split files written by this toolkit add
  ``seen_classes``/``unseen_classes`` and ``val_classes{1,2,3}`` (1-based class indices) and
  ``split_info`` (JSON of the method's parameters) and ``binary_att`` (0/1, A x C), so a derived
  split describes itself.
* MATLAB v5 files are read with scipy, v7.3 (HDF5) files with h5py; in HDF5 MATLAB stores arrays
  transposed, so every 2-D array is transposed back to MATLAB's orientation on load.

Everything in memory is 0-based: labels (N,) int64 and image indices are numpy int64 arrays.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.io

from imagenet_zsl.atomic import atomic_write_bytes, atomic_write_text
from imagenet_zsl.errors import UserInputError, preview

DATASETS = ("APY", "AWA1", "AWA2", "CUB", "SUN")
LOC_FIELDS = ("trainval_loc", "test_seen_loc", "test_unseen_loc")
OPTIONAL_LOC_FIELDS = ("train_loc", "val_loc")
VAL_SPLITS = (1, 2, 3)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


# --------------------------------------------------------------------------- MATLAB files
def _is_hdf5(path: Path) -> bool:
    """MATLAB v7.3 files are HDF5 with a 512-byte header; the signature sits at 0 or 512."""
    with open(path, "rb") as handle:
        head = handle.read(520)
    return head[:8] == HDF5_SIGNATURE or head[512:520] == HDF5_SIGNATURE


def _h5_value(h5file: Any, item: Any) -> Any:
    """One HDF5 MATLAB variable → numpy in MATLAB orientation; cells of strings → list[str]."""
    import h5py  # deferred: only MATLAB v7.3 (HDF5) files need it; xlsa17's own files are v5 (scipy)

    data = item[()]
    matlab_class = item.attrs.get("MATLAB_class", b"")
    if isinstance(matlab_class, bytes):
        matlab_class = matlab_class.decode()
    if data.dtype == h5py.ref_dtype or matlab_class == "cell":
        return [_h5_value(h5file, h5file[ref]) for ref in np.asarray(data).ravel(order="F")]
    if matlab_class == "char":
        return "".join(chr(c) for c in np.asarray(data).ravel(order="F") if c)
    data = np.asarray(data)
    return data.T if data.ndim == 2 else data


def load_mat(path: str | Path) -> dict[str, Any]:
    """All variables of a MATLAB file (v5 via scipy, v7.3 via h5py) in MATLAB orientation."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: MATLAB file not found")
    if _is_hdf5(path):
        import h5py  # deferred: only MATLAB v7.3 (HDF5) files need it; xlsa17's own files are v5 (scipy)

        try:
            with h5py.File(path, "r") as h5file:
                return {
                    key: _h5_value(h5file, h5file[key])
                    for key in h5file
                    if not key.startswith("#") and isinstance(h5file[key], h5py.Dataset)
                }
        except OSError as err:
            raise UserInputError(f"{path}: unreadable MATLAB v7.3 (HDF5) file: {err}") from err
    if path.stat().st_size == 0:
        raise UserInputError(f"{path}: empty file (0 bytes); download the xlsa17 .mat file again")
    with path.open("rb") as handle:
        head = handle.read(128)
    if not head.startswith(b"MATLAB") and all(32 <= b < 127 or b in b"\t\r\n" for b in head):
        raise UserInputError(f"{path}: a text file, not a MATLAB file; expected an xlsa17 .mat (v5 or v7.3)")
    try:
        raw = scipy.io.loadmat(path)
    except (
        ValueError,
        TypeError,
        OSError,
        NotImplementedError,
        IndexError,
        scipy.io.matlab.MatReadError,
    ) as err:
        raise UserInputError(f"{path}: unreadable MATLAB file: {err}") from err
    return {key: value for key, value in raw.items() if not key.startswith("__")}


def _strings(value: Any, what: str, path: Path) -> list[str]:
    """A MATLAB cell of strings (scipy object array or h5py list) → list[str]."""
    if isinstance(value, list):
        return [str(v) for v in value]
    array = np.asarray(value)
    if array.dtype.kind in "US":
        return [str(v).strip() for v in array.ravel()]
    out = []
    for cell in array.ravel(order="F"):
        cell = np.asarray(cell)
        if cell.dtype.kind not in "US":
            raise UserInputError(f"{path}: field {what!r} must be a cell array of strings")
        out.append(str(cell.ravel()[0]) if cell.size else "")
    return out


def _vector(value: Any, what: str, path: Path) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim > 2 or (array.ndim == 2 and min(array.shape) != 1):
        raise UserInputError(f"{path}: field {what!r} must be a vector, got shape {array.shape}")
    return array.ravel()


def _indices(value: Any, what: str, path: Path, upper: int | None = None) -> np.ndarray:
    """1-based MATLAB index vector → 0-based int64, validated (integers, ≥1, ≤upper, unique)."""
    raw = _vector(value, what, path)
    if raw.size and (not np.all(np.isfinite(raw)) or not np.all(np.mod(raw, 1) == 0)):
        raise UserInputError(f"{path}: field {what!r} must hold integer indices")
    idx = raw.astype(np.int64)
    if idx.size and idx.min() < 1:
        raise UserInputError(f"{path}: field {what!r} has index {idx.min()} < 1 (1-based)")
    if upper is not None and idx.size and idx.max() > upper:
        raise UserInputError(f"{path}: field {what!r} has index {idx.max()} but there are only {upper}")
    if len(np.unique(idx)) != len(idx):
        raise UserInputError(f"{path}: field {what!r} repeats indices")
    return idx - 1


# --------------------------------------------------------------------------- res101.mat
@dataclass
class Res101:
    """Per-image features. features (N, D) float32; labels (N,) int64 0-based; image_files."""

    features: np.ndarray
    labels: np.ndarray
    image_files: list[str] | None = None
    path: Path | None = None

    @property
    def num_images(self) -> int:
        return int(self.labels.shape[0])


def load_res101(path: str | Path) -> Res101:
    """Read an xlsa17 ``res101.mat`` (any D; D x N as released, N x D also accepted)."""
    path = Path(path)
    mat = load_mat(path)
    for key in ("features", "labels"):
        if key not in mat:
            raise UserInputError(
                f"{path}: no {key!r} variable (found {preview(sorted(mat))}); "
                "expected the xlsa17 layout: features D x N, labels N x 1"
            )
    labels_raw = _vector(mat["labels"], "labels", path)
    if labels_raw.size == 0:
        raise UserInputError(f"{path}: 'labels' is empty")
    if not np.all(np.mod(labels_raw, 1) == 0) or labels_raw.min() < 1:
        raise UserInputError(f"{path}: 'labels' must be 1-based class indices (min {labels_raw.min()})")
    labels = labels_raw.astype(np.int64) - 1
    n = labels.shape[0]
    features = np.asarray(mat["features"])
    if features.ndim != 2:
        raise UserInputError(f"{path}: 'features' must be a 2-D D x N matrix, got {features.shape}")
    if features.shape[1] == n:
        features = features.T
    elif features.shape[0] != n:
        raise UserInputError(
            f"{path}: 'features' is {features.shape[0]} x {features.shape[1]} but 'labels' has "
            f"{n} entries; expected D x {n}"
        )
    if features.shape[1] == 0:
        raise UserInputError(
            f"{path}: 'features' has 0 dimensions for {n} images; expected the D x N ResNet-101 features"
        )
    features = np.ascontiguousarray(features, dtype=np.float32)
    if not np.all(np.isfinite(features)):
        raise UserInputError(f"{path}: 'features' contains NaN or Inf")
    files = None
    if "image_files" in mat:
        files = _strings(mat["image_files"], "image_files", path)
        if len(files) != n:
            raise UserInputError(f"{path}: {len(files)} image_files but {n} labels")
    return Res101(features=features, labels=labels, image_files=files, path=path)


# --------------------------------------------------------------------------- att_splits.mat
@dataclass
class AttSplits:
    """Class-level attributes and image-level split of one dataset (0-based indices).

    att: (A, C) float64, columns = classes in ``class_names`` order (as in the file).
    locs: name → (n,) int64 image indices (``trainval_loc`` etc.).
    seen_classes / unseen_classes / val_classes: present in split files written by this toolkit.
    """

    att: np.ndarray
    class_names: list[str]
    locs: dict[str, np.ndarray]
    original_att: np.ndarray | None = None
    binary_att: np.ndarray | None = None
    seen_classes: np.ndarray | None = None
    unseen_classes: np.ndarray | None = None
    val_classes: dict[int, np.ndarray] = field(default_factory=dict)
    split_info: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_attributes(self) -> int:
        return int(self.att.shape[0])

    def binary(self) -> np.ndarray:
        """(A, C) 0/1 attributes: the released binaryAtt where present, else the same rule.

        The rule reproduces xlsa17's ``binaryAtt_splits.mat`` exactly (checked on AWA2): an
        attribute is on for a class when ``original_att`` exceeds the mean of the whole
        ``original_att`` matrix (Lampert et al.'s threshold).
        """
        if self.binary_att is not None:
            return self.binary_att
        return binarize(self.original_att if self.original_att is not None else self.att)

    def check_images(self, num_images: int) -> None:
        """Every location list must index an existing image (1..N)."""
        for name, loc in self.locs.items():
            if loc.size and loc.max() >= num_images:
                raise UserInputError(
                    f"{self.path}: {name} refers to image {loc.max() + 1} but res101.mat has "
                    f"only {num_images} images; the two files come from different releases"
                )


def binarize(matrix: np.ndarray) -> np.ndarray:
    """0/1 copy of an (A, C) attribute matrix thresholded at its global mean (see AttSplits)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    return (matrix > matrix.mean()).astype(np.float64)


def _checked_attributes(mat: dict[str, Any], path: Path) -> tuple[np.ndarray, list[str]]:
    """The (A, C) attribute matrix and the C class names, checked against each other."""
    missing = [k for k in ("att", "allclasses_names", *LOC_FIELDS) if k not in mat]
    if missing:
        raise UserInputError(
            f"{path}: missing field(s) {', '.join(missing)}; expected an xlsa17 att_splits.mat"
        )
    att = np.asarray(mat["att"], dtype=np.float64)
    names = _strings(mat["allclasses_names"], "allclasses_names", path)
    if att.ndim != 2 or att.shape[1] != len(names):
        raise UserInputError(
            f"{path}: 'att' has shape {att.shape} but there are {len(names)} allclasses_names; "
            "expected attributes x classes"
        )
    if not np.all(np.isfinite(att)):
        raise UserInputError(f"{path}: 'att' contains NaN or Inf")
    if len(set(names)) != len(names):
        raise UserInputError(f"{path}: allclasses_names repeats class names")
    return att, names


def _checked_locs(mat: dict[str, Any], path: Path) -> dict[str, np.ndarray]:
    """The 0-based image-index lists; the three standard ones disjoint, trainval/test_unseen non-empty."""
    locs = {k: _indices(mat[k], k, path) for k in (*LOC_FIELDS, *OPTIONAL_LOC_FIELDS) if k in mat}
    for i, first in enumerate(LOC_FIELDS):
        for second in LOC_FIELDS[i + 1 :]:
            shared = np.intersect1d(locs[first], locs[second])
            if shared.size:
                raise UserInputError(
                    f"{path}: {first} and {second} share {shared.size} images "
                    f"(e.g. {preview(shared[:5] + 1)}); the lists must be disjoint"
                )
    if locs["test_unseen_loc"].size == 0 or locs["trainval_loc"].size == 0:
        raise UserInputError(f"{path}: trainval_loc and test_unseen_loc must not be empty")
    return locs


def _read_class_subsets(split: AttSplits, mat: dict[str, Any], path: Path) -> None:
    """Fill the optional seen/unseen/validation class lists and ``split_info`` of ``split``."""
    num_classes = len(split.class_names)
    for key in ("seen_classes", "unseen_classes"):
        if key in mat:
            setattr(split, key, np.sort(_indices(mat[key], key, path, upper=num_classes)))
    for k in VAL_SPLITS:
        if f"val_classes{k}" in mat:
            split.val_classes[k] = np.sort(
                _indices(mat[f"val_classes{k}"], f"val_classes{k}", path, upper=num_classes)
            )
    if "split_info" in mat:
        info = mat["split_info"]
        text = info if isinstance(info, str) else "".join(_strings(info, "split_info", path))
        try:
            split.split_info = json.loads(text)
        except json.JSONDecodeError as err:
            raise UserInputError(f"{path}: 'split_info' is not JSON: {err}") from err


def _read_binary_att(split: AttSplits, mat: dict[str, Any], path: Path) -> None:
    """0/1 attributes: the file's ``binary_att``, else a valid ``binaryAtt_splits.mat`` beside it."""
    if "binary_att" in mat:
        binary = np.asarray(mat["binary_att"], dtype=np.float64)
        if binary.shape != split.att.shape or not set(np.unique(binary)) <= {0.0, 1.0}:
            raise UserInputError(f"{path}: 'binary_att' must be 0/1 with the shape of 'att'")
        split.binary_att = binary
    binary_path = path.with_name("binaryAtt_splits.mat")
    if split.binary_att is None and path.name == "att_splits.mat" and binary_path.is_file():
        binary = np.asarray(load_mat(binary_path).get("att", np.empty(0)), dtype=np.float64)
        if binary.shape == split.att.shape and set(np.unique(binary)) <= {0.0, 1.0}:
            split.binary_att = binary


def load_att_splits(path: str | Path) -> AttSplits:
    """Read and validate an ``att_splits.mat`` (and a ``binaryAtt_splits.mat`` beside it)."""
    path = Path(path)
    mat = load_mat(path)
    att, names = _checked_attributes(mat, path)
    locs = _checked_locs(mat, path)
    original = None
    if "original_att" in mat:
        original = np.asarray(mat["original_att"], dtype=np.float64)
        if original.shape != att.shape:
            raise UserInputError(f"{path}: original_att {original.shape} differs from att {att.shape}")
    split = AttSplits(att=att, class_names=names, locs=locs, original_att=original, path=path)
    _read_class_subsets(split, mat, path)
    _read_binary_att(split, mat, path)
    return split


def save_att_splits(path: str | Path, split: AttSplits) -> Path:
    """Write an xlsa17-compatible MATLAB v5 ``att_splits.mat`` (1-based indices, atomic)."""
    names = np.empty((len(split.class_names), 1), dtype=object)
    for i, name in enumerate(split.class_names):
        names[i, 0] = name
    variables: dict[str, Any] = {
        "att": np.asarray(split.att, dtype=np.float64),
        "allclasses_names": names,
    }
    if split.original_att is not None:
        variables["original_att"] = np.asarray(split.original_att, dtype=np.float64)
    if split.binary_att is not None:
        variables["binary_att"] = np.asarray(split.binary_att, dtype=np.uint8)
    for key, loc in split.locs.items():
        variables[key] = (np.asarray(loc, dtype=np.float64) + 1).reshape(-1, 1)
    for key in ("seen_classes", "unseen_classes"):
        value = getattr(split, key)
        if value is not None:
            variables[key] = (np.asarray(value, dtype=np.float64) + 1).reshape(-1, 1)
    for k, classes in split.val_classes.items():
        variables[f"val_classes{k}"] = (np.asarray(classes, dtype=np.float64) + 1).reshape(-1, 1)
    if split.split_info:
        variables["split_info"] = json.dumps(split.split_info, sort_keys=True)
    buffer = io.BytesIO()
    scipy.io.savemat(buffer, variables, do_compression=True, oned_as="column")
    return atomic_write_bytes(path, strip_mat_timestamp(buffer.getvalue()))


def strip_mat_timestamp(data: bytes) -> bytes:
    """scipy puts 'Created on: <date>' into the 116-byte text header; blank it (same bytes)."""
    header = b"MATLAB 5.0 MAT-file Platform: posix, Created by: imagenet-zsl"
    return header.ljust(116, b" ") + data[116:]


# --------------------------------------------------------------------------- class lists
def read_class_list(path: Path, known: Sequence[str]) -> list[str]:
    """One class name a line; every name must be one of ``known`` (allclasses_names)."""
    names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    unknown = [n for n in names if n not in set(known)]
    if unknown:
        raise UserInputError(
            f"{path}: {len(unknown)} class names are not in allclasses_names: {preview(unknown)}"
        )
    if len(set(names)) != len(names):
        raise UserInputError(f"{path}: repeats class names")
    return names


@dataclass
class ClassLists:
    """Class split of a protocol: trainval (seen), test (unseen), three train/val partitions."""

    trainval: list[str]
    test: list[str]
    train: dict[int, list[str]]
    val: dict[int, list[str]]
    source: str

    def check(self) -> None:
        overlap = set(self.trainval) & set(self.test)
        if overlap:
            raise UserInputError(f"{self.source}: classes both seen and unseen: {preview(sorted(overlap))}")
        for k in self.val:
            parts = set(self.train[k]) | set(self.val[k])
            if parts != set(self.trainval) or set(self.train[k]) & set(self.val[k]):
                raise UserInputError(
                    f"{self.source}: trainclasses{k} and valclasses{k} must partition the trainval classes"
                )


def read_class_lists(folder: Path, known: Sequence[str]) -> ClassLists:
    """The xlsa17 class-list files of one folder (``trainvalclasses.txt`` ... ``valclasses3``)."""
    for required in ("trainvalclasses.txt", "testclasses.txt"):
        if not (folder / required).is_file():
            raise UserInputError(f"{folder}: no {required} (xlsa17 class lists expected here)")
    train: dict[int, list[str]] = {}
    val: dict[int, list[str]] = {}
    for k in VAL_SPLITS:
        if (folder / f"trainclasses{k}.txt").is_file() and (folder / f"valclasses{k}.txt").is_file():
            train[k] = read_class_list(folder / f"trainclasses{k}.txt", known)
            val[k] = read_class_list(folder / f"valclasses{k}.txt", known)
    lists = ClassLists(
        trainval=read_class_list(folder / "trainvalclasses.txt", known),
        test=read_class_list(folder / "testclasses.txt", known),
        train=train,
        val=val,
        source=str(folder),
    )
    lists.check()
    return lists


def write_class_lists(folder: Path, lists: ClassLists, all_names: Sequence[str]) -> list[Path]:
    """Write the xlsa17 class-list files (atomic each); returns the paths written."""
    files = {
        "allclasses.txt": list(all_names),
        "trainvalclasses.txt": lists.trainval,
        "testclasses.txt": lists.test,
    }
    for k in lists.val:
        files[f"trainclasses{k}.txt"] = lists.train[k]
        files[f"valclasses{k}.txt"] = lists.val[k]
    return [
        atomic_write_text(folder / name, "".join(f"{n}\n" for n in names)) for name, names in files.items()
    ]
