"""GRAB robustness study (Rossi et al. 2024, Sec. 3.2.4 and 4.2-4.3): how much do ZSL top-1 and
GZSL u, s, H move with seeds, with random class splits, and on GRAB's stress-test splits?

For one dataset and model:

* ``base``: the Proposed Split (the benchmark split), once per seed (the seed drives the
  validation hold-out and any seeded model).
* every method (``random``, ``gcs``, ``ccs``, ``mas``, ``pas``; ``--inverse`` adds ``gcs_inv``,
  ``ccs_inv``, ``mas_inv``): a split is generated per seed (random draws a new class split per seed;
  the deterministic methods re-draw only the seen test images and validation classes) and the
  full protocol runs on it.

The two measures of the paper, for each metric m in {ZSL top-1, GZSL u, s, H} (per-class top-1):

* Eq. 9, generalizability: Gen(m, X) = the unbiased (ddof 1) standard deviation of the accuracy
  over X ("we use the unbiased estimator ... and calculate the standard deviation", Sec. 3.2.4).
  X = seed: the ``base`` runs (the PS, one run per seed; the paper's base variance). X = split:
  the ``random`` runs plus the ``base`` run of seed 0, as the paper's Table 2 counts "6 training
  runs (including the base one)" for 5 random splits. Lower is more generalizable.
* Eq. 10, robustness: Rob(m, Σ′) = E_σ[acc(m, σ)] − min over σ′ ∈ Σ′ of acc(m, σ′). The
  expectation is the mean over the ``random`` runs (random class splits stand for "all possible
  splits"); Σ′ is the set of GRAB splits that ran (gcs, ccs, mas, pas and, with ``--inverse``,
  gcs_inv, ccs_inv, mas_inv: the paper's Sec. 3.3); acc(m, σ′) of a GRAB split is its mean over
  the seeds (GRAB's splits are deterministic, the seeds only re-draw held-out images and
  validation classes; the paper's Eq. 5 likewise averages over training runs). Lower is more
  robust; a negative value means every GRAB split beat the random mean. Undefined (blank) without
  ``random`` or without any GRAB split.

Each run is an ordinary ``attributes run`` directory under ``OUT/runs/<method>/seed<s>`` (its split
under ``OUT/splits/<method>/seed<s>``); the summary is ``robustness.csv``/``.md``, ``runs.csv``,
``measures.json`` (Eq. 9 and 10) and ``robustness.png``. ``OUT`` appears whole, in one rename; the
runs are made in a work directory beside it, so an interrupted study resumes and a finished one is
not recomputed (:mod:`imagenet_zsl.attributes.outputs`). Each metric also gets its normalised
standard deviation ``<metric>_nstd`` = std / mean over the seeds (GRAB Table 2 reports it x100: the
"H nstd" column of the markdown).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imagenet_zsl.atomic import atomic_write_json, atomic_write_text
from imagenet_zsl.attributes.dataset import AttributeDataset, load_dataset
from imagenet_zsl.attributes.grab import INVERTIBLE, METHODS, make_split, write_split_dir
from imagenet_zsl.attributes.outputs import ROBUSTNESS_FORMAT, ROBUSTNESS_TOOL, prepare_work, publish
from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import file_record, write_manifest
from imagenet_zsl.plotting import save_figure, subplots

log = logging.getLogger(__name__)
METRICS = ("zsl", "seen", "unseen", "H", "H_cs")
#: the metrics GRAB's measures are reported for: ZSL top-1, GZSL u (unseen), s (seen), H
MEASURED = ("zsl", "unseen", "seen", "H")
MEASURED_LABELS = {"zsl": "ZSL", "unseen": "u", "seen": "s", "H": "H"}
#: Σ′ of Eq. 10: GRAB's stress-test splits (Sec. 3.3), each with its inverse except PAS
GRAB_SPLITS = ("gcs", "gcs_inv", "ccs", "ccs_inv", "mas", "mas_inv", "pas")


@dataclass(frozen=True)
class StudyOptions:
    """How the GRAB splits of a study are made: also the gcs/ccs/mas inverses; k attributes or
    components kept by mas/pas (None: GRAB's 40, capped as :func:`grab.default_k`); the attribute
    form MAS scores (:data:`grab.MAS_ATTRIBUTES`)."""

    inverse: bool = False
    k: int | None = None
    mas_attributes: str = "binary"


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
    work: str | Path,
    *,
    options: StudyOptions = StudyOptions(),
    params: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run base + every method over ``seeds`` seeds into the folder ``work`` (``runs/`` and
    ``splits/``; finished runs there are kept); returns the per-run table."""
    check_study(seeds)
    work = Path(work)
    names = variants(methods, options.inverse)
    rows = []
    total = (len(names) + 1) * seeds
    done = 0
    for variant in ["base", *names]:
        for seed in range(seeds):
            run_dir = work / "runs" / variant / f"seed{seed}"
            if variant == "base":
                target, att_splits = ds, None
            else:
                method = variant.removesuffix("_inv")
                split = make_split(
                    ds,
                    method,
                    inverse=variant.endswith("_inv"),
                    k=options.k if method in ("mas", "pas") else None,
                    seed=seed,
                    mas_attributes=options.mas_attributes if method == "mas" else "binary",
                )
                split_dir = work / "splits" / variant / f"seed{seed}"
                att_splits = write_split_dir(split, ds, split_dir)
                target = load_dataset(ds.name, att_splits=att_splits, images=ds.images)
            config = RunConfig(
                dataset=ds.name,
                model=model,
                split="ps",
                val_split=1,
                seed=seed,
                params=dict(params or {}),
                att_splits=None if att_splits is None else str(Path(att_splits).relative_to(work)),
            )
            results = run_to_directory(target, config, run_dir)
            rows.append(_row(variant, seed, results))
            done += 1
            if progress:
                progress(f"[{done}/{total}] {variant} seed {seed}: H {rows[-1]['H']:.4f}")
    return pd.DataFrame(rows)


def check_study(seeds: int) -> None:
    if seeds < 2:
        raise UserInputError("--seeds must be at least 2 to estimate a variance")


def study_parts(methods: Sequence[str], seeds: int, inverse: bool) -> list[str]:
    """The folders (relative to the study's directory) of the runs and splits of a study."""
    names = variants(methods, inverse)
    parts = [f"runs/{v}/seed{s}" for v in ["base", *names] for s in range(seeds)]
    return parts + [f"splits/{v}/seed{s}" for v in names for s in range(seeds)]


def study_to_directory(
    ds: AttributeDataset,
    model: str,
    methods: Sequence[str],
    seeds: int,
    out: str | Path,
    *,
    options: StudyOptions = StudyOptions(),
    params: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """The whole study into ``out`` (atomic; resumable, see the module doc); returns the summary."""
    check_study(seeds)
    parts = study_parts(methods, seeds, options.inverse)  # checks the method names
    sources = [p for p in (ds.images.path, ds.split.path) if p is not None]
    # the runs' configurations name no features and their splits only by path: the study is tied
    # to the files they came from and to what shapes the split files (k, the MAS attributes)
    identity = {
        "dataset": ds.name,
        "inputs": [{"path": str(p.resolve()), "bytes": p.stat().st_size} for p in sources],
        "k": options.k,
        "mas_attributes": options.mas_attributes,
    }
    work = prepare_work(
        out, tool=ROBUSTNESS_TOOL, manifest_format=ROBUSTNESS_FORMAT, identity=identity, inputs=sources
    )
    runs = run_study(ds, model, methods, seeds, work, options=options, params=params, progress=progress)
    parameters = {
        "dataset": ds.name,
        "model": model,
        "methods": list(methods),
        "seeds": seeds,
        "inverse": options.inverse,
        "k": options.k,
        "mas_attributes": options.mas_attributes,
        "params": dict(params or {}),
    }
    with publish(out, work, parts, tool=ROBUSTNESS_TOOL, inputs=sources) as tmp:
        text = write_summary(runs, tmp, f"{ds.name} {model}: GRAB robustness")
        write_manifest(
            tmp,
            format=ROBUSTNESS_FORMAT,
            tool=ROBUSTNESS_TOOL,
            inputs=[file_record(p) for p in sources],
            parameters=parameters,
            fields={"study": identity},
        )
    return text


def generalizability(runs: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """GRAB Eq. 9, Gen(m, X) = the unbiased standard deviation of each metric over X.

    X = "seed": the ``base`` runs (the PS once per seed). X = "split": the ``random`` runs plus the
    ``base`` run of seed 0 (GRAB Table 2: "6 training runs (including the base one)"); absent
    without ``random`` runs. → {X: {"runs": n, metric: std or None}}.
    """
    samples = {"seed": runs[runs.method == "base"]}
    if (runs.method == "random").any():
        first_base = runs[
            (runs.method == "base") & (runs.seed == runs.loc[runs.method == "base", "seed"].min())
        ]
        samples["split"] = pd.concat([first_base, runs[runs.method == "random"]])
    out: dict[str, dict[str, Any]] = {}
    for name, sample in samples.items():
        entry: dict[str, Any] = {"runs": int(len(sample))}
        for metric in MEASURED:
            values = sample[metric].dropna().to_numpy(dtype=float)
            entry[metric] = float(np.std(values, ddof=1)) if values.size > 1 else None
        out[name] = entry
    return out


def robustness(runs: pd.DataFrame) -> dict[str, Any]:
    """GRAB Eq. 10, Rob(m, Σ′) = E_σ[acc(m, σ)] − min over σ′ ∈ Σ′ of acc(m, σ′), per metric.

    E_σ: the mean over the ``random`` runs; Σ′: the GRAB splits among ``runs.method``
    (:data:`GRAB_SPLITS`), each one's accuracy its mean over seeds. → {"sigma_prime": [...],
    metric: {"expected", "worst", "worst_split", "rob"} (None where undefined)}.
    """
    ran = [m for m in GRAB_SPLITS if (runs.method == m).any()]
    result: dict[str, Any] = {"sigma_prime": ran}
    random = runs[runs.method == "random"]
    means = runs[runs.method.isin(ran)].groupby("method")[list(MEASURED)].mean()
    for metric in MEASURED:
        entry: dict[str, Any] = {"expected": None, "worst": None, "worst_split": None, "rob": None}
        values = means[metric].dropna() if ran else pd.Series(dtype=float)
        expected = random[metric].dropna()
        if not expected.empty:
            entry["expected"] = float(expected.mean())
        if not values.empty:
            ordered = values.reindex([m for m in ran if m in values.index])  # ties: Σ′ order
            entry["worst_split"] = str(ordered.idxmin())
            entry["worst"] = float(ordered.min())
        if entry["expected"] is not None and entry["worst"] is not None:
            entry["rob"] = entry["expected"] - entry["worst"]
        result[metric] = entry
    return result


def summarise(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-method mean/std of every metric and its change against ``base``; GRAB's measures
    ({"generalizability": Eq. 9, "robustness": Eq. 10})."""
    stats = runs.groupby("method", sort=False)[list(METRICS)].agg(["mean", "std"])
    stats.columns = [f"{m}_{s}" for m, s in stats.columns]
    for metric in METRICS:  # GRAB Table 2's normalised std: std / mean (x100 when shown)
        mean = stats[f"{metric}_mean"]
        stats[f"{metric}_nstd"] = (stats[f"{metric}_std"] / mean).where(mean > 0)
    base = stats.loc["base"]
    for metric in ("zsl", "seen", "unseen", "H"):
        stats[f"delta_{metric}"] = stats[f"{metric}_mean"] - base[f"{metric}_mean"]
    stats.insert(0, "runs", runs.groupby("method", sort=False).size())
    measures = {"generalizability": generalizability(runs), "robustness": robustness(runs)}
    return stats, measures


def _pct(value: float | None) -> str:
    return "" if value is None or pd.isna(value) else f"{value * 100:.1f}"


def render_measures(measures: dict[str, Any]) -> str:
    """Markdown table of Eq. 9 and Eq. 10 (rows) for ZSL, u, s, H (columns), in %."""
    gen, rob = measures["generalizability"], measures["robustness"]
    header = "| measure | " + " | ".join(MEASURED_LABELS[m] for m in MEASURED) + " |"
    lines = [header, "|:--|" + "--:|" * len(MEASURED)]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row(
        f"Gen(m, seed), Eq. 9: std over {gen['seed']['runs']} PS runs",
        [_pct(gen["seed"][m]) for m in MEASURED],
    )
    if "split" in gen:
        label = f"Gen(m, split), Eq. 9: std over PS + {gen['split']['runs'] - 1} random splits"
        row(label, [_pct(gen["split"][m]) for m in MEASURED])
    row("E_σ acc (random splits)", [_pct(rob[m]["expected"]) for m in MEASURED])
    row(
        "min over Σ′ acc (split)",
        [
            f"{_pct(rob[m]['worst'])} ({rob[m]['worst_split']})" if rob[m]["worst"] is not None else ""
            for m in MEASURED
        ],
    )
    row("Rob(m, Σ′), Eq. 10", [_pct(rob[m]["rob"]) for m in MEASURED])
    sigma = ", ".join(rob["sigma_prime"]) or "none ran"
    note = f"Σ′ = {{{sigma}}}"
    if not rob["sigma_prime"] or rob["zsl"]["expected"] is None:
        note += "; Eq. 10 needs random and at least one of gcs, ccs, mas, pas"
    return "\n".join([*lines, "", note])


def render(stats: pd.DataFrame, measures: dict[str, Any], title: str) -> str:
    columns = [
        "zsl_mean",
        "zsl_std",
        "seen_mean",
        "seen_std",
        "unseen_mean",
        "unseen_std",
        "H_mean",
        "H_std",
        "H_nstd",
        "delta_zsl",
        "delta_seen",
        "delta_unseen",
        "delta_H",
    ]
    shown = (stats[columns] * 100).map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    shown.insert(0, "runs", stats["runs"].astype(int).astype(str))
    table = shown.to_markdown(disable_numparse=True, colalign=["left"] + ["right"] * shown.shape[1])
    lines = [f"### {title} (per-class top-1, %)", "", table, ""]
    lines += ["### GRAB generalizability (Eq. 9) and robustness (Eq. 10), %", ""]
    lines.append(render_measures(measures))
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


def write_summary(runs: pd.DataFrame, out: Path, title: str) -> str:
    """The summary files of a study into ``out`` (the caller's atomic directory, which then gets
    its manifest); returns the markdown summary."""
    stats, measures = summarise(runs)
    text = render(stats, measures, title)
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(out / "robustness.csv", stats.to_csv(float_format="%.6g"))
    atomic_write_text(out / "robustness.md", text)
    atomic_write_json(out / "measures.json", measures)
    plot(stats, out / "robustness.png", title)
    return text
