"""GBU-style result tables and the method-ranking matrix (Xian et al., Tables 3-4 and Fig. 4).

Input: the ``results.json`` of many ``attributes run`` (and ``attributes upper-bound``)
directories. Output:

* ZSL table: models x datasets x {SS, PS}, per-class top-1 (%).
* GZSL table (PS): models x datasets x {u, s, H}, without and with calibrated stacking, AUSUC.
* Spread tables: ZSL top-1 and GZSL H as "mean ± std" over the validation splits (GBU Fig. 3).
* Ranking matrices (runs with attribute semantics only; "visual semantics" rows and the "upper
  bound (all classes supervised)" row of ``attributes upper-bound`` are bounds, not competitors):
  for every setting (dataset x split x validation split) models are ranked by ZSL top-1, by
  GZSL H, ts (unseen) and tr (seen) (GBU Fig. 4); cell (model, r) counts the settings in which
  the model came r-th. Ties share the best rank (competition ranking). Models are listed by mean
  rank.

* Cross-dataset test (GBU Sec. 5.1, Table 4, runs with ``--test-dataset``): the matrix of ZSL
  per-class top-1 per method for A:A, A:B, B:B, B:A (train : test, e.g. AWA1 and AWA2), and GBU's
  paired t-test: every pair of results with the same test set and different training sets (A:B
  with B:B, A:A with B:A), two pairs per method that ran both ways (GBU: 24 pairs of 12 methods),
  ``scipy.stats.ttest_rel`` of the results trained on A against those trained on B. GBU report
  p = 0.007; their own Table 4 numbers give t = 0.95, p = 0.35 under this test (two-sided, 23
  degrees of freedom; ``tests/attributes/test_table.py`` recomputes it), so the published p is not
  reproducible from the published table. As an extra, per run: the paired t-test over the unseen
  classes' per-class accuracies of one model (own test images against the other dataset's).

Where several validation splits ran for one cell, the ZSL/GZSL tables show their mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.attributes.outputs import RESULTS_NAME, TABLE_FORMAT, TABLE_TOOL
from imagenet_zsl.attributes.xlsa17 import DATASETS
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.safe_output import atomic_directory

#: the ranking matrices drawn as heat maps by ``attributes table --out``
PLOTTED = ("ranking_zsl", "ranking_gzsl_H", "ranking_gzsl_ts", "ranking_gzsl_tr")


def model_label(result: dict[str, Any]) -> str:
    """The row name of a run: the model, "+ visual semantics" for Chao et al.'s G-attr runs, the
    upper bound's own label for ``attributes upper-bound`` runs."""
    if "upper_bound" in result:
        return str(result["model"])
    if result.get("semantics", "attributes") != "attributes":
        return f"{result['model']} + {result['semantics']} semantics"
    return str(result["model"])


def results_frame(results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run with the headline numbers (fractions, not %); visual-semantics runs get
    their own model rows (:func:`model_label`)."""
    rows = []
    for r in results:
        gz = r.get("gzsl") or {}
        rows.append(
            {
                "dataset": r["dataset"],
                "model": model_label(r),
                "semantics": "labels" if "upper_bound" in r else r.get("semantics", "attributes"),
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


def spread_table(frame: pd.DataFrame, metric: str = "zsl") -> pd.DataFrame:
    """Models x (dataset, split): "mean ± std" (%) of ``metric`` over the validation splits that
    ran (GBU Fig. 3 shows this spread: hyper-parameters chosen on each of the three train/val
    partitions). The std is the sample std (ddof 1); a single validation split shows its value."""
    data = frame[frame[metric].notna()]
    if data.empty:
        return pd.DataFrame()
    grouped = data.groupby(["model", "dataset", "split"])[metric]
    summary = pd.DataFrame(
        {"mean": grouped.mean() * 100, "std": grouped.std(ddof=1) * 100, "n": grouped.size()}
    )
    cells = {
        key: f"{row['mean']:.1f} ± {row['std']:.1f} (n={int(row['n'])})"
        if row["n"] > 1
        else f"{row['mean']:.1f}"
        for key, row in summary.iterrows()
    }
    columns = [
        (d, s)
        for d in _dataset_order(data["dataset"])
        for s in ("ss", "ps")
        if ((data["dataset"] == d) & (data["split"] == s)).any()
    ]
    models = sorted(data["model"].unique())
    table = pd.DataFrame(
        [[cells.get((m, d, s), "") for d, s in columns] for m in models],
        index=models,
        columns=[f"{d} {s.upper()}" for d, s in columns],
    )
    return table.rename_axis("model")


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


def cross_dataset_table(results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run with a cross-dataset test: train → test dataset, split, validation split,
    ZSL top-1 (%) on its own and on the other dataset's test images, and the paired t-test's t and
    p over the per-class accuracies (blank where undefined: identical accuracies)."""
    rows = []
    for r in results:
        cross = r.get("cross_dataset")
        if not cross:
            continue
        t = cross["ttest"]
        rows.append(
            {
                "model": model_label(r),
                "train → test": f"{r['dataset']} → {cross['test_dataset']}",
                "split": r["split"].upper(),
                "val split": str(r.get("val_split", 1)),
                "ZSL own": f"{r['zsl']['top1_per_class'] * 100:.1f}",
                "ZSL cross": f"{cross['zsl']['top1_per_class'] * 100:.1f}",
                "t": "" if t["statistic"] is None else f"{t['statistic']:.2f}",
                "p": "" if t["pvalue"] is None else f"{t['pvalue']:.3g}",
            }
        )
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows).sort_values(["train → test", "split", "model", "val split"])
    return frame.set_index("model")


def _cross_runs(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, tuple]]:
    """(model, split, val split) → training dataset → (test dataset, own ZSL top-1, cross ZSL top-1)
    for every run with a cross-dataset test (bounds, i.e. non-attribute semantics, left out)."""
    found: dict[tuple[str, str, int], dict[str, tuple]] = {}
    for r in results:
        cross = r.get("cross_dataset")
        if not cross or "upper_bound" in r or r.get("semantics", "attributes") != "attributes":
            continue
        key = (model_label(r), r["split"], int(r.get("val_split", 1)))
        found.setdefault(key, {})[r["dataset"]] = (
            cross["test_dataset"],
            float(r["zsl"]["top1_per_class"]),
            float(cross["zsl"]["top1_per_class"]),
        )
    return found


def gbu_ttest(results: Sequence[dict[str, Any]]) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """GBU Table 4 and its paired t-test over methods (see the module docstring).

    → (matrix: one row per (model, split, val split) that ran both ways, columns "A:A", "A:B",
    "B:B", "B:A" in %, A the alphabetically first dataset; the test, or None without two pairs):
    {"datasets": [A, B], "pairs", "methods", "mean_difference" (trained on A − on B), "statistic",
    "pvalue"} (statistic/p None when every difference is equal)."""
    rows, on_a, on_b = [], [], []
    pair_names: tuple[str, str] | None = None
    for (model, split, val), runs in sorted(_cross_runs(results).items()):
        if len(runs) != 2:
            continue
        a, b = sorted(runs)
        if runs[a][0] != b or runs[b][0] != a:
            continue
        pair_names = (a, b)
        (_, aa, ab), (_, bb, ba) = runs[a], runs[b]
        rows.append(
            {
                "model": model,
                "split": split.upper(),
                "val split": val,
                f"{a}:{a}": aa * 100,
                f"{a}:{b}": ab * 100,
                f"{b}:{b}": bb * 100,
                f"{b}:{a}": ba * 100,
            }
        )
        on_a += [ab, aa]  # same test set, trained on a ...
        on_b += [bb, ba]  # ... and trained on b
    if not rows:
        return pd.DataFrame(), None
    matrix = pd.DataFrame(rows).set_index("model")
    first, second = np.asarray(on_a), np.asarray(on_b)
    test: dict[str, Any] = {
        "datasets": list(pair_names),
        "pairs": int(first.size),
        "methods": len(rows),
        "mean_difference": float((first - second).mean()),
        "statistic": None,
        "pvalue": None,
    }
    differences = first - second
    if first.size > 1 and np.ptp(differences) > 1e-12:  # equal up to rounding: undefined
        result = stats.ttest_rel(first, second)
        test["statistic"], test["pvalue"] = float(result.statistic), float(result.pvalue)
    return matrix, test


def _ttest_line(test: dict[str, Any]) -> str:
    a, b = test["datasets"]
    values = "undefined (all differences equal)"
    if test["statistic"] is not None:
        values = f"t = {test['statistic']:.3f}, p = {test['pvalue']:.3g}"
    return (
        f"GBU's paired t-test over {test['pairs']} pairs of results with the same test set "
        f"({test['methods']} methods x 2 test sets), trained on {a} vs on {b}: {values}; mean "
        f"difference {test['mean_difference'] * 100:+.2f} points\n"
    )


def _markdown(table: pd.DataFrame, title: str) -> str:
    if table.empty:
        return f"### {title}\n\n(no runs)\n"
    if "mean rank" in table.columns:  # counts stay integers, the mean rank gets two decimals
        table = table.astype(object)
        table["mean rank"] = [f"{v:.2f}" for v in table["mean rank"]]
        return f"### {title}\n\n{table.to_markdown(disable_numparse=True)}\n"
    if all(dtype is np.dtype(object) for dtype in table.dtypes):  # preformatted cells (spread tables)
        return f"### {title}\n\n{table.to_markdown(disable_numparse=True)}\n"
    return f"### {title}\n\n{table.to_markdown(floatfmt='.1f')}\n"


def render(results: Sequence[dict[str, Any]]) -> tuple[str, dict[str, pd.DataFrame]]:
    """Markdown text of all tables and the tables themselves (for CSV)."""
    frame = results_frame(results)
    ranked = frame[frame["semantics"] == "attributes"]  # bounds (visual semantics, labels) never rank
    tables = {
        "zsl": zsl_table(frame),
        "gzsl": gzsl_table(frame),
        "gzsl_calibrated": gzsl_table(frame, calibrated=True),
        "spread_zsl": spread_table(frame, "zsl"),
        "spread_gzsl_H": spread_table(frame, "H"),
        "ranking_zsl": ranking_matrix(ranked, "zsl"),
        "ranking_gzsl_H": ranking_matrix(ranked, "H"),
        "ranking_gzsl_ts": ranking_matrix(ranked, "u"),
        "ranking_gzsl_tr": ranking_matrix(ranked, "s"),
    }
    matrix, test = gbu_ttest(results)
    if not matrix.empty:  # only pairs of runs with --test-dataset both ways have it
        tables["cross_dataset_gbu"] = matrix
    cross = cross_dataset_table(results)
    if not cross.empty:  # only runs with --test-dataset have it; other tables stay as they were
        tables["cross_dataset"] = cross
    titles = {
        "zsl": "ZSL: per-class top-1 (%)",
        "gzsl": "GZSL (PS): u = unseen, s = seen per-class top-1, H (%)",
        "gzsl_calibrated": "GZSL (PS) with calibrated stacking (γ from validation) and AUSUC (%)",
        "spread_zsl": "ZSL top-1 over the validation splits: mean ± std (%)",
        "spread_gzsl_H": "GZSL H over the validation splits: mean ± std (%)",
        "ranking_zsl": "Ranking matrix, ZSL top-1: times each model ranked r-th",
        "ranking_gzsl_H": "Ranking matrix, GZSL H: times each model ranked r-th",
        "ranking_gzsl_ts": "Ranking matrix, GZSL ts (unseen per-class top-1): times each model ranked r-th",
        "ranking_gzsl_tr": "Ranking matrix, GZSL tr (seen per-class top-1): times each model ranked r-th",
        "cross_dataset_gbu": "Cross-dataset evaluation (GBU Table 4): ZSL top-1 (%), train:test",
        "cross_dataset": "Cross-dataset test per run (extra): ZSL top-1 (%), paired t-test over classes",
    }
    parts = []
    for key in tables:
        parts.append(_markdown(tables[key], titles[key]))
        if key == "cross_dataset_gbu" and test is not None:
            parts.append(_ttest_line(test))
    text = "\n".join(parts)
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


def table_to_directory(results: Sequence[dict[str, Any]], out: str | Path, runs: Sequence[str | Path]) -> str:
    """``table.md``, a CSV per non-empty table and the ranking heat maps into ``out`` (atomic, with
    a manifest listing every results.json read); ``runs`` are the given run folders, which ``out``
    may neither contain nor lie in. Returns the markdown text."""
    text, tables = render(results)
    with atomic_directory(out, tool=TABLE_TOOL, inputs=runs) as tmp:
        atomic_write_text(tmp / "table.md", text)
        for name, table in tables.items():
            if not table.empty:
                atomic_write_text(tmp / f"{name}.csv", table.to_csv(float_format="%.4f"))
        for name in PLOTTED:
            if not tables[name].empty:
                plot_ranking(tables[name], tmp / f"{name}.png", name.replace("_", " "))
        write_manifest(
            tmp,
            format=TABLE_FORMAT,
            tool=TABLE_TOOL,
            inputs=[file_record(Path(r["_path"]) / RESULTS_NAME) for r in results],
        )
    return text
