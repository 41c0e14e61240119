"""A pool's declared peak TFLOP/s per precision (`peak_tflops`), checked against the precisions crossrail knows."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from crossrail.core.peaks import PRECISIONS
from crossrail.spec.common import Items, raise_items
from crossrail.spec.problems import did_you_mean

Tflops = Annotated[float, Field(strict=True, gt=0, le=1e6, allow_inf_nan=False)]
"""Dense TFLOP/s of one chip: a positive, finite number (at most a million, well above any chip's)."""


def _known(peaks: dict[str, float]) -> dict[str, float]:
    items: Items = []
    for precision in peaks:
        if precision not in PRECISIONS:
            fix = did_you_mean(precision, PRECISIONS) or f"use one of {', '.join(PRECISIONS)}"
            items.append(((precision,), f"unknown precision {precision!r}", fix))
    raise_items(items)
    return peaks


PeakTflops = Annotated[dict[str, Tflops], AfterValidator(_known)]
"""`{bf16: 989.4, fp8: 1978.9}`: what one chip of the pool is declared to reach at each precision."""
