"""Write ``labels build`` outputs: lemmas.csv, classes.csv, report.md, two plots and a manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.plotting import save_figure, subplots
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.semantics.labels import LEMMA_COLUMNS, REASONS, LabelTables

#: the command that writes a labels folder (its manifest's "tool")
BUILD_TOOL = "imagenet-zsl labels build"
#: manifest format of a labels folder (v2: one manifest writer, "files" lists every file)
LABELS_FORMAT = "imagenet-zsl/labels-v2"
FREQUENCY_PLOT = "label_frequency.png"
REASONS_PLOT = "exclusion_reasons.png"
CLASS_VECTORS = "class_vectors.npz"


def _share(mask: pd.Series | np.ndarray) -> str:
    mask = np.asarray(mask, dtype=bool)
    return f"{mask.mean():.1%} ({int(mask.sum()):,})" if len(mask) else "-"


def populations(classes: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The class sets the report compares: all, zero-shot candidates, candidates with > 300 images."""
    candidates = classes[~classes["is_training"]]
    return {
        "all ImageNet-21K classes": classes,
        "candidates (not ILSVRC-2012)": candidates,
        "candidates with > 300 images": candidates[candidates["n_images"] > 300],
    }


def figures(tables: LabelTables) -> pd.DataFrame:
    """The headline shares per population (rows: figure, columns: population)."""
    rows: dict[str, dict[str, str]] = {}
    for name, part in populations(tables.classes).items():
        rows[name] = {
            "classes": f"{len(part):,}",
            "label shared with another WordNet concept": _share(part["n_noun_senses"] > 1),
            "label shared with another ImageNet class": _share(part["n_imagenet_classes_sharing"] > 0),
            "same label as another ImageNet class": _share(part["n_classes_same_label"] > 0),
            "rare label": _share(part["label_rare"]),
            "label used in a secondary meaning": _share(~part["is_primary"]),
            "no word vector": _share(~part["has_vector"]),
            "label out of vocabulary": _share(~part["label_in_vocabulary"]),
            "kept": _share(part["kept"]),
        }
    return pd.DataFrame(rows)


def reason_counts(classes: pd.DataFrame) -> pd.DataFrame:
    """Classes per exclusion reason (a class may have several) per population."""
    out = {}
    for name, part in populations(classes).items():
        split = part["exclusion_reasons"].str.split(";")
        out[name] = {r: int(split.map(lambda rs, r=r: r in rs).sum()) for r in REASONS}
    return pd.DataFrame(out)


def _plot_frequency(tables: LabelTables, path: Path) -> None:
    fig, ax = subplots(figsize=(7, 4), dpi=110)
    bins = np.arange(0, 8.01, 0.25)
    for name, part in populations(tables.classes).items():
        ax.hist(part["label_zipf"], bins=bins, histtype="step", linewidth=1.5, label=name)
    ax.axvline(
        tables.rare_zipf,
        color="k",
        linestyle="--",
        linewidth=1,
        label=f"rare below Zipf {tables.rare_zipf:.2f}",
    )
    ax.set_xlabel(f"Zipf frequency of the class label ({tables.frequency_source})")
    ax.set_ylabel("classes")
    ax.set_title("How common are ImageNet-21K label words?")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _plot_reasons(counts: pd.DataFrame, path: Path) -> None:
    fig, ax = subplots(figsize=(7, 3.6), dpi=110)
    y = np.arange(len(counts.index))
    height = 0.8 / len(counts.columns)
    for k, column in enumerate(counts.columns):
        ax.barh(y + k * height, counts[column].to_numpy(), height=height, label=column)
    ax.set_yticks(y + 0.4 - height / 2, counts.index)
    ax.invert_yaxis()
    ax.set_xlabel("classes (a class may have several reasons)")
    ax.set_title("Classes per exclusion reason")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _markdown(frame: pd.DataFrame, index: bool = True) -> str:
    return frame.to_markdown(index=index)


def render_report(tables: LabelTables) -> str:
    """report.md: settings, headline figures, reasons, and examples a reader can check."""
    c = tables.classes
    cfg = tables.config
    freq = cfg.frequency
    threshold_text = f"Zipf < {tables.rare_zipf:.2f}" + (
        f" (fewer than {freq.min_count:g} occurrences per {freq.reference_tokens or 3e9:.3g} words)"
        if freq.min_zipf is None and freq.min_count is not None
        else ""
    )
    counts = reason_counts(c)
    pool = populations(c)["candidates with > 300 images"]
    secondary = pool[~pool["is_primary"]].sort_values(["n_images", "wnid"], ascending=[False, True]).head(20)
    shared = (
        c.assign(key=c["label"].str.lower())
        .groupby("key")
        .agg(classes=("wnid", "size"), wnids=("wnid", lambda s: ", ".join(s)))
        .sort_values(["classes"], ascending=False, kind="stable")
        .head(12)
    )
    lemmas = tables.lemmas
    senses_shared = lemmas.groupby("lemma")["n_noun_senses"].first()
    lines = [
        "# Label curation report",
        "",
        f"Vectors: `{tables.vectors_source}` (lemma rule `{cfg.lemma_rule}`); frequencies: "
        f"{tables.frequency_source}; rare label: {threshold_text}; primary meaning: posterior ≥ "
        f"{cfg.min_confidence:g} (sense model {dict(cfg.sense_params)}).",
        "",
        "A class's label is its first WordNet lemma (Hascoet et al.). Shares are of classes, "
        "counts in parentheses.",
        "",
        "## Headline figures",
        "",
        _markdown(figures(tables)),
        "",
        f"Over all {len(lemmas):,} (class, lemma) pairs: "
        f"{(lemmas['n_noun_senses'] > 1).mean():.1%} of lemmas name more than one WordNet noun sense, "
        f"{(lemmas['n_imagenet_classes_sharing'] > 0).mean():.1%} are lemmas of more than one ImageNet "
        "class, "
        f"{lemmas['in_vocabulary'].mean():.1%} have a word vector; "
        f"{(senses_shared > 1).mean():.1%} of the {len(senses_shared):,} distinct lemmas are polysemous.",
        "",
        "## Exclusion reasons",
        "",
        _markdown(counts),
        "",
        f"![classes per exclusion reason]({REASONS_PLOT})",
        "",
        "## Label frequency",
        "",
        f"![label frequency histogram]({FREQUENCY_PLOT})",
        "",
        "## Labels shared by the most ImageNet classes",
        "",
        _markdown(shared.reset_index().rename(columns={"key": "label"}), index=False),
        "",
        "## Largest candidate classes named by a secondary meaning",
        "",
        _markdown(
            secondary[["wnid", "name", "label", "n_images", "primary_sense", "primary_confidence"]],
            index=False,
        ),
        "",
        "`imagenet-zsl labels sense WORD` shows the evidence behind any of these decisions.",
        "",
        "Reading the tables with pandas: `pd.read_csv(path, keep_default_na=False)` — `nan` (the bread, "
        "the grandmother) is a real lemma, and an empty `exclusion_reasons` means kept.",
        "",
    ]
    return "\n".join(lines)


def write_label_outputs(
    tables: LabelTables,
    out_dir: str | Path,
    inputs: dict[str, Any],
    sources: Sequence[str | Path | None] = (),
) -> Path:
    """All outputs into ``out_dir`` atomically (a failed run leaves the old folder untouched).

    ``inputs`` is recorded in the manifest; ``sources`` are the files read (config, vector files,
    class list): an ``out_dir`` that contains or lies inside one of them is refused.
    """
    out_dir = Path(out_dir)
    with atomic_directory(out_dir, tool=BUILD_TOOL, inputs=sources) as tmp:
        lemma_columns = list(LEMMA_COLUMNS) + [c for c in tables.lemmas.columns if c not in LEMMA_COLUMNS]
        tables.lemmas[lemma_columns].to_csv(tmp / "lemmas.csv", index=False, lineterminator="\n")
        tables.classes.to_csv(tmp / "classes.csv", index=False, lineterminator="\n")
        if tables.class_vectors is not None:
            tables.class_vectors.save(tmp / CLASS_VECTORS)
        _plot_frequency(tables, tmp / FREQUENCY_PLOT)
        classes = tables.classes
        reasons = reason_counts(classes)
        _plot_reasons(reasons, tmp / REASONS_PLOT)
        atomic_write_text(tmp / "report.md", render_report(tables))
        write_manifest(
            tmp,
            format=LABELS_FORMAT,
            tool=BUILD_TOOL,
            inputs=inputs,
            parameters={
                **tables.config.as_dict(),
                "rare_zipf_threshold": round(tables.rare_zipf, 6),
                "chosen_label": "first WordNet lemma",
            },
            fields={
                "summary": {
                    "classes": len(classes),
                    "lemmas": len(tables.lemmas),
                    "kept": int(classes["kept"].sum()),
                    "reasons": {r: int(v) for r, v in reasons["all ImageNet-21K classes"].items()},
                }
            },
        )
    return out_dir
