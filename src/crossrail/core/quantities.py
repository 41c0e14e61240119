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


CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}
"""Currencies written with their sign before the amount; any other ISO 4217 code follows it (`12.50 CHF`)."""


def format_money(amount: float | None, currency: str = "USD") -> str:
    """The one way crossrail writes an amount for people, in the fleet's currency: `$1,234.50`, `€0.12`,
    `12.50 CHF`; `-` for None or nan."""
    if amount is None or math.isnan(amount):
        return "-"
    sign = CURRENCY_SIGNS.get(currency)
    if sign is None:
        return f"{amount:,.2f} {currency}"
    return f"-{sign}{-amount:,.2f}" if amount < 0 else f"{sign}{amount:,.2f}"


_PAIRS = (("d", "h"), ("h", "m"), ("m", "s"))


def format_duration(seconds: float | None) -> str:
    """The one way crossrail writes a duration for people (tables, explanations, reports, the dashboard).

    Its two largest units, rounded to the second: `45s`, `3m20s`, `1h30m`, `2h05m`, `6h`, `1d04h`; two
    significant digits under ten seconds (`0.5s`, `2.5s`); `-` for None. `parse_duration` reads it back.
    """
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 9.5:
        return f"{seconds:.2g}s"
    for big, small in _PAIRS:
        n, per = round(seconds / _UNITS[small]), _UNITS[big] // _UNITS[small]
        if n >= per:
            whole, rest = divmod(n, per)
            return f"{whole}{big}{rest:02d}{small}" if rest else f"{whole}{big}"
    return f"{round(seconds)}s"


def parse_topology(text: str) -> tuple[int, ...]:
    """`2x2x1` -> (2, 2, 1). Raises ValueError unless every factor is a positive integer."""
    parts = text.strip().lower().split("x")
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) > 4:
        raise ValueError(f"{text!r} is not a slice topology; write chips per dimension, e.g. 2x2x1 or 4x4")
    return tuple(int(p) for p in parts)
