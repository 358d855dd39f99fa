"""GRAB robustness study: how much do S, U and H move with seeds versus with the class split?

For one dataset and model:

* ``base``: the Proposed Split, once per seed (the seed drives the validation hold-out and any
  seeded model). Its spread is the *base variance*.
* every method (``random``, ``gcs``, ``ccs``, ``mas``, ``pas``; ``--inverse`` adds ``gcs_inv``,
  ``ccs_inv``, ``mas_inv``): a split is generated per seed (random draws a new class split per seed;
  the deterministic methods re-draw only the seen test images and validation classes) and the
  full protocol runs on it. The spread of ``random`` is the *split variance*.

Each run is an ordinary ``attributes run`` directory under ``OUT/runs/<method>/seed<s>`` (finished
runs are kept, so an interrupted study resumes); the summary is ``robustness.csv``/``.md`` and
``robustness.png``. Each metric also gets its normalised standard deviation ``<metric>_nstd`` =
std / mean over the seeds (GRAB Table 2 reports it x100: the "H nstd" column of the markdown).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imagenet_zsl.attributes.dataset import AttributeDataset, load_dataset
from imagenet_zsl.attributes.grab import INVERTIBLE, METHODS, make_split, write_split_dir
from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.io import (
    MANIFEST_NAME,
    atomic_write_json,
    atomic_write_text,
    command_line,
    software_versions,
)
from imagenet_zsl.plotting import save_figure, subplots

log = logging.getLogger(__name__)
METRICS = ("zsl", "seen", "unseen", "H", "H_cs")


def variants(methods: Sequence[str], inverse: bool) -> list[str]:
    """Method names to run, e.g. ['random', 'gcs', 'gcs_inv'] (unknown names are an error)."""
    out = []
    for method in methods:
        if method not in METHODS:
            raise UserInputError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
        out.append(method)
        if inverse and method in INVERTIBLE:
            out.append(f"{method}_inv")
    return out


def _row(variant: str, seed: int, results: dict[str, Any]) -> dict[str, Any]:
    gz = results.get("gzsl") or {}
    return {
        "method": variant,
        "seed": seed,
        "zsl": results["zsl"]["top1_per_class"],
        "seen": gz.get("seen"),
        "unseen": gz.get("unseen"),
        "H": gz.get("H"),
        "H_cs": gz.get("H_cs"),
    }


def run_study(
    ds: AttributeDataset,
    model: str,
    methods: Sequence[str],
    seeds: int,
    out: str | Path,
    *,
    inverse_k: tuple[bool, int | None] = (False, None),
    params: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run base + every method over ``seeds`` seeds into ``out``; returns the per-run table.

    ``inverse_k`` is (inverse, k): also run the gcs/ccs/mas inverses; attributes/components kept by
    mas/pas (None: GRAB's 40, capped as :func:`grab.default_k`)."""
    inverse, k = inverse_k
    if seeds < 2:
        raise UserInputError("--seeds must be at least 2 to estimate a variance")
    out = Path(out)
    names = variants(methods, inverse)
    rows = []
    total = (len(names) + 1) * seeds
    done = 0
    for variant in ["base", *names]:
        for seed in range(seeds):
            run_dir = out / "runs" / variant / f"seed{seed}"
            if variant == "base":
                target, att_splits = ds, None
            else:
                method = variant.removesuffix("_inv")
                split = make_split(
                    ds,
                    method,
                    inverse=variant.endswith("_inv"),
                    k=k if method in ("mas", "pas") else None,
                    seed=seed,
                )
                split_dir = out / "splits" / variant / f"seed{seed}"
                att_splits = write_split_dir(split, ds, split_dir)
                target = load_dataset(ds.name, att_splits=att_splits, images=ds.images)
            config = RunConfig(
                dataset=ds.name,
                model=model,
                split="ps",
                val_split=1,
                seed=seed,
                params=dict(params or {}),
                att_splits=None if att_splits is None else str(Path(att_splits).relative_to(out)),
            )
            results = run_to_directory(target, config, run_dir)
            rows.append(_row(variant, seed, results))
            done += 1
            if progress:
                progress(f"[{done}/{total}] {variant} seed {seed}: H {rows[-1]['H']:.4f}")
    return pd.DataFrame(rows)


def summarise(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per-method mean/std of every metric and its change against ``base``; variance summary."""
    stats = runs.groupby("method", sort=False)[list(METRICS)].agg(["mean", "std"])
    stats.columns = [f"{m}_{s}" for m, s in stats.columns]
    for metric in METRICS:  # GRAB Table 2's normalised std: std / mean (x100 when shown)
        mean = stats[f"{metric}_mean"]
        stats[f"{metric}_nstd"] = (stats[f"{metric}_std"] / mean).where(mean > 0)
    base = stats.loc["base"]
    for metric in ("seen", "unseen", "H"):
        stats[f"delta_{metric}"] = stats[f"{metric}_mean"] - base[f"{metric}_mean"]
    stats.insert(0, "runs", runs.groupby("method", sort=False).size())
    variance = {"base_variance_H": float(np.var(runs.loc[runs.method == "base", "H"], ddof=1))}
    if (runs.method == "random").any():
        variance["split_variance_H"] = float(np.var(runs.loc[runs.method == "random", "H"], ddof=1))
    return stats, variance


def render(stats: pd.DataFrame, variance: dict[str, float], title: str) -> str:
    columns = [
        "zsl_mean",
        "seen_mean",
        "seen_std",
        "unseen_mean",
        "unseen_std",
        "H_mean",
        "H_std",
        "H_nstd",
        "delta_seen",
        "delta_unseen",
        "delta_H",
    ]
    shown = (stats[columns] * 100).map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    shown.insert(0, "runs", stats["runs"].astype(int).astype(str))
    table = shown.to_markdown(disable_numparse=True, colalign=["left"] + ["right"] * shown.shape[1])
    lines = [f"### {title} (per-class top-1, %)", "", table, ""]
    lines.append(f"base variance of H (seeds, PS): {variance['base_variance_H'] * 1e4:.2f} (%²)")
    if "split_variance_H" in variance:
        lines.append(
            f"split variance of H (random class splits): {variance['split_variance_H'] * 1e4:.2f} (%²)"
        )
    return "\n".join(lines) + "\n"


def plot(stats: pd.DataFrame, path: Path, title: str) -> None:
    """Grouped bars of S, U, H (mean ± std over seeds) per method."""
    methods = list(stats.index)
    x = np.arange(len(methods))
    fig, ax = subplots(figsize=(1.5 + 1.1 * len(methods), 3.5))
    for i, (metric, label) in enumerate((("seen", "S"), ("unseen", "U"), ("H", "H"))):
        ax.bar(
            x + (i - 1) * 0.27,
            stats[f"{metric}_mean"] * 100,
            width=0.27,
            yerr=stats[f"{metric}_std"].fillna(0) * 100,
            capsize=2,
            label=label,
        )
    ax.set_xticks(x, methods)
    ax.set_ylabel("per-class top-1 (%)")
    ax.set_title(title)
    ax.legend(ncols=3, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def write_summary(runs: pd.DataFrame, out: Path, title: str, parameters: dict[str, Any]) -> str:
    stats, variance = summarise(runs)
    text = render(stats, variance, title)
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(out / "robustness.csv", stats.to_csv(float_format="%.6g"))
    atomic_write_text(out / "robustness.md", text)
    atomic_write_json(out / "variance.json", variance)
    plot(stats, out / "robustness.png", title)
    atomic_write_json(
        out / MANIFEST_NAME,
        {
            "format": "imagenet-zsl/attribute-robustness",
            "tool": "imagenet-zsl attributes robustness",
            "command": command_line(),
            "parameters": parameters,
            "outputs": [
                "runs.csv",
                "robustness.csv",
                "robustness.md",
                "variance.json",
                "robustness.png",
                "runs/",
                "splits/",
            ],
            "versions": software_versions(),
        },
    )
    return text
