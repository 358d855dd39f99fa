"""The one place that sets up matplotlib: headless (Agg) figures saved as reproducible PNGs.

PNGs are written without the "Software" metadata and through an atomic rename, so the same data
gives the same bytes and an interrupted run never leaves half a plot.

Figures are ``matplotlib.figure.Figure`` objects on an Agg canvas, never pyplot's: pyplot's import
and its global figure registry cost a second of start-up for nothing in a headless command, and
its backend choice is process-wide. The PNG bytes are the same as pyplot's.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_bytes

#: the keywords of ``plt.subplots`` that shape the grid; the others describe the figure
_GRID_KEYWORDS = frozenset(
    ("sharex", "sharey", "squeeze", "width_ratios", "height_ratios", "subplot_kw", "gridspec_kw")
)


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots`` without pyplot: ``(fig, ax)`` (or an array of axes) on an Agg canvas.

    Takes ``plt.subplots``'s arguments: grid keywords (``squeeze``, ``sharex``, ...) shape the axes,
    the rest (``figsize``, ``dpi``, ``layout``) the figure. matplotlib is imported here, lazily.
    """
    # deferred: a bottom module; a plot-free command (--no-plots, a table) never loads matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # deferred: as above, plots only

    grid = {key: kwargs.pop(key) for key in _GRID_KEYWORDS & kwargs.keys()}
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **grid)


def save_figure(fig: Any, path: str | Path, dpi: int = 110) -> Path:
    """Save ``fig`` as a PNG at ``path`` (deterministic bytes, atomic)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return atomic_write_bytes(path, buffer.getvalue())


def colormap(name: str) -> Any:
    """matplotlib's registered colormap ``name`` (e.g. ``tab10``): colours ``cmap(i)``, ``cmap.N``."""
    from matplotlib import colormaps  # deferred: as above, plots only

    return colormaps[name]


def line_handle(**style: Any) -> Any:
    """A legend handle drawn in no axes: a line with ``style`` (``color``, ``marker``, ...), for a
    figure legend shared by several panels."""
    from matplotlib.lines import Line2D  # deferred: as above, plots only

    return Line2D([], [], **style)
