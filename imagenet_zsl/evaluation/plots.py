"""PNG plots of one evaluation run: hit@K curve, Seen-Unseen accuracy Curve, error breakdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from imagenet_zsl.plotting import save_figure, subplots

#: the SUC can have one breakpoint per image; this many points draw it faithfully
_MAX_CURVE_POINTS = 4000


def _save(fig, path: Path) -> Path:  # noqa: ANN001 - a matplotlib Figure
    fig.tight_layout()
    return save_figure(fig, path)


def plot_hit_curve(zsl: dict, path: str | Path, title: str = "") -> Path:
    """hit@K (flat and per-class) against K, from metrics.json's ``zsl`` block."""
    fig, ax = subplots(figsize=(5, 3.6))
    for key, label, style in (("flat", "flat (per image)", "o-"), ("per_class", "per-class mean", "s--")):
        ks = sorted(int(k) for k in zsl[key])
        ax.plot(ks, [100 * zsl[key][str(k)] for k in ks], style, label=label)
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xticks([], minor=True)
    ax.set_xlabel("K")
    ax.set_ylabel("hit@K (%)")
    ax.set_ylim(0, 102)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title or "ZSL hit@K")
    return _save(fig, Path(path))


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= _MAX_CURVE_POINTS:
        return x, y
    keep = np.unique(np.linspace(0, len(x) - 1, _MAX_CURVE_POINTS).astype(int))
    return x[keep], y[keep]


def plot_suc(
    curves: dict, path: str | Path, direct: dict, calibrated: dict | None = None, title: str = ""
) -> Path:
    """Seen-Unseen accuracy Curves {label: SeenUnseenCurve}; direct stacking (γ=0) and the
    calibrated point marked for each curve whose label is in ``direct``/``calibrated``."""
    fig, ax = subplots(figsize=(4.8, 4.4))
    for i, (label, curve) in enumerate(curves.items()):
        color = f"C{i}"
        # the curve starts at (0, seen[0]), as in the AUSUC definition
        x, y = _thin(100 * np.r_[0.0, curve.unseen], 100 * np.r_[curve.seen[0], curve.seen])
        ax.plot(x, y, "-", color=color, label=f"{label} (AUSUC {100 * curve.ausuc:.1f})")
        if label in direct:
            s, u = direct[label]
            ax.plot(
                [100 * u],
                [100 * s],
                "o",
                color=color,
                mfc="white",
                ms=7,
                label="direct stacking (γ=0)" if i == 0 else None,
            )
        if calibrated and label in calibrated:
            s, u = calibrated[label]
            ax.plot(
                [100 * u],
                [100 * s],
                "*",
                color=color,
                ms=11,
                label="calibrated γ (validation)" if i == 0 else None,
            )
    ax.set_xlabel("unseen accuracy (%)")
    ax.set_ylabel("seen accuracy (%)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Seen-Unseen accuracy Curve")
    return _save(fig, Path(path))


def plot_error_breakdown(breakdown: dict, path: str | Path, title: str = "") -> Path:
    """Bar chart of the top-1 prediction's relation to the true class (all images)."""
    names = [n for n in breakdown["shares"] if breakdown["counts"][n] or n != "not_in_graph"]
    shares = [100 * breakdown["shares"][n] for n in names]
    fig, ax = subplots(figsize=(6, 3.4))
    colors = [
        "C2"
        if n == "correct"
        else "C0"
        if n in ("parent", "ancestor")
        else "C1"
        if n in ("child", "descendant")
        else "C7"
        for n in names
    ]
    bars = ax.bar(names, shares, color=colors)
    for bar, share in zip(bars, shares, strict=True):
        ax.annotate(
            f"{share:.1f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("images (%)")
    ax.set_title(
        title
        or (
            f"top-1 vs hierarchy: strict {100 * breakdown['strict_top1']:.1f}%, "
            f"semantic {100 * breakdown['semantic_lower_bound']:.1f}–"
            f"{100 * breakdown['semantic_upper_bound']:.1f}%"
        ),
        fontsize=9,
    )
    ax.tick_params(axis="x", labelrotation=20)
    return _save(fig, Path(path))
