"""Writing a run directory: the top-k lists, metrics.json, per_class.csv, report.md, the plots and,
last, the manifest (:func:`imagenet_zsl.manifests.write_manifest`) listing them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl import scoring as M
from imagenet_zsl.atomic import atomic_save_npy, atomic_write_json, atomic_write_text
from imagenet_zsl.evaluation import plots
from imagenet_zsl.evaluation.run.config import TOOL, EvaluationConfig
from imagenet_zsl.evaluation.run.run_report import render_run_report
from imagenet_zsl.evaluation.run.verify import EVALUATION_FORMAT, METRICS_NAME
from imagenet_zsl.manifests import write_manifest

if TYPE_CHECKING:
    from imagenet_zsl.evaluation.run.checked_inputs import EvaluationInputs
    from imagenet_zsl.evaluation.run.gzsl import GZSLResult
    from imagenet_zsl.evaluation.run.results import SearchResults
    from imagenet_zsl.evaluation.run.search_sets import SetResult
    from imagenet_zsl.evaluation.run.table import ClassTable
    from imagenet_zsl.evaluation.run.zsl import ZSLResult

TOPK_ABOUT = (
    "unseen: the label space; count_as_miss: classes outside it whose test images "
    "(not listed here) count as misses in metrics.json; "
    "X.labels.npy index the set's own classes (test/val: unseen or val_unseen; "
    "seen/val_seen: seen); X.SPACE.ids.npy index SPACE's list; X.rows.npy are row "
    "numbers in the set's feature directory (shard order); -1/-inf pad short lists; "
    "X.true_above.npy / X.true_tied.npy: classes of the set's own space scoring strictly "
    "above / exactly equal to the true class (over all classes, identical prototypes tied); "
    "X.SPACE.tail.npy: per image, SPACE's classes left out of its list that score exactly the "
    "list's last score (a tie group reaching the end of a list is counted whole)"
)


@dataclass(frozen=True, eq=False)
class RunOutputs:
    """What a finished run writes besides its top-k lists: the metrics (JSON-ready), the per-class
    table and the results the plots draw."""

    metrics: dict[str, Any]
    table: ClassTable
    zsl: ZSLResult
    gzsl: GZSLResult | None


def save_set(topk_dir: Path, name: str, result: SetResult | None) -> None:
    """One set's labels, row numbers, true ranks and top-k lists as .npy files in ``topk_dir``."""
    if result is None:
        return
    atomic_save_npy(topk_dir / f"{name}.labels.npy", result.labels.astype(np.int32))
    atomic_save_npy(topk_dir / f"{name}.rows.npy", result.rows)
    atomic_save_npy(topk_dir / f"{name}.true_above.npy", result.ranks.above.astype(np.int32))
    atomic_save_npy(topk_dir / f"{name}.true_tied.npy", result.ranks.tied.astype(np.int32))
    for space, (scores, ids) in result.lists.items():
        _save_list(topk_dir / f"{name}.{space}.scores.npy", scores, np.float32)
        _save_list(topk_dir / f"{name}.{space}.ids.npy", ids, np.int32)
        if space in result.tails:
            _save_list(topk_dir / f"{name}.{space}.tail.npy", result.tails[space], np.int32)


def _save_list(path: Path, array: np.ndarray, dtype: type) -> None:
    """np.save's bytes (format 1.0 header, C order), written SORT_BLOCK rows at a time: a
    memory-mapped list is read block by block and its pages are not kept resident (issue 38 §4).
    Plainly written: the run directory is a temp directory until it is complete."""
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False,
        "shape": array.shape,
    }
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        for lo in range(0, len(array), M.SORT_BLOCK):
            handle.write(np.ascontiguousarray(array[lo : lo + M.SORT_BLOCK], dtype=dtype).tobytes())
            M.release_pages(array)


def _write_topk(tmp: Path, inp: EvaluationInputs, results: SearchResults, metrics: dict[str, Any]) -> None:
    topk_dir = tmp / "topk"
    topk_dir.mkdir()
    classes = {
        "unseen": list(inp.space_wnids),
        "seen": list(inp.seen_wnids or []),
        "val_unseen": list(inp.val_wnids or []),
        "count_as_miss": metrics["count_as_miss"]["images_per_class"],
        "about": TOPK_ABOUT,
    }
    atomic_write_json(topk_dir / "classes.json", classes)
    for name, result in results.sets():
        save_set(topk_dir, name, result)


def _write_plots(tmp: Path, outputs: RunOutputs) -> None:
    metrics = outputs.metrics
    title = f"{metrics['model']['name']} on {metrics['inputs']['split']['name']}"
    plots.plot_hit_curve(metrics["zsl"], tmp / "hit_at_k.svg", title)
    gzsl = outputs.gzsl
    if gzsl is not None and gzsl.curves:
        plots.plot_suc(gzsl.curves, tmp / "suc_curve.svg", gzsl.direct_points, gzsl.calibrated_points, title)
    if outputs.zsl.breakdown is not None:
        plots.plot_error_breakdown(metrics["hierarchy"], tmp / "error_breakdown.svg")


def config_record(cfg: EvaluationConfig) -> dict[str, Any]:
    """The config as the manifest's ``parameters`` (paths as strings, K values as a list)."""
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
    config["ks"] = list(config["ks"])
    config["count_as_miss"] = list(config["count_as_miss"])
    return config


def write_run(tmp: Path, inp: EvaluationInputs, results: SearchResults, outputs: RunOutputs) -> None:
    """Write the run directory's files into ``tmp`` (top-k lists, metrics, table, report, plots,
    then the manifest listing them)."""
    metrics = outputs.metrics
    _write_topk(tmp, inp, results, metrics)
    atomic_write_json(tmp / METRICS_NAME, metrics)
    atomic_write_text(tmp / "per_class.csv", outputs.table.to_csv())
    atomic_write_text(tmp / "report.md", render_run_report(metrics))
    if inp.cfg.plots:
        _write_plots(tmp, outputs)
    write_manifest(
        tmp,
        format=EVALUATION_FORMAT,
        tool=TOOL,
        inputs=metrics["inputs"],
        parameters=config_record(inp.cfg),
        fields={
            "model": metrics["model"],
            "feature_mismatch": metrics["provenance"]["feature_mismatch"],
        },
    )
