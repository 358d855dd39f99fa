"""GRAB split stress tests (Rossi et al., "Generalizability and robustness evaluation of
attribute-based zero-shot learning"): new class splits and attribute subsets of a dataset.

Class-split methods change which classes are seen (same number of seen classes as the source):

* ``random``: a seeded permutation of all classes.
* ``gcs`` (greedy class split): classes sorted by the sum of their attribute vector, the n_S
  largest are seen (seen classes carry the most "present" attributes).
* ``ccs`` (clustered class split): classes sorted by their summed Euclidean distance to all
  classes, the n_S smallest (the tightest cluster) are seen, the outliers unseen.
* ``proportion`` (GRAB Table 3, the seen/unseen proportion): a seeded permutation of all classes
  (the ``random`` one for the same seed) whose first round(S · C) classes are seen, S =
  ``seen_share``; the validation classes are carved from those seen classes, as many as the
  source's val/seen ratio gives (at least 1, and at least one train class left). At S equal to
  the source's seen share this is exactly the ``random`` split.

GRAB's robustness metric (its Eq. 10) is not implemented: its definition is not available to this
toolkit's authors offline, and none is invented here.

Attribute methods keep the class split and change the class semantics:

* ``mas`` (minimal attribute split): on binarised attributes, attribute i's correlation is
  sum_j |classes with i and j| / |classes with i| (j != i); keep the k least correlated.
  Attributes that no class has are uninformative and are ranked last either way.
* ``pas`` (principal attribute split): PCA of the class x attribute matrix (class vectors L2-normalised,
  then centred), top k components.

``inverse`` flips gcs/ccs (seen = the other end of the ordering) and mas (keep the k most
correlated). Orderings are stable: ties keep class/attribute index order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from imagenet_zsl.attributes.dataset import AttributeDataset
from imagenet_zsl.attributes.xlsa17 import (
    VAL_SPLITS,
    AttSplits,
    ClassLists,
    save_att_splits,
    write_class_lists,
)
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_write_json,
    command_line,
    file_record,
    software_versions,
)
from imagenet_zsl.models.selection import holdout_images

METHODS = ("random", "gcs", "ccs", "mas", "pas", "proportion")
CLASS_METHODS = ("random", "gcs", "ccs", "proportion")
ATTRIBUTE_METHODS = ("mas", "pas")
INVERTIBLE = ("gcs", "ccs", "mas")


# --------------------------------------------------------------------------- orderings
def gcs_order(class_att: np.ndarray) -> np.ndarray:
    """Class indices by descending attribute sum; ``class_att`` is (C, A)."""
    sums = np.asarray(class_att, dtype=np.float64).sum(axis=1)
    return np.argsort(-sums, kind="stable")


def ccs_order(class_att: np.ndarray) -> np.ndarray:
    """Class indices by ascending summed Euclidean distance to all classes (tightest first)."""
    class_att = np.asarray(class_att, dtype=np.float64)
    totals = cdist(class_att, class_att, metric="euclidean").sum(axis=1)
    return np.argsort(totals, kind="stable")


def mas_scores(binary_class_att: np.ndarray) -> np.ndarray:
    """(A,) co-occurrence ratio sums; NaN for attributes present in no class.

    ``binary_class_att`` is (C, A) 0/1. ratio[i, j] = |classes with i and j| / |classes with i|.
    """
    binary = (np.asarray(binary_class_att) > 0).astype(np.int64)
    co = binary.T @ binary  # (A, A) integer counts of classes having both
    present = np.diag(co)
    # one division of integer sums (not a sum of rounded ratios), so equal ratios tie exactly
    shared = co.sum(axis=1) - present
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = shared / present
    scores[present == 0] = np.nan
    return scores


def mas_order(binary_class_att: np.ndarray, inverse: bool = False) -> np.ndarray:
    """Attribute indices, least correlated first (most correlated first if ``inverse``)."""
    scores = mas_scores(binary_class_att)
    informative = np.flatnonzero(~np.isnan(scores))
    key = scores[informative] if not inverse else -scores[informative]
    ranked = informative[np.argsort(key, kind="stable")]
    return np.concatenate([ranked, np.flatnonzero(np.isnan(scores))])


def pca_components(
    class_att: np.ndarray, k: int, normalise: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k PCA of (C, A): (scores (C, k), components (k, A), explained variance ratio (k,)).

    As GRAB's PAS, the attributes are normalised before centring: each class's attribute vector is
    scaled to unit L2 norm (xlsa17's ``att`` already is; raw ``original_att`` values are not), so a
    class's overall attribute magnitude does not become a principal component. ``normalise=False``
    centres only. Signs are fixed so each component's largest-magnitude loading is positive.
    """
    class_att = np.asarray(class_att, dtype=np.float64)
    if normalise:
        norms = np.linalg.norm(class_att, axis=1, keepdims=True)
        class_att = class_att / np.where(norms > 0, norms, 1.0)
    centred = class_att - class_att.mean(axis=0, keepdims=True)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    components = vt[:k]
    pivot = np.abs(components).argmax(axis=1)
    components = components * np.sign(components[np.arange(k), pivot])[:, None]
    variance = singular**2
    ratio = variance[:k] / variance.sum() if variance.sum() > 0 else np.zeros(k)
    return centred @ components.T, components, ratio


def _normalise_columns(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=0, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


# --------------------------------------------------------------------------- split building
@dataclass
class SplitResult:
    """A new att_splits with its description (what was chosen and why)."""

    split: AttSplits
    info: dict[str, Any]


def default_k(method: str, num_attributes: int, num_classes: int) -> int:
    k = max(1, num_attributes // 2)
    return min(k, num_classes - 1) if method == "pas" else k


def _validation_partition(seen: np.ndarray, n_val: int, seed: int) -> dict[int, np.ndarray]:
    """Three seeded train/val partitions of the new seen classes (val size as in the source)."""
    out = {}
    for k in VAL_SPLITS:
        rng = np.random.default_rng([seed, k])
        out[k] = np.sort(rng.permutation(seen)[:n_val])
    return out


def seen_count(share: float, num_classes: int, min_seen: int = 2) -> int:
    """round(share · C) seen classes, checked: at least ``min_seen`` (a train and a val class) and at
    least one unseen class, else a UserInputError naming --seen-share."""
    share = float(share)
    n_seen = round(share * num_classes)
    if not 0 < share < 1 or not min_seen <= n_seen <= num_classes - 1:
        raise UserInputError(
            f"--seen-share {share:g}: gives {n_seen} of {num_classes} classes seen; need between "
            f"{min_seen} and {num_classes - 1} (a share strictly between 0 and 1)"
        )
    return n_seen


def _val_count(ds: AttributeDataset, n_seen: int, source_seen: int) -> int:
    """Validation classes for ``n_seen`` seen classes: the source's count scaled by n_seen /
    source_seen (equal to it when n_seen is unchanged), at least 1, at most n_seen - 1."""
    n_val = len(next(iter(ds.ps_lists.val.values()))) if ds.ps_lists.val else max(1, round(source_seen / 3))
    return int(min(max(1, round(n_val * n_seen / source_seen)), n_seen - 1))


def make_split(
    ds: AttributeDataset,
    method: str,
    *,
    inverse: bool = False,
    k: int | None = None,
    seed: int = 0,
    seen_share: float | None = None,
) -> SplitResult:
    """Build the ``method`` split of ``ds`` (Proposed Split as the source); ``seen_share`` (only
    and always for ``proportion``) is the share of all classes that become seen."""
    if method not in METHODS:
        raise UserInputError(f"unknown split method {method!r}; choose one of {', '.join(METHODS)}")
    if inverse and method not in INVERTIBLE:
        raise UserInputError(f"--inverse applies to {', '.join(INVERTIBLE)}, not {method}")
    if (seen_share is not None) != (method == "proportion"):
        raise UserInputError(
            "--seen-share is required with --method proportion"
            if seen_share is None
            else f"--seen-share applies to --method proportion, not {method}"
        )
    source = ds.split
    task = ds.task("ps")
    n_seen, n_classes = task.seen.size, source.num_classes
    class_att = source.att.T
    info: dict[str, Any] = {
        "method": method,
        "inverse": bool(inverse),
        "seed": int(seed),
        "dataset": ds.name,
        "source": str(source.path),
    }
    att, original = source.att, source.original_att
    binary = source.binary_att
    locs = dict(source.locs)
    seen, unseen = task.seen, task.unseen
    if method in CLASS_METHODS:
        if k is not None:
            raise UserInputError(f"--k applies to mas and pas, not {method}")
        source_seen = n_seen
        if method == "proportion":
            n_seen = seen_count(seen_share, n_classes)
            info["seen_share"] = float(seen_share)
        if method in ("random", "proportion"):
            order = np.random.default_rng(seed).permutation(n_classes)
        elif method == "gcs":
            order = gcs_order(class_att)
        else:
            order = ccs_order(class_att)
        if inverse:
            order = order[::-1]
        seen, unseen = np.sort(order[:n_seen]), np.sort(order[n_seen:])
        info["order"] = (order + 1).tolist()
        fraction = ds.seen_test_fraction()
        seen_images = ds.images_of(seen)
        held = holdout_images(ds.images.labels[seen_images], fraction, seed)
        locs = {
            "trainval_loc": seen_images[~held],
            "test_seen_loc": seen_images[held],
            "test_unseen_loc": ds.images_of(unseen),
        }
        info["test_seen_fraction"] = fraction
        val = _validation_partition(seen, _val_count(ds, n_seen, source_seen), seed)
    else:
        limit = source.num_attributes if method == "mas" else min(source.num_attributes, n_classes - 1)
        k = default_k(method, source.num_attributes, n_classes) if k is None else int(k)
        if not 1 <= k <= limit:
            raise UserInputError(f"--k must be between 1 and {limit} for {method} on {ds.name}")
        info["k"] = k
        if method == "mas":
            order = mas_order(source.binary().T, inverse=inverse)
            keep = np.sort(order[:k])
            info["kept_attributes"] = (keep + 1).tolist()
            info["order"] = (order + 1).tolist()
            base = original if original is not None else att
            original = base[keep]
            att = _normalise_columns(original)
            binary = source.binary()[keep]
        else:
            scores, components, ratio = pca_components(class_att, k)
            original = scores.T
            att = _normalise_columns(original)
            binary = None
            info["explained_variance_ratio"] = ratio.tolist()
            info["components"] = components.tolist()
        index = {n: i for i, n in enumerate(source.class_names)}
        val = {
            v: np.array(sorted(index[n] for n in names), dtype=np.int64)
            for v, names in ds.ps_lists.val.items()
        }
    train1 = np.setdiff1d(seen, val[1]) if 1 in val else None
    if train1 is not None:
        pool = locs["trainval_loc"]
        locs["train_loc"] = ds.images_of(train1, pool)
        locs["val_loc"] = ds.images_of(val[1], pool)
    else:
        locs.pop("train_loc", None)
        locs.pop("val_loc", None)
    new = AttSplits(
        att=att,
        class_names=list(source.class_names),
        locs=locs,
        original_att=original,
        binary_att=binary,
        seen_classes=seen,
        unseen_classes=unseen,
        val_classes=val,
        split_info=json.loads(json.dumps(info)),
    )
    info["seen_classes"] = [source.class_names[i] for i in seen]
    info["unseen_classes"] = [source.class_names[i] for i in unseen]
    return SplitResult(new, info)


def write_split_dir(result: SplitResult, ds: AttributeDataset, out: str | Path) -> Path:
    """Write ``att_splits.mat``, the xlsa17 class lists, ``split.json`` and a manifest (atomic)."""
    split = result.split
    names = split.class_names
    seen_names = [names[i] for i in split.seen_classes]
    lists = ClassLists(
        trainval=seen_names,
        test=[names[i] for i in split.unseen_classes],
        train={
            k: [n for n in seen_names if n not in {names[i] for i in v}] for k, v in split.val_classes.items()
        },
        val={k: [names[i] for i in v] for k, v in split.val_classes.items()},
        source="split",
    )
    out = Path(out)
    with atomic_directory(out, tool="imagenet-zsl attributes split") as tmp:
        save_att_splits(tmp / "att_splits.mat", split)
        write_class_lists(tmp, lists, names)
        atomic_write_json(tmp / "split.json", result.info)
        atomic_write_json(
            tmp / MANIFEST_NAME,
            {
                "format": "imagenet-zsl/attribute-split",
                "tool": "imagenet-zsl attributes split",
                "command": command_line(),
                "inputs": [file_record(p) for p in (ds.images.path, ds.split.path) if p is not None],
                "parameters": {k: v for k, v in result.split.split_info.items()},
                "outputs": [file_record(p, tmp) for p in sorted(tmp.iterdir()) if p.name != MANIFEST_NAME],
                "versions": software_versions(),
            },
        )
    return out / "att_splits.mat"
