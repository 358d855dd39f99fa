"""Typed hyper-parameters: every model declares a pydantic ``Params`` class (strict types, ranges,
choices), checked before any work.

A model's ``Params`` is a :class:`ModelParams` (the config layer's strict :class:`Config`, and no
NaN or infinity): an int is accepted where a float is expected, a bool or a string never is, so
``gamma: "1.0"``, ``gamma: true``, ``gamma: .nan`` and ``epochs: "5"`` are one-line errors that
name the file, the key and the value. Shared groups of parameters (the seen classifier's, the
mini-batch trainers') are base classes that a model's ``Params`` extends::

    class ESZSL(LinearSemanticModel):
        class Params(LinearParams):
            gamma: NonNegative = 1.0

:func:`describe_params` renders each field's type, range or choices and default for
``imagenet-zsl models``.
"""

from __future__ import annotations

import functools
import operator
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import AfterValidator, ConfigDict, Field, ValidationError

from imagenet_zsl.config import Config, describe_error
from imagenet_zsl.errors import UserInputError

_DEVICE = re.compile(r"cpu|cuda|auto|cuda:[0-9]+")


def _check_device(value: str) -> str:
    if not _DEVICE.fullmatch(value):
        raise ValueError("use cpu, cuda, cuda:N or auto")
    return value


#: a torch device name; whether the GPU exists is checked when the model is fitted
Device = Annotated[str, AfterValidator(_check_device)]
NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=0)]
FeatureMode = Literal["none", "l2", "standard"]
SemanticNorm = Literal["none", "l2"]


class ModelParams(Config):
    """Base of every model's ``Params``: unknown keys, wrong types, NaN/inf and out-of-range values
    are refused; instances are frozen."""

    model_config = ConfigDict(allow_inf_nan=False)


class TorchParams(ModelParams):
    """Where a torch-trained model runs and its seed."""

    device: Device = "cpu"
    seed: Seed = 0


class LinearParams(ModelParams):
    """Image-feature and class-vector normalisation of the linear semantic models."""

    features: FeatureMode = "none"
    semantic_norm: SemanticNorm = "l2"


class ClassifierParams(TorchParams):
    """The seen-class classifier of ConSE, trivial and the GCN models
    (:mod:`imagenet_zsl.models.seen_classifier`)."""

    classifier: Literal["auto", "head", "softmax"] = "auto"
    classifier_reg: NonNegative = 1e-4
    classifier_iter: PositiveInt = 200


class MinibatchParams(LinearParams, TorchParams):
    """Adam on seeded mini-batches: CMT and the ranking models (DeViSE, ALE, SJE, LATEM, SSE)."""

    lr: Positive = 1e-2
    weight_decay: NonNegative = 1e-4
    epochs: PositiveInt = 50
    batch_size: PositiveInt = 64
    features: FeatureMode = "standard"


def validate_params(
    params_class: type[ModelParams], values: Mapping[str, Any], where: str, prefix: str = "params."
) -> ModelParams:
    """``values`` checked against ``params_class`` → the typed parameters; a mistake is one
    UserInputError naming ``where`` (the file, or "model NAME"), ``prefix`` + the key, and the value."""
    if not isinstance(values, Mapping):
        raise UserInputError(
            f"invalid value ({where}: {prefix.rstrip('.') or 'params'}): give a mapping of hyper-parameters"
        )
    try:
        return params_class.model_validate(dict(values))
    except ValidationError as err:
        raise UserInputError(describe_error(err, params_class, values, where, prefix=prefix)) from None


def check_grid(
    params_class: type[ModelParams],
    grid: Mapping[str, Any],
    base: Mapping[str, Any],
    where: str,
    prefix: str = "select.grid.",
) -> None:
    """Every value of a selection ``grid`` ({name: [values]}) is a valid hyper-parameter on top of
    ``base``; checked before any work, one line naming ``where``, ``prefix`` + the name and the value."""
    for name, values in grid.items():
        if not isinstance(values, list | tuple) or not values:
            raise UserInputError(
                f"invalid value ({where}: {prefix}{name} = {values!r}): give a non-empty list of values"
            )
        for value in values:
            validate_params(params_class, {**base, name: value}, where, prefix=prefix)


# ----------------------------------------------------------------------------- descriptions
_BOUNDS = (
    (annotated_types.Gt, "> ", "gt"),
    (annotated_types.Ge, ">= ", "ge"),
    (annotated_types.Lt, "< ", "lt"),
    (annotated_types.Le, "<= ", "le"),
)


def _bounds(metadata: list[Any]) -> str:
    """'>= 0, < 1' from a field's annotated-types constraints."""
    return ", ".join(
        f"{sign}{getattr(item, attribute)}"
        for item in metadata
        for kind, sign, attribute in _BOUNDS
        if isinstance(item, kind)
    )


def _describe_type(annotation: Any, metadata: list[Any] | None = None) -> tuple[str, str]:
    """(type name, range or choices) of a field annotation and its constraints."""
    metadata = list(metadata or [])
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *extra = typing.get_args(annotation)
        for item in extra:
            metadata += list(getattr(item, "metadata", [])) or [item]
        return _describe_type(base, metadata)
    if any(getattr(item, "func", None) is _check_device for item in metadata):
        return "device", "cpu | cuda | cuda:N | auto"
    if origin is Literal:
        return "choice", " | ".join(str(v) for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        members = []
        for arg in typing.get_args(annotation):
            kind, bounds = _describe_type(arg)
            members.append(bounds if kind == "choice" else f"{kind} {bounds}".strip())
        return " | ".join(members), ""
    if origin is list:
        inner, bounds = _describe_type(typing.get_args(annotation)[0])
        return f"list[{inner}]", f"each {bounds}" if bounds else ""
    return getattr(annotation, "__name__", str(annotation)), _bounds(metadata)


def plain_annotation(annotation: Any) -> Any:
    """``annotation`` without its ``Annotated[...]`` constraints (``Annotated[float, Field(ge=0)]``
    → ``float``, inside unions and lists too): the type a model's ``__init__`` signature shows
    (:class:`~imagenet_zsl.models.base.ZSLModel`); the ranges stay in ``Params`` and its docstring."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return plain_annotation(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (plain_annotation(a) for a in typing.get_args(annotation)))
    if origin is list:
        return list[plain_annotation(typing.get_args(annotation)[0])]
    return annotation


def describe_params(params_class: type[ModelParams]) -> dict[str, dict[str, Any]]:
    """{name: {"type", "range", "default"}} of every hyper-parameter, in declaration order."""
    out = {}
    for name, field in params_class.model_fields.items():
        kind, bounds = _describe_type(field.annotation, field.metadata)
        out[name] = {"type": kind, "range": bounds, "default": field.get_default(call_default_factory=True)}
    return out
