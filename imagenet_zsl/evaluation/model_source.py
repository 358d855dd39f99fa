"""A fitted model directory as a query source (:class:`ModelDirectory`): queries are the model's
``embed_images``, prototypes its ``class_prototypes``, scores its own rule. Apart from
:mod:`~imagenet_zsl.evaluation.queries` so that a prototype file is evaluated without importing the
models (``run.inputs.MODEL_SOURCE`` names this class)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.queries import QuerySource, class_vectors_text
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, MODEL_SEMANTICS_KEY
from imagenet_zsl.manifests import MANIFEST_NAME

# the model directory's verified readers, looked up here when a source is built (tests stand a model
# in through ``model_source.load_model``)
from imagenet_zsl.models.persistence import load_model, read_manifest
from imagenet_zsl.models.vision_language import VisionLanguageZeroShot, tower_pair_problem


class ModelDirectory(QuerySource):
    """A fitted model saved by ``imagenet-zsl train``: queries = ``embed_images``, prototypes =
    ``class_prototypes`` (optionally both L2-normalised: a query's K parts are scaled together, so
    a model with K maps keeps its ranking), ``maps`` = the model's ``score_maps()``.

    Read through :func:`imagenet_zsl.models.persistence.read_manifest` (the verified reader). Its
    manifest gives the provenance: ``feature_identity`` (the features it was fitted on) and
    ``semantics_identity`` (its class vectors), else the class-vector source ``train`` recorded
    under ``inputs.semantics``."""

    def __init__(self, path: str | Path, l2: bool = False):
        super().__init__(l2)
        self.path = Path(path)
        if not self.path.is_dir():
            raise UserInputError(
                f"{self.path}: model directory not found (train one with 'imagenet-zsl train')"
            )
        self.model = load_model(self.path)  # every file checked against the verified manifest
        self.manifest = read_manifest(self.path)
        identity = self.manifest.get(MODEL_FEATURES_KEY)
        self.feature_identity = identity if isinstance(identity, dict) else None
        inputs = self.manifest.get("inputs")
        self.class_vectors = self.manifest.get(MODEL_SEMANTICS_KEY) or (
            inputs.get("semantics") if isinstance(inputs, dict) else None
        )
        #: sha256 of the verified manifest, which lists every file's sha256
        self.model_digest = sha256_file(self.path / MANIFEST_NAME)
        self.digest = hashlib.sha256(f"model:{self.model_digest}:l2={l2}".encode()).hexdigest()
        #: the directory's name identifies the fitted model in reports; the class is its type
        self.model_type = getattr(self.model, "name", "") or type(self.model).__name__
        self.name = self.path.name + (" (cosine)" if l2 else "")
        self.uses_logits = True
        self.maps = int(self.model.score_maps())

    def _embed(self, features: np.ndarray, logits: np.ndarray | None) -> np.ndarray:
        return self.model.embed_images(features, logits)

    def _class_vectors(self, wnids: Sequence[str]) -> np.ndarray:
        return self.model.class_prototypes(wnids)

    def probe(self, features: np.ndarray, logits: np.ndarray | None, where: str) -> int:
        """Embed one row to learn the query dimension; turn a failure into one clear line."""
        try:
            return int(self.encode(features[:1], None if logits is None else logits[:1]).shape[1])
        except UserInputError:
            raise
        except Exception as err:
            raise UserInputError(
                f"{self.path}: model cannot embed the {features.shape[1]}-d features of {where} "
                f"({type(err).__name__}: {err}); evaluate it on the features it was fitted on"
            ) from err

    def describe(self) -> dict:
        return {
            "kind": "model",
            "path": str(self.path),
            "name": self.name,
            "type": self.model_type,
            "manifest_sha256": self.model_digest,
            "params": getattr(self.model, "params", {}),
            "l2_normalize": self.l2,
        }

    def seen_wnids(self) -> list[str] | None:
        """The model's seen classes: the manifest's ``seen_wnids`` or the fitted ``seen_wnids_``."""
        for value in (self.manifest.get("seen_wnids"), getattr(self.model, "seen_wnids_", None)):
            if isinstance(value, list | tuple) and value:
                return [str(w) for w in value]
        return None

    def tower_pair_problem(self, feature_identity: dict | None) -> tuple[str | None, bool]:
        """A vision-language model (``vlm_zero_shot``) scores image features against its class
        text embeddings: both must come from one model (by identity, not by equal dimensions)."""
        if not isinstance(self.model, VisionLanguageZeroShot):
            return None, False
        return tower_pair_problem(feature_identity, class_vectors_text(self.class_vectors))
