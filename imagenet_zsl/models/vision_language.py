"""Vision-language zero-shot (CLIP, Radford et al. 2021): no training, cosine of image and text.

A vision-language model embeds images and texts in one space, so zero-shot classification needs
no seen class: an image's score for a class is the cosine similarity between its image embedding
and the class's text embedding,

    s(x, c) = <x / |x|, t_c / |t_c|>,

with ``x`` the features of the model's image tower (``imagenet-zsl extract --backbone
open_clip:ARCH/TAG``) and ``t_c`` the class vectors of its text tower (``imagenet-zsl labels
encode --encoder clip:ARCH/TAG``, prompt templates averaged there). Both sides must come from the
same model: ``fit`` checks that their dimensions agree, the one check that can be made without
the weights.

Leakage: such a model was pretrained on web image-text pairs, with no class list, so whether a
test class was seen in pretraining is unknown. The features' manifest records that
(``pretraining.web_data``), and evaluation reports "unknown (web data)" rather than a count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel
from imagenet_zsl.models.common import check_features, l2_normalize
from imagenet_zsl.semantics.class_vectors import ClassVectors


@MODELS.register("vlm_zero_shot")
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

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, D) image features → (N, D) unit-length rows."""
        return l2_normalize(check_features(self.name, features, self.dim_))

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        """(C, D) unit-length text embeddings (a class without one is a UserInputError)."""
        return l2_normalize(self.semantics_.get(list(wnids)))
