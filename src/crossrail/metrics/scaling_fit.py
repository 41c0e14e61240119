"""Scaling fits: throughput against chips from measured points, and the time and chip-hours to a target.

Two models, each fitted by least squares (scipy.optimize.curve_fit) to the measured (chips, throughput) points:

  - Amdahl, in throughput form: T(n) = base x n / (1 + s x (n - 1)), where `base` is the throughput of one
    chip and `s` the serial fraction (0 <= s <= 1): with s = 0 throughput grows in proportion to chips, with
    s = 1 it does not grow at all. The time form is its inverse: time per token t(n) = (1 + s(n - 1)) / (base n).
  - a power law: T(n) = a x n^b (b = 1: linear scaling; b < 1: each doubling gains 2^b).

Each fit carries its error: the standard error of each parameter (the square root of the diagonal of the
covariance curve_fit estimates; None when there are no more points than parameters) and the RMS of the
residuals. To a target of N tokens at n chips: time = N / T(n), chip-hours = n x time / 3600.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossrail.core.extras import require

AMDAHL, POWER = "amdahl", "power_law"


@dataclass(frozen=True)
class Fit:
    """One model fitted to points: its parameters, their standard errors, the residual RMS."""

    model: str
    params: dict[str, float]
    stderr: dict[str, float | None]
    rms: float
    points: int
    formula: str = field(default="")

    def throughput(self, chips: float) -> float:
        return float(MODELS[self.model][0](chips, *self.params.values()))

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "formula": self.formula,
            "params": dict(self.params),
            "stderr": dict(self.stderr),
            "rms": self.rms,
            "points": self.points,
        }


def amdahl(n: Any, base: float, serial: float) -> Any:
    return base * n / (1.0 + serial * (n - 1.0))


def power_law(n: Any, a: float, b: float) -> Any:
    return a * n**b


MODELS: dict[str, tuple[Callable[..., Any], tuple[str, str], str]] = {
    AMDAHL: (amdahl, ("base", "serial"), "T(n) = base * n / (1 + serial * (n - 1))"),
    POWER: (power_law, ("a", "b"), "T(n) = a * n^b"),
}


def fit(model: str, chips: Sequence[float], throughput: Sequence[float]) -> Fit:
    """`model` (amdahl or power_law) fitted to the points; ValueError when they cannot determine it."""
    import numpy as np

    require("scipy.optimize", extra="reports", needed_for="scaling fits")
    from scipy.optimize import OptimizeWarning, curve_fit  # type: ignore[import-untyped]

    x, y = np.asarray(chips, dtype=float), np.asarray(throughput, dtype=float)
    if len(x) != len(y):
        raise ValueError("one throughput per chip count")
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(set(x.tolist())) < 2:
        raise ValueError("a scaling fit needs positive throughputs measured at two or more chip counts")
    fn, names, formula = MODELS[model]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", OptimizeWarning)  # too few points for a covariance: said as None below
        warnings.simplefilter("ignore", np.exceptions.RankWarning)
        try:
            p0, bounds = _start(model, x, y)
            params, cov = curve_fit(fn, x, y, p0=p0, bounds=bounds, maxfev=20_000)
        except (
            RuntimeError,
            ValueError,
            np.linalg.LinAlgError,
        ) as exc:  # no convergence, or values no float arithmetic can fit
            raise ValueError(f"the {model} fit did not converge on these points ({exc})") from None
        rms = float(np.sqrt(np.mean((y - fn(x, *params)) ** 2)))
    if not (math.isfinite(rms) and all(math.isfinite(float(p)) for p in params)):
        raise ValueError(f"the {model} fit of these points is not a finite curve; are the values in range?")
    enough = len(x) > len(names)
    errors = [float(math.sqrt(v)) if enough and math.isfinite(v) and v >= 0 else None for v in np.diag(cov)]
    return Fit(
        model=model,
        params={n: float(p) for n, p in zip(names, params, strict=True)},
        stderr=dict(zip(names, errors, strict=True)),
        rms=rms,
        points=len(x),
        formula=formula,
    )


def _start(model: str, x: Any, y: Any) -> tuple[list[float], tuple[list[float], list[float]]]:
    """A starting point and bounds: a log-log line for the power law; the best per-chip rate for Amdahl."""
    import numpy as np

    b, log_a = np.polyfit(np.log(x), np.log(y), 1)
    if model == POWER:
        return [float(np.exp(log_a)), float(b)], ([0.0, -np.inf], [np.inf, np.inf])
    return [float(np.max(y / x)), 0.05], ([0.0, 0.0], [np.inf, 1.0])


def to_target(f: Fit, chips: float, tokens: float) -> dict[str, float | None]:
    """Throughput at `chips` and the time (s) and chip-hours to process `tokens` at it (None: never, at a
    throughput that is not positive)."""
    rate = f.throughput(chips)
    seconds = tokens / rate if rate > 0 and math.isfinite(rate) else None
    hours = None if seconds is None else chips * seconds / 3600.0
    return {"chips": chips, "throughput": rate if math.isfinite(rate) else None, "time_s": seconds, "chip_hours": hours}
