"""``imagenet-zsl analyze factor RUN_DIR``: hit@K against a controlled factor, per model.

The run's splits are factor splits (``imagenet-zsl splits factor``): each cell's split file lies
in a factor-split directory whose manifest names the factor, the bin and the bin's mean factor
value (or give that directory with ``--splits``). Per (model, factor, bin) the headline is the
per-class hit@K (mean over the split's classes of the class's hit@K, from the cell's
``per_class.csv``) with a seeded percentile bootstrap confidence interval over classes.

Each bin is placed at the mean factor value of the classes the cell actually evaluated (from the
factor-split directory's ``classes.csv``), not the full split's mean: a class that could not be
scored (e.g. no word vector) is in neither the hit@K nor the x value, and the table says how many
of the split's classes were evaluated. Cells are verified against their manifests and must share
one feature identity (``--allow-feature-mismatch`` overrides; recorded and shown).

Tie rules as in ``evaluate``: ``hit`` is the expected value under uniform random tie-breaking (the
``hit@K`` column), ``hit_strict`` counts ties against the model (``hit@K_strict``); both come from
the same bootstrap resamples of classes, so their intervals are paired.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from imagenet_zsl import scoring as M
from imagenet_zsl.analysis.factor_splits import FORMAT
from imagenet_zsl.analysis.factor_splits import TOOL as SPLITS_TOOL
from imagenet_zsl.analysis.runs import (
    RunCell,
    cell_backbone,
    check_cell_features,
    features_note,
    mismatch_note,
    read_cells,
)
from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest, read_manifest_verified, write_manifest
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.safe_output import atomic_directory

#: 2: written by manifests.write_manifest ("files" for "outputs", settings under "parameters")
FACTOR_FORMAT = "imagenet-zsl/factor-analysis-v2"
FACTOR_TOOL = "imagenet-zsl analyze factor"


@dataclass
class FactorOptions:
    """``imagenet-zsl analyze factor`` settings."""

    run_dir: Path
    out: Path | None = None
    splits_dir: Path | None = None
    ks: Sequence[int] = field(default_factory=lambda: [1, 5])
    resamples: int = 1000
    level: float = 0.95
    seed: int = 0
    allow_feature_mismatch: bool = False

    @property
    def out_dir(self) -> Path:
        """``--out``, by default ``RUN_DIR-factor`` next to the run."""
        return Path(self.out) if self.out is not None else Path(f"{Path(self.run_dir)}-factor")


def bootstrap_ci(
    values: np.ndarray, resamples: int, level: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling classes)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return float("nan"), float("nan")
    means = values[rng.integers(0, len(values), (resamples, len(values)))].mean(axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired_bootstrap_ci(
    columns: Sequence[np.ndarray], resamples: int, level: float, rng: np.random.Generator
) -> list[tuple[float, float]]:
    """:func:`bootstrap_ci` of several (n,) value columns over the same resampled rows."""
    n = len(columns[0])
    if n == 0:
        return [(float("nan"), float("nan"))] * len(columns)
    rows = rng.integers(0, n, (resamples, n))
    tail = (1 - level) / 2
    out = []
    for values in columns:
        means = np.asarray(values, dtype=np.float64)[rows].mean(axis=1)
        out.append((float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))))
    return out


def _factor_manifest(
    cell: RunCell, splits_dir: Path | None, seen: dict[Path, dict]
) -> tuple[dict, Path] | None:
    """The verified manifest of the factor-split directory holding the cell's split, and that
    directory (None: the split is not a factor split). ``seen`` caches directories verified."""
    folder = splits_dir if splits_dir is not None else (cell.split_path.parent if cell.split_path else None)
    if folder is None or not (Path(folder) / MANIFEST_NAME).is_file():
        return None
    folder = Path(folder)
    if folder not in seen:
        recognised = read_manifest(folder)  # another tool's directory (a plain split list) is skipped
        if recognised is not None and recognised.get("tool") != SPLITS_TOOL:
            return None
        seen[folder] = read_manifest_verified(folder, FORMAT, rerun=f"re-run '{SPLITS_TOOL}'")
    manifest = seen[folder]
    if not isinstance(manifest.get("splits"), dict) or cell.split not in manifest["splits"]:
        return None
    return manifest, folder


def _split_classes(manifest: dict, folder: Path, split: str) -> pd.DataFrame:
    """The split's rows of the factor-split directory's classes.csv (wnid and the factors)."""
    path = folder / "classes.csv"
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise UserInputError(f"{path}: not readable ({err}); re-run `imagenet-zsl splits factor`") from err
    factor = manifest["factor"]
    if not {"split", "wnid", factor} <= set(table.columns):
        raise UserInputError(f"{path}: needs columns split, wnid and {factor}")
    return table[table["split"] == split].set_index("wnid")


def _per_class(cell: RunCell, ks: Sequence[int]) -> pd.DataFrame:
    path = cell.path / "per_class.csv"
    if not path.is_file():
        raise UserInputError(f"{path}: missing; the run directory is incomplete")
    table = pd.read_csv(path)
    absent = [f"hit@{k}" for k in ks if f"hit@{k}" not in table.columns]
    if absent:
        raise UserInputError(f"{path}: no column {absent[0]}; was the run evaluated with that K (--k)?")
    absent = [f"hit@{k}_strict" for k in ks if f"hit@{k}_strict" not in table.columns]
    if absent:
        raise UserInputError(
            f"{path}: no column {absent[0]}; the run predates the tie-fair metrics, re-run the evaluation"
        )
    return table[table["role"] == "unseen"]


def factor_rows(opts: FactorOptions) -> pd.DataFrame:
    """One row per (model, factor, bin, K): x (bin mean of the factor), hit@K and its interval."""
    ks = M.hit_ks(opts.ks)
    if opts.resamples < 1 or not 0 < opts.level < 1:
        raise UserInputError("--resamples must be >= 1 and --level in (0, 1)")
    rng = np.random.default_rng(opts.seed)
    rows = []
    cells = read_cells(opts.run_dir)
    overrides = check_cell_features(cells, opts.allow_feature_mismatch)
    verified: dict[Path, dict] = {}
    for cell in cells:
        found = _factor_manifest(cell, opts.splits_dir, verified)
        if found is None:
            continue
        manifest, folder = found
        factor, info = manifest["factor"], manifest["splits"][cell.split]
        table = _per_class(cell, ks)
        split_classes = _split_classes(manifest, folder, cell.split)
        for k in ks:
            part = table.set_index("wnid")[[f"hit@{k}", f"hit@{k}_strict"]].dropna()
            values, strict = (part[c].to_numpy(dtype=np.float64) for c in part.columns)
            evaluated = split_classes.reindex(part.index)[factor].dropna()
            (low, high), (low_s, high_s) = paired_bootstrap_ci(
                [values, strict], opts.resamples, opts.level, rng
            )
            rows.append(
                {
                    "model": cell.model,
                    "backbone": cell_backbone(cell),
                    "factor": factor,
                    "split": cell.split,
                    "bin": int(info["bin"]),
                    "x": float(evaluated.mean()) if len(evaluated) else float("nan"),
                    "x_split": float(info["means"][factor]),
                    "k": k,
                    "classes": int(len(values)),
                    "split_classes": int(len(split_classes)),
                    "hit": float(values.mean()) if len(values) else float("nan"),
                    "ci_low": low,
                    "ci_high": high,
                    "hit_strict": float(strict.mean()) if len(strict) else float("nan"),
                    "ci_low_strict": low_s,
                    "ci_high_strict": high_s,
                }
            )
    if not rows:
        raise UserInputError(
            f"{opts.run_dir}: no cell was evaluated on a factor split (`imagenet-zsl splits factor`); "
            "give the factor-split directory with --splits if the files moved"
        )
    out = (
        pd.DataFrame(rows).sort_values(["factor", "model", "k", "bin"], kind="stable").reset_index(drop=True)
    )
    out.attrs["feature_mismatch"] = overrides
    out.attrs["features_note"] = features_note(cells)
    return out


def render_markdown(table: pd.DataFrame, level: float) -> str:
    """Per-class hit@K (%) with its bootstrap interval, expected (headline) and strict tie rule,
    one row per (factor, model, K, bin)."""
    ci = f"{int(100 * level)}% CI"
    lines = [
        "| factor | model | K | bin | factor mean (evaluated) | classes evaluated / in split | "
        f"per-class hit@K % | {ci} | strict % | strict {ci} |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r['factor']} | {r['model']} | {r['k']} | {r['bin']} | {r['x']:.3f} | "
            f"{r['classes']} / {r['split_classes']} | "
            f"{100 * r['hit']:.2f} | [{100 * r['ci_low']:.2f}, {100 * r['ci_high']:.2f}] | "
            f"{100 * r['hit_strict']:.2f} | "
            f"[{100 * r['ci_low_strict']:.2f}, {100 * r['ci_high_strict']:.2f}] |"
        )
    lines += [
        "",
        "Each bin is placed at the factor's mean over the classes evaluated in that cell (a class "
        "the model could not score is left out of both the hit@K and the mean).",
    ]
    return "\n".join(lines) + "\n"


def plot_factor(table: pd.DataFrame, path: str | Path) -> None:
    """One panel per (factor, K): per-class hit@K against the bin's factor mean, one line per model."""
    panels = list(dict.fromkeys(zip(table["factor"], table["k"], strict=True)))
    # constrained layout keeps the x-label and the legend inside the saved image
    fig, axes = subplots(
        1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, layout="constrained"
    )
    for ax, (factor, k) in zip(axes[0], panels, strict=True):
        part = table[(table["factor"] == factor) & (table["k"] == k)]
        for model, rows in part.groupby("model", sort=True):
            y = 100 * rows["hit"].to_numpy()
            err = [y - 100 * rows["ci_low"].to_numpy(), 100 * rows["ci_high"].to_numpy() - y]
            ax.errorbar(rows["x"], y, yerr=err, marker="o", capsize=3, label=str(model))
        ax.set_xlabel(f"{factor} (mean over the evaluated classes)")
        ax.set_ylabel(f"per-class hit@{k} (%)")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def run_factor_analysis(opts: FactorOptions) -> pd.DataFrame:
    """Compute the factor table of a run and write factor.md, factor.csv, factor.png, manifest.json."""
    table = factor_rows(opts)
    with atomic_directory(opts.out_dir, tool=FACTOR_TOOL, inputs=[opts.run_dir]) as tmp:
        note = mismatch_note(table.attrs["feature_mismatch"])
        head = table.attrs.get("features_note", "")
        atomic_write_text(tmp / "factor.md", head + render_markdown(table, opts.level) + note)
        atomic_write_text(
            tmp / "factor.csv", table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        )
        plot_factor(table, tmp / "factor.png")
        write_manifest(
            tmp,
            format=FACTOR_FORMAT,
            tool=FACTOR_TOOL,
            inputs={"run_dir": str(opts.run_dir), "splits_dir": opts.splits_dir and str(opts.splits_dir)},
            parameters={
                "ks": M.hit_ks(opts.ks),
                "resamples": opts.resamples,
                "level": opts.level,
                "seed": opts.seed,
                "allow_feature_mismatch": opts.allow_feature_mismatch,
            },
            fields={
                "x": "mean factor value over the classes evaluated in the cell",
                "feature_mismatch": table.attrs["feature_mismatch"],
                "tie_rule": {"headline": "expected", **M.TIE_RULE_TEXT},
            },
        )
    return table
