"""Vision-language zero-shot (CLIP, Radford et al. 2021): no training, cosine of image and text.

A vision-language model embeds images and texts in one space, so zero-shot classification needs
no seen class: an image's score for a class is the cosine similarity between its image embedding
and the class's text embedding,

    s(x, c) = <x / |x|, t_c / |t_c|>,

with ``x`` the features of the model's image tower (``imagenet-zsl extract --backbone
open_clip:ARCH/TAG``) and ``t_c`` the class vectors of its text tower (``imagenet-zsl labels
encode --encoder clip:ARCH/TAG``, prompt templates averaged there). Both sides must come from the
same model: ``fit`` checks that their dimensions agree, and :func:`tower_pair_problem` pairs the
towers by identity wherever the features' identity is known (``evaluate``/``run`` before scoring;
``check_inputs`` for ``train``): the image features must come from an ``open_clip`` image tower
and the class vectors from the ``clip:`` text tower of the same architecture and pretrained tag
(and the same weights sha256 when the class-vector source records one). Equal dimensions are not
enough: timm ViT-S features and MiniLM sentence vectors are both 384-d.

Leakage: such a model was pretrained on web image-text pairs, with no class list, so whether a
test class was seen in pretraining is unknown. The features' manifest records that
(``pretraining.web_data``), and evaluation reports "unknown (web data)" rather than a count.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel
from imagenet_zsl.models.common import check_features
from imagenet_zsl.scoring.vectors import l2_normalize
from imagenet_zsl.semantics.class_vectors import ClassVectors

log = logging.getLogger(__name__)
#: the text encoders of ``labels encode`` (``semantics.text_encoders``): ``KIND:MODEL; ...``
TEXT_KINDS = ("clip", "sentence")
#: how a class-vector source may record its text tower's checkpoint (``...; weights sha256 HEX``)
_TEXT_SHA = re.compile(r"weights sha256 ([0-9a-f]{64})")
_PAIR_HINT = (
    "use the image and text towers of one model (extract --backbone open_clip:ARCH/TAG, "
    "labels encode --encoder clip:ARCH/TAG)"
)


def _text_tower(source: str) -> tuple[str | None, str, str | None]:
    """(kind, model, weights sha256) of a class-vector source ``KIND:MODEL; templates ...``;
    kind None when the vectors do not come from a text encoder (word vectors, a bare file)."""
    head = source.split(";", 1)[0].strip()
    kind, sep, model = head.partition(":")
    found = _TEXT_SHA.search(source)
    sha = found.group(1) if found else None
    return (kind, model, sha) if sep and kind in TEXT_KINDS else (None, head, sha)


def _clip_problem(
    image_model: str, image_sha: str | None, text: str, text_model: str, sha: str | None
) -> tuple[str | None, bool]:
    """Both towers are CLIP's: the same architecture and tag (and weights, when both record them)."""
    arch, _, tag = image_model.partition("/")
    text_arch, _, text_tag = text_model.partition("/")
    if arch != text_arch or (tag and text_tag and tag != text_tag):
        return f"the image tower is open_clip:{image_model} but the text tower is clip:{text_model}", True
    if sha and image_sha and sha != image_sha:
        return f"the image tower's weights (sha256 {image_sha[:12]}) are not the text tower's ({text})", True
    if not (tag and text_tag) and not (sha and image_sha):
        return f"the text tower ({text}) records no pretrained tag or weights to compare", False
    return None, False


def tower_pair_problem(image: dict[str, Any] | None, text_source: str | None) -> tuple[str | None, bool]:
    """Do the image features (their identity, ``features.identity.feature_identity``) and the class
    vectors (their recorded source) come from one vision-language model?

    Returns (None, False) when paired, or when one side is unknown or SIMULATED (nothing to
    compare); (problem, True) when they certainly come from different models; (problem, False)
    when they cannot be compared (a side records too little)."""
    backbone = str((image or {}).get("backbone") or "")
    if not backbone or backbone == "SIMULATED" or not text_source:
        return None, False
    kind, model, sha = _text_tower(text_source)
    if not backbone.startswith("open_clip:"):
        if kind is None:
            return f"the image features ({backbone}) are not a vision-language image tower", False
        return (
            f"the image features come from {backbone}, not a vision-language image tower, and the "
            f"class vectors from {kind}:{model}: equal dimensions, unrelated spaces",
            True,
        )
    if kind != "clip":
        what = f"{kind}:{model}, not a CLIP text tower" if kind else f"{model!r}, not a text tower"
        return f"the image tower is {backbone} but the class vectors come from {what}", kind is not None
    return _clip_problem(
        backbone.removeprefix("open_clip:"), (image or {}).get("weights_sha256"), text_source, model, sha
    )


@MODELS.register
class VisionLanguageZeroShot(ZSLModel):
    """Vision-language zero-shot (CLIP): cosine of image features and class text embeddings."""

    name: ClassVar[str] = "vlm_zero_shot"
    grid: ClassVar[dict[str, list[Any]]] = {}
    #: no training: ``train`` reads no image, and no seen class needs a vector
    learns_from_images: ClassVar[bool] = False
    seen_need_vectors: ClassVar[bool] = False

    def fit(
        self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None
    ) -> VisionLanguageZeroShot:
        """Nothing is learnt: checks that the image features (N, D) — N may be 0, only D is read —
        and the class vectors (C, E) live in one space (D == E), and keeps the class vectors."""
        if semantics is None:
            raise UserInputError(
                f"{self.name}: needs class text embeddings (semantics: a file from "
                "'imagenet-zsl labels encode --encoder clip:ARCH/TAG')"
            )
        shape = np.shape(data.features)  # a row source: only D is read
        dim = int(shape[1]) if len(shape) == 2 else -1
        if dim != semantics.dim:
            raise UserInputError(
                f"{self.name}: the image features have {dim} dimensions but the class vectors "
                f"({semantics.source or 'semantics'}) have {semantics.dim}: use features and class "
                "vectors of the same vision-language model (extract --backbone open_clip:ARCH/TAG, "
                "labels encode --encoder clip:ARCH/TAG)"
            )
        self.semantics_ = semantics
        self.dim_ = dim
        self.fit_info_ = {"training": "none", "class_vectors": semantics.source}
        return self

    def check_inputs(self, feature_identity: dict[str, Any] | None, semantics: ClassVectors | None) -> None:
        """Refuse image features and class vectors of two different models (:func:`tower_pair_problem`);
        warn when a side records too little to tell. ``train`` calls it with its features' identity."""
        problem, certain = tower_pair_problem(
            feature_identity, None if semantics is None else semantics.source
        )
        if problem and certain:
            raise UserInputError(f"{self.name}: {problem}; {_PAIR_HINT}")
        if problem:
            log.warning("%s: cannot check that image and text towers belong together: %s", self.name, problem)

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, D) image features → (N, D) unit-length rows."""
        return l2_normalize(check_features(self.name, features, self.dim_))

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        """(C, D) unit-length text embeddings (a class without one is a UserInputError)."""
        return l2_normalize(self.semantics_.get(list(wnids)))
