"""What a filter run decides per class, the tables and report it writes, and their readers.

Written (by :func:`~imagenet_zsl.image_filter.quality.filter_feature_dir`): ``kept.csv``
(image_id, wnid: kept images of kept classes), ``classes.csv`` (:data:`CLASS_COLUMNS`),
``rejected.csv`` (images that failed, with the prediction that failed them), ``report.md`` and
``class_accuracy.png``. Read back by :mod:`~imagenet_zsl.image_filter.filtered`.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from imagenet_zsl.features.in_memory import LoadedFeatures
from imagenet_zsl.image_filter.crossfit import CrossFitFilter
from imagenet_zsl.image_filter.params import FilterParams
from imagenet_zsl.plotting import save_figure, subplots

CLASS_COLUMNS = ("wnid", "images_before", "images_after", "heldout_accuracy", "kept", "reason")
PLOT_NAME = "class_accuracy.png"

# --------------------------------------------------------------------------------------------
# class-level outcome


def class_outcomes(
    labels: np.ndarray, classes: list[str], crossfit: CrossFitFilter, params: FilterParams
) -> list[dict[str, Any]]:
    """One row per class of the label space (C rows, ``labels`` (N,) into ``classes``): counts,
    held-out accuracy (None when no image was judged), kept, and the reason when dropped."""
    num_classes = len(classes)
    before = np.bincount(labels, minlength=num_classes)
    judged = np.bincount(labels[crossfit.judged_], minlength=num_classes)
    correct = np.bincount(labels, weights=crossfit.correct_.sum(axis=0), minlength=num_classes)
    after = np.bincount(labels[crossfit.keep_], minlength=num_classes)
    rows = []
    for c, wnid in enumerate(classes):
        accuracy = correct[c] / (judged[c] * params.seeds) if judged[c] else None
        if before[c] == 0:
            reason = "no images"
        elif judged[c] == 0:
            reason = f"{before[c]} images, fewer than --folds {params.folds}: cannot be cross-fitted"
        elif accuracy < params.min_class_accuracy:
            reason = f"held-out accuracy {accuracy:.3f} < --min-class-accuracy {params.min_class_accuracy:g}"
        elif after[c] < params.min_images:
            reason = f"{after[c]} images kept < --min-images {params.min_images}"
        else:
            reason = ""
        rows.append(
            {
                "wnid": wnid,
                "images_before": int(before[c]),
                "images_after": int(after[c]),
                "heldout_accuracy": accuracy,
                "kept": reason == "",
                "reason": reason,
            }
        )
    return rows


# --------------------------------------------------------------------------------------------
# tables


def _csv_text(header: tuple[str, ...] | list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _format_accuracy(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _write_class_table(path: Path, outcomes: list[dict[str, Any]]) -> None:
    rows = [
        [
            o["wnid"],
            o["images_before"],
            o["images_after"],
            _format_accuracy(o["heldout_accuracy"]),
            "true" if o["kept"] else "false",
            o["reason"],
        ]
        for o in outcomes
    ]
    path.write_text(_csv_text(CLASS_COLUMNS, rows))


def _write_image_table(path: Path, columns: dict[str, np.ndarray]) -> None:
    """Large image lists via pandas (C writer) with fixed formatting for byte-stable files."""
    import pandas as pd  # deferred: the pool filter reads classes.csv (csv module) without pandas

    pd.DataFrame(columns).to_csv(path, index=False, lineterminator="\n")


def write_tables(
    directory: Path, data: LoadedFeatures, crossfit: CrossFitFilter, outcomes: list[dict[str, Any]]
) -> None:
    """``kept.csv``, ``rejected.csv`` and ``classes.csv`` of a fitted run into ``directory``."""
    wnids = np.asarray(data.classes, dtype=np.str_)
    class_kept = np.array([o["kept"] for o in outcomes], dtype=bool)
    keep = crossfit.keep_ & class_kept[data.labels]
    rejected = crossfit.judged_ & ~crossfit.keep_
    first_wrong = np.argmax(~crossfit.correct_, axis=0)
    failing_prediction = crossfit.predicted_[first_wrong, np.arange(len(data.labels))]
    _write_image_table(directory / "kept.csv", {"image_id": data.ids[keep], "wnid": wnids[data.labels[keep]]})
    _write_image_table(
        directory / "rejected.csv",
        {
            "image_id": data.ids[rejected],
            "wnid": wnids[data.labels[rejected]],
            "predicted_wnid": wnids[failing_prediction[rejected]],
            "correct_seeds": crossfit.correct_.sum(axis=0)[rejected],
        },
    )
    _write_class_table(directory / "classes.csv", outcomes)


# --------------------------------------------------------------------------------------------
# report


def _judged_accuracies(outcomes: list[dict[str, Any]]) -> np.ndarray:
    return np.array([o["heldout_accuracy"] for o in outcomes if o["heldout_accuracy"] is not None])


def _plot_histogram(path: Path, accuracies: np.ndarray, threshold: float) -> None:
    fig, ax = subplots(figsize=(6, 3.5), dpi=100)
    ax.hist(accuracies, bins=20, range=(0.0, 1.0), color="#4c72b0", edgecolor="white")
    if threshold > 0:
        ax.axvline(threshold, color="#c44e52", linestyle="--", label="--min-class-accuracy")
        ax.legend(loc="upper left")
    ax.set_xlabel("held-out accuracy of the class")
    ax.set_ylabel("classes")
    ax.set_title("Per-class held-out accuracy (cross-fitted)")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def _histogram_rows(accuracies: np.ndarray, bins: int = 10) -> list[list[Any]]:
    counts, edges = np.histogram(accuracies, bins=bins, range=(0.0, 1.0))
    widest = max(int(counts.max()) if len(counts) else 0, 1)
    return [
        [
            f"{edges[i]:.1f}–{edges[i + 1]:.1f}",
            int(counts[i]),
            "█" * math.ceil(30 * counts[i] / widest) if counts[i] else "",
        ]
        for i in range(len(counts))
    ]


def _dropped_section(outcomes: list[dict[str, Any]]) -> list[str]:
    dropped = [o for o in outcomes if not o["kept"]]
    if not dropped:
        return []
    shown = sorted(dropped, key=lambda o: o["wnid"])[:50]
    return [
        f"## Dropped classes ({len(dropped)}" + (", first 50 shown" if len(dropped) > 50 else "") + ")",
        "",
        tabulate(
            [
                [
                    o["wnid"],
                    o["images_before"],
                    o["images_after"],
                    _format_accuracy(o["heldout_accuracy"]),
                    o["reason"],
                ]
                for o in shown
            ],
            headers=["wnid", "images", "kept images", "accuracy", "reason"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
    ]


def report_text(
    summary: dict[str, Any],
    outcomes: list[dict[str, Any]],
    params: FilterParams,
    features_dir: str,
    classifier: str | None = None,
) -> str:
    """``report.md``: before/after counts, the accuracy histogram and the dropped classes.

    ``classifier`` names what judged the images when it is not ``params.classifier``.
    """
    lines = [
        "# Image-quality filter report",
        "",
        f"Features: `{features_dir}` ({summary['images_before']} images, "
        f"{summary['classes_before']} classes, {summary['dim']}-d). Classifier: "
        f"{classifier or params.classifier}, cross-fitted over {params.folds} stratified folds x "
        f"{params.seeds} seed(s) from seed {params.seed}; an image is kept when every model "
        "that never saw it classifies it correctly.",
        "",
        tabulate(
            [
                ["images", summary["images_before"], summary["images_after"]],
                ["classes", summary["classes_before"], summary["classes_after"]],
            ],
            headers=["", "before", "after"],
            tablefmt="github",
        ),
        "",
        f"Overall held-out accuracy: {summary['heldout_accuracy']:.4f}. Images rejected by the "
        f"classifier: {summary['images_rejected']}; classes dropped: {summary['classes_dropped']} "
        f"(--min-class-accuracy {params.min_class_accuracy:g}, --min-images {params.min_images}).",
        "",
        "## Per-class held-out accuracy",
        "",
        f"![per-class held-out accuracy]({PLOT_NAME})",
        "",
        tabulate(
            _histogram_rows(_judged_accuracies(outcomes)),
            headers=["accuracy", "classes", ""],
            tablefmt="github",
        ),
        "",
        *_dropped_section(outcomes),
        "Full tables: `classes.csv`, `kept.csv`, `rejected.csv`.",
        "",
    ]
    return "\n".join(lines)


def write_report(
    directory: Path,
    summary: dict[str, Any],
    outcomes: list[dict[str, Any]],
    params: FilterParams,
    features_dir: str,
    classifier: str | None = None,
) -> None:
    """``class_accuracy.png`` and ``report.md`` (see :func:`report_text`) into ``directory``."""
    _plot_histogram(directory / PLOT_NAME, _judged_accuracies(outcomes), params.min_class_accuracy)
    (directory / "report.md").write_text(report_text(summary, outcomes, params, features_dir, classifier))
