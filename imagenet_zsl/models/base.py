"""The one interface every zero-shot model implements (scikit-learn style), and the model registry.

A model is fitted on seen classes only. Afterwards the score of image ``x`` for class ``c`` is
``embed_images(x) @ class_prototypes([c]).T`` — a dot product — or, for a model whose
:meth:`ZSLModel.score_maps` is K > 1 (LATEM), the max of K such dot products: ``embed_images``
then gives K query vectors side by side. Evaluation runs one exact search that reads
``score_maps`` (:func:`map_scores` is the same rule on a whole matrix), so every model is ranked
by its own score and none is special-cased by name.

Models register themselves where they are defined (timm's way)::

    @MODELS.register
    class ESZSL(ZSLModel):
        name = "eszsl"

and ``MODELS`` imports every model module the first time it lists its models or misses a name,
so it is always complete when asked, while importing the package imports no model. Fitted state
follows scikit-learn: every attribute learnt by ``fit`` ends in ``_`` (``map_``, ``classifier_``);
:func:`check_is_fitted` tests for them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import create_model

from imagenet_zsl.models.catalog import MODELS as CATALOG
from imagenet_zsl.models.params import ModelParams, validate_params
from imagenet_zsl.registry import Registry
from imagenet_zsl.scoring.vectors import map_scores

if TYPE_CHECKING:
    from imagenet_zsl.features.head import BackboneHead
    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors


#: rows per block when streaming over all training images (bounds temporaries to ~100 MB at D=2048)
BLOCK_ROWS = 16384


def read_rows(rows: Any, key: slice | np.ndarray) -> np.ndarray:
    """float32 rows ``key`` (a slice, int positions in any order, or a bool mask) of an (N, D)
    row source: a numpy array (any float dtype, memory-mapped or not) or a
    :class:`~imagenet_zsl.features.feature_dir.ShardRows`. Only those rows are converted."""
    return np.asarray(rows[key], dtype=np.float32)


def take_rows(rows: Any, positions: np.ndarray) -> Any:
    """The rows at increasing ``positions`` (or a bool mask) of a row source, as a row source: a
    ShardRows subset reads nothing; a numpy array is indexed (a copy of those rows, its dtype)."""
    take = getattr(rows, "take", None)
    return take(positions) if take is not None and not isinstance(rows, np.ndarray) else rows[positions]


@dataclass
class SeenData:
    """Training data of the seen classes.

    features: (N, D) image features, a row source read block by block (:meth:`blocks`,
    :func:`read_rows`): a numpy array (float32, or float16 as stored) or, from ``train``, a
    :class:`~imagenet_zsl.features.feature_dir.ShardRows` over the memory-mapped shards (no copy in
    memory). labels: (N,) int64 index into ``seen_wnids``; logits: optional (N, K) backbone logits
    over ``logit_classes`` (e.g. the ILSVRC 1K head), a row source too; head: optional backbone
    classifier stored with the features (``head.npz``: weight (K, D), bias (K,), its K classes).
    With a head that covers every seen class, the models built on the seen classifier (ConSE,
    trivial, GCNZ, SGCN, DGP) take it as it is and need no image (N may be 0, and a seen class may
    have none).
    """

    features: Any
    labels: np.ndarray
    seen_wnids: list[str]
    logits: Any = None
    logit_classes: list[str] | None = None
    head: BackboneHead | None = None

    def blocks(self, rows: int = BLOCK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(features float32 (b, D), labels int64 (b,)) in order, b <= ``rows``: the one way to
        stream over the training images (memory: one block)."""
        labels = np.asarray(self.labels, dtype=np.int64)
        for start in range(0, len(labels), rows):
            yield read_rows(self.features, slice(start, start + rows)), labels[start : start + rows]

    def subset(self, positions: np.ndarray, labels: np.ndarray, seen_wnids: list[str]) -> SeenData:
        """The images at increasing ``positions`` (or a bool mask), relabelled ``labels`` into
        ``seen_wnids``; features and logits stay row sources (a ShardRows subset reads nothing)."""
        return SeenData(
            features=take_rows(self.features, positions),
            labels=np.asarray(labels, dtype=np.int64),
            seen_wnids=list(seen_wnids),
            logits=None if self.logits is None else take_rows(self.logits, positions),
            logit_classes=self.logit_classes,
            head=self.head,
        )


class NotFittedError(ValueError, AttributeError):
    """A model was used (embedded, saved) before ``fit`` (scikit-learn's exception of that name)."""


class ZSLModel(ABC):
    """Base class: hyper-parameters in ``__init__`` (checked by the class's ``Params`` and stored
    in ``self.params``), then fit/embed.

    ``fit`` stores what it learns in attributes ending in ``_``; nothing else does. Attributes
    starting with ``_`` are private caches and never saved.
    """

    name: ClassVar[str] = ""
    #: the typed hyper-parameters (:mod:`imagenet_zsl.models.params`); none by default
    Params: ClassVar[type[ModelParams]] = ModelParams
    #: hyper-parameter name -> default, derived from ``Params`` (``imagenet-zsl models`` lists them)
    defaults: ClassVar[dict[str, Any]] = {}
    #: fit reads the training images' backbone logits (``SeenData.logits``: the seen classifier's
    #: "head" source). ``train`` loads them only for such models: N x 1000 x 4 B (5.1 GB for
    #: ImageNet-1K) that every other model never touches. Such models build on the seen classifier
    #: and so can use a stored backbone head (``SeenData.head``) instead of images.
    uses_training_logits: ClassVar[bool] = False
    #: fit learns from the seen classes' images. False for a model without training (the
    #: vision-language zero-shot model): ``train`` then reads no image at all.
    learns_from_images: ClassVar[bool] = True
    #: fit needs class vectors (False: the graph-only trivial models)
    needs_semantics: ClassVar[bool] = True
    #: fit needs the class graph (GCNZ, SGCN, DGP, the trivial models)
    needs_graph: ClassVar[bool] = False
    #: a seen class without a class vector cannot be trained on (left out, with a warning)
    seen_need_vectors: ClassVar[bool] = True
    #: the default validation grid of ``select`` (hyper-parameter -> values)
    grid: ClassVar[dict[str, list[Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any):
        """Derive ``defaults`` from ``Params``; a class that declares only a ``defaults`` dict (a
        model written before typed parameters) gets an untyped ``Params`` of those names."""
        super().__init_subclass__(**kwargs)
        if "defaults" in vars(cls) and "Params" not in vars(cls):
            fields: dict[str, Any] = {key: (Any, value) for key, value in cls.defaults.items()}
            cls.Params = create_model(f"{cls.__name__}Params", __base__=ModelParams, **fields)
        cls.defaults = cls.Params().model_dump()

    def __init__(self, **params: Any):
        """``params`` checked against ``Params``: an unknown name, a wrong type or a value out of
        range is a one-line UserInputError."""
        self.params: dict[str, Any] = validate_params(
            self.Params, params, f"model {self.name or type(self).__name__}"
        ).model_dump()

    def fitted_attributes(self) -> list[str]:
        """Names of the attributes learnt by ``fit`` (public, ending in ``_``), sorted."""
        return sorted(k for k in vars(self) if k.endswith("_") and not k.startswith("_"))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The hyper-parameters (scikit-learn's ``get_params``): a copy of ``self.params``, every
        field of ``Params`` with its value. ``deep`` is accepted for scikit-learn's tools; a model
        holds no nested estimator, so it changes nothing."""
        return dict(self.params)

    def set_params(self, **params: Any) -> ZSLModel:
        """Change hyper-parameters (scikit-learn's ``set_params``), checked against ``Params`` like
        ``__init__``; returns self. A change of value drops the fitted state (the model must be fitted
        again), so a fitted model never carries parameters it was not fitted with."""
        checked = validate_params(
            self.Params, {**self.params, **params}, f"model {self.name or type(self).__name__}"
        ).model_dump()
        if checked != self.params:
            for name in self.fitted_attributes():
                delattr(self, name)
        self.params = checked
        return self

    def __getattr__(self, name: str) -> Any:
        """Only called for a missing attribute: a fitted one (``x_``) on a model never fitted is a
        :class:`NotFittedError` naming the model, whatever method asked for it."""
        if name.endswith("_") and not name.startswith("_") and not self.fitted_attributes():
            raise NotFittedError(f"{self.name or type(self).__name__}: call fit() first (no {name})")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @abstractmethod
    def fit(
        self,
        data: SeenData,
        semantics: ClassVectors,
        graph: ClassGraph | None = None,
    ) -> ZSLModel:
        """Learn from seen classes only; returns self."""

    def check_inputs(self, feature_identity: dict[str, Any] | None, semantics: ClassVectors | None) -> None:
        """Refuse training features (their identity, ``features.identity.feature_identity``) and
        class vectors that cannot belong together; ``train`` calls it after :meth:`fit`. Default:
        nothing to check (a vision-language model pairs its two towers)."""
        return None

    @abstractmethod
    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        """(N, D) image features (and optional logits) → (N, E) float32 query vectors."""

    @abstractmethod
    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        """Any list of wnids (seen or unseen) → (C, E) float32 prototypes, in that order."""

    def score_maps(self) -> int:
        """K: ``embed_images`` gives (N, K * E), K query vectors side by side, and the score of a
        class is the max of their K dot products with its prototype (LATEM's K maps, GBU Eq. 10).
        1, the default: one dot product. Evaluation's search and :meth:`scores` both read it."""
        return 1

    @classmethod
    def fit_many(
        cls,
        param_sets: Sequence[dict[str, Any]],
        data: SeenData,
        semantics: ClassVectors | None,
        graph: ClassGraph | None = None,
    ) -> Iterator[ZSLModel]:
        """One fitted model per hyper-parameter set, all on the same data, yielded in order.

        Why: a grid search fits the same data many times, and most of the work does not depend on
        the grid values (feature statistics, a seen-class classifier, a γ-solve shared by every λ).
        The models of one call share a private cache (``_shared``) that :meth:`shared` fills once;
        each yielded model equals ``cls(**params).fit(data, semantics, graph)`` exactly, because
        the cached values are the very numbers that fit would have computed."""
        cache: dict[Any, Any] = {}
        for params in param_sets:
            model = cls(**params)
            model._shared = cache
            try:
                yield model.fit(data, semantics, graph)
            finally:
                del model._shared

    def shared(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()`` — once per :meth:`fit_many` call for a given hashable ``key`` (which must
        name every hyper-parameter the value depends on); without fit_many, simply ``compute()``."""
        cache = getattr(self, "_shared", None)
        if cache is None:
            return compute()
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    def scores(
        self, features: np.ndarray, wnids: Sequence[str], logits: np.ndarray | None = None
    ) -> np.ndarray:
        """(N, C) float32 exact scores of images against classes: :func:`map_scores` of
        ``embed_images(x)`` and ``class_prototypes(c)`` with :meth:`score_maps` maps, the rule
        evaluation's search ranks by."""
        queries = np.asarray(self.embed_images(features, logits), dtype=np.float32)
        prototypes = np.asarray(self.class_prototypes(wnids), dtype=np.float32)
        return map_scores(queries, prototypes, self.score_maps())


#: model name → model class; filled by ``@MODELS.register`` in each model module, which the
#: registry imports on first use (:mod:`imagenet_zsl.models.catalog`)
MODELS: Registry[type[ZSLModel]] = CATALOG


def create(name: str, **params: Any) -> ZSLModel:
    """A model by registry name with hyper-parameters (timm's ``create_model``); an unknown name or
    invalid hyper-parameters (the model's ``Params``) are a UserInputError, any other error in the
    model's ``__init__`` a bug that propagates."""
    return MODELS.create(name, **params)


def check_is_fitted(model: ZSLModel) -> None:
    """Raise :class:`NotFittedError` unless ``fit`` has stored its attributes on ``model``."""
    if not model.fitted_attributes():
        raise NotFittedError(f"{model.name or type(model).__name__}: call fit() first")


def clone(model: ZSLModel) -> ZSLModel:
    """A new, unfitted model of the same class and hyper-parameters (scikit-learn's ``clone``)."""
    return type(model)(**model.get_params())
