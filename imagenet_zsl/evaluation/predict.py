"""``imagenet-zsl predict``: the top-k classes of a few photos under a fitted zero-shot model.

Why: it is the sanity check every user wants (does the model put coffee-like classes first on a
photo of a coffee cup?), and the one way to score a photo against the ~21K ImageNet classes
without writing Python. Each photo is decoded and preprocessed exactly as ``extract`` did it for
the model's features (:func:`~imagenet_zsl.features.extract.load_backbone`: the backbone's own
preprocessing, fp16 features; JPEGs decoded at full size, or drafted where the features recorded
``jpeg_draft``: :func:`recorded_decode`), embedded by the model, and ranked by dot product against
the prototypes of the label space (:func:`~imagenet_zsl.splits.label_space.resolve_label_space`).
The model's recorded feature identity must match the backbone and weights given, as for
``evaluate``.

The flags are registered by :mod:`imagenet_zsl.evaluation.cli`, one field of :class:`PredictOptions`
each; this module, the handler (:func:`predict_command`), is imported only when ``predict`` runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.devices import resolve_device, torch_numerics
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.evaluation.model_source import ModelDirectory
from imagenet_zsl.evaluation.run import representable_classes
from imagenet_zsl.features.backbones import classifier_head
from imagenet_zsl.features.extract import ExtractConfig, load_backbone, provenance_fields
from imagenet_zsl.features.identity import check_same_features, feature_identity
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import training_wnids
from imagenet_zsl.images.decode import DecodeFailure, decode_rgb
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.scoring import topk_from_scores
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import (
    NAMED_LABEL_SPACES,
    check_label_space_spec,
    resolve_label_space,
    training_classes,
)
from imagenet_zsl.splits.named import resolve_split

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class PredictOptions:
    """``imagenet-zsl predict``: one field per flag."""

    #: image files (any format PIL reads)
    photos: list[Path]
    #: model directory written by ``train``
    model: Path
    #: the backbone the model's features came from
    backbone: str
    #: its weights file, or 'random' (tests only); None: the torch hub / Hugging Face cache
    weights: str | None = None
    #: seed of ``--weights random``
    seed: int = 0
    #: 'all', 'split' (the classes of ``split``) or a wnid list FILE
    label_space: str = "all"
    #: the split (needed by ``--label-space split``): a wnid list file, a published or a committed name
    split: str | Path | None = None
    #: classes per photo
    top_k: int = 5
    resize: int | None = None
    crop: int | None = None
    ten_crop: bool = False
    allow_feature_mismatch: bool = False
    device: str = "auto"


@dataclass(frozen=True)
class Prediction:
    """The top-k of one photo: ``wnids`` (k,), ``scores`` (k,) float32, best first."""

    photo: str
    wnids: list[str]
    scores: np.ndarray


def _check_input_files(photos: list[Path], label_space: str) -> None:
    """Every file ``predict`` reads is a regular file, checked before the model and the backbone
    load: a FIFO would block its reader, and a FIFO as ``--label-space`` read as a missing file."""
    for photo in photos:
        regular_input_file(photo, "photo")
    space = Path(label_space)
    if label_space not in NAMED_LABEL_SPACES and (space.exists() or space.is_symlink()):
        regular_input_file(space, "label-space file")


def _label_space(cfg: PredictOptions, seen: list[str]) -> list[str]:
    """The label space's wnids (sorted) for ``--label-space`` / ``--split``."""
    spec = str(cfg.label_space)  # checked by predict() before any work
    if spec == "split" and cfg.split is None:
        raise UserInputError("--label-space split needs --split FILE (the split's wnid list)")
    split = read_wnid_list(cfg.split) if cfg.split is not None else []
    return resolve_label_space(spec, split, seen, f"--label-space ({cfg.split or spec})")


def excluded_classes(model_seen: list[str] | None, has_head: bool, spec: str) -> Any:
    """The training classes kept out of the label space, as ``evaluate`` and ``run`` decide them
    (:func:`~imagenet_zsl.splits.label_space.training_classes`): the model's training classes and,
    when the backbone has its ImageNet-1K head, the 1,000 ILSVRC-2012 classes it classifies (for
    ``all``/FILE also when the model does not record its training classes)."""
    unknown = model_seen is None and spec != "split"
    parts = [
        ("the model's training classes", model_seen),
        ("the backbone head's classes", training_wnids() if has_head else None),
        (
            "ILSVRC-2012 classes (the model does not record its training classes)",
            training_wnids() if unknown else None,
        ),
    ]
    return training_classes(parts)


def recorded_decode(
    pre: Preprocessing, provenance: dict[str, Any], recorded: dict[str, Any] | None
) -> tuple[Preprocessing, dict[str, Any]]:
    """(the preprocessing to embed photos with, the feature identity it gives): ``pre`` with the
    JPEG decode the model's features recorded (``recorded``, the model's ``feature_identity``,
    which holds a digest of the preprocessing record), found among the records ``pre``'s geometry
    can carry (:meth:`~imagenet_zsl.features.transforms.Preprocessing.decode_records`: exact,
    drafted, exact before the key) and read as ``finetune`` reads one
    (:meth:`~imagenet_zsl.features.transforms.Preprocessing.from_record`). None matching (another
    resize, crop or interpolation; a model without identity): ``pre`` itself, exact, whose
    identity :func:`~imagenet_zsl.features.identity.check_same_features` then compares."""
    digest = (recorded or {}).get("preprocessing")
    for record in pre.decode_records() if digest else []:
        identity = feature_identity({**provenance, "preprocessing": record})
        if identity["preprocessing"] == digest:
            return Preprocessing.from_record(record), identity
    return pre, feature_identity(provenance)


def embed_photos(
    net: Any, pre: Preprocessing, photos: list[Path], device: str = "cpu"
) -> tuple[np.ndarray, np.ndarray | None]:
    """(N, D) float32 features (rounded to fp16 as 'extract' stores them) and (N, K) logits (or None)
    of the photos, decoded and preprocessed as 'extract' does, forward in fp32 on ``device`` with
    extract's deterministic numerics (no TF32), so CPU and GPU agree to fp32 rounding."""
    # deferred: a mistake in the photos, the split or the label space is reported before torch loads
    import torch

    target = resolve_device(device)

    crops = []
    for photo in photos:
        try:
            image = decode_rgb(photo.read_bytes(), pre.decode_min_side)
            crops.append(torch.from_numpy(pre.crop_pil(image)))
        except DecodeFailure as err:
            raise UserInputError(f"{photo}: cannot read the image ({err})") from None
        except OSError as err:
            raise UserInputError(f"{photo}: cannot read the file ({err.strerror or err})") from None
    x = pre.normalizer(target)(torch.stack(crops).to(target))
    if pre.ten_crop:
        x = x.reshape(-1, *x.shape[2:])
    net = net.to(target)
    with torch_numerics(deterministic=True), torch.inference_mode():
        features, logits = net(x.contiguous(memory_format=torch.channels_last))
    features = features.cpu()
    logits = None if logits is None else logits.cpu()
    if pre.ten_crop:
        features = features.float().reshape(len(photos), pre.views, -1).mean(dim=1)
        logits = None if logits is None else logits.float().reshape(len(photos), pre.views, -1).mean(dim=1)
    as_stored = features.to(torch.float16).float().numpy()
    return as_stored, None if logits is None else logits.to(torch.float16).float().numpy()


def predict(cfg: PredictOptions) -> tuple[list[Prediction], dict[str, Any]]:
    """The top-k of every photo, and what was ranked against (label-space counts, override)."""
    photos = [Path(p) for p in cfg.photos]
    _check_input_files(photos, str(cfg.label_space))
    if cfg.split is not None:  # resolved as evaluate and run resolve it, before any model loads
        cfg = dataclasses.replace(cfg, split=resolve_split(cfg.split, "splits", "--split"))
    check_label_space_spec(str(cfg.label_space), "--label-space")
    source = ModelDirectory(cfg.model)
    extract = ExtractConfig(
        store="",
        classes_file="",
        backbone=cfg.backbone,
        out="",
        weights=cfg.weights,
        seed=cfg.seed,
        resize=cfg.resize,
        crop=cfg.crop,
        ten_crop=cfg.ten_crop,
    )
    net, dim, weights, pre = load_backbone(extract)
    net.want_logits = net.num_logits is not None
    pre, identity = recorded_decode(
        pre, provenance_fields(cfg.backbone, dim, weights, pre), source.feature_identity
    )
    given = f"--backbone {cfg.backbone}" + (f" --weights {cfg.weights}" if cfg.weights else "")
    override = check_same_features(
        source.feature_identity, identity, f"model {cfg.model}", given, cfg.allow_feature_mismatch
    )
    # the head's classes leave the label space exactly when extract would store the head (head.npz)
    has_head = classifier_head(net, getattr(net.head, "in_features", -1)) is not None
    seen = excluded_classes(source.seen_wnids(), has_head, str(cfg.label_space))
    space = _label_space(cfg, seen.wnids)
    features, logits = embed_photos(net, pre, photos, cfg.device)
    queries = source.encode(features, logits)
    kept, without = representable_classes(source, space)
    scores = source.score(queries, source.prototypes(kept))  # the model's own rule (LATEM: max over maps)
    _, order = topk_from_scores(scores, min(cfg.top_k, scores.shape[1]))  # ties: lower column first
    predictions = [
        Prediction(str(photo), [kept[j] for j in row], scores[i, row])
        for i, (photo, row) in enumerate(zip(photos, order, strict=True))
    ]
    info = {
        "label_space": str(cfg.label_space),
        "classes": len(kept),
        "without_prototype": without,
        "seen": len(seen),
        "seen_source": seen.source,
        "override": override,
    }
    return predictions, info


def format_predictions(predictions: list[Prediction], info: dict[str, Any]) -> str:
    """The text ``predict`` prints: a header, then per photo one line per class
    (rank, wnid, first lemma, score, WordNet gloss)."""
    nouns = load_wordnet_nouns()
    lines = [
        f"label space {info['label_space']}: {info['classes']:,} classes ({info['seen']:,} training "
        f"classes excluded: {info['seen_source']})"
    ]
    if info["without_prototype"]:
        lines[0] += (
            f"; {len(info['without_prototype']):,} more left out, without a prototype (e.g. no "
            f"class vector): {preview(info['without_prototype'], 3)}"
        )
    if info["override"]:
        lines.append(f"WARNING: feature mismatch allowed ({', '.join(info['override']['differ'])} differ)")
    for prediction in predictions:
        lines.append(f"{prediction.photo}:")
        for rank, (wnid, score) in enumerate(zip(prediction.wnids, prediction.scores, strict=True), 1):
            row = nouns.index.get(wnid)
            lemma = nouns.lemmas[row][0].replace("_", " ") if row is not None else "?"
            gloss = nouns.definitions[row] if row is not None else ""
            lines.append(f"  {rank:>2}. {wnid}  {lemma:<24} {float(score):+.4f}  {gloss}")
    return "\n".join(lines)


def predict_command(cfg: PredictOptions) -> int:
    """``imagenet-zsl predict`` (flags in :mod:`imagenet_zsl.evaluation.cli`): print the top-k of
    every photo."""
    predictions, info = predict(cfg)
    print(format_predictions(predictions, info), flush=True)
    return 0
