"""Where query vectors and prototypes come from: a fitted model directory or a prototype file.

Both sources expose the same small interface so the search loop never special-cases one:
``encode(features, logits) -> (n, maps * E)``, ``prototypes(wnids) -> (C, E)`` and ``maps``: the
score is the dot product, or for a model whose score is the max over K maps (LATEM,
:meth:`~imagenet_zsl.models.base.ZSLModel.score_maps`) the max of the K parts' dot products.
:meth:`QuerySource.searcher` and :meth:`QuerySource.score` apply that rule, so ``evaluate``,
``run`` and ``predict`` rank every model by its own score.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.features.identity import MODEL_FEATURES_KEY, MODEL_SEMANTICS_KEY
from imagenet_zsl.io import MANIFEST_NAME, sha256_file
from imagenet_zsl.models.base import map_scores
from imagenet_zsl.models.common import l2_normalize

# the model directory's verified readers, looked up here when a source is built (tests stand a model
# in through ``queries.load_model``)
from imagenet_zsl.models.persistence import load_model, read_manifest
from imagenet_zsl.semantics.class_vectors import ClassVectors


class QuerySource:
    """Base: ``describe()`` goes into metrics.json; ``digest`` keys the resumable search cache.

    Provenance: ``feature_identity`` is the identity of the features the source was fitted on
    (None: unknown, e.g. a prototype file or a model directory written before identities), and
    ``class_vectors`` names the class-vector source its prototypes come from."""

    uses_logits = False
    #: K: a query is K E-d vectors side by side, the score the max of their dot products
    maps = 1
    digest = ""
    feature_identity: dict | None = None
    class_vectors: str | dict | None = None

    def __init__(self, l2: bool = False):
        self.l2 = l2
        #: the last request and its (read-only) prototypes: ``evaluate`` first checks that every
        #: class of a label space has a prototype, then searches those same prototypes
        self._last: tuple[tuple[str, ...], np.ndarray] | None = None

    def _embed(self, features: np.ndarray, logits: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def _class_vectors(self, wnids: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    @property
    def features_as_queries(self) -> bool:
        """Whether :meth:`encode` returns the features themselves: a search on a GPU may then take
        the feature blocks to the device as stored (float16) and skip ``encode``."""
        return False

    def encode(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        queries = np.asarray(self._embed(features, logits), dtype=np.float32)
        return l2_normalize(queries) if self.l2 else queries

    def prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        """(C, E) float32 prototypes of ``wnids`` in that order (read-only; built once for a
        repeated request)."""
        key = tuple(wnids)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        protos = np.asarray(self._class_vectors(list(wnids)), dtype=np.float32)
        protos = l2_normalize(protos) if self.l2 else protos
        protos.flags.writeable = False
        self._last = (key, protos)
        return protos

    def searcher(self, wnids: Sequence[str], k: int, device: Any = "auto") -> TopKSearcher:
        """The exact top-``k`` search of :meth:`encode`'s queries among ``wnids`` by the source's
        own score (its ``maps``); ``device``: see :class:`~imagenet_zsl.evaluation.search.TopKSearcher`."""
        return TopKSearcher(self.prototypes(wnids), k, device=device, maps=self.maps)

    def score(self, queries: np.ndarray, prototypes: np.ndarray) -> np.ndarray:
        """(n, C) float32 scores of :meth:`encode`'s queries against :meth:`prototypes` by the
        source's own rule (:func:`~imagenet_zsl.models.base.map_scores` with its ``maps``)."""
        queries = np.asarray(queries, dtype=np.float32)
        prototypes = np.asarray(prototypes, dtype=np.float32)
        if self.maps == 1:
            return queries @ prototypes.T
        return map_scores(queries, prototypes, self.maps)

    def describe(self) -> dict:
        raise NotImplementedError

    def seen_wnids(self) -> list[str] | None:
        """The classes the source was trained on, when it records them (None: it does not say)."""
        return None


class PrototypeFile(QuerySource):
    """A ClassVectors npz (wnids + matrix) scored against the raw image features.

    With ``l2=True`` both features and prototypes are L2-normalised (cosine similarity), which
    suits e.g. class-mean features; otherwise the plain inner product is used.
    """

    def __init__(self, path: str | Path, l2: bool = False):
        super().__init__(l2)
        self.path = Path(path)
        self.vectors = ClassVectors.load(self.path)
        if l2:  # a zero row has no direction: its class would score 0 against every image, silently
            self.vectors.require_nonzero_rows(str(self.path))
        self.sha256 = sha256_file(self.path)
        self.digest = hashlib.sha256(f"prototypes:{self.sha256}:l2={l2}".encode()).hexdigest()
        self.name = self.path.stem + (" (cosine)" if l2 else "")
        self.class_vectors = self.vectors.source or self.path.name

    def check_dim(self, feature_dim: int, where: str) -> None:
        if self.vectors.dim != feature_dim:
            raise UserInputError(
                f"{self.path}: prototypes are {self.vectors.dim}-d but the features in {where} are "
                f"{feature_dim}-d; --prototypes must live in feature space (use --model otherwise)"
            )

    @property
    def features_as_queries(self) -> bool:
        return not self.l2

    def _embed(self, features: np.ndarray, logits: np.ndarray | None) -> np.ndarray:
        return features

    def _class_vectors(self, wnids: Sequence[str]) -> np.ndarray:
        if len(wnids) == len(self.vectors.wnids) and list(wnids) == self.vectors.wnids:
            # every class in the file's order (a prototype file made for the label space): a
            # view of the matrix, not a gathered copy (0.35 s at 21,842 x 2,048)
            return self.vectors.matrix.view()
        return self.vectors.get(wnids)

    def describe(self) -> dict:
        return {
            "kind": "prototypes",
            "path": str(self.path),
            "sha256": self.sha256,
            "name": self.name,
            "l2_normalize": self.l2,
        }


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
