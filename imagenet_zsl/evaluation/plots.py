"""The figures of one evaluation run, as SVG: hit@K curve, Seen-Unseen accuracy Curve, error breakdown.

Why SVG written as text, not matplotlib PNGs: importing matplotlib and drawing two PNGs cost a
run 0.5-0.8 s of CPU, more than everything else ``evaluate`` adds to the search at 5,000 images x
1,000 classes (issue 46), for three simple charts. These are a few kilobytes of vector graphics,
drawn in about a millisecond, deterministic (the same data gives the same bytes), shown by any
browser, by GitHub and mkdocs in ``report.md``, and convertible to PDF for a paper. (``run``'s
summary, the splits' and the analyses' figures are still matplotlib PNGs: :mod:`imagenet_zsl.plotting`.)
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.scoring.ranks import ks_of

#: the SUC can have one breakpoint per image; this many points draw it faithfully
_MAX_CURVE_POINTS = 4000
#: matplotlib's default colour cycle (tab10), so the figures look like the toolkit's other ones
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_FONT = 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif"'


def _num(value: float) -> str:
    """A coordinate with two decimals (no '-0.00')."""
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text


def _text(x: float, y: float, text: str, size: float = 11, anchor: str = "middle", extra: str = "") -> str:
    return (
        f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size:g}" text-anchor="{anchor}"{extra}>'
        f"{html.escape(text)}</text>"
    )


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2 or 5 x 10^n) covering [low, high]."""
    if not high > low:
        high = low + 1.0
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    start = math.floor(low / step + 1e-9) * step
    ticks = []
    value = start
    while value <= high + 1e-9 * step:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high - 1e-9 * step:
        ticks.append(round(value, 10))
    return ticks


@dataclass
class _Axes:
    """One plot area: data limits, log or linear x, and the SVG elements drawn so far."""

    width: float
    height: float
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    log_x: bool = False
    margin: tuple[float, float, float, float] = (58, 16, 34, 48)  # left, right, top, bottom
    body: list[str] = field(default_factory=list)
    legend: list[tuple[str, str, str, bool]] = field(default_factory=list)

    def x_px(self, x: float) -> float:
        low, high = (math.log10(v) for v in self.xlim) if self.log_x else self.xlim
        value = math.log10(x) if self.log_x else x
        left, right = self.margin[0], self.width - self.margin[1]
        return left + (value - low) / ((high - low) or 1.0) * (right - left)

    def y_px(self, y: float) -> float:
        low, high = self.ylim
        top, bottom = self.margin[2], self.height - self.margin[3]
        return bottom - (y - low) / ((high - low) or 1.0) * (bottom - top)

    def frame(
        self, xticks: Sequence[tuple[float, str]], yticks: Sequence[float], xlabel: str, ylabel: str
    ) -> None:
        """Grid, ticks, tick labels, the box and the axis labels."""
        left, right = self.margin[0], self.width - self.margin[1]
        top, bottom = self.margin[2], self.height - self.margin[3]
        for value, label in xticks:
            x = self.x_px(value)
            self.body.append(f'<line x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{bottom}" class="grid"/>')
            self.body.append(_text(x, bottom + 15, label, 10))
        for value in yticks:
            y = self.y_px(value)
            self.body.append(f'<line x1="{left}" y1="{_num(y)}" x2="{right}" y2="{_num(y)}" class="grid"/>')
            self.body.append(_text(left - 5, y + 3.5, f"{value:g}", 10, "end"))
        box = f'x="{left}" y="{top}" width="{_num(right - left)}" height="{_num(bottom - top)}"'
        self.body.append(f'<rect {box} fill="none" stroke="#000" stroke-width="0.8"/>')
        if xlabel:
            self.body.append(_text((left + right) / 2, self.height - 10, xlabel))
        middle = (top + bottom) / 2
        self.body.append(_text(14, middle, ylabel, extra=f' transform="rotate(-90 14 {_num(middle)})"'))

    def line(
        self, xs: Sequence[float], ys: Sequence[float], color: str, marker: str = "", dashed: bool = False
    ) -> None:
        """A polyline through the points, with a marker on each (``o`` circle, ``s`` square)."""
        points = " ".join(f"{_num(self.x_px(x))},{_num(self.y_px(y))}" for x, y in zip(xs, ys, strict=True))
        dash = ' stroke-dasharray="6 3"' if dashed else ""
        self.body.append(
            f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>'
        )
        for x, y in zip(xs, ys, strict=True) if marker else ():
            self.marker(x, y, color, marker)

    def marker(
        self, x: float, y: float, color: str, shape: str, fill: str | None = None, size: float = 3.5
    ) -> None:
        """One marker: ``o`` circle, ``s`` square, ``*`` star; ``fill`` defaults to ``color``."""
        px, py, fill = self.x_px(x), self.y_px(y), fill or color
        style = f'fill="{fill}" stroke="{color}" stroke-width="1.2"'
        if shape == "s":
            self.body.append(
                f'<rect x="{_num(px - size)}" y="{_num(py - size)}" width="{_num(2 * size)}" '
                f'height="{_num(2 * size)}" {style}/>'
            )
        elif shape == "*":
            corners = [
                (px + (size if i % 2 == 0 else size / 2.5) * math.sin(i * math.pi / 5),
                 py - (size if i % 2 == 0 else size / 2.5) * math.cos(i * math.pi / 5))
                for i in range(10)
            ]  # fmt: skip
            points = " ".join(f"{_num(a)},{_num(b)}" for a, b in corners)
            self.body.append(f'<polygon points="{points}" {style}/>')
        else:
            self.body.append(f'<circle cx="{_num(px)}" cy="{_num(py)}" r="{_num(size)}" {style}/>')

    def add_legend(self, corner: str = "upper left", size: float = 10) -> None:
        """The legend entries (label, colour, marker, dashed) in a box in one corner of the plot."""
        if not self.legend:
            return
        longest = max(len(label) for label, *_ in self.legend)
        box_w, box_h = 34 + 0.55 * size * longest, 6 + 1.5 * size * len(self.legend)
        left, top = self.margin[0] + 6, self.margin[2] + 6
        if corner.endswith("right"):
            left = self.width - self.margin[1] - 6 - box_w
        if corner.startswith("lower"):
            top = self.height - self.margin[3] - 6 - box_h
        self.body.append(
            f'<rect x="{_num(left)}" y="{_num(top)}" width="{_num(box_w)}" height="{_num(box_h)}" '
            'fill="#fff" fill-opacity="0.85" stroke="#ccc"/>'
        )
        for i, (label, color, marker, dashed) in enumerate(self.legend):
            y = top + 4 + 1.5 * size * (i + 0.5)
            dash = ' stroke-dasharray="6 3"' if dashed else ""
            if dashed is not None:
                self.body.append(
                    f'<line x1="{_num(left + 5)}" y1="{_num(y)}" x2="{_num(left + 25)}" y2="{_num(y)}" '
                    f'stroke="{color}" stroke-width="1.6"{dash}/>'
                )
            if marker:
                px, py = left + 15, y
                self.body.append(_marker_at(px, py, color, marker))
            self.body.append(_text(left + 30, y + 3.5, label, size, "start"))

    def svg(self, title: str) -> str:
        """The whole document."""
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:g}" height="{self.height:g}" '
            f'viewBox="0 0 {self.width:g} {self.height:g}" {_FONT}>\n'
            "<style>.grid{stroke:#000;stroke-opacity:0.12;stroke-width:0.8}</style>\n"
            f'<rect width="100%" height="100%" fill="#fff"/>\n'
        )
        heading = _text(self.width / 2, 20, title, 12)
        return head + "\n".join([heading, *self.body]) + "\n</svg>\n"


def _marker_at(px: float, py: float, color: str, shape: str) -> str:
    """A legend marker at pixel coordinates (``o``, ``s``, ``*``; ``O``: open circle)."""
    if shape == "s":
        return f'<rect x="{_num(px - 3.5)}" y="{_num(py - 3.5)}" width="7.00" height="7.00" fill="{color}"/>'
    if shape == "*":
        return _text(px, py + 4.5, "★", 12, extra=f' fill="{color}"')
    fill = "#fff" if shape == "O" else color
    style = f'fill="{fill}" stroke="{color}" stroke-width="1.2"'
    return f'<circle cx="{_num(px)}" cy="{_num(py)}" r="3.50" {style}/>'


def _save(text: str, path: Path) -> Path:
    return atomic_write_text(path, text)


def plot_hit_curve(zsl: dict, path: str | Path, title: str = "") -> Path:
    """hit@K (flat and per-class) against K on a log axis, from metrics.json's ``zsl`` block."""
    ks = ks_of(zsl["flat"])
    low, high = (ks[0], ks[-1]) if ks[-1] > ks[0] else (ks[0] / 1.5, ks[0] * 1.5)
    pad = (high / low) ** 0.05
    axes = _Axes(500, 360, (low / pad, high * pad), (0, 102), log_x=True)
    axes.frame([(k, str(k)) for k in ks], range(0, 101, 20), "K", "hit@K (%)")
    series = (("flat", "flat (per image)", "o", False), ("per_class", "per-class mean", "s", True))
    for i, (key, label, marker, dashed) in enumerate(series):
        keys = ks_of(zsl[key])
        axes.line(keys, [100 * zsl[key][str(k)] for k in keys], COLORS[i], marker, dashed)
        axes.legend.append((label, COLORS[i], marker, dashed))
    axes.add_legend("upper left")
    return _save(axes.svg(title or "ZSL hit@K"), Path(path))


def hit_curves_svg(curves: Sequence[tuple[str, Sequence[int], Sequence[float | None]]], title: str) -> str:
    """hit@K (%) against K on a log axis, one line per ``(label, ks, values)`` (fractions; None: a
    gap, never 0), as SVG text (``report --html``'s curves per split)."""
    ks = sorted({k for _, keys, _ in curves for k in keys}) or [1]
    low, high = (ks[0], ks[-1]) if ks[-1] > ks[0] else (ks[0] / 1.5, ks[0] * 1.5)
    pad = (high / low) ** 0.05
    axes = _Axes(520, 360, (low / pad, high * pad), (0, 102), log_x=True)
    axes.frame([(k, str(k)) for k in ks], range(0, 101, 20), "K", "flat hit@K (%)")
    markers = ("o", "s", "*")
    for i, (label, keys, values) in enumerate(curves):
        color, marker = COLORS[i % len(COLORS)], markers[(i // len(COLORS)) % len(markers)]
        points = [(k, 100 * v) for k, v in zip(keys, values, strict=True) if v is not None]
        for k, v in points:
            axes.marker(k, v, color, marker)
        run: list[tuple[int, float]] = []
        for k, v in zip(keys, values, strict=True):  # a line through each run of known values
            if v is None:
                run = []
                continue
            run.append((k, 100 * v))
            if len(run) > 1:
                axes.line([p[0] for p in run[-2:]], [p[1] for p in run[-2:]], color)
        axes.legend.append((label, color, marker, False))
    axes.add_legend("lower right", 9)
    return axes.svg(title)


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
    drawn = {}
    for label, curve in curves.items():
        # the curve starts at (0, seen[0]), as in the AUSUC definition
        drawn[label] = _thin(100 * np.r_[0.0, curve.unseen], 100 * np.r_[curve.seen[0], curve.seen])
    x_high = max([1.0, *(float(x.max()) for x, _ in drawn.values())])
    y_high = max([1.0, *(float(y.max()) for _, y in drawn.values())])
    xticks, yticks = nice_ticks(0, x_high), nice_ticks(0, y_high)
    axes = _Axes(480, 440, (0, xticks[-1]), (0, yticks[-1]))
    axes.frame([(v, f"{v:g}") for v in xticks], yticks, "unseen accuracy (%)", "seen accuracy (%)")
    for i, (label, curve) in enumerate(curves.items()):
        color = COLORS[i % len(COLORS)]
        axes.line(*drawn[label], color)
        axes.legend.append((f"{label} (AUSUC {100 * curve.ausuc:.1f})", color, "", False))
        if label in direct:
            seen, unseen = direct[label]
            axes.marker(100 * unseen, 100 * seen, color, "o", fill="#fff", size=4.5)
        if calibrated and label in calibrated:
            seen, unseen = calibrated[label]
            axes.marker(100 * unseen, 100 * seen, color, "*", size=8)
    axes.legend.append(("direct stacking (γ=0)", COLORS[0], "O", None))
    if calibrated:
        axes.legend.append(("calibrated γ (validation)", COLORS[0], "*", None))
    axes.add_legend("upper right", 9)  # a SUC falls from the upper left to the lower right
    return _save(axes.svg(title or "Seen-Unseen accuracy Curve"), Path(path))


def _bar_color(name: str) -> str:
    if name == "correct":
        return COLORS[2]
    if name in ("parent", "ancestor"):
        return COLORS[0]
    if name in ("child", "descendant"):
        return COLORS[1]
    return COLORS[7]


def plot_error_breakdown(breakdown: dict, path: str | Path, title: str = "") -> Path:
    """Bar chart of the top-1 prediction's relation to the true class (all images), from
    metrics.json's ``hierarchy`` block."""
    names = [n for n in breakdown["shares"] if breakdown["counts"][n] or n != "not_in_graph"]
    shares = [100 * breakdown["shares"][n] for n in names]
    yticks = nice_ticks(0, max([1.0, *shares]) * 1.1)
    axes = _Axes(560, 340, (0, len(names)), (0, yticks[-1]), margin=(58, 16, 34, 62))
    axes.frame([], yticks, "", "images (%)")
    for i, (name, share) in enumerate(zip(names, shares, strict=True)):
        x0, x1, top = axes.x_px(i + 0.1), axes.x_px(i + 0.9), axes.y_px(share)
        bottom = axes.y_px(0)
        axes.body.append(
            f'<rect x="{_num(x0)}" y="{_num(top)}" width="{_num(x1 - x0)}" height="{_num(bottom - top)}" '
            f'fill="{_bar_color(name)}"/>'
        )
        middle = (x0 + x1) / 2
        axes.body.append(_text(middle, top - 3, f"{share:.1f}", 9))
        label_y = bottom + 14
        axes.body.append(
            _text(middle, label_y, name, 10, "end", f' transform="rotate(-20 {_num(middle)} {label_y})"')
        )
    heading = title or (
        f"top-1 vs hierarchy: strict {100 * breakdown['strict_top1']:.1f}%, "
        f"semantic {100 * breakdown['semantic_lower_bound']:.1f}–"
        f"{100 * breakdown['semantic_upper_bound']:.1f}%"
    )
    return _save(axes.svg(heading), Path(path))
