"""Quantities written by people: durations such as `6h` or `1h30m`, slice topologies such as `2x2x1`."""

from __future__ import annotations

import math
import re

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)")


def parse_duration(value: str | int | float) -> float:
    """Seconds in `value`: a number of seconds, or `90s`, `10m`, `6h`, `2d`, `1h30m`.

    Raises ValueError with the accepted forms when `value` is neither.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write e.g. 90s, 10m, 6h or 1h30m")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"{value!r} is too large for a duration") from None
    else:
        text = value.strip().lower().replace(" ", "")
        pos, seconds = 0, 0.0
        for m in _PART.finditer(text):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if not text or pos != len(text):
            if re.fullmatch(r"\d+(\.\d+)?", text):
                seconds = float(text)
            else:
                raise ValueError(f"{value!r} is not a duration; write e.g. 90s, 10m, 6h or 1h30m")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be positive and finite (got {value!r})")
    return seconds


def format_duration(seconds: float) -> str:
    """`5400` -> `1h30m`; sub-minute precision only for short durations."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    total = round(seconds)
    out = []
    for unit, size in _UNITS.items():
        if total >= size:
            out.append(f"{total // size}{unit}")
            total %= size
    return "".join(out)


def short_duration(seconds: float | None) -> str:
    """A duration in one unit for tables: `45.0s`, `12.5m`, `3.2h`, `2.1d`; `-` for None."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 3 * 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def parse_topology(text: str) -> tuple[int, ...]:
    """`2x2x1` -> (2, 2, 1). Raises ValueError unless every factor is a positive integer."""
    parts = text.strip().lower().split("x")
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) > 4:
        raise ValueError(f"{text!r} is not a slice topology; write chips per dimension, e.g. 2x2x1 or 4x4")
    return tuple(int(p) for p in parts)
