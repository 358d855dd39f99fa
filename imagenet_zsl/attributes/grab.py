"""GRAB split stress tests (Rossi et al., "Generalizability and robustness evaluation of
attribute-based zero-shot learning", Neural Networks 2024): new class splits and attribute subsets
of a dataset.

Class-split methods change which classes are seen (random, gcs, ccs: as many seen classes as the
source):

* ``random``: a seeded permutation of all classes.
* ``gcs`` (greedy class split): classes sorted by the sum of their attribute vector, the n_S
  largest are seen (seen classes carry the most "present" attributes).
* ``ccs`` (clustered class split): classes sorted by their summed Euclidean distance to all
  classes, the n_S smallest (the tightest cluster) are seen, the outliers unseen.
* ``proportion`` (GRAB Table 3 and Sec. 4.2, the seen/unseen proportion), two designs:

  - ``prop`` (the paper's design, the default one): the number of unseen classes is fixed, n_U =
    half the source's unseen classes (AWA1/AWA2 5, CUB 25, SUN 36, FLO 10 in the paper; aPY 6 by
    the same rule, the paper has no aPY), and so is the unseen set: the first n_U classes of a
    seeded permutation of all classes. Prop i (i = 1..4) makes the next n_S(i) = n_S + (i - 3) ·
    n_U classes of that permutation seen, n_S the source's seen count: AWA 30/35/40/45, CUB
    100/125/150/175, SUN 573/609/645/681 (the paper's Table 3 counts), aPY 8/14/20/26. Smaller seen
    sets are subsets of larger ones and the unseen set is the same for every i (one seed); the
    remaining classes are left out (in no location list). Prop 4 uses every class.
  - ``seen_share`` (the share-based option): the first round(S · C) classes of the seeded
    permutation (the ``random`` one for the same seed) are seen and every other class is unseen,
    none left out; at S equal to the source's seen share this is exactly the ``random`` split.

  Either way the validation classes are carved from the seen classes, as many as the source's
  val/seen ratio gives (at least 1, and at least one train class left).

Attribute methods keep the class split and change the class semantics:

* ``mas`` (minimal attribute split, Eq. 14): attribute i's correlation is sum_{j != i} s(i, j),
  keep the k least correlated. ``mas_attributes="binary"`` (the default): s(i, j) = |classes with i
  and j| / |classes with i| on binarised attributes, the paper's definition. ``"continuous"``: the
  same ratio on the continuous class vectors a (xlsa17's ``att``, negatives clipped to 0),
  s(i, j) = sum_y a_i(y) a_j(y) / sum_y a_i(y), which equals the binary ratio on 0/1 values. GRAB
  states its experiments use continuous attributes (Sec. 3.1 and 3.3) but gives no continuous
  formula; this product form is our reading (the reference code sums raw dot products a_i · a_j,
  see below). Binary stays the default because it is the only form the paper defines exactly.
  Attributes that no class has are uninformative and are ranked last either way.
* ``pas`` (principal attribute split): PCA of the class x attribute matrix (class vectors L2-normalised,
  then centred), top k components.

k defaults to 40, the reference code's ``mas_k``/``pas_k``, capped at the method's limit (mas: the
number of attributes A; pas: min(A, C - 1), as C centred class vectors span at most C - 1
directions); the split's info records ``k`` and ``k_default`` (whether k came from this default).

``inverse`` flips gcs/ccs (seen = the other end of the ordering) and mas (keep the k most
correlated). Orderings are stable: ties keep class/attribute index order.

GRAB's measures (Eq. 9, generalizability; Eq. 10, robustness) are computed over many runs of these
splits by :mod:`imagenet_zsl.attributes.robustness` (``attributes robustness``).

Differences from the reference code
-----------------------------------
The authors' splitter is ``grabzsl/splitter.py`` (class ``Splitter``), driven by
``run_splitter.py``, in github.com/luca-rossi/grabzsl (read at commit 5fe0f7a; reimplemented here,
nothing copied). Where its docstrings and its code disagree, this module follows the docstring
(the method's description, which the paper's Sec. 3.3 states the same way) and says so below.
Unless stated, the input is the same: the rows of xlsa17's ``att`` (C x A, each class vector unit
L2).

* GCS (``Splitter.greedy_class_split``): same split. The reference sorts the sums ascending and
  makes the last n_S seen (``inverse``: the first n_S). Ties may fall differently: the reference
  uses numpy's default (unstable) argsort, ours a stable one.
* CCS (``Splitter.clustered_class_split``): the reference docstring says the n_S classes with the
  lowest summed distance (a cluster) are seen. Its code slices the ascending order as in
  ``greedy_class_split``: with ``inverse=False`` the n_U classes with the *smallest* sums become
  unseen and the n_S largest seen. Ours follows the docstring, so our default equals the
  reference code's ``inverse=True`` and our ``inverse=True`` the reference code's default (ties
  aside).
* MAS (``Splitter.minimal_attribute_split``), two differences.
  (a) Score. The docstring: "the ratio of co-occurrencies of i and j over i or j ... not
  symmetric". The code: s_i = sum over all j (j = i included) of ``np.correlate(a_i, a_j)``, i.e.
  of the dot product a_i · a_j of the raw continuous ``att`` columns, without binarising or
  dividing. Ours follows the docstring and the paper's Eq. 14: binarised co-occurrence counts
  divided by i's count (the j = i term would add the constant 1, so it is left out); with
  ``mas_attributes="continuous"`` the same ratio on the continuous ``att`` (the reference's
  numerator, divided by sum_y a_i(y); j = i left out too).
  (b) Selection. The code keeps attribute i when ``np.argsort(s)[i] < k`` (``inverse``:
  ``>= A - k``), reading argsort's output (attribute indices in score order) as if it were ranks.
  It keeps k attributes, the set {rank(j) : j < k}, which is in general not the k least
  correlated (tests/attributes/test_grab.py has a 4-attribute example where, with k = 2, it keeps
  the two most correlated and its ``inverse`` the two least). Ours keeps the k least (``inverse``:
  most) correlated.
* PAS (``Splitter.pca_attribute_split``): the reference runs sklearn ``PCA(n_components=pas_k)``
  on the ``att`` rows: centring only, no whitening. Ours L2-normalises each class vector, then
  centres ("normalise before centring", as the paper was read when this was written). xlsa17's
  class vectors are already unit L2, so on ``att`` ours gives the reference's scores up to each
  component's sign (ours: the largest-magnitude loading is positive). Normalising matters only
  for vectors that are not unit norm (e.g. the raw ``original_att``).
* Saved attributes (``Splitter.generate_split``): the reference saves the kept ``att`` columns
  (MAS) or the raw PCA scores (PAS) as ``att`` without re-normalising, and leaves
  ``original_att`` at the source's full size. Its loader (``grabzsl/data.py``, ``Data``)
  L2-normalises every class vector when it loads. Ours saves that normalised matrix as ``att``,
  the unnormalised subset/scores as ``original_att``, and for MAS the kept binary attributes.
* ``inverse`` for ``rnd`` and ``pas``: the reference ignores it, but ``generate_all_splits``
  still writes ``*_inv`` files (for ``rnd`` another unseeded random split, for ``pas`` the same
  attributes). Ours rejects ``inverse`` for random, proportion and pas.
* Default k: ``Splitter(mas_k=40, pas_k=40)``, and ``run_splitter.py``'s ``--mas_k``/``--pas_k``
  default to 40 (files ``att_splits_mas40.mat``, ``att_splits_pas40.mat``). The repository has
  no script that sweeps k. The reference does not cap k: ``mas_k >= A`` keeps every attribute and
  a ``pas_k`` above min(C, A) is an sklearn error. Ours: 40 capped as above (aPY PAS: 31), and an
  explicit k outside [1, limit] is an error.
* Seen-class test images (``Splitter.generate_split``, ``Splitter.generate_random_splits``): the
  reference shuffles all seen-class image indices with numpy's global RNG and cuts the first
  int(r · n) as ``test_seen_loc``, r = the source's test_seen / (test_seen + trainval), pooled
  over classes, so a class's share varies. The global RNG is unseeded in ``generate_split``
  (``run_splitter.py --all``) and seeded once, ``np.random.seed(1000)``, in
  ``generate_random_splits``, whose stream the class shuffles share (a later ``--split`` in the
  same run continues it). It does this for MAS/PAS too. Ours holds out the same fraction within
  each seen class (``models.selection.holdout_images``), seeded by ``seed``, and for mas/pas keeps
  the source's image lists unchanged (only the attributes change).
* Validation classes: the reference copies ``train_loc``/``val_loc`` unchanged from the source,
  so after a class split they refer to the old seen classes (its trainers read only
  ``trainval_loc``). Ours draws three seeded train/val partitions of the new seen classes (as many
  val classes as the source has, scaled to the number of seen classes) and writes
  ``train_loc``/``val_loc`` for partition 1.
* Random splits (``Splitter.random_split``, ``Splitter.generate_random_splits``): the reference
  shuffles the class labels with the global RNG; ``generate_random_splits(seed=1000,
  n_splits=10)`` writes ``att_splits_rnd0.mat``..., and ``run_splitter.py`` calls it with
  ``--n_rnd`` (default 5) unless ``--n_rnd 0``. Ours makes one split per ``seed`` from
  ``np.random.default_rng(seed)``. The reference's files cannot be reproduced here (another
  generator and another order of draws).
* Proportion splits: ``random_split(n_seen=..., n_unseen=...)`` (``run_splitter.py --n_seen
  --n_unseen``) takes counts. With n_seen > 0 the first n_seen shuffled classes are seen and the
  rest unseen. With n_unseen > 0 only the n_unseen classes after those are unseen, and any others
  are left out of every location list, so for one shuffle the unseen set moves with n_seen. With
  n_seen = 0 and n_unseen > 0 the unseen classes are the first n_unseen, which overlap the seen
  ones. Ours (``prop``) follows the paper's text instead: "for a given dataset, the set of unseen
  classes is always the same" and smaller seen sets are subsets of larger ones, so the unseen
  classes come first in the permutation and the seen ones after them. The share-based option
  (round(S · C) seen, all others unseen) is this toolkit's own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from imagenet_zsl.atomic import atomic_write_json
from imagenet_zsl.attributes.dataset import AttributeDataset
from imagenet_zsl.attributes.outputs import SPLIT_FORMAT, SPLIT_TOOL
from imagenet_zsl.attributes.xlsa17 import (
    VAL_SPLITS,
    AttSplits,
    ClassLists,
    save_att_splits,
    write_class_lists,
)
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.models.selection import holdout_images
from imagenet_zsl.safe_output import atomic_directory

METHODS = ("random", "gcs", "ccs", "mas", "pas", "proportion")
CLASS_METHODS = ("random", "gcs", "ccs", "proportion")
INVERTIBLE = ("gcs", "ccs", "mas")
DEFAULT_K = 40  # the reference's Splitter(mas_k=40, pas_k=40) and run_splitter.py defaults
MAS_ATTRIBUTES = ("binary", "continuous")
PROPS = (1, 2, 3, 4)  # GRAB Table 3's Prop 1..4


@dataclass(frozen=True)
class Proportion:
    """How a ``proportion`` split chooses its classes: ``prop`` (GRAB Table 3's Prop 1..4, fixed
    unseen set, nested seen sets, the default design) or ``seen_share`` (share-based); one of the
    two, never both."""

    prop: int | None = None
    seen_share: float | None = None


# --------------------------------------------------------------------------- orderings
def gcs_order(class_att: np.ndarray) -> np.ndarray:
    """Class indices by descending attribute sum; ``class_att`` is (C, A).

    The reference's ``Splitter.greedy_class_split`` (grabzsl/splitter.py) makes the same n_S seen.
    """
    sums = np.asarray(class_att, dtype=np.float64).sum(axis=1)
    return np.argsort(-sums, kind="stable")


def ccs_order(class_att: np.ndarray) -> np.ndarray:
    """Class indices by ascending summed Euclidean distance to all classes (tightest first).

    The first n_S are seen, as the docstring of the reference's ``Splitter.clustered_class_split``
    says; its code makes the first n_U unseen instead (what ``inverse`` gives here).
    """
    class_att = np.asarray(class_att, dtype=np.float64)
    totals = cdist(class_att, class_att, metric="euclidean").sum(axis=1)
    return np.argsort(totals, kind="stable")


def mas_scores(class_att: np.ndarray, continuous: bool = False) -> np.ndarray:
    """(A,) co-occurrence ratio sums sum_{j != i} s(i, j); NaN for attributes present in no class.

    ``class_att`` is (C, A). Binary (default): entries > 0 count as present and s(i, j) = |classes
    with i and j| / |classes with i|, GRAB's Eq. 14 and the docstring of the reference's
    ``Splitter.minimal_attribute_split`` (its code sums raw dot products instead; see the module
    docstring). ``continuous``: s(i, j) = sum_y a_i(y) a_j(y) / sum_y a_i(y) on the values clipped
    at 0, the same ratio with products for intersections (equal to the binary one on 0/1 input).
    """
    if continuous:
        values = np.clip(np.asarray(class_att, dtype=np.float64), 0.0, None)
        co = values.T @ values  # (A, A) summed products
        present = values.sum(axis=0)
    else:
        binary = (np.asarray(class_att) > 0).astype(np.int64)
        co = binary.T @ binary  # (A, A) integer counts of classes having both
        present = np.diag(co)
    # one division of sums (not a sum of rounded ratios), so equal ratios tie exactly
    shared = co.sum(axis=1) - np.diag(co)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = shared / present
    scores[present == 0] = np.nan
    return scores


def mas_order(class_att: np.ndarray, inverse: bool = False, continuous: bool = False) -> np.ndarray:
    """Attribute indices, least correlated first (most correlated first if ``inverse``).

    MAS keeps the first k: by rank, unlike the reference's ``Splitter.minimal_attribute_split``,
    which tests ``argsort(scores)[i] < k`` as if argsort returned ranks.
    """
    scores = mas_scores(class_att, continuous=continuous)
    informative = np.flatnonzero(~np.isnan(scores))
    key = scores[informative] if not inverse else -scores[informative]
    ranked = informative[np.argsort(key, kind="stable")]
    return np.concatenate([ranked, np.flatnonzero(np.isnan(scores))])


def pca_components(
    class_att: np.ndarray, k: int, normalise: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k PCA of (C, A): (scores (C, k), components (k, A), explained variance ratio (k,)).

    The attributes are normalised before centring (GRAB's PAS as the paper is read here; the
    reference code has no such step, see the module docstring): each class's attribute vector is
    scaled to unit L2 norm (xlsa17's ``att`` already is; raw ``original_att`` values are not), so a
    class's overall attribute magnitude does not become a principal component. ``normalise=False``
    centres only. Signs are fixed so each component's largest-magnitude loading is positive. On
    unit-norm class vectors this is the reference's ``Splitter.pca_attribute_split`` (sklearn
    ``PCA``, centring only) up to each component's sign.
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


def k_limit(method: str, num_attributes: int, num_classes: int) -> int:
    """Largest k: mas keeps at most every attribute; pas at most min(A, C - 1) components (C
    centred class vectors span at most C - 1 directions)."""
    return num_attributes if method == "mas" else min(num_attributes, num_classes - 1)


def default_k(method: str, num_attributes: int, num_classes: int) -> int:
    """The reference's k = 40 (``mas_k``/``pas_k``), capped at :func:`k_limit`."""
    return max(1, min(DEFAULT_K, k_limit(method, num_attributes, num_classes)))


def class_order(method: str, class_att: np.ndarray, *, inverse: bool = False, seed: int = 0) -> np.ndarray:
    """All class indices, the seen ones first (a split with n_S seen classes takes the first n_S)."""
    if method in ("random", "proportion"):
        order = np.random.default_rng(seed).permutation(len(class_att))
    elif method == "gcs":
        order = gcs_order(class_att)
    elif method == "ccs":
        order = ccs_order(class_att)
    else:
        raise ValueError(f"{method} is not a class-split method")
    return order[::-1] if inverse else order


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


def prop_counts(prop: int, source_seen: int, source_unseen: int, num_classes: int) -> tuple[int, int]:
    """GRAB Table 3: (n_seen, n_unseen) of Prop ``prop`` (1..4) for a source split with
    ``source_seen``/``source_unseen`` classes: n_U = source_unseen // 2, n_S = source_seen +
    (prop - 3) · n_U (AWA 40/10 → 30/5, 35/5, 40/5, 45/5; CUB 150/50 → 100..175 by 25; SUN 645/72
    → 573..681 by 36, the paper's counts). A count that does not fit is a UserInputError."""
    if prop not in PROPS:
        raise UserInputError(f"--prop {prop}: must be one of {', '.join(map(str, PROPS))} (GRAB Table 3)")
    n_unseen = source_unseen // 2
    n_seen = source_seen + (prop - 3) * n_unseen
    if n_unseen < 1 or n_seen < 2 or n_seen + n_unseen > num_classes:
        raise UserInputError(
            f"--prop {prop}: the source split ({source_seen} seen / {source_unseen} unseen of "
            f"{num_classes} classes) gives {n_seen} seen / {n_unseen} unseen; need at least 2 seen, "
            f"1 unseen and at most {num_classes} classes in all"
        )
    return n_seen, n_unseen


def _val_count(ds: AttributeDataset, n_seen: int, source_seen: int) -> int:
    """Validation classes for ``n_seen`` seen classes: the source's count scaled by n_seen /
    source_seen (equal to it when n_seen is unchanged), at least 1, at most n_seen - 1."""
    n_val = len(next(iter(ds.ps_lists.val.values()))) if ds.ps_lists.val else max(1, round(source_seen / 3))
    return int(min(max(1, round(n_val * n_seen / source_seen)), n_seen - 1))


def _check_request(method: str, inverse: bool, k: int | None, proportion: Proportion | None) -> None:
    """One-line UserInputErrors for options that do not apply to ``method``."""
    if method not in METHODS:
        raise UserInputError(f"unknown split method {method!r}; choose one of {', '.join(METHODS)}")
    if inverse and method not in INVERTIBLE:
        raise UserInputError(f"--inverse applies to {', '.join(INVERTIBLE)}, not {method}")
    if k is not None and method in CLASS_METHODS:
        raise UserInputError(f"--k applies to mas and pas, not {method}")
    given = proportion is not None and (proportion.prop is not None or proportion.seen_share is not None)
    if method != "proportion":
        if given:
            option = "--prop" if proportion.prop is not None else "--seen-share"
            raise UserInputError(f"{option} applies to --method proportion, not {method}")
        return
    if not given:
        raise UserInputError(
            "--method proportion needs --prop 1..4 (GRAB Table 3: fixed unseen classes, nested seen "
            "sets) or --seen-share S (share-based)"
        )
    if proportion.prop is not None and proportion.seen_share is not None:
        raise UserInputError("--prop and --seen-share are two designs of --method proportion: give one")


def _class_split(
    ds: AttributeDataset, method: str, info: dict[str, Any], inverse: bool, proportion: Proportion | None
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], dict[int, np.ndarray]]:
    """(seen, unseen, locs, val) of a class-split method; records the order and counts in ``info``."""
    task, seed = ds.task("ps"), int(info["seed"])
    source_seen, n_classes = task.seen.size, ds.split.num_classes
    n_seen, n_unseen = source_seen, n_classes - source_seen
    skip = 0  # classes before the seen ones in the order (the fixed unseen set of a prop split)
    if method == "proportion" and proportion.seen_share is not None:
        n_seen = seen_count(proportion.seen_share, n_classes)
        n_unseen = n_classes - n_seen
        info.update(design="seen_share", seen_share=float(proportion.seen_share))
    elif method == "proportion":
        n_seen, n_unseen = prop_counts(proportion.prop, source_seen, task.unseen.size, n_classes)
        skip = n_unseen
        info.update(design="prop", prop=int(proportion.prop), n_seen=n_seen, n_unseen=n_unseen)
    order = class_order(method, ds.split.att.T, inverse=inverse, seed=seed)
    if skip:
        unseen, seen = np.sort(order[:skip]), np.sort(order[skip : skip + n_seen])
        info["left_out_classes"] = [ds.class_names[i] for i in np.sort(order[skip + n_seen :])]
    else:
        seen, unseen = np.sort(order[:n_seen]), np.sort(order[n_seen : n_seen + n_unseen])
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
    return seen, unseen, locs, val


def _attribute_split(
    ds: AttributeDataset, method: str, info: dict[str, Any], k: int | None, mas_attributes: str
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(att, original_att, binary_att) of mas/pas, each (k, C); records k and the choice in ``info``."""
    source = ds.split
    limit = k_limit(method, source.num_attributes, source.num_classes)
    info["k_default"] = k is None
    k = default_k(method, source.num_attributes, source.num_classes) if k is None else int(k)
    if not 1 <= k <= limit:
        raise UserInputError(f"--k must be between 1 and {limit} for {method} on {ds.name}")
    info["k"] = k
    if method == "pas":
        scores, components, ratio = pca_components(source.att.T, k)
        info["explained_variance_ratio"] = ratio.tolist()
        info["components"] = components.tolist()
        return _normalise_columns(scores.T), scores.T, None
    continuous = mas_attributes == "continuous"
    info["mas_attributes"] = mas_attributes
    scored = source.att.T if continuous else source.binary().T
    order = mas_order(scored, inverse=bool(info["inverse"]), continuous=continuous)
    keep = np.sort(order[:k])
    info["kept_attributes"] = (keep + 1).tolist()
    info["order"] = (order + 1).tolist()
    base = source.original_att if source.original_att is not None else source.att
    return _normalise_columns(base[keep]), base[keep], source.binary()[keep]


def make_split(
    ds: AttributeDataset,
    method: str,
    *,
    inverse: bool = False,
    k: int | None = None,
    seed: int = 0,
    proportion: Proportion | None = None,
    mas_attributes: str = "binary",
) -> SplitResult:
    """Build the ``method`` split of ``ds`` (Proposed Split as the source). ``proportion`` (only and
    always for ``proportion``) picks GRAB's Table 3 design (``prop``) or the share-based one;
    ``mas_attributes`` ("binary" or "continuous") is the attribute form MAS scores."""
    _check_request(method, inverse, k, proportion)
    if mas_attributes not in MAS_ATTRIBUTES:
        raise UserInputError(
            f"--mas-attributes must be one of {', '.join(MAS_ATTRIBUTES)}, got {mas_attributes!r}"
        )
    if mas_attributes != "binary" and method != "mas":
        raise UserInputError(f"--mas-attributes applies to mas, not {method}")
    source = ds.split
    info: dict[str, Any] = {
        "method": method,
        "inverse": bool(inverse),
        "seed": int(seed),
        "dataset": ds.name,
        "source": str(source.path),
    }
    att, original, binary = source.att, source.original_att, source.binary_att
    locs = dict(source.locs)
    task = ds.task("ps")
    seen, unseen = task.seen, task.unseen
    if method in CLASS_METHODS:
        seen, unseen, locs, val = _class_split(ds, method, info, inverse, proportion)
    else:
        att, original, binary = _attribute_split(ds, method, info, k, mas_attributes)
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


def split_inputs(ds: AttributeDataset) -> list[Path]:
    """The files a split of ``ds`` is read from (its res101.mat and att_splits.mat): an ``--out``
    inside either's folder, or containing it, is refused."""
    return [p.parent for p in (ds.images.path, ds.split.path) if p is not None]


def write_split_dir(
    result: SplitResult, ds: AttributeDataset, out: str | Path, inputs: Sequence[Path] = ()
) -> Path:
    """Write ``att_splits.mat``, the xlsa17 class lists, ``split.json`` and a manifest (atomic);
    ``inputs`` are folders that ``out`` must neither lie in nor contain (see ``split_inputs``)."""
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
    with atomic_directory(out, tool=SPLIT_TOOL, inputs=inputs) as tmp:
        save_att_splits(tmp / "att_splits.mat", split)
        write_class_lists(tmp, lists, names)
        atomic_write_json(tmp / "split.json", result.info)
        write_manifest(
            tmp,
            format=SPLIT_FORMAT,
            tool=SPLIT_TOOL,
            inputs=[file_record(p) for p in (ds.images.path, ds.split.path) if p is not None],
            parameters=dict(split.split_info),
        )
    return out / "att_splits.mat"
