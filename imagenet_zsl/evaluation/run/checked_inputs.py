"""The frozen record of a run's checked inputs (:class:`EvaluationInputs`, :class:`GZSLSets`): its
own module below both the builder (:mod:`~imagenet_zsl.evaluation.run.inputs`) and the stages that
read it (provenance, zsl, gzsl, results, table, writer), so none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.evaluation.queries import QuerySource
from imagenet_zsl.evaluation.run.classes import LabelSpace
from imagenet_zsl.evaluation.run.config import EvaluationConfig
from imagenet_zsl.evaluation.search import TopKSearcher
from imagenet_zsl.features.feature_dir import FeatureDir

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph


@dataclass(frozen=True, eq=False)
class GZSLSets:
    """The seen and validation image sets of a GZSL run (``None`` where the run has none).

    ``seen_wnids``: the seen classes the source can represent; ``excluded_seen``: those it cannot
    (they left with their images); ``*_lookup``: (len(fd.classes),) feature label → class index."""

    seen_wnids: list[str] | None = None
    seen_fd: FeatureDir | None = None
    seen_lookup: np.ndarray | None = None
    excluded_seen: tuple[str, ...] = ()
    val_wnids: list[str] | None = None
    val_fd: FeatureDir | None = None
    val_lookup: np.ndarray | None = None
    val_seen_fd: FeatureDir | None = None
    val_seen_lookup: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class EvaluationInputs:
    """Every input of a run: the test set with its label space, lookups and per-class counts, the
    GZSL sets, the query source, the graph for the error breakdown and the searcher of each label
    space."""

    cfg: EvaluationConfig
    ks: tuple[int, ...]
    #: classes kept per image and space: max(K) + 1
    m: int
    split_wnids: list[str]
    fd: FeatureDir
    source: QuerySource
    space: LabelSpace
    #: (len(fd.classes),) feature label → index in the label space (-1: not a test image)
    test_lookup: np.ndarray
    #: (len(split_wnids),) test images of each split class (kept images only, misses included)
    class_counts_all: np.ndarray
    #: (len(space.miss),) test images of each count-as-miss class
    miss_counts: np.ndarray
    #: ``--allow-feature-mismatch`` override records (empty: every identity agreed or is unknown)
    feature_checks: list[dict[str, Any]]
    graph: ClassGraph | None
    sets: GZSLSets
    spaces: dict[str, TopKSearcher]
    kept_ids: np.ndarray | None
    #: "seen in pretraining" block of metrics.json (None: the features do not record it)
    pretraining: dict[str, Any] | None
    pretraining_wnids: frozenset[str] | None

    @property
    def space_wnids(self) -> list[str]:
        """The ZSL label space (the ``unseen`` search space)."""
        return self.space.wnids

    @property
    def eval_wnids(self) -> list[str]:
        """What test labels index: the label space, then the count-as-miss classes."""
        return self.space.eval_wnids

    @property
    def seen_wnids(self) -> list[str] | None:
        return self.sets.seen_wnids

    @property
    def val_wnids(self) -> list[str] | None:
        return self.sets.val_wnids
