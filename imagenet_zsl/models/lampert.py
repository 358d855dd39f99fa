"""Lampert et al.'s attribute-classifier baselines DAP and IAP ("Attribute-based classification for
zero-shot visual object categorization", TPAMI 2013) as dot-product ZSL models.

Both estimate attribute posteriors p(a_m | x) and score class z by Lampert's MAP rule

    log p(z | x) = sum_m [ s_zm log(p_m / pi_m) + (1 - s_zm) log((1 - p_m) / (1 - pi_m)) ] + const

with binary class signatures s_z and attribute priors pi_m (the empirical mean over seen classes,
as in the paper; ``prior="uniform"`` drops them). The rule is linear in s_z, hence:

    embed_images(x)      = [log p - log pi, log(1 - p) - log(1 - pi)]        (N, 2A)
    class_prototypes(z)  = [s_z, 1 - s_z]                                    (C, 2A)

* DAP: one L2-regularised logistic regression per attribute on seen images (fitted jointly: one
  linear layer with A sigmoid outputs, full-batch L-BFGS).
* IAP: a softmax classifier over seen classes; p(a_m | x) = sum_k p(y_k | x) s_km.

Both train with the toolkit's one L-BFGS linear-layer trainer
(:func:`~imagenet_zsl.models.common.fit_linear_lbfgs`, the seen classifier's too).

Binarisation: 0/1 semantics are used as given (xlsa17's ``binaryAtt``, which the attribute protocol
passes to these models). Real-valued semantics are thresholded at the mean of the whole semantic
matrix handed to ``fit``, the rule that reproduces xlsa17's released binaryAtt from original_att.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel, check_is_fitted
from imagenet_zsl.models.common import (
    LabelRows,
    LBFGSSettings,
    check_features,
    check_seen_data,
    column_moments,
    fit_linear_lbfgs,
)
from imagenet_zsl.models.params import ModelParams, NonNegative, PositiveInt

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors


#: DAP's and IAP's L-BFGS stopping tolerances (looser than the seen classifier's)
LBFGS_TOLERANCES = {"tolerance_grad": 1e-6, "tolerance_change": 1e-9}


class _AttributePosteriorModel(ZSLModel):
    """Shared parts: validation, feature standardisation, signatures, priors, log embedding."""

    class Params(ModelParams):
        reg: NonNegative = 1e-3
        max_iter: PositiveInt = 100
        prior: Literal["empirical", "uniform"] = "empirical"
        eps: Annotated[float, Field(gt=0, lt=0.5)] = 1e-4

    #: these models read binary class signatures (the attribute protocol passes binaryAtt)
    semantics_kind: ClassVar[str] = "binary"
    #: hyper-parameter grid searched on validation classes
    grid: ClassVar[dict[str, list[Any]]] = {"reg": [1e-4, 1e-3, 1e-2, 1e-1, 1.0]}

    def _settings(self) -> LBFGSSettings:
        return LBFGSSettings(float(self.params["reg"]), int(self.params["max_iter"]), **LBFGS_TOLERANCES)

    # ---------------------------------------------------------------- signatures
    def _signatures(self, wnids: Sequence[str]) -> np.ndarray:
        matrix = self.semantics_.get(list(wnids)).astype(np.float64)
        return (matrix > self.threshold_).astype(np.float64)

    def _prepare(self, data: SeenData, semantics: ClassVectors) -> tuple[Any, np.ndarray]:
        """(features (N, D) row source, seen signatures (Z, A)); fits the standardisation (blockwise
        column moments: :meth:`_standardise` is applied to each block as the trainer reads it)."""
        features, _ = check_seen_data(self.name, data)
        self.semantics_ = semantics
        matrix = semantics.matrix
        is_binary = np.isin(matrix, (0.0, 1.0)).all()
        self.threshold_ = 0.5 if is_binary else float(matrix.mean())
        signatures = self._signatures(data.seen_wnids)
        eps = float(self.params["eps"])
        if self.params["prior"] == "empirical":
            prior = signatures.mean(axis=0)
        else:
            prior = np.full(signatures.shape[1], 0.5)
        self.log_prior_ = np.log(np.clip(prior, eps, 1 - eps))
        self.log_not_prior_ = np.log(np.clip(1 - prior, eps, 1 - eps))
        self.mean_, std = column_moments(features)
        self.scale_ = np.maximum(std, 1e-6)
        return features, signatures

    def _standardise(self, features: np.ndarray) -> np.ndarray:
        return (features - self.mean_) / self.scale_

    # ---------------------------------------------------------------- scoring
    def attribute_posteriors(self, features: np.ndarray) -> np.ndarray:
        """(N, D) features → (N, A) p(a_m = 1 | x), clipped to [eps, 1 - eps]."""
        check_is_fitted(self)
        features = check_features(self.name, features, self.mean_.shape[0])
        eps = float(self.params["eps"])
        return np.clip(self._posteriors(self._standardise(features)), eps, 1 - eps)

    def _posteriors(self, standardised: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        p = self.attribute_posteriors(features).astype(np.float64)
        positive = np.log(p) - self.log_prior_
        negative = np.log1p(-p) - self.log_not_prior_
        return np.concatenate([positive, negative], axis=1).astype(np.float32)

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        check_is_fitted(self)
        signatures = self._signatures(wnids)
        return np.concatenate([signatures, 1 - signatures], axis=1).astype(np.float32)


@MODELS.register
class DAP(_AttributePosteriorModel):
    """Direct Attribute Prediction: per-attribute logistic regressions on seen images."""

    name: ClassVar[str] = "dap"

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> DAP:
        features, signatures = self._prepare(data, semantics)
        targets = LabelRows(signatures, np.asarray(data.labels, dtype=np.int64))  # (N, A), on demand
        self.weight_, self.bias_ = fit_linear_lbfgs(
            features, targets, self._settings(), "bce", transform=self._standardise
        )
        return self

    def _posteriors(self, standardised: np.ndarray) -> np.ndarray:
        logits = standardised @ self.weight_ + self.bias_
        return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))


@MODELS.register
class IAP(_AttributePosteriorModel):
    """Indirect Attribute Prediction: seen-class posteriors mapped through seen signatures."""

    name: ClassVar[str] = "iap"

    def fit(self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None) -> IAP:
        features, signatures = self._prepare(data, semantics)
        labels = np.asarray(data.labels, dtype=np.int64)
        self.weight_, self.bias_ = fit_linear_lbfgs(
            features, labels, self._settings(), "ce", len(data.seen_wnids), transform=self._standardise
        )
        self.seen_signatures_ = signatures
        return self

    def _posteriors(self, standardised: np.ndarray) -> np.ndarray:
        logits = (standardised @ self.weight_ + self.bias_).astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        return probabilities @ self.seen_signatures_
