"""Per-chip throughput at any degree from the degrees a workload was measured at: the scaling model placement uses.

A workload's attempts report their throughput at the chips they held (their degree, for a data-parallel run
its workers x chips per worker). Adding chips rarely adds throughput in proportion: gradients are
all-reduced, inputs are fed, a step waits for its slowest worker. The per-chip rate at `n` chips is

  - measured at `n`: the median measured there;
  - one degree measured: the per-chip rate at that degree (the nearest measured, and the only one);
  - two or more: Amdahl's law fitted to them. With serial fraction s and one-chip rate r1, `n` chips run
    r1 x n / (1 + s x (n - 1)) in all, so 1 / per-chip rate = (s x n + 1 - s) / r1: a line in `n`,
    fitted by least squares. A fit that says more chips make each chip faster is clamped flat (s = 0);
    one that says throughput falls with chips is clamped to throughput that stops growing (s = 1).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """The per-chip rate at `chips` chips and how it was found (`how` reads as a clause in an explanation)."""

    per_chip: float
    chips: int
    how: str


@dataclass(frozen=True)
class Amdahl:
    """A fitted Amdahl model: the one-chip rate and the serial fraction."""

    one_chip: float
    serial: float

    def per_chip(self, chips: int) -> float:
        return self.one_chip / (1.0 + self.serial * (chips - 1))


def fit(rates: Mapping[int, float]) -> Amdahl:
    """Least squares of 1 / per-chip rate on the degree, clamped to 0 <= serial fraction <= 1 (see above)."""
    points = [(float(n), 1.0 / r) for n, r in rates.items() if n > 0 and r > 0]
    if len(points) < 2:
        raise ValueError("an Amdahl fit needs rates at two or more degrees")
    mean_n = sum(n for n, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((n - mean_n) ** 2 for n, _ in points)
    slope = sum((n - mean_n) * (y - mean_y) for n, y in points) / spread if spread else 0.0
    if slope <= 0:  # superlinear or flat: every chip at the harmonic mean of the measured rates
        return Amdahl(1.0 / mean_y, 0.0)
    intercept = mean_y - slope * mean_n
    if intercept <= 0:  # worse than Amdahl allows: through the origin, total throughput constant
        slope = sum(n * y for n, y in points) / sum(n * n for n, _ in points)
        return Amdahl(1.0 / slope, 1.0)
    return Amdahl(1.0 / (slope + intercept), slope / (slope + intercept))


def rate_at(rates: Mapping[int, float], chips: int) -> Rate | None:
    """The per-chip rate at `chips` from per-chip rates measured at each degree; None when none is measured."""
    return _rate_at(tuple(sorted(rates.items())), chips)


@functools.lru_cache(maxsize=4096)
def _rate_at(rates: tuple[tuple[int, float], ...], chips: int) -> Rate | None:
    # Cached: placement asks for the same workload's rate once per pool and run of a queue.
    measured = {n: r for n, r in rates if n > 0 and r > 0}
    if not measured:
        return None
    if chips in measured:
        return Rate(measured[chips], chips, f"measured at {chips} chips")
    if len(measured) == 1:
        ((n, r),) = measured.items()
        return Rate(r, chips, f"per-chip rate measured at {n} chips, the only degree measured")
    model = fit(measured)
    degrees = ", ".join(str(n) for n in sorted(measured))
    how = f"Amdahl fit over {degrees} chips (serial {model.serial:.1%})"
    return Rate(model.per_chip(chips), chips, how)
