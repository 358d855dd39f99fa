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

import copy
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import create_model

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.models.catalog import MODELS as CATALOG
from imagenet_zsl.models.params import ModelParams, describe_params, plain_annotation, validate_params
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

    def __len__(self) -> int:
        """N, the number of images."""
        return len(self.labels)

    @property
    def shape(self) -> tuple[int, int]:
        """(N, D): the images and the feature dimension (how scikit-learn sizes and splits an ``X``)."""
        return len(self.labels), int(self.features.shape[1])

    def __getitem__(self, key: Any) -> SeenData:
        """The images at ``key`` — a slice, int positions or a bool mask over the N images (numpy's
        ``data[rows, ...]`` too) — relabelled onto the classes they hold, in ``seen_wnids`` order.

        Why: scikit-learn's cross-validation indexes its ``X`` this way, so a :class:`SeenData` is
        the ``X`` of ``GridSearchCV``; with ``GroupKFold`` and ``groups=data.labels`` each fold
        fits on some seen classes and scores on the others, the zero-shot validation protocol."""
        if isinstance(key, tuple) and len(key) == 2 and key[1] is Ellipsis:
            key = key[0]
        positions = np.arange(len(self))[key]
        if positions.ndim != 1:
            raise TypeError("index a SeenData with a slice, int positions or a bool mask over its images")
        present, labels = np.unique(np.asarray(self.labels)[positions], return_inverse=True)
        return self.subset(positions, labels, [self.seen_wnids[i] for i in present])

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


def _is_estimator(value: Any) -> bool:
    """A hyper-parameter that is itself an estimator (scikit-learn's test: an instance with
    ``get_params``), whose own parameters ``get_params(deep=True)`` lists as ``name__param``."""
    return hasattr(value, "get_params") and not isinstance(value, type)


def _keyword_init(cls: type[ZSLModel]) -> Callable[..., None]:
    """``cls.__init__``: every field of ``cls.Params`` a keyword-only parameter with its type and
    default, in ``inspect.signature`` (so ``help()``, IDEs that inspect live objects, and
    scikit-learn's ``_get_param_names`` see them). The body is :meth:`ZSLModel.__init__`."""

    def __init__(self: ZSLModel, **params: Any) -> None:
        ZSLModel.__init__(self, **params)

    fields = cls.Params.model_fields
    described = describe_params(cls.Params)
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.get_default(call_default_factory=True),
            annotation=plain_annotation(field.annotation),
        )
        for name, field in fields.items()
    ]
    __init__.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    lines = [
        f"    {name}: {d['type']}"
        + (f" ({d['range']})" if d["range"] else "")
        + f", default {d['default']!r}"
        for name, d in described.items()
    ]
    __init__.__doc__ = (
        "Hyper-parameters, each stored unchanged as the attribute of its name (scikit-learn's "
        "convention) and checked against ``Params``: an unknown name, a wrong type or a value out "
        "of range is a one-line UserInputError.\n\n" + ("\n".join(lines) if lines else "    (none)")
    )
    return __init__


class ZSLModel(ABC):
    """Base class: hyper-parameters are keyword arguments of ``__init__`` (one per field of the
    class's ``Params``, stored unchanged as attributes; ``self.params`` is the checked dict), then
    fit/embed.

    ``fit`` stores what it learns in attributes ending in ``_``; nothing else does. Attributes
    starting with ``_`` are private caches and never saved. scikit-learn's ``clone``,
    ``get_params``/``set_params`` and ``GridSearchCV`` work on every model (a :class:`SeenData` is
    the ``X`` they split; ``semantics`` and ``graph`` go to ``fit`` as fit parameters).
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
        """Derive ``defaults`` from ``Params`` (a class that declares only a ``defaults`` dict, a
        model written before typed parameters, gets an untyped ``Params`` of those names), and
        give the class an ``__init__`` whose signature lists them (:func:`_keyword_init`) unless it
        writes its own."""
        super().__init_subclass__(**kwargs)
        if "defaults" in vars(cls) and "Params" not in vars(cls):
            fields: dict[str, Any] = {key: (Any, value) for key, value in cls.defaults.items()}
            cls.Params = create_model(f"{cls.__name__}Params", __base__=ModelParams, **fields)
        cls.defaults = cls.Params().model_dump()
        clashes = sorted(name for name in cls.Params.model_fields if hasattr(ZSLModel, name))
        if clashes:
            raise TypeError(f"{cls.__name__}: hyper-parameter names {clashes} are ZSLModel attributes")
        if "__init__" not in vars(cls):
            cls.__init__ = _keyword_init(cls)  # type: ignore[method-assign]

    def __init__(self, **params: Any):
        """``params`` checked against ``Params`` (an unknown name, a wrong type or a value out of
        range is a one-line UserInputError), then each field stored unchanged as an attribute, the
        default where not given. Subclasses show the fields in their signature (:func:`_keyword_init`)."""
        validate_params(self.Params, params, self._where())
        for name, field in self.Params.model_fields.items():
            value = params[name] if name in params else field.get_default(call_default_factory=True)
            setattr(self, name, value)

    def _where(self) -> str:
        return f"model {self.name or type(self).__name__}"

    def _raw_params(self) -> dict[str, Any]:
        """Field name → the attribute as stored (what was given), in ``Params`` order."""
        return {name: self.__dict__[name] for name in self.Params.model_fields if name in self.__dict__}

    @property
    def params(self) -> dict[str, Any]:
        """The hyper-parameters as ``Params`` reads them (a new dict): the attributes checked and
        converted (an int given for a float is a float here). Re-checked whenever an attribute
        changed since the last call, so a value assigned directly is refused at ``fit``."""
        raw = self._raw_params()
        key = repr(raw)
        cached = self.__dict__.get("_checked_params")
        if cached is None or cached[0] != key:
            cached = (key, validate_params(self.Params, raw, self._where()).model_dump())
            self.__dict__["_checked_params"] = cached
        return dict(cached[1])

    @params.setter
    def params(self, values: dict[str, Any]) -> None:
        """Restore the hyper-parameters of a saved model (``persistence.load_model``): each field
        becomes its attribute (the default where ``values`` lacks it), and ``self.params`` returns
        ``values`` as saved until an attribute changes."""
        for name, field in self.Params.model_fields.items():
            setattr(
                self, name, values[name] if name in values else field.get_default(call_default_factory=True)
            )
        self.__dict__["_checked_params"] = (repr(self._raw_params()), dict(values))

    def fitted_attributes(self) -> list[str]:
        """Names of the attributes learnt by ``fit`` (public, ending in ``_``), sorted."""
        return sorted(k for k in vars(self) if k.endswith("_") and not k.startswith("_"))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The hyper-parameters as scikit-learn defines ``get_params``: a new dict of every field
        of ``Params`` and its attribute, unchanged; with ``deep``, a parameter that is itself an
        estimator adds its own parameters as ``name__param`` (none of the registered models has one)."""
        out = {name: getattr(self, name) for name in self.Params.model_fields}
        if deep:
            for name, value in list(out.items()):
                if _is_estimator(value):
                    out.update((f"{name}__{key}", sub) for key, sub in value.get_params(deep=True).items())
        return out

    def set_params(self, **params: Any) -> ZSLModel:
        """Change hyper-parameters (scikit-learn's ``set_params``; ``name__param`` sets a parameter
        of an estimator-valued one), checked against ``Params`` like ``__init__`` before anything
        changes; returns self. A change of value drops the fitted state (the model must be fitted
        again), so a fitted model never carries parameters it was not fitted with."""
        own = {key: value for key, value in params.items() if "__" not in key}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            if "__" in key:
                name, sub = key.split("__", 1)
                nested.setdefault(name, {})[sub] = value
        checked = validate_params(self.Params, {**self._raw_params(), **own}, self._where()).model_dump()
        for name, sub in nested.items():
            if name not in self.Params.model_fields:  # an unknown name: the one-line error of __init__
                validate_params(self.Params, {name: next(iter(sub.values()))}, self._where())
            if not _is_estimator(own.get(name, getattr(self, name))):
                raise UserInputError(
                    f"invalid value ({self._where()}: params.{name}__{next(iter(sub))}): "
                    f"{name} is not an estimator, so it has no parameters of its own"
                )
        try:
            was: dict[str, Any] | None = self.params
        except UserInputError:  # an invalid value assigned directly, replaced now
            was = None
        before = self.get_params(deep=True)
        changed = checked != was or any(
            before.get(f"{name}__{key}") != value
            for name, sub in nested.items()
            for key, value in sub.items()
        )
        for name, value in own.items():
            setattr(self, name, value)
        for name, sub in nested.items():
            getattr(self, name).set_params(**sub)
        if changed:
            for name in self.fitted_attributes():
                delattr(self, name)
        return self

    def __repr__(self) -> str:
        """``ESZSL(gamma=2.0)``: the class and the hyper-parameters that differ from the defaults
        (scikit-learn's way)."""
        changed = [
            f"{k}={v!r}" for k, v in self._raw_params().items() if repr(v) != repr(self.defaults.get(k))
        ]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's estimator tags, which its tools (``GridSearchCV``) ask for: no target
        (``fit`` takes a :class:`SeenData`, the labels inside), neither classifier nor regressor."""
        from sklearn.utils import Tags, TargetTags  # deferred: optional; only scikit-learn asks for it

        return Tags(estimator_type=None, target_tags=TargetTags(required=False))

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
    """A new, unfitted model of the same class and hyper-parameters (scikit-learn's ``clone``: an
    estimator-valued parameter is cloned, any other deep-copied, so the two share no list)."""
    return type(model)(**{name: _clone_value(v) for name, v in model.get_params(deep=False).items()})


def _clone_value(value: Any) -> Any:
    if _is_estimator(value):
        return type(value)(**{name: _clone_value(v) for name, v in value.get_params(deep=False).items()})
    return copy.deepcopy(value)
