"""GBU-style result tables and the method-ranking matrix (Xian et al., Tables 3-4 and Fig. 4).

Input: the ``results.json`` of many ``attributes run`` directories. Output:

* ZSL table: models x datasets x {SS, PS}, per-class top-1 (%).
* GZSL table (PS): models x datasets x {u, s, H}, without and with calibrated stacking, AUSUC.
* Ranking matrix: for every setting (dataset x split x validation split) models are ranked by
  ZSL top-1 (and by GZSL H); cell (model, r) counts the settings in which the model came r-th.
  Ties share the best rank (competition ranking). Models are listed by mean rank.

Where several validation splits ran for one cell, the table shows their mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imagenet_zsl.attributes.xlsa17 import DATASETS
from imagenet_zsl.plotting import save_figure, subplots


def results_frame(results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run with the headline numbers (fractions, not %)."""
    rows = []
    for r in results:
        gz = r.get("gzsl") or {}
        rows.append(
            {
                "dataset": r["dataset"],
                "model": r["model"],
                "split": r["split"],
                "val_split": r.get("val_split", 1),
                "setting": r.get("config", {}).get("att_splits"),
                "zsl": r["zsl"]["top1_per_class"],
                "u": gz.get("unseen"),
                "s": gz.get("seen"),
                "H": gz.get("H"),
                "u_cs": gz.get("unseen_cs"),
                "s_cs": gz.get("seen_cs"),
                "H_cs": gz.get("H_cs"),
                "ausuc": gz.get("ausuc"),
                "path": r.get("_path", ""),
            }
        )
    return pd.DataFrame(rows)


def _dataset_order(names: Sequence[str]) -> list[str]:
    known = [d for d in DATASETS if d in set(names)]
    return known + sorted(set(names) - set(known))


def zsl_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Models x (dataset, split) ZSL per-class top-1 in %, mean over validation splits."""
    table = frame.pivot_table(index="model", columns=["dataset", "split"], values="zsl", aggfunc="mean") * 100
    columns = [
        (d, s) for d in _dataset_order(frame["dataset"]) for s in ("ss", "ps") if (d, s) in table.columns
    ]
    table = table[columns]
    table.columns = [f"{d} {s.upper()}" for d, s in columns]
    return table


def gzsl_table(frame: pd.DataFrame, calibrated: bool = False) -> pd.DataFrame:
    """Models x (dataset, {u, s, H}) on the PS in %; ``calibrated`` adds γ's u/s/H and AUSUC."""
    ps = frame[(frame["split"] == "ps") & frame["H"].notna()]
    keys = ("u_cs", "s_cs", "H_cs", "ausuc") if calibrated else ("u", "s", "H")
    if ps.empty:
        return pd.DataFrame()
    means = ps.groupby(["model", "dataset"])[list(keys)].mean() * 100
    parts = []
    for dataset in _dataset_order(ps["dataset"]):
        part = means.xs(dataset, level="dataset") if dataset in means.index.get_level_values(1) else None
        if part is None:
            continue
        parts.append(part.rename(columns={k: f"{dataset} {k.replace('_cs', '')}" for k in keys}))
    return pd.concat(parts, axis=1)


def ranking_matrix(frame: pd.DataFrame, metric: str = "zsl") -> pd.DataFrame:
    """Models x rank counts over settings (dataset, split, val split, split file), plus mean rank."""
    data = frame[frame[metric].notna()]
    if data.empty:
        return pd.DataFrame()
    group_keys = ["dataset", "split", "val_split", "setting"]
    data = data.assign(setting=data["setting"].fillna(""))
    ranks = data.groupby(group_keys, dropna=False)[metric].rank(ascending=False, method="min")
    data = data.assign(rank=ranks.astype(int))
    models = sorted(data["model"].unique())
    size = len(models)
    counts = pd.DataFrame(0, index=models, columns=list(range(1, size + 1)))
    for (model, rank), n in data.groupby(["model", "rank"]).size().items():
        counts.loc[model, rank] = n
    counts["mean rank"] = data.groupby("model")["rank"].mean()
    counts["settings"] = data.groupby("model").size()
    return counts.sort_values(["mean rank"]).rename_axis(f"model (by {metric})")


def _markdown(table: pd.DataFrame, title: str) -> str:
    if table.empty:
        return f"### {title}\n\n(no runs)\n"
    if "mean rank" in table.columns:  # counts stay integers, the mean rank gets two decimals
        table = table.astype(object)
        table["mean rank"] = [f"{v:.2f}" for v in table["mean rank"]]
        return f"### {title}\n\n{table.to_markdown(disable_numparse=True)}\n"
    return f"### {title}\n\n{table.to_markdown(floatfmt='.1f')}\n"


def render(results: Sequence[dict[str, Any]]) -> tuple[str, dict[str, pd.DataFrame]]:
    """Markdown text of all tables and the tables themselves (for CSV)."""
    frame = results_frame(results)
    tables = {
        "zsl": zsl_table(frame),
        "gzsl": gzsl_table(frame),
        "gzsl_calibrated": gzsl_table(frame, calibrated=True),
        "ranking_zsl": ranking_matrix(frame, "zsl"),
        "ranking_gzsl_H": ranking_matrix(frame, "H"),
    }
    titles = {
        "zsl": "ZSL: per-class top-1 (%)",
        "gzsl": "GZSL (PS): u = unseen, s = seen per-class top-1, H (%)",
        "gzsl_calibrated": "GZSL (PS) with calibrated stacking (γ from validation) and AUSUC (%)",
        "ranking_zsl": "Ranking matrix, ZSL top-1: times each model ranked r-th",
        "ranking_gzsl_H": "Ranking matrix, GZSL H: times each model ranked r-th",
    }
    text = "\n".join(_markdown(tables[k], titles[k]) for k in tables)
    return text, tables


def plot_ranking(matrix: pd.DataFrame, path: Path, title: str) -> None:
    """Heat map of a ranking matrix (PNG), like Xian et al.'s Fig. 4."""
    counts = matrix.drop(columns=["mean rank", "settings"])
    fig, ax = subplots(figsize=(1 + 0.6 * counts.shape[1], 1 + 0.4 * counts.shape[0]))
    ax.imshow(counts.to_numpy(dtype=float), cmap="Blues", aspect="auto")
    ax.set_xticks(np.arange(counts.shape[1]), [str(c) for c in counts.columns])
    ax.set_yticks(np.arange(counts.shape[0]), list(counts.index))
    values = counts.to_numpy()
    for (i, j), value in np.ndenumerate(values):
        colour = "white" if value > values.max() / 2 else "black"
        ax.text(j, i, str(value), ha="center", va="center", fontsize=8, color=colour)
    ax.set_xlabel("rank")
    ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
