"""Where query vectors and prototypes come from: a prototype file here, a fitted model directory in
:mod:`~imagenet_zsl.evaluation.model_source` (apart: ``evaluate`` of a prototype file loads no model
code).

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

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.scoring.vectors import l2_normalize, map_scores
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

    def tower_pair_problem(self, feature_identity: dict | None) -> tuple[str | None, bool]:
        """Whether images of ``feature_identity`` and this source's class vectors come from one
        vision-language model, where the source needs that (see
        :func:`~imagenet_zsl.models.vision_language.tower_pair_problem`): (problem or None,
        certain). A prototype file scores features against vectors in their own space: nothing to
        check."""
        return None, False


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


def class_vectors_text(record: str | dict | None) -> str:
    """The recorded class-vector source as text (a manifest records a dict or a string)."""
    return str(record.get("source") or "") if isinstance(record, dict) else str(record or "")
