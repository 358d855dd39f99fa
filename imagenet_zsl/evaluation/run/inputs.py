"""Every input of a run, checked before any long work: :func:`check_inputs`, the one builder of
the frozen :class:`~imagenet_zsl.evaluation.run.checked_inputs.EvaluationInputs`."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.devices import gpu_possible, resolve_device
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.queries import PrototypeFile, QuerySource
from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs, GZSLSets
from imagenet_zsl.evaluation.run.classes import (
    check_count_as_miss,
    check_test_images,
    class_image_counts,
    class_lookup,
    head_classes,
    log,
    present_classes,
    read_classes,
    representable_classes,
    resolve_space,
    test_lookup,
)
from imagenet_zsl.evaluation.run.config import TOOL, EvaluationConfig, input_paths
from imagenet_zsl.evaluation.run.provenance import check_feature_identities, pretraining_overlap
from imagenet_zsl.evaluation.search import TopKSearcher, import_faiss
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.image_ids import read_id_set, shared_ids
from imagenet_zsl.hierarchy.universe import resolve_graph
from imagenet_zsl.image_filter.filtered import kept_image_ids
from imagenet_zsl.manifests import MANIFEST_NAME
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.registry import load_target
from imagenet_zsl.safe_output import check_out_dir
from imagenet_zsl.scoring.ranks import hit_ks
from imagenet_zsl.splits.label_space import NAMED_LABEL_SPACES, check_label_space_spec

if TYPE_CHECKING:
    import torch

    from imagenet_zsl.hierarchy.graph import ClassGraph


def _check_ks(cfg: EvaluationConfig) -> tuple[int, ...]:
    ks = hit_ks(cfg.ks)
    if cfg.gzsl and ks[0] != 1:
        raise UserInputError(
            f"--k {' '.join(map(str, ks))}: --gzsl reports H and calibrates γ at hit@1; add 1 to --k"
        )
    if int(cfg.block_rows) < 1:
        raise UserInputError(f"--block-rows {cfg.block_rows}: must be a positive number of images")
    return ks


def _seen_set(cfg: EvaluationConfig, split_wnids: list[str]) -> dict[str, Any]:
    if not cfg.gzsl:
        if cfg.seen_features is not None:
            raise UserInputError("--seen-features is only used with --gzsl; add --gzsl")
        return {}
    if cfg.seen_features is None:
        raise UserInputError(
            "--gzsl needs --seen-features DIR: held-out images of the seen (training) "
            "classes, e.g. ILSVRC-2012 validation features"
        )
    seen_fd = FeatureDir(cfg.seen_features)
    seen_wnids = (
        read_classes(cfg.seen_classes, "seen-class list") if cfg.seen_classes else present_classes(seen_fd)
    )
    overlap = sorted(set(seen_wnids) & set(split_wnids))
    if overlap:
        raise UserInputError(
            f"{len(overlap)} classes are both seen and in the test split: "
            f"{preview(overlap)}; a zero-shot test class cannot be seen"
        )
    lookup = class_lookup(seen_fd, seen_wnids, "seen classes")
    return {"seen_fd": seen_fd, "seen_wnids": seen_wnids, "seen_lookup": lookup}


def _validation_set(cfg: EvaluationConfig, split_wnids: list[str], seen_wnids: list[str]) -> dict[str, Any]:
    if cfg.val_split is None:
        if cfg.val_features or cfg.val_seen_features:
            raise UserInputError("--val-features/--val-seen-features need --val-split")
        return {}
    if not cfg.gzsl:
        raise UserInputError("--val-split chooses the GZSL calibration γ: add --gzsl")
    val_wnids = read_classes(cfg.val_split, "validation split")
    clash = sorted(set(val_wnids) & (set(split_wnids) | set(seen_wnids)))
    if clash:
        raise UserInputError(
            f"{cfg.val_split}: {len(clash)} validation classes are test or seen classes: {preview(clash)}"
        )
    val_fd = FeatureDir(cfg.val_features or cfg.features)
    found = {
        "val_wnids": val_wnids,
        "val_fd": val_fd,
        "val_lookup": class_lookup(val_fd, val_wnids, f"validation split {Path(cfg.val_split).name}"),
    }
    if cfg.val_seen_features is not None:
        val_seen_fd = FeatureDir(cfg.val_seen_features)
        found["val_seen_fd"] = val_seen_fd
        found["val_seen_lookup"] = class_lookup(val_seen_fd, seen_wnids, "seen classes (validation)")
    elif not 0 < cfg.val_seen_fraction < 1:
        raise UserInputError("--val-seen-fraction must be between 0 and 1")
    return found


@dataclass(frozen=True)
class TrainingFeatures:
    """The features a model was fitted on, as far as they are known: ``sha256`` of their
    manifest (which lists every shard's sha256: the directory's content digest), the ``directory``
    (None where it is not at hand), ``named``, how an error names them, and ``ids_file``, the
    image ids ``train`` kept in the model directory (None for a model trained before it did, and
    for ``run``'s training features, whose directory is what the models are fitted on now)."""

    sha256: str | None
    directory: Path | None
    named: str
    ids_file: Path | None = None

    @classmethod
    def of_directory(cls, directory: Path, named: str) -> TrainingFeatures:
        """Training features given as a directory (``run``'s ``features.train``)."""
        return cls(sha256_file(Path(directory) / MANIFEST_NAME), Path(directory), named)

    @classmethod
    def of_model(
        cls, manifest: dict[str, Any], named: str, model_dir: Path | None = None
    ) -> TrainingFeatures | None:
        """The training features a model manifest records (``inputs.features``: path and sha256 of
        their manifest, and ``image_ids``, the file of ``model_dir`` that keeps their ids, as
        ``train`` writes it); None where it records none."""
        inputs = manifest.get("inputs")
        record = inputs.get("features") if isinstance(inputs, dict) else None
        if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
            return None
        path = Path(str(record.get("path", ""))).parent if record.get("path") else None
        kept = record.get("image_ids")
        ids_file = None
        if model_dir is not None and isinstance(kept, dict) and isinstance(kept.get("file"), str):
            ids_file = Path(model_dir) / Path(kept["file"]).name
        return cls(record["sha256"], path, named, ids_file)


def check_held_out_seen(seen: FeatureDir, training: TrainingFeatures, where: str) -> None:
    """The one rule for GZSL's held-out seen images (``evaluate --seen-features``, ``run``'s
    ``features.seen``): they are not the features the model was fitted on, compared by content
    (the sha256 of the feature directory's manifest, so a copy or another path to the same
    features is caught), and share no image id with them: the ids ``train`` kept in the model
    directory (whatever the training directory holds now: re-extracted, moved or gone), else, for
    a model trained before they were kept, the training directory's where it is at hand and still
    holds what the model was fitted on. Why: GZSL S measured on training images is not a
    held-out accuracy (it looks like a good model and a high H)."""
    seen_sha = sha256_file(seen.path / MANIFEST_NAME)
    if training.sha256 is not None and seen_sha == training.sha256:
        raise UserInputError(
            f"{seen.path}: the held-out seen images are the training features ({where}: the same "
            f"content as {training.named}); give held-out images, e.g. ILSVRC-2012 validation features"
        )
    if training.ids_file is not None:
        count, first = _shared_with_kept(str(seen.path), seen_sha, str(training.ids_file))
        source = f"{training.directory or 'the model'} (image ids kept in {training.ids_file})"
    else:
        directory = _training_directory(training)
        if directory is None:
            return
        count, first = _shared_ids(
            str(seen.path), seen_sha, str(directory), sha256_file(directory / MANIFEST_NAME)
        )
        source = str(directory)
    if count:
        raise UserInputError(
            f"{seen.path}: {count} held-out seen images are training images of {source} "
            f"(e.g. image {first}) ({where}: {training.named}); give held-out images"
        )


def _training_directory(training: TrainingFeatures) -> Path | None:
    """The training directory whose ids stand for the model's (no ids kept: a model trained
    before ``train`` kept them, or ``run``'s features): None, with one log line saying the id check
    could not run, where it is not at hand or has changed since the model was fitted."""
    directory = training.directory
    if directory is None or not (directory / MANIFEST_NAME).is_file():
        why = "is not at hand" if directory is None else f"{directory} is not found"
    elif training.sha256 is not None and sha256_file(directory / MANIFEST_NAME) != training.sha256:
        why = f"{directory} has changed since the model was fitted"
    else:
        return directory
    log.warning(
        "the held-out seen images' ids could not be checked against %s: the model keeps no "
        "training image ids (trained by an older version) and its training directory %s; "
        "retrain the model to have them checked",
        training.named,
        why,
    )
    return None


@functools.lru_cache(maxsize=16)
def _shared_ids(seen: str, seen_sha256: str, train: str, train_sha256: str) -> tuple[int, str | None]:
    """(how many, the first) image ids two feature directories share, keyed by their manifests'
    sha256 too: ``run`` evaluates every cell against the same training features, whose 1.28M ids
    are read once."""
    shared = np.intersect1d(FeatureDir(train).ids(), FeatureDir(seen).ids())
    return len(shared), (str(shared[0]) if len(shared) else None)


def _shared_with_kept(seen: str, seen_sha256: str, ids_file: str) -> tuple[int, str | None]:
    """(how many, the first) image ids of the feature directory ``seen`` that a model's kept
    training ids hold; cached by the seen manifest's and the id file's sha256 (``run``'s models
    keep the same ids: read once)."""
    key = (seen_sha256, sha256_file(ids_file))
    if key not in _KEPT_SHARED:
        shared = shared_ids(read_id_set(ids_file), FeatureDir(seen).ids())
        if len(_KEPT_SHARED) >= 16:
            _KEPT_SHARED.clear()
        _KEPT_SHARED[key] = (len(shared), str(shared[0]) if len(shared) else None)
    return _KEPT_SHARED[key]


#: :func:`_shared_with_kept`'s results, by (seen manifest sha256, id file sha256)
_KEPT_SHARED: dict[tuple[str, str], tuple[int, str | None]] = {}


def _check_seen_not_training(cfg: EvaluationConfig, source: QuerySource, sets: GZSLSets) -> None:
    """``evaluate``: :func:`check_held_out_seen` against the training features the model's
    manifest records (a prototype file records none)."""
    manifest = getattr(source, "manifest", None)  # a model directory's verified manifest
    if not isinstance(manifest, dict):
        return
    model_dir = getattr(source, "path", None)
    named = f"model {cfg.model}'s training features"
    training = TrainingFeatures.of_model(manifest, named, model_dir)
    if training is None:
        return
    for flag, fd in (("--seen-features", sets.seen_fd), ("--val-seen-features", sets.val_seen_fd)):
        if fd is not None:
            check_held_out_seen(fd, training, flag)


#: the fitted-model query source, by target: imported (with the models and pydantic: 0.1 s of CPU)
#: only when a model directory is evaluated, not for a prototype file
MODEL_SOURCE = "imagenet_zsl.evaluation.model_source:ModelDirectory"


def _feature_dirs(fd: FeatureDir, sets: GZSLSets) -> list[FeatureDir]:
    return [d for d in (fd, sets.seen_fd, sets.val_fd, sets.val_seen_fd) if d is not None]


def _query_source(cfg: EvaluationConfig, feature_dirs: list[FeatureDir]) -> QuerySource:
    if cfg.prototypes is None:
        return load_target(MODEL_SOURCE)(cfg.model, l2=cfg.l2_normalize)
    source = PrototypeFile(cfg.prototypes, l2=cfg.l2_normalize)
    for feature_dir in feature_dirs:
        source.check_dim(feature_dir.dim, str(feature_dir.path))
    return source


def _representable_seen(sets: GZSLSets, source: QuerySource) -> GZSLSets:
    """Seen classes the source cannot represent leave the GZSL label space (see
    :func:`representable_classes`) with their images: the lookups are rebuilt without them."""
    kept, excluded = representable_classes(source, sets.seen_wnids)
    if not excluded:
        return sets
    log.warning(
        "%d seen classes have no prototype (e.g. no word vector) and are left out "
        "of the GZSL label space with their images: %s",
        len(excluded),
        preview(excluded),
    )
    val_seen_lookup = sets.val_seen_lookup
    seen_lookup = class_lookup(sets.seen_fd, kept, "seen classes")
    if sets.val_seen_fd is not None:
        val_seen_lookup = class_lookup(sets.val_seen_fd, kept, "seen classes (validation)")
    return GZSLSets(
        kept,
        sets.seen_fd,
        seen_lookup,
        tuple(excluded),
        sets.val_wnids,
        sets.val_fd,
        sets.val_lookup,
        sets.val_seen_fd,
        val_seen_lookup,
    )


def _label_spaces(
    source: QuerySource, wnids: dict[str, list[str] | None], m: int, device: torch.device
) -> dict[str, TopKSearcher]:
    """One searcher per label space; all prototypes (and a model's queries) share one dim."""
    spaces = {
        space: source.searcher(classes, m, device) for space, classes in wnids.items() if classes is not None
    }
    dims = {sp.dim for sp in spaces.values()}
    if len(dims) != 1:
        raise UserInputError(f"class prototypes have differing dimensions {sorted(dims)}")
    return spaces


def _check_query_dim(cfg: EvaluationConfig, source: QuerySource, dirs: list[FeatureDir], dim: int) -> None:
    """A model's query vectors must have the prototypes' dimension (probed on one row each)."""
    if cfg.prototypes is not None:  # a prototype file: its queries are the features themselves
        return
    for feature_dir in dirs:
        features, logits = feature_dir.first_row()
        qdim = source.probe(features, logits, str(feature_dir.path))
        if qdim != dim:
            raise UserInputError(f"{cfg.model}: query vectors are {qdim}-d but prototypes are {dim}-d")


def _check_given_gamma(cfg: EvaluationConfig) -> None:
    """A γ chosen outside the evaluation (``cfg.gamma``) is a finite number, needs GZSL and
    replaces the validation split; the rows that chose it are a fraction in (0, 1)."""
    if cfg.gamma is None:
        if cfg.hold_calibration_rows:
            raise UserInputError("hold_calibration_rows holds out the rows that chose a given γ: give gamma")
        return
    if not cfg.gzsl:
        raise UserInputError(f"gamma {cfg.gamma}: a calibration γ is only used with --gzsl; add --gzsl")
    if cfg.val_split is not None:
        raise UserInputError("give either a calibration gamma or --val-split (which chooses one), not both")
    if not math.isfinite(float(cfg.gamma)):
        raise UserInputError(f"gamma {cfg.gamma}: a calibration γ must be a finite number")
    if cfg.hold_calibration_rows and not 0 < cfg.val_seen_fraction < 1:
        raise UserInputError(f"--val-seen-fraction {cfg.val_seen_fraction}: must be between 0 and 1")


def _check_list_files(cfg: EvaluationConfig) -> None:
    """The wnid lists a run reads that exist are regular files: a FIFO would block the reader, and
    a FIFO given as ``--label-space`` would otherwise read as a missing file. A missing file is
    left to the later checks, which say which flag it needs or what writes it."""
    space = None if str(cfg.label_space) in NAMED_LABEL_SPACES else Path(cfg.label_space)
    lists = {
        "split file": cfg.split,
        "seen-class list": cfg.seen_classes,
        "validation split": cfg.val_split,
        "label-space file": space,
    }
    for what, path in lists.items():
        if path is not None and (Path(path).exists() or Path(path).is_symlink()):
            regular_input_file(path, what)


def _check_cheap(cfg: EvaluationConfig) -> tuple[tuple[int, ...], torch.device | str]:
    """The checks that read nothing: K values, one query source, the label-space spec, a given γ,
    the device and ``--out``."""
    ks = _check_ks(cfg)
    _check_given_gamma(cfg)
    if (cfg.model is None) == (cfg.prototypes is None):
        raise UserInputError("give exactly one of --model MODEL_DIR or --prototypes FILE")
    _check_list_files(cfg)
    check_label_space_spec(str(cfg.label_space), "--label-space")
    # '--device cpu' (or 'auto' where no GPU driver exists) is the string the search takes as it
    # is: no torch import to resolve it
    cpu = cfg.device == "cpu" or (cfg.device == "auto" and not gpu_possible())
    device = "cpu" if cpu else resolve_device(cfg.device)
    if cfg.search == "faiss":
        import_faiss()  # a missing faiss is one line before any reading
    # own_files: a file the user added to an earlier run's --out is refused before any loading
    check_out_dir(cfg.out, TOOL, input_paths(cfg), own_files=True)
    return ks, device


def check_inputs(cfg: EvaluationConfig, graph: ClassGraph | None | str = None) -> EvaluationInputs:
    """Every cheap check of a run, in order, before any search: the one builder of
    :class:`EvaluationInputs`. ``graph`` overrides ``cfg.graph`` (a ClassGraph, e.g. in tests)."""
    ks, device = _check_cheap(cfg)
    split_wnids = read_classes(cfg.split, "split")
    miss = check_count_as_miss(cfg, split_wnids)
    fd = FeatureDir(cfg.features)
    found = _seen_set(cfg, split_wnids)
    found.update(_validation_set(cfg, split_wnids, found.get("seen_wnids", [])))
    sets = GZSLSets(**found)
    dirs = _feature_dirs(fd, sets)
    source = _query_source(cfg, dirs)
    _check_seen_not_training(cfg, source, sets)
    feature_checks = check_feature_identities(cfg, source, fd, sets)
    resolved_graph = resolve_graph(graph if graph is not None else cfg.graph)
    kept_ids = None
    if cfg.kept_images is not None:
        kept_ids = np.asarray(sorted(kept_image_ids(cfg.kept_images)), dtype=np.str_)
    space = resolve_space(cfg, source, split_wnids, miss, sets.seen_wnids, head_classes(fd))
    lookup = test_lookup(fd, space.wnids, space.scored)
    counts_all = class_image_counts(fd, split_wnids, kept_ids)
    position = {w: i for i, w in enumerate(split_wnids)}  # count-as-miss classes are split classes
    miss_counts = counts_all[[position[w] for w in miss]]
    check_test_images(cfg, fd, split_wnids, counts_all)
    if cfg.gzsl:
        sets = _representable_seen(sets, source)
    m = ks[-1] + 1
    wnids = {"unseen": space.wnids, "seen": sets.seen_wnids, "val_unseen": sets.val_wnids}
    spaces = _label_spaces(source, wnids, m, device)
    _check_query_dim(cfg, source, dirs, next(iter(spaces.values())).dim)
    pretraining, pretraining_wnids = pretraining_overlap(fd, split_wnids)
    return EvaluationInputs(
        cfg=cfg,
        ks=ks,
        m=m,
        split_wnids=split_wnids,
        fd=fd,
        source=source,
        space=space,
        test_lookup=lookup,
        class_counts_all=counts_all,
        miss_counts=miss_counts,
        feature_checks=feature_checks,
        graph=resolved_graph,
        sets=sets,
        spaces=spaces,
        kept_ids=kept_ids,
        pretraining=pretraining,
        pretraining_wnids=pretraining_wnids,
    )
