"""``imagenet-zsl evaluate``: search once, keep the top-k lists, compute every metric, write a run.

Flow: every input is checked first (split, feature manifests, class coverage, dimensions, seen
classes), then each image set is streamed shard by shard through the query source and searched
against each label space with faiss, then metrics, tables and plots are written into the output
directory in one atomic rename.

Image sets and label spaces (``m = max(K) + 1`` classes kept per image and space):

* ``test``     — images of the split's classes from ``--features``: searched among the test
  classes (``unseen`` space; the ZSL result) and, with ``--gzsl``, among the seen classes.
* ``seen``     — held-out images of seen classes (``--seen-features``, e.g. ILSVRC-2012 val):
  searched among seen and test classes.
* ``val`` / ``val_seen`` — with ``--val-split``: images of validation classes and held-out seen
  images, used only to choose the calibration γ (never the test images). Without
  ``--val-seen-features`` a seeded ``--val-seen-fraction`` of the seen images is held out for
  validation and removed from the seen test images.

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl import scoring as M
from imagenet_zsl.evaluation.hierarchy_errors import error_breakdown
from imagenet_zsl.evaluation.queries import ModelDirectory, PrototypeFile, QuerySource
from imagenet_zsl.evaluation.search import DEFAULT_BLOCK_ROWS, TopKSearcher
from imagenet_zsl.features.shards import FeatureDir
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_directory,
    atomic_save_npy,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    command_line,
    file_record,
    sha256_file,
    software_versions,
)
from imagenet_zsl.splits.io import read_wnid_list

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

log = logging.getLogger(__name__)

TIE_RULE = ("ties count against the model: the true class's rank is the number of other classes "
            "scoring greater than or equal to it; hit@K iff rank < K")
CACHE_VERSION = 1


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


# ----------------------------------------------------------------------------- input checks


def read_class_list(path: str | Path, what: str = "split") -> list[str]:
    """A wnid list (see ``splits.io.read_wnid_list``) that must not be empty."""
    wnids = read_wnid_list(path)
    if not wnids:
        raise UserInputError(f"{path}: the {what} is empty; it needs one class wnid per line")
    return wnids


def class_lookup(fd: FeatureDir, wnids: Sequence[str], where: str) -> np.ndarray:
    """(len(fd.classes),) int64 mapping each feature label to its index in ``wnids`` (-1: skip).

    Errors if a class of ``wnids`` is not in the feature directory or has no image there, or if
    a shard's labels fall outside the directory's label space.
    """
    position = {w: i for i, w in enumerate(fd.classes)}
    absent = [w for w in wnids if w not in position]
    if absent:
        raise UserInputError(
            f"{fd.path}: {len(absent)} classes of the {where} have no features here: "
            f"{preview(absent)}; extract them or drop them from the {where}"
        )
    labels = fd.labels()
    if len(labels) and (labels.min() < 0 or labels.max() >= len(fd.classes)):
        raise UserInputError(
            f"{fd.path}: labels outside the directory's {len(fd.classes)} classes "
            f"(min {labels.min()}, max {labels.max()}); the shards and manifest disagree"
        )
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


def representable_classes(source: QuerySource, wnids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split seen classes into those the model/prototype file can represent and those it cannot.

    The GZSL label space is defined by the training set, but a semantic model cannot score a seen
    class that has no word vector (it was also left out of its training). Such classes leave the
    seen label space with their images, and the run reports them; the zero-shot split itself is
    never changed (a test class without a prototype is an error).
    """
    try:
        source.prototypes(wnids)
        return list(wnids), []
    except UserInputError:
        pass
    kept, excluded = [], []
    for wnid in wnids:
        try:
            source.prototypes([wnid])
            kept.append(wnid)
        except UserInputError:
            excluded.append(wnid)
    if not kept:
        raise UserInputError("no seen class has a prototype; check the model's class semantics")
    return kept, excluded


def present_classes(fd: FeatureDir) -> list[str]:
    """Classes of a feature directory that have at least one image (label-space order)."""
    counts = np.bincount(fd.labels(), minlength=len(fd.classes))
    return [w for w, c in zip(fd.classes, counts, strict=True) if c > 0]


def load_graph(spec: str | ClassGraph | None) -> ClassGraph | None:
    from imagenet_zsl.hierarchy.graph import ClassGraph

    if spec is None or isinstance(spec, ClassGraph):
        return spec
    if spec == "none":
        return None
    if spec == "auto":
        try:
            return load_graph("wordnet")
        except UserInputError as err:
            log.warning("no hierarchy breakdown: %s (or pass --graph FILE)", err)
            return None
    if spec in ("wordnet", "imagenet"):
        from imagenet_zsl.hierarchy.universe import load_class_graph

        return load_class_graph(spec)
    path = Path(spec)
    if not path.is_file():
        raise UserInputError(f"--graph {spec}: use wordnet, imagenet, none, or a parent<TAB>child "
                             "edge file")
    edges = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise UserInputError(f"{path}:{line_no}: expected 'parent<TAB>child'")
        edges.append((parts[0].strip(), parts[1].strip()))
    return ClassGraph.from_edges(edges, source=path.name)


# ----------------------------------------------------------------------------- search


@dataclass
class SetResult:
    """Search results of one image set: labels index its class list; ``lists[space]`` =
    (scores (n, m) float32, ids (n, m) int64 into that space's class list)."""

    labels: np.ndarray
    rows: np.ndarray
    lists: dict[str, tuple[np.ndarray, np.ndarray]]

    def take(self, keep: np.ndarray) -> SetResult:
        return SetResult(self.labels[keep], self.rows[keep],
                         {s: (a[keep], b[keep]) for s, (a, b) in self.lists.items()})


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


def search_set(
    name: str,
    fd: FeatureDir,
    lookup: np.ndarray,
    source: QuerySource,
    spaces: dict[str, TopKSearcher],
    cache: SearchCache,
    block_rows: int,
    progress: bool = True,
    kept_ids: np.ndarray | None = None,
) -> SetResult:
    """Stream a feature directory's rows of the wanted classes through ``source`` and search
    each label space; memory is bounded by one shard (plus the kept top-k lists)."""
    from tqdm import tqdm

    use_logits = source.uses_logits and fd.has_logits
    space_key = {s: hashlib.sha256(sp.prototypes.tobytes()).hexdigest() for s, sp in
                 spaces.items()}
    labels_out, rows_out = [], []
    lists_out: dict[str, list] = {s: [] for s in spaces}
    offset = 0
    bar = tqdm(total=fd.num_rows, desc=f"search {name}", unit="img", disable=not progress,
               leave=False)
    for shard in fd.shards:
        shard_name, shard_rows = shard["name"], int(shard["rows"])
        key = hashlib.sha256(json.dumps([
            CACHE_VERSION, source.digest, space_key, sorted(spaces), shard.get("sha256", {}),
            shard_rows, {s: sp.k for s, sp in spaces.items()}, int(lookup.sum()),
            hashlib.sha256(lookup.tobytes()).hexdigest(),
            None if kept_ids is None else hashlib.sha256(kept_ids.tobytes()).hexdigest(),
        ], sort_keys=True).encode()).hexdigest()
        cached = cache.get(name, shard_name, key)
        if cached is None:
            cached = _search_shard(fd, shard_name, lookup, source, spaces, block_rows, use_logits,
                                   kept_ids)
            cached["rows"] = cached["rows"] + offset
            cache.put(name, shard_name, key, cached)
        labels_out.append(cached["labels"])
        rows_out.append(cached["rows"])
        for s in spaces:
            lists_out[s].append((cached[f"{s}.scores"], cached[f"{s}.ids"]))
        offset += shard_rows
        bar.update(shard_rows)
    bar.close()
    m = {s: sp.k for s, sp in spaces.items()}
    lists = {
        s: (np.concatenate([a for a, _ in parts]) if parts else np.zeros((0, m[s]), np.float32),
            np.concatenate([b for _, b in parts]) if parts else np.zeros((0, m[s]), np.int64))
        for s, parts in lists_out.items()
    }
    return SetResult(np.concatenate(labels_out).astype(np.int64),
                     np.concatenate(rows_out).astype(np.int64), lists)


def _search_shard(fd, shard_name, lookup, source, spaces, block_rows, use_logits,
                  kept_ids=None) -> dict:
    labels = np.load(fd.path / f"{shard_name}.labels.npy", allow_pickle=False).astype(np.int64)
    target = lookup[labels]
    wanted = target >= 0
    if kept_ids is not None:
        ids = np.load(fd.path / f"{shard_name}.ids.npy", allow_pickle=False)
        wanted &= np.isin(ids, kept_ids)
    keep = np.flatnonzero(wanted)
    out = {"labels": target[keep], "rows": keep.astype(np.int64)}
    for s, sp in spaces.items():
        out[f"{s}.scores"] = np.empty((len(keep), sp.k), np.float32)
        out[f"{s}.ids"] = np.empty((len(keep), sp.k), np.int32)
    if len(keep) == 0:
        return out
    features_mm = np.load(fd.path / f"{shard_name}.features.npy", mmap_mode="r")
    logits_mm = (np.load(fd.path / f"{shard_name}.logits.npy", mmap_mode="r")
                 if use_logits else None)
    for start in range(0, len(keep), block_rows):
        rows = keep[start : start + block_rows]
        features = np.asarray(features_mm[rows], dtype=np.float32)
        logits = None if logits_mm is None else np.asarray(logits_mm[rows], dtype=np.float32)
        _check_rows(fd, shard_name, rows, features, "features")
        queries = source.encode(features, logits)
        _check_rows(fd, shard_name, rows, queries, "query vectors (model output)")
        for s, sp in spaces.items():
            scores, ids = sp.search(queries)
            out[f"{s}.scores"][start : start + len(rows)] = scores
            out[f"{s}.ids"][start : start + len(rows)] = ids
    return out


def _check_rows(fd: FeatureDir, shard: str, rows: np.ndarray, matrix: np.ndarray,
                what: str) -> None:
    finite = np.isfinite(matrix).all(axis=1)
    if finite.all():
        return
    ids = np.load(fd.path / f"{shard}.ids.npy", allow_pickle=False)
    bad = rows[~finite]
    raise UserInputError(
        f"{fd.path}: {what} of {len(bad)} images in shard {shard} contain NaN or Inf "
        f"(first: {ids[bad[0]]}); re-extract them or drop those images"
    )


# ----------------------------------------------------------------------------- GZSL assembly


def _offset(ids: np.ndarray, by: int) -> np.ndarray:
    """Shift class indices into the joint space, keeping -1 padding (and the int32 dtype)."""
    return np.where(ids >= 0, ids + ids.dtype.type(by), ids.dtype.type(-1))


def build_gzsl(unseen_part: SetResult, seen_part: SetResult, n_unseen: int, n_seen: int,
               unseen_space: str) -> M.GZSLTopK:
    """Joint label space = unseen classes then seen classes."""
    parts = []
    for part, label_offset in ((unseen_part, 0), (seen_part, n_unseen)):
        s_scores, s_ids = part.lists["seen"]
        u_scores, u_ids = part.lists[unseen_space]
        parts.append(M.GZSLTopK(s_scores, _offset(s_ids, n_unseen), u_scores, u_ids,
                                part.labels + label_offset,
                                np.r_[np.zeros(n_unseen, bool), np.ones(n_seen, bool)]))
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


def _predictions(ranks: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Top-1 prediction consistent with the tie rule: when the true class is listed first but
    tied (rank > 0), the prediction is the next class in the list."""
    pred = ids[:, 0].astype(np.int64)
    tied_first = (pred == labels) & (ranks > 0)
    pred[tied_first] = ids[tied_first, 1]
    return pred


def evaluate(cfg: EvaluationConfig, graph: ClassGraph | None | str = None,
             progress: bool = True) -> dict:
    """Run the whole evaluation and write ``cfg.out``; returns the metrics dict.

    ``graph`` overrides ``cfg.graph`` (a ClassGraph object, e.g. a hand-made one in tests).
    """
    ks = sorted({int(k) for k in cfg.ks})
    if not ks or ks[0] < 1:
        raise UserInputError(f"--k values must be positive integers, got {list(cfg.ks)}")
    m = ks[-1] + 1
    if (cfg.model is None) == (cfg.prototypes is None):
        raise UserInputError("give exactly one of --model MODEL_DIR or --prototypes FILE")

    # ---- cheap checks before any long work
    test_wnids = read_class_list(cfg.split, "split")
    fd = FeatureDir(cfg.features)
    test_lookup = class_lookup(fd, test_wnids, f"split {Path(cfg.split).name}")
    seen_fd = seen_wnids = seen_lookup = None
    if cfg.gzsl:
        if cfg.seen_features is None:
            raise UserInputError(
                "--gzsl needs --seen-features DIR: held-out images of the seen (training) "
                "classes, e.g. ILSVRC-2012 validation features"
            )
        seen_fd = FeatureDir(cfg.seen_features)
        seen_wnids = (read_class_list(cfg.seen_classes, "seen-class list") if cfg.seen_classes
                      else present_classes(seen_fd))
        overlap = sorted(set(seen_wnids) & set(test_wnids))
        if overlap:
            raise UserInputError(f"{len(overlap)} classes are both seen and in the test split: "
                                 f"{preview(overlap)}; a zero-shot test class cannot be seen")
        seen_lookup = class_lookup(seen_fd, seen_wnids, "seen classes")
    elif cfg.seen_features is not None:
        raise UserInputError("--seen-features is only used with --gzsl; add --gzsl")
    val_wnids = val_fd = val_lookup = val_seen_fd = val_seen_lookup = None
    if cfg.val_split is not None:
        if not cfg.gzsl:
            raise UserInputError("--val-split chooses the GZSL calibration γ: add --gzsl")
        val_wnids = read_class_list(cfg.val_split, "validation split")
        clash = sorted(set(val_wnids) & (set(test_wnids) | set(seen_wnids)))
        if clash:
            raise UserInputError(f"{cfg.val_split}: {len(clash)} validation classes are test or "
                                 f"seen classes: {preview(clash)}")
        val_fd = FeatureDir(cfg.val_features or cfg.features)
        val_lookup = class_lookup(val_fd, val_wnids, f"validation split {Path(cfg.val_split).name}")
        if cfg.val_seen_features is not None:
            val_seen_fd = FeatureDir(cfg.val_seen_features)
            val_seen_lookup = class_lookup(val_seen_fd, seen_wnids, "seen classes (validation)")
        elif not 0 < cfg.val_seen_fraction < 1:
            raise UserInputError("--val-seen-fraction must be between 0 and 1")
    elif cfg.val_features or cfg.val_seen_features:
        raise UserInputError("--val-features/--val-seen-features need --val-split")

    source: QuerySource
    if cfg.prototypes is not None:
        source = PrototypeFile(cfg.prototypes, l2=cfg.l2_normalize)
        for feature_dir in filter(None, (fd, seen_fd, val_fd, val_seen_fd)):
            source.check_dim(feature_dir.dim, str(feature_dir.path))
    else:
        source = ModelDirectory(cfg.model, l2=cfg.l2_normalize)
    graph_obj = load_graph(graph if graph is not None else cfg.graph)

    excluded_seen: list[str] = []
    if cfg.gzsl:
        seen_wnids, excluded_seen = representable_classes(source, seen_wnids)
        if excluded_seen:
            log.warning("%d seen classes have no prototype (e.g. no word vector) and are left out "
                        "of the GZSL label space with their images: %s", len(excluded_seen),
                        preview(excluded_seen))
            seen_lookup = class_lookup(seen_fd, seen_wnids, "seen classes")
            if val_seen_fd is not None:
                val_seen_lookup = class_lookup(val_seen_fd, seen_wnids, "seen classes (validation)")

    spaces = {"unseen": TopKSearcher(source.prototypes(test_wnids), m, use_gpu=cfg.use_gpu)}
    if cfg.gzsl:
        spaces["seen"] = TopKSearcher(source.prototypes(seen_wnids), m, use_gpu=cfg.use_gpu)
    if val_wnids is not None:
        spaces["val_unseen"] = TopKSearcher(source.prototypes(val_wnids), m, use_gpu=cfg.use_gpu)
    dims = {sp.dim for sp in spaces.values()}
    if len(dims) != 1:
        raise UserInputError(f"class prototypes have differing dimensions {sorted(dims)}")
    if isinstance(source, ModelDirectory):
        for feature_dir in filter(None, (fd, seen_fd, val_fd, val_seen_fd)):
            features, logits = _first_row(feature_dir)
            qdim = source.probe(features, logits, str(feature_dir.path))
            if qdim not in dims:
                raise UserInputError(f"{cfg.model}: query vectors are {qdim}-d but prototypes "
                                     f"are {dims.pop()}-d")

    # ---- search (resumable)
    out = Path(cfg.out)
    cache = SearchCache(out.parent / f".{out.name}.search-cache")
    search = {"progress": progress, "cache": cache, "block_rows": cfg.block_rows}
    test_spaces = {s: spaces[s] for s in ("unseen", "seen") if s in spaces}
    kept_ids = None
    if cfg.kept_images is not None:
        from imagenet_zsl.images.quality import kept_image_ids

        kept_ids = np.asarray(sorted(kept_image_ids(cfg.kept_images)), dtype=np.str_)
    test = search_set("test", fd, test_lookup, source, test_spaces, kept_ids=kept_ids, **search)
    if cfg.kept_images is not None and len(test.labels) == 0:
        raise UserInputError(f"{cfg.kept_images}: none of the split's images are among the kept "
                             "images; was the filter run on these features?")
    seen = val = val_seen = None
    if cfg.gzsl:
        seen_spaces = dict(test_spaces)
        if val_wnids is not None and val_seen_fd is None:
            seen_spaces["val_unseen"] = spaces["val_unseen"]
        seen = search_set("seen", seen_fd, seen_lookup, source, seen_spaces, **search)
        if val_wnids is not None:
            val_spaces = {"seen": spaces["seen"], "val_unseen": spaces["val_unseen"]}
            val = search_set("val", val_fd, val_lookup, source, val_spaces, **search)
            if val_seen_fd is not None:
                val_seen = search_set("val_seen", val_seen_fd, val_seen_lookup, source,
                                      val_spaces, **search)
            else:
                rng = np.random.default_rng(cfg.seed)
                held = rng.random(seen_fd.num_rows) < cfg.val_seen_fraction
                val_seen = seen.take(held[seen.rows])
                seen = seen.take(~held[seen.rows])
                if len(seen.labels) == 0 or len(val_seen.labels) == 0:
                    raise UserInputError("--val-seen-fraction leaves no seen images for test or "
                                         "validation; change it or pass --val-seen-features")

    # ---- metrics
    n_test = len(test_wnids)
    scores, ids = test.lists["unseen"]
    ranks = M.true_rank(ids, test.labels, scores)
    metrics: dict[str, Any] = {
        "zsl": {
            "images": int(len(test.labels)),
            "classes": n_test,
            "flat": M.hit_rates(ranks, ks),
            "per_class": M.per_class_rates(ranks, test.labels, ks, n_test),
        }
    }
    counts, class_hits = M.per_class_hits(ranks, test.labels, ks, n_test)
    curves, direct_points, calibrated_points = {}, {}, {}
    gzsl_class_hits = None
    if cfg.gzsl:
        n_seen = len(seen_wnids)
        gz = build_gzsl(test, seen, n_test, n_seen, "unseen")
        gzsl = M.gzsl_metrics(gz, ks)
        gzsl["images"] = {"unseen": int(len(test.labels)), "seen": int(len(seen.labels))}
        gzsl["classes"] = {"unseen": n_test, "seen": n_seen}
        gzsl["seen_classes_without_prototypes"] = excluded_seen
        if val is not None:
            gz_val = build_gzsl(val, val_seen, len(val_wnids), n_seen, "val_unseen")
            gamma, val_h = M.choose_gamma(gz_val, k=1, per_class=True)
            calibrated = M.gzsl_metrics(gz, ks, gamma)["calibrated"]
            gzsl["calibration"] = {
                "gamma": gamma, "k": 1, "criterion": "per-class H@1 on validation",
                "validation_split": str(cfg.val_split), "validation_H": val_h,
                "validation_images": {"unseen": int(len(val.labels)),
                                      "seen": int(len(val_seen.labels))},
                "test": {"per_class": calibrated["per_class"], "flat": calibrated["flat"]},
            }
        metrics["gzsl"] = gzsl
        for k in ks:
            if k in (1, ks[-1]):
                curve = M.seen_unseen_curve(gz, k, per_class=True)
                curves[f"hit@{k}"] = curve
                direct_points[f"hit@{k}"] = curve.at(0.0)
                if "calibration" in gzsl:
                    calibrated_points[f"hit@{k}"] = curve.at(gzsl["calibration"]["gamma"])
        joint_labels = gz.labels
        gzsl_class_hits = {}
        for k in ks:
            theta = M.gzsl_thresholds(gz, k)
            hit = np.where(gz.seen_images, 0.0 < theta, 0.0 > theta)
            per = np.bincount(joint_labels, weights=hit, minlength=n_test + n_seen)
            with np.errstate(invalid="ignore", divide="ignore"):
                gzsl_class_hits[k] = per / np.bincount(joint_labels, minlength=n_test + n_seen)
        gzsl_counts = np.bincount(joint_labels, minlength=n_test + n_seen)

    breakdown = None
    if graph_obj is not None:
        pred = _predictions(ranks, ids, test.labels)
        breakdown = error_breakdown(graph_obj, test_wnids, test.labels, pred)
        metrics["hierarchy"] = {"graph": graph_obj.source, **breakdown.to_dict()}

    # ---- per-class table with class properties
    import pandas as pd

    from imagenet_zsl.evaluation.properties import class_properties

    all_wnids = list(test_wnids) + (list(seen_wnids) if cfg.gzsl else [])
    train_wnids = seen_wnids
    if train_wnids is None and graph_obj is not None:
        from imagenet_zsl.hierarchy.universe import training_wnids

        candidates = training_wnids()
        train_wnids = candidates if all(w in graph_obj for w in candidates) else None
    props = class_properties(all_wnids, graph_obj, train_wnids,
                             label_frequency=cfg.label_frequency, test_wnids=test_wnids)
    table = pd.DataFrame({"wnid": all_wnids,
                          "role": ["unseen"] * n_test + ["seen"] * (len(all_wnids) - n_test)})
    table["images"] = np.r_[counts, gzsl_counts[n_test:]] if cfg.gzsl else counts
    for k in ks:
        table[f"hit@{k}"] = np.r_[class_hits[k], np.full(len(all_wnids) - n_test, np.nan)]
    if gzsl_class_hits is not None:
        for k in ks:
            table[f"gzsl_hit@{k}"] = gzsl_class_hits[k]
    table = table.merge(props, on="wnid", how="left", sort=False)
    spearman = {}
    unseen_rows = table[table["role"] == "unseen"]
    for prop in ("structural_ratio", "population", "label_frequency", "depth"):
        pair = unseen_rows[["hit@1" if 1 in ks else f"hit@{ks[0]}", prop]]
        pair = pair.replace([np.inf, -np.inf], np.nan).dropna()
        if len(pair) >= 3 and pair[prop].nunique() > 1 and pair.iloc[:, 0].nunique() > 1:
            rho = pair.iloc[:, 0].rank().corr(pair[prop].rank())
            spearman[prop] = {"rho": float(rho), "classes": int(len(pair))}
    metrics["class_properties"] = {"columns": [c for c in props.columns if c != "wnid"],
                                   "spearman_hit1": spearman}

    # ---- provenance
    model_info = source.describe()
    inputs: dict[str, Any] = {
        "split": {"path": str(cfg.split), "name": Path(cfg.split).stem,
                  "sha256": sha256_file(cfg.split), "classes": n_test},
        "features": _feature_info(fd),
    }
    if cfg.gzsl:
        inputs["seen_features"] = _feature_info(seen_fd)
        inputs["seen_classes"] = ({"path": str(cfg.seen_classes),
                                   "sha256": sha256_file(cfg.seen_classes)}
                                  if cfg.seen_classes else "classes present in --seen-features")
    if val_wnids is not None:
        inputs["val_split"] = {"path": str(cfg.val_split), "sha256": sha256_file(cfg.val_split),
                               "classes": len(val_wnids)}
        inputs["val_features"] = _feature_info(val_fd)
        inputs["val_seen"] = (_feature_info(val_seen_fd) if val_seen_fd is not None else
                              {"held_out_from": "seen_features",
                               "fraction": cfg.val_seen_fraction, "seed": cfg.seed})
    metrics["inputs"] = inputs
    metrics["model"] = model_info
    metrics["parameters"] = {
        "ks": ks, "kept_per_image": m, "l2_normalize": cfg.l2_normalize, "gzsl": cfg.gzsl,
        "tie_rule": TIE_RULE, "graph": None if graph_obj is None else graph_obj.source,
        "kept_images": None if cfg.kept_images is None else {
            "filter_dir": str(cfg.kept_images), "n_kept_ids": int(len(kept_ids))},
    }
    metrics["software"] = software_versions()
    metrics = _finite_or_none(_str_keys(metrics))

    with atomic_directory(out, tool="imagenet-zsl evaluate") as tmp:
        _write_run(tmp, metrics, table, test, seen, val, val_seen, test_wnids, seen_wnids,
                   val_wnids, curves, direct_points, calibrated_points, breakdown, cfg)
    shutil.rmtree(cache.root, ignore_errors=True)
    return metrics


def _first_row(fd: FeatureDir) -> tuple[np.ndarray, np.ndarray | None]:
    """The first image's features (and logits) without reading a whole shard."""
    name = next(s["name"] for s in fd.shards if int(s["rows"]) > 0)
    features = np.asarray(np.load(fd.path / f"{name}.features.npy", mmap_mode="r")[:1],
                          dtype=np.float32)
    logits = None
    if fd.has_logits:
        logits = np.asarray(np.load(fd.path / f"{name}.logits.npy", mmap_mode="r")[:1],
                            dtype=np.float32)
    return features, logits


def _feature_info(fd: FeatureDir) -> dict:
    return {"path": str(fd.path), "manifest_sha256": sha256_file(fd.path / MANIFEST_NAME),
            "rows": fd.num_rows, "dim": fd.dim, "simulated": fd.simulated}


def _save_set(topk_dir: Path, name: str, result: SetResult | None) -> None:
    if result is None:
        return
    atomic_save_npy(topk_dir / f"{name}.labels.npy", result.labels.astype(np.int32))
    atomic_save_npy(topk_dir / f"{name}.rows.npy", result.rows)
    for space, (scores, ids) in result.lists.items():
        atomic_save_npy(topk_dir / f"{name}.{space}.scores.npy", scores.astype(np.float32))
        atomic_save_npy(topk_dir / f"{name}.{space}.ids.npy", ids.astype(np.int32))


def _write_run(tmp: Path, metrics, table, test, seen, val, val_seen, test_wnids, seen_wnids,
               val_wnids, curves, direct_points, calibrated_points, breakdown, cfg) -> None:
    from imagenet_zsl.evaluation import plots
    from imagenet_zsl.evaluation.report import METRICS_NAME, render_run_report

    topk_dir = tmp / "topk"
    topk_dir.mkdir()
    atomic_write_json(topk_dir / "classes.json", {
        "unseen": list(test_wnids), "seen": list(seen_wnids or []),
        "val_unseen": list(val_wnids or []),
        "about": "X.labels.npy index the set's own classes (test/val: unseen or val_unseen; "
                 "seen/val_seen: seen); X.SPACE.ids.npy index SPACE's list; X.rows.npy are row "
                 "numbers in the set's feature directory (shard order); -1/-inf pad short lists",
    })
    for name, result in (("test", test), ("seen", seen), ("val", val), ("val_seen", val_seen)):
        _save_set(topk_dir, name, result)
    atomic_write_json(tmp / METRICS_NAME, metrics)
    atomic_write_text(tmp / "per_class.csv", table.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(tmp / "report.md", render_run_report(metrics))
    if cfg.plots:
        title = f"{metrics['model']['name']} on {metrics['inputs']['split']['name']}"
        plots.plot_hit_curve(metrics["zsl"], tmp / "hit_at_k.png", title)
        if curves:
            plots.plot_suc(curves, tmp / "suc_curve.png", direct_points, calibrated_points,
                           title)
        if breakdown is not None:
            plots.plot_error_breakdown(metrics["hierarchy"], tmp / "error_breakdown.png")
    outputs = [file_record(p, tmp) for p in sorted(tmp.rglob("*")) if p.is_file()]
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
    config["ks"] = list(config["ks"])
    atomic_write_json(tmp / MANIFEST_NAME, {
        "format": "imagenet-zsl/evaluation-v1",
        "tool": "imagenet-zsl evaluate",
        "command": command_line(),
        "config": config,
        "inputs": metrics["inputs"],
        "model": metrics["model"],
        "outputs": outputs,
        "versions": software_versions(),
    })
