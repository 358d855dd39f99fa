"""``imagenet-zsl evaluate``: search once, keep the top-k lists, compute every metric, write a run.

Flow: every input is checked first (split, feature manifests, class coverage, dimensions, seen
classes), then each image set is streamed shard by shard through the query source and searched
against each label space (blocked matmul), then metrics, tables and plots are written into the output
directory in one atomic rename.

Image sets and label spaces (``m = max(K) + 1`` classes kept per image and space):

* ``test``     — images of the split's classes from ``--features``: searched among the classes
  of the label space (``unseen`` space; the ZSL result) and, with ``--gzsl``, among the seen
  classes.
* ``seen``     — held-out images of seen classes (``--seen-features``, e.g. ILSVRC-2012 val):
  searched among seen and test classes.
* ``val`` / ``val_seen`` — with ``--val-split``: images of validation classes and held-out seen
  images, used only to choose the calibration γ (never the test images). Without
  ``--val-seen-features`` a seeded ``--val-seen-fraction`` of the seen images is held out for
  validation and removed from the seen test images.

The label space (``--label-space``, :func:`imagenet_zsl.splits.label_space.resolve_label_space`)
is the split's classes (``split``), every ImageNet-21K class that is not a seen class (``all``),
or a wnid list file. Split classes without test images stay in it as distractors (they need a
prototype, not images); metrics are over the test images of the split classes the feature
directory holds. ``count_as_miss`` classes (split classes a model cannot represent) leave the label
space, but their test images stay in every denominator as misses (flat and per-class hit@K, GZSL
unseen accuracy); they are never searched and their images are not in ``topk/``.

Provenance: the identity of the test features (:mod:`imagenet_zsl.features.identity`) is compared
with the one the model directory records for its training features, and with the identities of
the other feature directories of the run; a difference is an error unless
``--allow-feature-mismatch``, whose override is recorded in metrics.json and the manifest.

Ties: every hit@K is reported under two rules (:mod:`imagenet_zsl.scoring`): the expected value
under random tie-breaking (the headline keys) and ties-against-the-model (``*_strict`` keys); the
search counts, over the full score row, the classes strictly above and tied with each true class
(identical prototypes always tie). When the features' manifest records the backbone's
pretraining label set, the test classes seen in pretraining are counted and warned about.

Steps, each in its own module: :mod:`.inputs` (every check; the frozen :class:`EvaluationInputs`
it builds lives in :mod:`.checked_inputs`),
:mod:`.results` / :mod:`.search_sets` / :mod:`.cache` (the search), :mod:`.zsl`, :mod:`.gzsl` and
:mod:`.table` (metrics as pure functions of inputs and search results), :mod:`.provenance` and
:mod:`.writer` (the run directory and its manifest).

Resumable: each shard's search result is cached in ``.<out>.search-cache/`` next to ``--out``
(keyed by the model/prototype digest, the shard's sha256 and k); re-running an interrupted
command skips finished shards. The cache is deleted once the run is written or fails on its inputs
(:func:`.cache.run_cache`). ``run`` also opens a
shared cache (:func:`.cache.shared_search`) in which the held-out seen and validation images'
searches are kept per label space and reused by the model's other splits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.evaluation.run.cache import run_cache
from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs
from imagenet_zsl.evaluation.run.classes import present_classes, representable_classes
from imagenet_zsl.evaluation.run.config import TOOL, VAL_SEEN_FRACTION, EvaluationConfig, input_paths
from imagenet_zsl.evaluation.run.gzsl import gzsl_metrics, held_calibration_rows
from imagenet_zsl.evaluation.run.inputs import check_inputs
from imagenet_zsl.evaluation.run.provenance import provenance, warn_pretraining
from imagenet_zsl.evaluation.run.results import SearchResults, run_search
from imagenet_zsl.evaluation.run.search_sets import SearchContext
from imagenet_zsl.evaluation.run.table import class_table
from imagenet_zsl.evaluation.run.writer import RunOutputs, write_run
from imagenet_zsl.evaluation.run.zsl import zsl_metrics
from imagenet_zsl.safe_output import atomic_directory

if TYPE_CHECKING:
    from imagenet_zsl.hierarchy.graph import ClassGraph

__all__ = [
    "VAL_SEEN_FRACTION",
    "EvaluationConfig",
    "EvaluationInputs",
    "check_inputs",
    "compute_outputs",
    "evaluate",
    "present_classes",
    "representable_classes",
]


def _str_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _str_keys(v) for k, v in obj.items()}
    return obj


def _finite_or_none(obj: Any) -> Any:
    """JSON has no NaN/Infinity: such values become null."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_none(v) for v in obj]
    if isinstance(obj, float | np.floating) and not np.isfinite(obj):
        return None
    return obj


def compute_outputs(inp: EvaluationInputs, results: SearchResults) -> RunOutputs:
    """Every metric of a run from its inputs and search results (pure: nothing is written)."""
    zsl = zsl_metrics(inp, results)
    gzsl = gzsl_metrics(inp, results) if inp.cfg.gzsl else None
    table, properties = class_table(inp, zsl, gzsl)
    metrics: dict[str, Any] = dict(zsl.blocks)
    if gzsl is not None:
        metrics["gzsl"] = gzsl.block
    metrics["class_properties"] = properties
    metrics.update(provenance(inp))
    return RunOutputs(_finite_or_none(_str_keys(metrics)), table, zsl, gzsl)


def evaluate(cfg: EvaluationConfig, graph: ClassGraph | None | str = None, progress: bool = True) -> dict:
    """Run the whole evaluation and write ``cfg.out``; returns the metrics dict.

    ``graph`` overrides ``cfg.graph`` (a ClassGraph object, e.g. a hand-made one in tests).
    """
    inp = check_inputs(cfg, graph)
    out = Path(cfg.out)
    warn_pretraining(inp)
    with run_cache(out) as cache:  # kept only for a resume: see run_cache
        results = run_search(
            inp, SearchContext(inp.source, cache, cfg.block_rows, progress, search=cfg.search)
        )
        results = held_calibration_rows(inp, results)
        outputs = compute_outputs(inp, results)
        with atomic_directory(out, tool=TOOL, inputs=input_paths(cfg)) as tmp:
            write_run(tmp, inp, results, outputs)
    return outputs.metrics
