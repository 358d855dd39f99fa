"""The one place that sets up matplotlib: headless (Agg) figures saved as reproducible PNGs.

PNGs are written without the "Software" metadata and through an atomic rename, so the same data
gives the same bytes and an interrupted run never leaves half a plot.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from imagenet_zsl.io import atomic_write_bytes


def pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend (imported lazily: matplotlib is heavy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def subplots(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots`` on the Agg backend; returns ``(fig, ax)`` as matplotlib does."""
    return pyplot().subplots(*args, **kwargs)


def save_figure(fig: Any, path: str | Path, dpi: int = 110) -> Path:
    """Save ``fig`` as a PNG at ``path`` (deterministic bytes, atomic) and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    pyplot().close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
