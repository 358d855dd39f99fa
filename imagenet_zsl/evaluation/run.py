"""``imagenet-zsl evaluate``: search once, keep the top-k lists, compute every metric, write a run.

Flow: every input is checked first (split, feature manifests, class coverage, dimensions, seen
classes), then each image set is streamed shard by shard through the query source and searched
against each label space (blocked matmul), then metrics, tables and plots are written into the output
directory in one atomic rename.

Image sets and label spaces (``m = max(K) + 1`` classes kept per image and space):

* ``test``     — images of the split's classes from ``--features``: searched among the classes
  of the label space (``unseen`` space; the ZSL result) and, with ``--gzsl``, among the seen
  classes.
* ``seen``     — held-out images of seen classes (``--seen-features``, e.g. ILSVRC-2012 val):
  searched among seen and test classes.
* ``val`` / ``val_seen`` — with ``--val-split``: images of validation classes and held-out seen
  images, used only to choose the calibration γ (never the test images). Without
  ``--val-seen-features`` a seeded ``--val-seen-fraction`` of the seen images is held out for
  validation and removed from the seen test images.

The label space (``--label-space``, :func:`imagenet_zsl.splits.label_space.resolve_label_space`)
is the split's classes (``split``), every ImageNet-21K class that is not a seen class (``all``),
or a wnid list file. Split classes without test images stay in it as distractors (they need a
prototype, not images); metrics are over the test images of the split classes the feature
directory holds. ``count_as_miss`` classes (split classes a model cannot represent) leave the label
space, but their test images stay in every denominator as misses (flat and per-class hit@K, GZSL
unseen accuracy); they are never searched and their images are not in ``topk/``.

Provenance: the identity of the test features (:mod:`imagenet_zsl.features.identity`) is compared
with the one the model directory records for its training features, and with the identities of
the other feature directories of the run; a difference is an error unless
``--allow-feature-mismatch``, whose override is recorded in metrics.json and the manifest.

Ties: every hit@K is reported under two rules (:mod:`imagenet_zsl.scoring`): the expected value
under random tie-breaking (the headline keys) and ties-against-the-model (``*_strict`` keys); the
search counts, over the full score row, the classes strictly above and tied with each true class
(identical prototypes always tie). When the features' manifest records the backbone's
pretraining label set, the test classes seen in pretraining are counted and warned about.

Resumable: each shard's search result is cached in ``.<out>.search-cache/`` next to ``--out``
(keyed by the model/prototype digest, the shard's sha256 and k); re-running an interrupted
command skips finished shards. The cache is deleted once the run is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from imagenet_zsl import scoring as M
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation import plots
from imagenet_zsl.evaluation.hierarchy_errors import expected_error_breakdown, gzsl_error_breakdowns
from imagenet_zsl.evaluation.properties import class_properties
from imagenet_zsl.evaluation.queries import ModelDirectory, PrototypeFile, QuerySource
from imagenet_zsl.evaluation.report import METRICS_NAME, render_run_report
from imagenet_zsl.evaluation.search import DEFAULT_BLOCK_ROWS, TopKSearcher
from imagenet_zsl.features.identity import check_same_features, describe_identity
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.hierarchy.universe import resolve_graph, training_wnids
from imagenet_zsl.image_filter.outputs import kept_image_ids
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_save_npy,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_out_dir,
    command_line,
    file_record,
    sha256_file,
    software_versions,
)
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import check_label_space_spec, resolve_label_space
from imagenet_zsl.splits.pretraining import Pretraining

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

log = logging.getLogger(__name__)

TOOL = "imagenet-zsl evaluate"
#: the label space each image set's true classes live in (its "own" space)
OWN_SPACE = {"test": "unseen", "seen": "seen", "val": "val_unseen", "val_seen": "seen"}
CACHE_VERSION = 2


@dataclass
class EvaluationConfig:
    """Everything ``imagenet-zsl evaluate`` takes; see the module docstring for the roles."""

    features: Path
    split: Path
    out: Path
    model: Path | None = None
    prototypes: Path | None = None
    l2_normalize: bool = False
    ks: Sequence[int] = M.DEFAULT_KS
    gzsl: bool = False
    seen_features: Path | None = None
    seen_classes: Path | None = None
    val_split: Path | None = None
    val_features: Path | None = None
    val_seen_features: Path | None = None
    val_seen_fraction: float = 0.5
    seed: int = 0
    #: "auto" (WordNet when installed, else no breakdown), "wordnet", "imagenet", "none", or a
    #: TSV of parent<TAB>child edges
    graph: str = "auto"
    label_frequency: bool = True
    plots: bool = True
    block_rows: int = DEFAULT_BLOCK_ROWS
    use_gpu: bool | None = None
    #: output of ``imagenet-zsl images filter``: evaluate only the test images it kept
    kept_images: Path | None = None
    #: the classes each test image is ranked against: "split", "all" or a wnid list file
    #: (:func:`imagenet_zsl.splits.label_space.resolve_label_space`)
    label_space: str = "split"
    #: split classes the model has no prototype for: they leave the label space, and their test
    #: images count as misses in every denominator (the ``count_as_miss`` policy of ``run``)
    count_as_miss: Sequence[str] = ()
    #: evaluate features whose identity differs from the model's training features (or from
    #: each other); the override is recorded in metrics.json and the manifest
    allow_feature_mismatch: bool = False


# ----------------------------------------------------------------------------- input checks


def _read_classes(path: str | Path, what: str = "split") -> list[str]:
    """A wnid list (:func:`imagenet_zsl.splits.io.read_wnid_list`) that must not be empty."""
    wnids = read_wnid_list(path)
    if not wnids:
        raise UserInputError(f"{path}: the {what} is empty; it needs one class wnid per line")
    return wnids


def _check_label_range(fd: FeatureDir, labels: np.ndarray) -> None:
    if len(labels) and (labels.min() < 0 or labels.max() >= len(fd.classes)):
        raise UserInputError(
            f"{fd.path}: labels outside the directory's {len(fd.classes)} classes "
            f"(min {labels.min()}, max {labels.max()}); the shards and manifest disagree"
        )


def class_lookup(fd: FeatureDir, wnids: Sequence[str], where: str) -> np.ndarray:
    """(len(fd.classes),) int64 mapping each feature label to its index in ``wnids`` (-1: skip).

    For the seen and validation classes, which must all have images: errors if a class of
    ``wnids`` is not in the feature directory or has no image there, or if a shard's labels fall
    outside the directory's label space.
    """
    position = {w: i for i, w in enumerate(fd.classes)}
    absent = [w for w in wnids if w not in position]
    if absent:
        raise UserInputError(
            f"{fd.path}: {len(absent)} classes of the {where} have no features here: "
            f"{preview(absent)}; extract them or drop them from the {where}"
        )
    labels = fd.labels()
    _check_label_range(fd, labels)
    lookup = np.full(len(fd.classes), -1, dtype=np.int64)
    lookup[[position[w] for w in wnids]] = np.arange(len(wnids))
    counts = np.bincount(labels, minlength=len(fd.classes))
    empty = [w for w in wnids if counts[position[w]] == 0]
    if empty:
        raise UserInputError(
            f"{fd.path}: {len(empty)} classes of the {where} have no images: {preview(empty)}; "
            f"drop them from the {where} or add their images"
        )
    return lookup


def test_lookup(fd: FeatureDir, space_wnids: Sequence[str], scored: Sequence[str]) -> np.ndarray:
    """(len(fd.classes),) int64: each feature class's index in the label space ``space_wnids`` when
    it is one of the ``scored`` split classes, else -1 (not a test image). Split classes absent
    from the directory are simply classes without test images."""
    _check_label_range(fd, fd.labels())
    index = {w: i for i, w in enumerate(space_wnids)}
    wanted = set(scored)
    return np.array([index[w] if w in wanted else -1 for w in fd.classes], dtype=np.int64)


def class_image_counts(
    fd: FeatureDir, wnids: Sequence[str], kept_ids: np.ndarray | None = None
) -> np.ndarray:
    """(len(wnids),) int64 test images of each class in ``fd`` (only ``kept_ids`` when given);
    reads labels (and ids) only."""
    position = {w: i for i, w in enumerate(fd.classes)}
    counts = np.zeros(len(fd.classes), dtype=np.int64)
    for shard in fd.shard_names():
        labels = fd.shard_labels(shard)
        if kept_ids is not None:
            labels = labels[np.isin(fd.shard_ids(shard), kept_ids)]
        counts += np.bincount(labels, minlength=len(fd.classes))[: len(fd.classes)]
    return np.array([counts[position[w]] if w in position else 0 for w in wnids], dtype=np.int64)


def _missing_prototypes(source: QuerySource, wnids: Sequence[str]) -> list[str]:
    """The classes of ``wnids`` the source has no prototype for (bisecting failed requests, so a
    21K-class label space with a few holes costs a few dozen calls, not one per class)."""
    if not wnids:
        return []
    try:
        source.prototypes(wnids)
        return []
    except UserInputError:
        if len(wnids) == 1:
            return list(wnids)
    half = len(wnids) // 2
    return _missing_prototypes(source, wnids[:half]) + _missing_prototypes(source, wnids[half:])


def representable_classes(source: QuerySource, wnids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split seen classes into those the model/prototype file can represent and those it cannot.

    The GZSL label space is defined by the training set, but a semantic model cannot score a seen
    class that has no word vector (it was also left out of its training). Such classes leave the
    seen label space with their images, and the run reports them; a split class without a
    prototype is an error unless the caller counts it as a miss (``count_as_miss``).
    """
    missing = set(_missing_prototypes(source, list(wnids)))
    kept = [w for w in wnids if w not in missing]
    if not kept:
        raise UserInputError("no seen class has a prototype; check the model's class semantics")
    return kept, [w for w in wnids if w in missing]


def present_classes(fd: FeatureDir) -> list[str]:
    """Classes of a feature directory that have at least one image (label-space order)."""
    counts = np.bincount(fd.labels(), minlength=len(fd.classes))
    return [w for w, c in zip(fd.classes, counts, strict=True) if c > 0]


@dataclass
class LabelSpace:
    """The ZSL label space of a run and what left it.

    ``wnids``: the label space, sorted (what the ``unseen`` top-k ids index); ``split``: the
    split's classes in file order; ``miss``: the ``count_as_miss`` classes (sorted; their test
    labels are ``len(wnids) + j``); ``seen``/``seen_source``: the seen classes kept out of it;
    ``without_prototype``: distractors (label-space classes outside the split) that left because
    the source has no prototype for them."""

    spec: str
    wnids: list[str]
    split: list[str]
    miss: list[str] = field(default_factory=list)
    seen_source: str = "none"
    seen_count: int = 0
    without_prototype: list[str] = field(default_factory=list)

    @property
    def scored(self) -> list[str]:
        """Split classes the model is scored on (in the label space)."""
        miss = set(self.miss)
        return [w for w in self.split if w not in miss]

    @property
    def eval_wnids(self) -> list[str]:
        """The class list test labels index: the label space, then the count-as-miss classes."""
        return list(self.wnids) + list(self.miss)


def _check_count_as_miss(cfg: EvaluationConfig, split_wnids: Sequence[str]) -> list[str]:
    miss = sorted({str(w) for w in cfg.count_as_miss})
    outside = sorted(set(miss) - set(split_wnids))
    if outside:
        raise UserInputError(
            f"count_as_miss: {len(outside)} classes are not in the split {cfg.split}: {preview(outside)}"
        )
    return miss


def _seen_for_label_space(inp: EvaluationInputs) -> tuple[list[str], str]:
    """The seen classes a zero-shot label space leaves out, and where they come from: the GZSL
    seen classes; else the model's seen classes; else (for ``all``/FILE) ILSVRC-2012's 1,000.
    The ``split`` space of a plain ZSL run checks no seen classes (the split is the choice)."""
    if inp.cfg.gzsl:
        return list(inp.seen_wnids), "GZSL seen classes"
    if inp.cfg.label_space == "split":
        return [], "none"
    model_seen = inp.source.seen_wnids()
    if model_seen:
        return model_seen, "the model's seen classes"
    return training_wnids(), "ILSVRC-2012 classes (the model does not record its seen classes)"


def resolve_space(inp: EvaluationInputs, miss: list[str]) -> LabelSpace:
    """The run's label space: resolved by :func:`resolve_label_space` without the count-as-miss
    classes; a split class without a prototype is an error (count it as a miss or drop it), a
    distractor without one leaves with a warning."""
    cfg = inp.cfg
    seen, seen_source = _seen_for_label_space(inp)
    space = LabelSpace(cfg.label_space, [], inp.split_wnids, miss, seen_source, len(set(seen)))
    excluded = set(miss)
    resolved = resolve_label_space(cfg.label_space, space.scored, seen, "--label-space")
    wnids = [w for w in resolved if w not in excluded]
    missing = _missing_prototypes(inp.source, wnids)
    split_missing = sorted(set(missing) & set(space.scored))
    if split_missing:
        raise UserInputError(
            f"{len(split_missing)} classes of the split {cfg.split} have no prototype "
            f"({_class_vectors_label(inp.source.class_vectors)}): {preview(split_missing)}; drop them from "
            "the split or count them as misses (run recipe: count_as_miss)"
        )
    if missing:
        log.warning(
            "%d classes of the label space %r have no prototype and leave it: %s",
            len(missing),
            cfg.label_space,
            preview(missing),
        )
    gone = set(missing)
    space.wnids = [w for w in wnids if w not in gone]
    space.without_prototype = sorted(missing)
    if not space.wnids:
        raise UserInputError(f"--label-space {cfg.label_space}: no class is left in the label space")
    return space


def _check_test_images(inp: EvaluationInputs) -> None:
    """A split with no test image at all in ``--features`` is one line; some classes without
    images are fine (they are distractors)."""
    if int(inp.class_counts_all.sum()) == 0 and inp.cfg.kept_images is not None:
        raise UserInputError(
            f"{inp.cfg.kept_images}: none of the split's images are among the kept "
            "images; was the filter run on these features?"
        )
    if int(inp.class_counts_all.sum()) == 0:
        raise UserInputError(
            f"{inp.fd.path}: none of the {len(inp.split_wnids)} classes of the split {inp.cfg.split} has a "
            "test image here; point --features at the split's test images"
        )
    empty = [w for w, c in zip(inp.split_wnids, inp.class_counts_all, strict=True) if c == 0]
    if empty:
        log.info(
            "%d split classes have no test image in %s and stay in the label space as distractors: %s",
            len(empty),
            inp.fd.path,
            preview(empty),
        )


def _class_vectors_label(record: Any) -> str:
    """A short name for a class-vector source recorded as a string or a dict."""
    if isinstance(record, dict):
        for key in ("describe", "source", "name", "path"):
            if record.get(key):
                return str(record[key])
        return "unknown"
    return str(record) if record else "unknown"


def check_feature_identities(inp: EvaluationInputs) -> list[dict[str, Any]]:
    """Compare the model's training-feature identity with every feature directory of the run, and
    the other feature directories with the test features (:func:`check_same_features`).

    Returns the override records (``--allow-feature-mismatch``), empty when all agree; raises one
    line naming both sides otherwise. Unknown identities (older directories) are skipped."""
    cfg = inp.cfg
    allow = cfg.allow_feature_mismatch
    test_what = f"--features {inp.fd.path}"
    named = [
        ("--seen-features", inp.seen_fd),
        ("--val-features", inp.val_fd if cfg.val_features is not None else None),
        ("--val-seen-features", inp.val_seen_fd),
    ]
    records = []
    model_identity = inp.source.feature_identity
    model_what = f"model {cfg.model}"
    for what, fd in [("--features", inp.fd), *named]:
        if fd is None:
            continue
        where = f"{what} {fd.path}"
        records.append(check_same_features(model_identity, fd.identity, model_what, where, allow))
        if fd is not inp.fd:
            records.append(check_same_features(inp.fd.identity, fd.identity, test_what, where, allow))
    return [r for r in records if r is not None]


# ----------------------------------------------------------------------------- search


@dataclass
class SetResult:
    """Search results of one image set: labels index its class list; ``lists[space]`` =
    (scores (n, m) float32, ids (n, m) int64 into that space's class list); ``ranks``: the exact
    :class:`~imagenet_zsl.scoring.TieRanks` of each true class in the set's own label space."""

    labels: np.ndarray
    rows: np.ndarray
    lists: dict[str, tuple[np.ndarray, np.ndarray]]
    ranks: M.TieRanks

    def take(self, keep: np.ndarray) -> SetResult:
        return SetResult(
            self.labels[keep],
            self.rows[keep],
            {s: (a[keep], b[keep]) for s, (a, b) in self.lists.items()},
            self.ranks.take(keep),
        )


class SearchCache:
    """Per-shard search results under one directory, each tagged with the key it was made with."""

    def __init__(self, root: Path | None):
        self.root = root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def _path(self, set_name: str, shard: str) -> Path:
        return self.root / f"{set_name}-{shard}.npz"

    def get(self, set_name: str, shard: str, key: str) -> dict[str, np.ndarray] | None:
        if self.root is None:
            return None
        path = self._path(set_name, shard)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["key"]) != key:
                    return None
                return {name: data[name] for name in data.files if name != "key"}
        except (OSError, ValueError, KeyError):
            return None

    def put(self, set_name: str, shard: str, key: str, arrays: dict[str, np.ndarray]) -> None:
        if self.root is None:
            return
        buffer = io.BytesIO()
        np.savez(buffer, key=np.asarray(key), **arrays)
        atomic_write_bytes(self._path(set_name, shard), buffer.getvalue())


@dataclass
class SearchContext:
    """What every image set's search shares: the query source, the resumable shard cache, the
    rows read per block and whether to show a progress bar."""

    source: QuerySource
    cache: SearchCache
    block_rows: int = DEFAULT_BLOCK_ROWS
    progress: bool = True


@dataclass(frozen=True)
class SetKey:
    """The parts of a shard's cache key shared by every shard of one image set, hashed once per
    set (the prototype digests once per label space: each searcher caches its own)."""

    name: str
    source_digest: str
    #: label space -> sha256 of its prototypes
    spaces: dict[str, str]
    #: label space -> k
    ks: dict[str, int]
    lookup_sum: int
    lookup_digest: str
    kept_digest: str | None

    @classmethod
    def of(
        cls,
        name: str,
        lookup: np.ndarray,
        spaces: dict[str, TopKSearcher],
        source: QuerySource,
        kept_ids: np.ndarray | None,
    ) -> SetKey:
        return cls(
            name,
            source.digest,
            {s: sp.digest for s, sp in spaces.items()},
            {s: sp.k for s, sp in spaces.items()},
            int(lookup.sum()),
            hashlib.sha256(lookup.tobytes()).hexdigest(),
            None if kept_ids is None else hashlib.sha256(kept_ids.tobytes()).hexdigest(),
        )


def _shard_key(set_key: SetKey, shard: dict) -> str:
    """Everything a shard's cached search result depends on, hashed (the same bytes as before the
    digests were computed once per set, so existing caches stay valid)."""
    return hashlib.sha256(
        json.dumps(
            [
                CACHE_VERSION,
                set_key.name,
                set_key.source_digest,
                set_key.spaces,
                sorted(set_key.spaces),
                shard.get("sha256", {}),
                int(shard["rows"]),
                set_key.ks,
                set_key.lookup_sum,
                set_key.lookup_digest,
                set_key.kept_digest,
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()


def search_set(
    name: str,
    fd: FeatureDir,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    kept_ids: np.ndarray | None = None,
) -> SetResult:
    """Stream a feature directory's rows of the wanted classes through the query source and search
    each label space.

    Memory: one block of ``context.block_rows`` rows and one score tile while searching; then the
    labels, row numbers and tie ranks (32 bytes per image) in memory, and the top-k lists
    (``n * m * 8`` bytes per space) memory-mapped from the cache directory when there is one.
    """
    source = context.source
    use_logits = source.uses_logits and fd.has_logits
    parts: list[dict[str, np.ndarray]] = []  # only without a cache directory
    done: list[tuple[str, str, int]] = []
    offset = 0
    set_key = SetKey.of(name, lookup, spaces, source, kept_ids)
    with tqdm(
        total=fd.num_rows, desc=f"search {name}", unit="img", disable=not context.progress, leave=False
    ) as bar:
        for shard in fd.shards:
            shard_name, shard_rows = shard["name"], int(shard["rows"])
            key = _shard_key(set_key, shard)
            cached = context.cache.get(name, shard_name, key)
            if cached is None:
                cached = _search_shard(
                    fd, shard_name, lookup, spaces, context, use_logits, OWN_SPACE[name], kept_ids
                )
                cached["rows"] = cached["rows"] + offset
                context.cache.put(name, shard_name, key, cached)
            if context.cache.root is None:
                parts.append(cached)
            done.append((shard_name, key, len(cached["labels"])))
            offset += shard_rows
            bar.update(shard_rows)
    if context.cache.root is not None:
        return _joined_from_cache(name, spaces, context.cache, done)
    return _joined(parts, spaces)


def _set_result(fields: dict[str, np.ndarray], spaces: dict[str, TopKSearcher]) -> SetResult:
    return SetResult(
        fields["labels"].astype(np.int64),
        fields["rows"].astype(np.int64),
        {s: (fields[f"{s}.scores"], fields[f"{s}.ids"]) for s in spaces},
        M.TieRanks(fields["above"].astype(np.int64), fields["tied"].astype(np.int64)),
    )


def _field_specs(spaces: dict[str, TopKSearcher]) -> dict[str, tuple[tuple[int, ...], type]]:
    specs: dict[str, tuple[tuple[int, ...], type]] = {
        "labels": ((), np.int64),
        "rows": ((), np.int64),
        "above": ((), np.int64),
        "tied": ((), np.int64),
    }
    for s, sp in spaces.items():
        specs[f"{s}.scores"] = ((sp.k,), np.float32)
        specs[f"{s}.ids"] = ((sp.k,), np.int32)
    return specs


def _joined(parts: list[dict[str, np.ndarray]], spaces: dict[str, TopKSearcher]) -> SetResult:
    fields = {
        f: np.concatenate([p[f] for p in parts]) if parts else np.zeros((0, *shape), dtype)
        for f, (shape, dtype) in _field_specs(spaces).items()
    }
    return _set_result(fields, spaces)


def _joined_from_cache(
    name: str, spaces: dict[str, TopKSearcher], cache: SearchCache, done: list[tuple[str, str, int]]
) -> SetResult:
    """The set's arrays filled shard by shard from the cache; the top-k lists as memory-mapped
    .npy files in the cache directory (so they need no heap memory)."""
    total = sum(n for _, _, n in done)
    fields: dict[str, np.ndarray] = {}
    for f, (shape, dtype) in _field_specs(spaces).items():
        if shape:
            path = cache.root / f"{name}.{f}.npy"
            fields[f] = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(total, *shape))
        else:
            fields[f] = np.empty(total, dtype)
    start = 0
    for shard_name, key, n in done:
        data = cache.get(name, shard_name, key)
        if data is None:  # removed under our feet
            raise UserInputError(f"{cache.root}: the search cache changed during the run; re-run the command")
        for f in fields:
            fields[f][start : start + n] = data[f]
        start += n
    for array in fields.values():
        if isinstance(array, np.memmap):
            array.flush()
    return _set_result(fields, spaces)


def _search_shard(
    fd: FeatureDir,
    shard_name: str,
    lookup: np.ndarray,
    spaces: dict[str, TopKSearcher],
    context: SearchContext,
    use_logits: bool,
    own_space: str,
    kept_ids: np.ndarray | None = None,
) -> dict:
    """One shard's labels, row numbers, top-k lists in every space and the true classes' tie
    ranks in their own space (the unit of the cache). Reads only through :class:`FeatureDir`."""
    target = lookup[fd.shard_labels(shard_name)]
    wanted = target >= 0
    if kept_ids is not None:
        wanted &= np.isin(fd.shard_ids(shard_name), kept_ids)
    keep = np.flatnonzero(wanted)
    out = {
        "labels": target[keep],
        "rows": keep.astype(np.int64),
        "above": np.empty(len(keep), np.int64),
        "tied": np.empty(len(keep), np.int64),
    }
    for s, sp in spaces.items():
        out[f"{s}.scores"] = np.empty((len(keep), sp.k), np.float32)
        out[f"{s}.ids"] = np.empty((len(keep), sp.k), np.int32)
    if len(keep) == 0:
        return out
    start = 0
    # every row wanted (the usual case): contiguous slices, one fp16 -> fp32 pass per block
    rows = None if len(keep) == len(target) else keep
    for block in fd.shard_blocks(shard_name, rows, context.block_rows, with_logits=use_logits):
        done = slice(start, start + len(block))
        _check_rows(fd, shard_name, block.ids, block.features, "features")
        queries = context.source.encode(block.features, block.logits)
        if queries is not block.features:  # prototypes in feature space: the rows just checked
            _check_rows(fd, shard_name, block.ids, queries, "query vectors (model output)")
        for s, sp in spaces.items():
            labels = target[keep[done]] if s == own_space else None
            scores, ids, ranks = sp.search_ranked(queries, labels)
            out[f"{s}.scores"][done] = scores
            out[f"{s}.ids"][done] = ids
            if ranks is not None:
                out["above"][done], out["tied"][done] = ranks.above, ranks.tied
        start += len(block)
    return out


def _check_rows(fd: FeatureDir, shard: str, ids: np.ndarray, matrix: np.ndarray, what: str) -> None:
    finite = np.isfinite(matrix).all(axis=1)
    if finite.all():
        return
    bad = np.flatnonzero(~finite)
    raise UserInputError(
        f"{fd.path}: {what} of {len(bad)} images in shard {shard} contain NaN or Inf "
        f"(first: {ids[bad[0]]}); re-extract them or drop those images"
    )


# ----------------------------------------------------------------------------- GZSL assembly


def _offset(ids: np.ndarray, by: int) -> np.ndarray:
    """Shift class indices into the joint space, keeping -1 padding (and the int32 dtype)."""
    return np.where(ids >= 0, ids + ids.dtype.type(by), ids.dtype.type(-1))


def build_gzsl(
    unseen_part: SetResult, seen_part: SetResult, n_unseen: int, n_seen: int, unseen_space: str
) -> M.GZSLTopK:
    """Joint label space = unseen classes then seen classes."""
    parts = []
    for part, label_offset in ((unseen_part, 0), (seen_part, n_unseen)):
        s_scores, s_ids = part.lists["seen"]
        u_scores, u_ids = part.lists[unseen_space]
        parts.append(
            M.GZSLTopK(
                s_scores,
                _offset(s_ids, n_unseen),
                u_scores,
                u_ids,
                part.labels + label_offset,
                np.r_[np.zeros(n_unseen, bool), np.ones(n_seen, bool)],
                part.ranks,
            )
        )
    return M.GZSLTopK.concat(parts)


# ----------------------------------------------------------------------------- the run


def _str_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _str_keys(v) for k, v in obj.items()}
    return obj


def _finite_or_none(obj: Any) -> Any:
    """JSON has no NaN/Infinity: such values become null."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_none(v) for v in obj]
    if isinstance(obj, float | np.floating) and not np.isfinite(obj):
        return None
    return obj


@dataclass
class EvaluationInputs:
    """Every input of a run, checked before any long work: the image sets with their class lists
    and label lookups (``None`` where the run does not use them), the query source, the graph for
    the error breakdown and the searcher of each label space."""

    cfg: EvaluationConfig
    ks: list[int]
    m: int
    split_wnids: list[str]
    fd: FeatureDir
    source: QuerySource
    #: the label space (see :class:`LabelSpace`); ``test_lookup`` maps feature classes into it
    space: LabelSpace | None = None
    test_lookup: np.ndarray | None = None
    #: (len(split_wnids),) test images of each split class (kept images only, misses included)
    class_counts_all: np.ndarray | None = None
    #: (len(space.miss),) test images of each count-as-miss class
    miss_counts: np.ndarray | None = None
    #: ``--allow-feature-mismatch`` override records (empty: every identity agreed or is unknown)
    feature_checks: list[dict[str, Any]] = field(default_factory=list)
    graph: ClassGraph | None = None
    seen_wnids: list[str] | None = None
    seen_fd: FeatureDir | None = None
    seen_lookup: np.ndarray | None = None
    excluded_seen: list[str] = field(default_factory=list)
    val_wnids: list[str] | None = None
    val_fd: FeatureDir | None = None
    val_lookup: np.ndarray | None = None
    val_seen_fd: FeatureDir | None = None
    val_seen_lookup: np.ndarray | None = None
    spaces: dict[str, TopKSearcher] = field(default_factory=dict)
    kept_ids: np.ndarray | None = None
    #: "seen in pretraining" block of metrics.json (None: the features do not record it)
    pretraining: dict[str, Any] | None = None
    pretraining_wnids: frozenset[str] | None = None

    def feature_dirs(self) -> list[FeatureDir]:
        return [d for d in (self.fd, self.seen_fd, self.val_fd, self.val_seen_fd) if d is not None]

    @property
    def space_wnids(self) -> list[str]:
        """The ZSL label space (the ``unseen`` search space)."""
        return self.space.wnids

    @property
    def eval_wnids(self) -> list[str]:
        """What test labels index: the label space, then the count-as-miss classes."""
        return self.space.eval_wnids


def _check_ks(cfg: EvaluationConfig) -> list[int]:
    ks = sorted({int(k) for k in cfg.ks})
    if not ks or ks[0] < 1:
        raise UserInputError(f"--k values must be positive integers, got {list(cfg.ks)}")
    if cfg.gzsl and ks[0] != 1:
        raise UserInputError(
            f"--k {' '.join(map(str, ks))}: --gzsl reports H and calibrates γ at hit@1; add 1 to --k"
        )
    if int(cfg.block_rows) < 1:
        raise UserInputError(f"--block-rows {cfg.block_rows}: must be a positive number of images")
    return ks


def _check_seen(inp: EvaluationInputs) -> None:
    cfg = inp.cfg
    if not cfg.gzsl:
        if cfg.seen_features is not None:
            raise UserInputError("--seen-features is only used with --gzsl; add --gzsl")
        return
    if cfg.seen_features is None:
        raise UserInputError(
            "--gzsl needs --seen-features DIR: held-out images of the seen (training) "
            "classes, e.g. ILSVRC-2012 validation features"
        )
    inp.seen_fd = FeatureDir(cfg.seen_features)
    inp.seen_wnids = (
        _read_classes(cfg.seen_classes, "seen-class list")
        if cfg.seen_classes
        else present_classes(inp.seen_fd)
    )
    overlap = sorted(set(inp.seen_wnids) & set(inp.split_wnids))
    if overlap:
        raise UserInputError(
            f"{len(overlap)} classes are both seen and in the test split: "
            f"{preview(overlap)}; a zero-shot test class cannot be seen"
        )
    inp.seen_lookup = class_lookup(inp.seen_fd, inp.seen_wnids, "seen classes")


def _check_validation(inp: EvaluationInputs) -> None:
    cfg = inp.cfg
    if cfg.val_split is None:
        if cfg.val_features or cfg.val_seen_features:
            raise UserInputError("--val-features/--val-seen-features need --val-split")
        return
    if not cfg.gzsl:
        raise UserInputError("--val-split chooses the GZSL calibration γ: add --gzsl")
    inp.val_wnids = _read_classes(cfg.val_split, "validation split")
    clash = sorted(set(inp.val_wnids) & (set(inp.split_wnids) | set(inp.seen_wnids)))
    if clash:
        raise UserInputError(
            f"{cfg.val_split}: {len(clash)} validation classes are test or seen classes: {preview(clash)}"
        )
    inp.val_fd = FeatureDir(cfg.val_features or cfg.features)
    inp.val_lookup = class_lookup(inp.val_fd, inp.val_wnids, f"validation split {Path(cfg.val_split).name}")
    if cfg.val_seen_features is not None:
        inp.val_seen_fd = FeatureDir(cfg.val_seen_features)
        inp.val_seen_lookup = class_lookup(inp.val_seen_fd, inp.seen_wnids, "seen classes (validation)")
    elif not 0 < cfg.val_seen_fraction < 1:
        raise UserInputError("--val-seen-fraction must be between 0 and 1")


def _query_source(inp: EvaluationInputs) -> QuerySource:
    cfg = inp.cfg
    if cfg.prototypes is None:
        return ModelDirectory(cfg.model, l2=cfg.l2_normalize)
    source = PrototypeFile(cfg.prototypes, l2=cfg.l2_normalize)
    for feature_dir in inp.feature_dirs():
        source.check_dim(feature_dir.dim, str(feature_dir.path))
    return source


def _drop_unrepresentable_seen(inp: EvaluationInputs) -> None:
    """Seen classes the source cannot represent leave the GZSL label space (see
    :func:`representable_classes`); their lookups are rebuilt."""
    inp.seen_wnids, inp.excluded_seen = representable_classes(inp.source, inp.seen_wnids)
    if not inp.excluded_seen:
        return
    log.warning(
        "%d seen classes have no prototype (e.g. no word vector) and are left out "
        "of the GZSL label space with their images: %s",
        len(inp.excluded_seen),
        preview(inp.excluded_seen),
    )
    inp.seen_lookup = class_lookup(inp.seen_fd, inp.seen_wnids, "seen classes")
    if inp.val_seen_fd is not None:
        inp.val_seen_lookup = class_lookup(inp.val_seen_fd, inp.seen_wnids, "seen classes (validation)")


def _label_spaces(inp: EvaluationInputs) -> dict[str, TopKSearcher]:
    """One searcher per label space; all prototypes (and a model's queries) share one dim."""
    cfg = inp.cfg
    wnids = {"unseen": inp.space_wnids, "seen": inp.seen_wnids, "val_unseen": inp.val_wnids}
    spaces = {
        space: TopKSearcher(inp.source.prototypes(classes), inp.m, use_gpu=cfg.use_gpu)
        for space, classes in wnids.items()
        if classes is not None
    }
    dims = {sp.dim for sp in spaces.values()}
    if len(dims) != 1:
        raise UserInputError(f"class prototypes have differing dimensions {sorted(dims)}")
    if isinstance(inp.source, ModelDirectory):
        for feature_dir in inp.feature_dirs():
            features, logits = feature_dir.first_row()
            qdim = inp.source.probe(features, logits, str(feature_dir.path))
            if qdim not in dims:
                raise UserInputError(
                    f"{cfg.model}: query vectors are {qdim}-d but prototypes are {dims.pop()}-d"
                )
    return spaces


def check_inputs(cfg: EvaluationConfig, graph: ClassGraph | None | str = None) -> EvaluationInputs:
    """Every cheap check of a run, in order, before any search (see :class:`EvaluationInputs`)."""
    ks = _check_ks(cfg)
    if (cfg.model is None) == (cfg.prototypes is None):
        raise UserInputError("give exactly one of --model MODEL_DIR or --prototypes FILE")
    check_label_space_spec(str(cfg.label_space), "--label-space")
    check_out_dir(cfg.out, TOOL, _input_paths(cfg))
    split_wnids = _read_classes(cfg.split, "split")
    miss = _check_count_as_miss(cfg, split_wnids)
    fd = FeatureDir(cfg.features)
    inp = EvaluationInputs(cfg=cfg, ks=ks, m=ks[-1] + 1, split_wnids=split_wnids, fd=fd, source=None)  # type: ignore[arg-type] - set below
    _check_seen(inp)
    _check_validation(inp)
    inp.source = _query_source(inp)
    inp.feature_checks = check_feature_identities(inp)
    inp.graph = resolve_graph(graph if graph is not None else cfg.graph)
    if cfg.kept_images is not None:
        inp.kept_ids = np.asarray(sorted(kept_image_ids(cfg.kept_images)), dtype=np.str_)
    inp.space = resolve_space(inp, miss)
    inp.test_lookup = test_lookup(fd, inp.space_wnids, inp.space.scored)
    inp.class_counts_all = class_image_counts(fd, split_wnids, inp.kept_ids)
    inp.miss_counts = class_image_counts(fd, miss, inp.kept_ids)
    _check_test_images(inp)
    if cfg.gzsl:
        _drop_unrepresentable_seen(inp)
    inp.spaces = _label_spaces(inp)
    inp.pretraining, inp.pretraining_wnids = pretraining_overlap(fd, split_wnids)
    return inp


# ----------------------------------------------------------------------------- the search


@dataclass
class SearchResults:
    """The top-k lists of every image set of a run (``None``: the set is not used)."""

    test: SetResult
    seen: SetResult | None = None
    val: SetResult | None = None
    val_seen: SetResult | None = None
    #: the test images of the count-as-miss classes (never searched): labels ``len(space) + j``,
    #: empty lists, true class outside every list (``above = m``); None without such images
    misses: SetResult | None = None

    def scored_test(self) -> SetResult:
        """The test images every metric counts: the searched ones, then the misses."""
        if self.misses is None:
            return self.test
        parts = (self.test, self.misses)
        return SetResult(
            np.concatenate([p.labels for p in parts]),
            np.concatenate([p.rows for p in parts]),
            {
                space: tuple(np.concatenate([p.lists[space][i] for p in parts]) for i in (0, 1))
                for space in self.test.lists
            },
            M.TieRanks(
                np.concatenate([p.ranks.above for p in parts]), np.concatenate([p.ranks.tied for p in parts])
            ),
        )

    def sets(self) -> list[tuple[str, SetResult | None]]:
        return [("test", self.test), ("seen", self.seen), ("val", self.val), ("val_seen", self.val_seen)]


def miss_set(inp: EvaluationInputs, like: SetResult) -> SetResult | None:
    """The count-as-miss images as a :class:`SetResult` shaped like ``like`` (the searched test
    set): ids -1 and scores -inf in every space, ``above = m`` (outside the list: a miss at every
    K under both tie rules and at every calibration γ), rows -1 (never read)."""
    counts = inp.miss_counts
    if counts is None or int(counts.sum()) == 0:
        return None
    labels = np.repeat(len(inp.space_wnids) + np.arange(len(counts), dtype=np.int64), counts)
    n = len(labels)
    lists = {
        space: (np.full((n, ids.shape[1]), -np.inf, np.float32), np.full((n, ids.shape[1]), -1, ids.dtype))
        for space, (_, ids) in like.lists.items()
    }
    ranks = M.TieRanks(np.full(n, inp.m, np.int64), np.zeros(n, np.int64))
    return SetResult(labels, np.full(n, -1, np.int64), lists, ranks)


def run_search(inp: EvaluationInputs, context: SearchContext) -> SearchResults:
    """Search every image set of the run in its label spaces (resumable through the cache)."""
    cfg, spaces = inp.cfg, inp.spaces
    test_spaces = {s: spaces[s] for s in ("unseen", "seen") if s in spaces}
    test = search_set("test", inp.fd, inp.test_lookup, test_spaces, context, kept_ids=inp.kept_ids)
    results = SearchResults(test, misses=miss_set(inp, test))
    if not cfg.gzsl:
        return results
    seen_spaces = dict(test_spaces)
    if inp.val_wnids is not None and inp.val_seen_fd is None:
        seen_spaces["val_unseen"] = spaces["val_unseen"]
    results.seen = search_set("seen", inp.seen_fd, inp.seen_lookup, seen_spaces, context)
    if inp.val_wnids is None:
        return results
    val_spaces = {"seen": spaces["seen"], "val_unseen": spaces["val_unseen"]}
    results.val = search_set("val", inp.val_fd, inp.val_lookup, val_spaces, context)
    if inp.val_seen_fd is not None:
        results.val_seen = search_set("val_seen", inp.val_seen_fd, inp.val_seen_lookup, val_spaces, context)
        return results
    rng = np.random.default_rng(cfg.seed)
    held = rng.random(inp.seen_fd.num_rows) < cfg.val_seen_fraction
    results.val_seen = results.seen.take(held[results.seen.rows])
    results.seen = results.seen.take(~held[results.seen.rows])
    if len(results.seen.labels) == 0 or len(results.val_seen.labels) == 0:
        raise UserInputError(
            "--val-seen-fraction leaves no seen images for test or "
            "validation; change it or pass --val-seen-features"
        )
    return results


# ----------------------------------------------------------------------------- metrics


@dataclass
class EvaluationRun:
    """Everything a finished run writes: metrics, the per-class table, the top-k lists and what
    the plots draw (Seen-Unseen curves with their direct/calibrated points, error breakdown)."""

    inputs: EvaluationInputs
    results: SearchResults
    metrics: dict[str, Any]
    table: Any = None  # pandas.DataFrame
    curves: dict[str, M.SeenUnseenCurve] = field(default_factory=dict)
    direct_points: dict[str, tuple[float, float]] = field(default_factory=dict)
    calibrated_points: dict[str, tuple[float, float]] = field(default_factory=dict)
    breakdown: Any = None  # ErrorBreakdown
    #: ZSL (test classes) and GZSL (test + seen classes) per-class image counts and hit@K rates
    #: (expected tie rule; the strict twins under the same keys in ``*_strict``)
    class_counts: np.ndarray | None = None
    class_hits: dict[int, np.ndarray] = field(default_factory=dict)
    class_hits_strict: dict[int, np.ndarray] = field(default_factory=dict)
    gzsl_counts: np.ndarray | None = None
    gzsl_class_hits: dict[int, np.ndarray] | None = None


def _suffix(tie_rule: str) -> str:
    return "" if tie_rule == "expected" else "_strict"


def label_space_block(inp: EvaluationInputs, counts: np.ndarray) -> dict[str, Any]:
    """metrics.json's ``label_space``: the spec, both counts and what left the space.

    ``counts``: (len(eval_wnids),) test images per class (label space, then count-as-miss)."""
    space = inp.space
    n_space = len(space.wnids)
    spec = str(space.spec)
    block: dict[str, Any] = {
        "spec": spec,
        "classes_in_label_space": n_space,
        "classes_with_test_images": int(np.count_nonzero(counts)),
        "split_classes": len(space.split),
        "split_classes_without_test_images": int(np.count_nonzero(inp.class_counts_all == 0)),
        "distractors_without_test_images": int(np.count_nonzero(counts[:n_space] == 0)),
        "seen_classes_left_out": {"source": space.seen_source, "classes": space.seen_count},
        "without_prototype": {"classes": len(space.without_prototype), "wnids": space.without_prototype},
    }
    if spec not in ("split", "all"):
        block["file"] = {"path": spec, "sha256": sha256_file(spec)}
    return block


def count_as_miss_block(inp: EvaluationInputs) -> dict[str, Any]:
    """metrics.json's ``count_as_miss``: the classes and how many test images each adds as misses."""
    counts = inp.miss_counts if inp.miss_counts is not None else np.zeros(0, np.int64)
    return {
        "classes": list(inp.space.miss),
        "images": int(counts.sum()),
        "classes_with_test_images": int(np.count_nonzero(counts)),
        "images_per_class": {w: int(c) for w, c in zip(inp.space.miss, counts, strict=True)},
    }


def zsl_metrics(run: EvaluationRun) -> None:
    """ZSL hit@K (flat and per class, both tie rules) of the test images among the label space;
    count-as-miss images are in every denominator with no credit."""
    inp, test = run.inputs, run.results.scored_test()
    n_eval = len(inp.eval_wnids)
    ranks = test.ranks
    counts = np.bincount(test.labels, minlength=n_eval)
    run.metrics["label_space"] = label_space_block(inp, counts)
    run.metrics["count_as_miss"] = count_as_miss_block(inp)
    zsl: dict[str, Any] = {
        "images": int(len(test.labels)),
        "classes": int(np.count_nonzero(counts)),
        "classes_in_label_space": len(inp.space_wnids),
        "classes_with_test_images": int(np.count_nonzero(counts)),
        "label_space": str(inp.space.spec),
        "miss_images": run.metrics["count_as_miss"]["images"],
    }
    for rule in M.TIE_RULES:
        zsl[f"flat{_suffix(rule)}"] = M.hit_at_k(ranks, test.labels, inp.ks, tie_rule=rule)
        zsl[f"per_class{_suffix(rule)}"] = M.hit_at_k(
            ranks, test.labels, inp.ks, num_classes=n_eval, per_class=True, tie_rule=rule
        )
    zsl["tied_images"] = int(np.count_nonzero(ranks.tied))
    zsl["duplicate_prototypes"] = int(inp.spaces["unseen"].duplicate_classes)
    run.metrics["zsl"] = zsl
    run.class_counts = counts
    per_class = {"num_classes": n_eval, "per_class": True, "average": False}
    run.class_hits = M.hit_at_k(ranks, test.labels, inp.ks, **per_class)
    run.class_hits_strict = M.hit_at_k(ranks, test.labels, inp.ks, tie_rule="strict", **per_class)
    searched = run.results.test
    if inp.graph is not None and len(searched.labels):
        # over the searched images only: a count-as-miss image has no prediction to classify
        scores, ids = searched.lists["unseen"]
        run.breakdown = expected_error_breakdown(
            inp.graph, inp.space_wnids, searched.labels, ids, scores, searched.ranks
        )
        run.metrics["hierarchy"] = {"graph": inp.graph.source, **run.breakdown.to_dict()}


def _calibration(inp: EvaluationInputs, results: SearchResults, gz: M.GZSLTopK) -> dict[str, Any]:
    """γ chosen on the validation images (never the test images) and the test figures at γ."""
    gz_val = build_gzsl(results.val, results.val_seen, len(inp.val_wnids), len(inp.seen_wnids), "val_unseen")
    gamma, val_h = M.choose_gamma(gz_val, k=1, per_class=True)
    calibrated = M.gzsl_metrics(gz, inp.ks, gamma)["calibrated"]
    return {
        "gamma": gamma,
        "k": 1,
        "criterion": "per-class H@1 on validation (expected tie rule)",
        "validation_split": str(inp.cfg.val_split),
        "validation_H": val_h,
        "validation_images": {
            "unseen": int(len(results.val.labels)),
            "seen": int(len(results.val_seen.labels)),
        },
        "test": {key: calibrated[key] for key in ("per_class", "flat", "per_class_strict", "flat_strict")},
    }


def _gzsl_breakdown(inp: EvaluationInputs, gz: M.GZSLTopK, gamma: float) -> dict[str, Any]:
    """Hierarchy-aware error breakdown of the GZSL top-1 (joint space: label space, count-as-miss
    classes, then seen classes) at calibration ``gamma``, under the expected tie rule (a top-1 tie
    group shares its image); ``gz`` holds the searched images only."""
    joint = list(inp.eval_wnids) + list(inp.seen_wnids)
    parts = gzsl_error_breakdowns(inp.graph, joint, gz, gamma)  # streamed in blocks of images
    return {"gamma": float(gamma), **{name: breakdown.to_dict() for name, breakdown in parts.items()}}


def gzsl_metrics(run: EvaluationRun) -> None:
    """GZSL over test ∪ seen classes: direct stacking, AUSUC, the calibrated γ (with a validation
    split), the curves to plot, per-class GZSL hit@K at γ = 0 and the hierarchy breakdown."""
    inp, results = run.inputs, run.results
    n_test, n_seen = len(inp.eval_wnids), len(inp.seen_wnids)
    scored = results.scored_test()
    gz = build_gzsl(scored, results.seen, n_test, n_seen, "unseen")
    gzsl = M.gzsl_metrics(gz, inp.ks)
    gzsl["images"] = {"unseen": int(len(scored.labels)), "seen": int(len(results.seen.labels))}
    gzsl["classes"] = {
        "unseen": len(inp.space_wnids),
        "unseen_with_test_images": int(np.count_nonzero(np.bincount(scored.labels, minlength=n_test))),
        "seen": n_seen,
    }
    gzsl["seen_classes_without_prototypes"] = inp.excluded_seen
    if results.val is not None:
        gzsl["calibration"] = _calibration(inp, results, gz)
    if inp.graph is not None and len(results.test.labels):
        searched = gz
        if results.misses is not None:
            searched = build_gzsl(results.test, results.seen, n_test, n_seen, "unseen")
        gzsl["hierarchy"] = {"graph": inp.graph.source, "direct": _gzsl_breakdown(inp, searched, 0.0)}
        if "calibration" in gzsl:
            gamma = gzsl["calibration"]["gamma"]
            gzsl["hierarchy"]["calibrated"] = _gzsl_breakdown(inp, searched, gamma)
    run.metrics["gzsl"] = gzsl
    for k in inp.ks:
        if k in (1, inp.ks[-1]):
            curve = M.seen_unseen_curve(gz, k, per_class=True)
            run.curves[f"hit@{k}"] = curve
            run.direct_points[f"hit@{k}"] = curve.at(0.0)
            if "calibration" in gzsl:
                run.calibrated_points[f"hit@{k}"] = curve.at(gzsl["calibration"]["gamma"])
    run.gzsl_counts = np.bincount(gz.labels, minlength=n_test + n_seen)
    run.gzsl_class_hits = {k: M.gzsl_class_rates(gz, k, 0.0) for k in inp.ks}


# ----------------------------------------------------------------------------- class table


def _spearman(table: Any, ks: list[int]) -> dict[str, dict[str, Any]]:
    """Spearman ρ between unseen classes' hit@1 (or the smallest K) and each class property."""
    spearman = {}
    unseen_rows = table[table["role"] == "unseen"]
    for prop in ("structural_ratio", "population", "label_frequency", "depth"):
        pair = unseen_rows[["hit@1" if 1 in ks else f"hit@{ks[0]}", prop]]
        pair = pair.replace([np.inf, -np.inf], np.nan).dropna()
        if len(pair) >= 3 and pair[prop].nunique() > 1 and pair.iloc[:, 0].nunique() > 1:
            rho = pair.iloc[:, 0].rank().corr(pair[prop].rank())
            spearman[prop] = {"rho": float(rho), "classes": int(len(pair))}
    return spearman


def class_table(run: EvaluationRun) -> None:
    """The per-class table (test classes, then seen classes with --gzsl) with class properties,
    and the Spearman correlations of hit@1 with each property."""
    import pandas as pd  # heavy: imported when a table is built

    inp = run.inputs
    cfg, ks = inp.cfg, inp.ks
    # rows: the classes with test images (label space, then count-as-miss), then the seen classes
    present = np.flatnonzero(run.class_counts > 0)
    eval_wnids = inp.eval_wnids
    n_test, n_seen = len(present), (len(inp.seen_wnids) if cfg.gzsl else 0)
    all_wnids = [eval_wnids[i] for i in present] + (list(inp.seen_wnids) if cfg.gzsl else [])
    train_wnids = inp.seen_wnids
    if train_wnids is None and inp.graph is not None:
        candidates = training_wnids()
        train_wnids = candidates if all(w in inp.graph for w in candidates) else None
    props = class_properties(
        all_wnids, inp.graph, train_wnids, label_frequency=cfg.label_frequency, test_wnids=inp.split_wnids
    )
    table = pd.DataFrame({"wnid": all_wnids, "role": ["unseen"] * n_test + ["seen"] * n_seen})
    seen_rows = len(eval_wnids) + np.arange(n_seen)
    table["images"] = np.r_[run.class_counts[present], run.gzsl_counts[seen_rows] if cfg.gzsl else []]
    if len(inp.space.miss):
        table["count_as_miss"] = [i >= len(inp.space_wnids) for i in present] + [False] * n_seen
    for k in ks:
        table[f"hit@{k}"] = np.r_[run.class_hits[k][present], np.full(n_seen, np.nan)]
    for k in ks:
        table[f"hit@{k}_strict"] = np.r_[run.class_hits_strict[k][present], np.full(n_seen, np.nan)]
    if inp.pretraining_wnids is not None:
        table["seen_in_pretraining"] = [w in inp.pretraining_wnids for w in all_wnids]
    if run.gzsl_class_hits is not None:
        for k in ks:
            table[f"gzsl_hit@{k}"] = run.gzsl_class_hits[k][np.r_[present, seen_rows]]
    run.table = table.merge(props, on="wnid", how="left", sort=False)
    run.metrics["class_properties"] = {
        "columns": [c for c in props.columns if c != "wnid"],
        "spearman_hit1": _spearman(run.table, ks),
    }


# ----------------------------------------------------------------------------- provenance


def provenance(run: EvaluationRun) -> None:
    """Inputs (paths, sha256, sizes), the query source, parameters and software of the run."""
    inp = run.inputs
    cfg = inp.cfg
    inputs: dict[str, Any] = {
        "split": {
            "path": str(cfg.split),
            "name": Path(cfg.split).stem,
            "sha256": sha256_file(cfg.split),
            "classes": len(inp.split_wnids),
        },
        "features": _feature_info(inp.fd),
    }
    if cfg.gzsl:
        inputs["seen_features"] = _feature_info(inp.seen_fd)
        inputs["seen_classes"] = (
            {"path": str(cfg.seen_classes), "sha256": sha256_file(cfg.seen_classes)}
            if cfg.seen_classes
            else "classes present in --seen-features"
        )
    if inp.val_wnids is not None:
        inputs["val_split"] = {
            "path": str(cfg.val_split),
            "sha256": sha256_file(cfg.val_split),
            "classes": len(inp.val_wnids),
        }
        inputs["val_features"] = _feature_info(inp.val_fd)
        inputs["val_seen"] = (
            _feature_info(inp.val_seen_fd)
            if inp.val_seen_fd is not None
            else {"held_out_from": "seen_features", "fraction": cfg.val_seen_fraction, "seed": cfg.seed}
        )
    run.metrics["inputs"] = inputs
    run.metrics["model"] = inp.source.describe()
    run.metrics["provenance"] = provenance_block(inp)
    if inp.pretraining is not None:
        run.metrics["pretraining"] = inp.pretraining
    run.metrics["parameters"] = {
        "ks": inp.ks,
        "kept_per_image": inp.m,
        "l2_normalize": cfg.l2_normalize,
        "gzsl": cfg.gzsl,
        "tie_rule": {"headline": "expected", **M.TIE_RULE_TEXT},
        "graph": None if inp.graph is None else inp.graph.source,
        "kept_images": None
        if cfg.kept_images is None
        else {"filter_dir": str(cfg.kept_images), "n_kept_ids": int(len(inp.kept_ids))},
        "label_space": str(cfg.label_space),
        "allow_feature_mismatch": bool(cfg.allow_feature_mismatch),
    }
    run.metrics["software"] = software_versions()


def provenance_block(inp: EvaluationInputs) -> dict[str, Any]:
    """metrics.json's ``provenance``: the test features' identity, the model's training-feature
    identity, the class-vector source and the ``--allow-feature-mismatch`` overrides."""
    identity = inp.fd.identity
    model_identity = inp.source.feature_identity
    return {
        "features": {"backbone": describe_identity(identity), "identity": identity},
        "model_features": None
        if model_identity is None
        else {"backbone": describe_identity(model_identity), "identity": model_identity},
        "class_vectors": _class_vectors_label(inp.source.class_vectors),
        "class_vectors_record": inp.source.class_vectors,
        "feature_mismatch": list(inp.feature_checks),
    }


# ----------------------------------------------------------------------------- the run


def evaluate(cfg: EvaluationConfig, graph: ClassGraph | None | str = None, progress: bool = True) -> dict:
    """Run the whole evaluation and write ``cfg.out``; returns the metrics dict.

    ``graph`` overrides ``cfg.graph`` (a ClassGraph object, e.g. a hand-made one in tests).
    """
    inp = check_inputs(cfg, graph)
    out = Path(cfg.out)
    _warn_pretraining(inp)
    cache = SearchCache(out.parent / f".{out.name}.search-cache")
    results = run_search(inp, SearchContext(inp.source, cache, cfg.block_rows, progress))
    run = EvaluationRun(inp, results, metrics={})
    zsl_metrics(run)
    if cfg.gzsl:
        gzsl_metrics(run)
    class_table(run)
    provenance(run)
    run.metrics = _finite_or_none(_str_keys(run.metrics))
    with atomic_directory(out, tool=TOOL, inputs=_input_paths(cfg)) as tmp:
        write_run(tmp, run)
    shutil.rmtree(cache.root, ignore_errors=True)
    return run.metrics


def _input_paths(cfg: EvaluationConfig) -> list[Path | None]:
    """Every path the run reads: ``--out`` may neither contain nor lie inside one of them."""
    return [
        cfg.features,
        cfg.split,
        cfg.model,
        cfg.prototypes,
        cfg.seen_features,
        cfg.seen_classes,
        cfg.val_split,
        cfg.val_features,
        cfg.val_seen_features,
        cfg.kept_images,
        None if str(cfg.label_space) in ("split", "all") else Path(cfg.label_space),
    ]


def pretraining_overlap(fd: FeatureDir, test_wnids: Sequence[str]) -> tuple[dict | None, frozenset | None]:
    """What the features' backbone saw in pretraining (``manifest["pretraining"]``, written by
    extraction) → (the metrics block, the wnid set or None when unknown)."""
    record = fd.manifest.get("pretraining")
    if not isinstance(record, dict):
        return None, None
    info = Pretraining(
        str(record.get("model", "")), tuple(record.get("label_sets") or ()), bool(record.get("web_data"))
    )
    try:
        wnids = info.wnids
    except UserInputError as err:  # a --pretraining-classes file that is gone
        log.warning("pretraining label set of %s cannot be read: %s", fd.path, err)
        wnids = None
    block: dict[str, Any] = {
        "note": record.get("note") or info.describe(),
        "label_sets": list(info.label_sets),
    }
    if wnids is None:
        block["test_classes_seen"] = "unknown (web data)" if info.web_data else "unknown"
        return block, None
    seen = sorted(set(test_wnids) & wnids)
    block["test_classes_seen"] = len(seen)
    if info.web_data:
        block["test_classes_seen_note"] = "a lower bound: web data came too"
    block["seen_wnids"] = seen
    return block, wnids


def _warn_pretraining(inp: EvaluationInputs) -> None:
    block = inp.pretraining
    if block is None:
        return
    count = block["test_classes_seen"]
    if isinstance(count, int) and count > 0:
        log.warning(
            "%d of %d test classes were labels of the backbone's pretraining (%s): results on them "
            "are not zero-shot",
            count,
            len(inp.split_wnids),
            block["note"],
        )
    elif not isinstance(count, int):
        log.warning("test classes seen in pretraining: %s (%s)", count, block["note"])


def _feature_info(fd: FeatureDir) -> dict:
    return {
        "path": str(fd.path),
        "manifest_sha256": sha256_file(fd.path / MANIFEST_NAME),
        "rows": fd.num_rows,
        "dim": fd.dim,
        "simulated": fd.simulated,
    }


def _save_set(topk_dir: Path, name: str, result: SetResult | None) -> None:
    if result is None:
        return
    atomic_save_npy(topk_dir / f"{name}.labels.npy", result.labels.astype(np.int32))
    atomic_save_npy(topk_dir / f"{name}.rows.npy", result.rows)
    atomic_save_npy(topk_dir / f"{name}.true_above.npy", result.ranks.above.astype(np.int32))
    atomic_save_npy(topk_dir / f"{name}.true_tied.npy", result.ranks.tied.astype(np.int32))
    for space, (scores, ids) in result.lists.items():
        atomic_save_npy(topk_dir / f"{name}.{space}.scores.npy", np.asarray(scores, dtype=np.float32))
        atomic_save_npy(topk_dir / f"{name}.{space}.ids.npy", np.asarray(ids, dtype=np.int32))


def _write_plots(tmp: Path, run: EvaluationRun) -> None:
    metrics = run.metrics
    title = f"{metrics['model']['name']} on {metrics['inputs']['split']['name']}"
    plots.plot_hit_curve(metrics["zsl"], tmp / "hit_at_k.png", title)
    if run.curves:
        plots.plot_suc(run.curves, tmp / "suc_curve.png", run.direct_points, run.calibrated_points, title)
    if run.breakdown is not None:
        plots.plot_error_breakdown(metrics["hierarchy"], tmp / "error_breakdown.png")


def write_run(tmp: Path, run: EvaluationRun) -> None:
    """Write the run directory's files into ``tmp`` (top-k lists, metrics, table, report, plots,
    then the manifest listing them)."""
    inp, metrics, cfg = run.inputs, run.metrics, run.inputs.cfg
    topk_dir = tmp / "topk"
    topk_dir.mkdir()
    atomic_write_json(
        topk_dir / "classes.json",
        {
            "unseen": list(inp.space_wnids),
            "seen": list(inp.seen_wnids or []),
            "val_unseen": list(inp.val_wnids or []),
            "count_as_miss": run.metrics["count_as_miss"]["images_per_class"],
            "about": "unseen: the label space; count_as_miss: classes outside it whose test images "
            "(not listed here) count as misses in metrics.json; "
            "X.labels.npy index the set's own classes (test/val: unseen or val_unseen; "
            "seen/val_seen: seen); X.SPACE.ids.npy index SPACE's list; X.rows.npy are row "
            "numbers in the set's feature directory (shard order); -1/-inf pad short lists; "
            "X.true_above.npy / X.true_tied.npy: classes of the set's own space scoring strictly "
            "above / exactly equal to the true class (over all classes, identical prototypes tied)",
        },
    )
    for name, result in run.results.sets():
        _save_set(topk_dir, name, result)
    atomic_write_json(tmp / METRICS_NAME, metrics)
    atomic_write_text(tmp / "per_class.csv", run.table.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(tmp / "report.md", render_run_report(metrics))
    if cfg.plots:
        _write_plots(tmp, run)
    outputs = [file_record(p, tmp) for p in sorted(tmp.rglob("*")) if p.is_file()]
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
    config["ks"] = list(config["ks"])
    atomic_write_json(
        tmp / MANIFEST_NAME,
        {
            "format": "imagenet-zsl/evaluation-v1",
            "tool": "imagenet-zsl evaluate",
            "command": command_line(),
            "config": config,
            "inputs": metrics["inputs"],
            "model": metrics["model"],
            "feature_mismatch": metrics["provenance"]["feature_mismatch"],
            "outputs": outputs,
            "versions": software_versions(),
        },
    )
