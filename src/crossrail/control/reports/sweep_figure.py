"""A scaling fit drawn as a PNG (matplotlib, Agg): each pool's measured points and its fitted curves."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from crossrail.control.reports.figures import DPI, HEIGHT_IN, WIDTH_IN
from crossrail.core.extras import require
from crossrail.errors import UsageError
from crossrail.metrics.scaling_fit import MODELS

STYLES = {"amdahl": "-", "power_law": "--"}


def fit_png(fitted: dict[str, Any]) -> bytes:
    """The PNG of a `ScalingFit` object (Operations.fit): throughput against chips, points and curves per pool."""
    import numpy as np

    require("matplotlib", extra="reports", needed_for="a scaling fit's figure")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    fig.suptitle(f"sweep {fitted['sweep']}: {fitted['y']} against {fitted['x']}")
    for i, pool in enumerate(fitted["pools"]):
        color = f"C{i}"
        xs = [p["x"] for p in pool["points"]]
        ax.scatter(xs, [p["y"] for p in pool["points"]], color=color, label=f"{pool['pool']} measured", zorder=3)
        grid = np.linspace(min(xs), max(xs) * 1.5, 100)
        for model, f in pool["fits"].items():
            if f is None:
                continue
            curve = MODELS[model][0](grid, *f["params"].values())
            shown = ", ".join(f"{k}={v:.3g}" for k, v in f["params"].items())
            ax.plot(grid, curve, STYLES.get(model, ":"), color=color, label=f"{pool['pool']} {model} ({shown})")
    ax.set_xlabel(fitted["x"])
    ax.set_ylabel(fitted["y"])
    ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def draw_fit(fitted: dict[str, Any], path: Path) -> None:
    """Write `fit_png(fitted)` to `path` (a .png file)."""
    if path.suffix.lower() != ".png":
        raise UsageError(f"--out {path}: write the figure to a .png file")
    try:
        path.write_bytes(fit_png(fitted))
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write it ({exc.strerror or exc})") from None
