"""How the command prints: crossrail/v1 JSON objects, rich tables, times and durations (one way each)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from crossrail.core import format_duration
from crossrail.core.api import api_object


class _Console(Console):
    """A rich console whose tables are never cut: printed to anything but a terminal, or with `--wide`, a
    table is as wide as its widest row needs (full ids a script can read back), whatever the width."""

    wide = False

    def print(self, *objects: Any, **kwargs: Any) -> None:
        tables = [o for o in objects if isinstance(o, Table)]
        if not tables or not (self.wide or not self.is_terminal):
            super().print(*objects, **kwargs)
            return
        roomy = self.options.update(width=1_000_000)
        needed = max(Measurement.get(self, roomy, t).maximum for t in tables)
        before = self.width
        self.width = max(before, needed)
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = before


console = _Console(highlight=False)
err = _Console(stderr=True, highlight=False)


def take_wide(args: list[str]) -> list[str]:
    """`args` without `--wide` (before a `--`), which makes every table full width, wherever it was given."""
    end = args.index("--") if "--" in args else len(args)
    if "--wide" in args[:end]:
        console.wide = err.wide = True
    return [a for a in args[:end] if a != "--wide"] + args[end:]


secs = format_duration  # the one duration formatter (crossrail.core): 45s, 3m20s, 2h05m


def print_json(obj: dict[str, Any]) -> None:
    """One JSON object on stdout, indented, fields in their order (values JSON lacks are written as text)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(obj: dict[str, Any]) -> None:
    """One JSON object on one line (JSON Lines: what a follow prints, one object per line as they come)."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def print_object(kind: str, body: dict[str, Any]) -> None:
    """`body` as a crossrail/v1 object of `kind` (apiVersion and kind first)."""
    print_json(api_object(kind, **body))


def emit(obj: dict[str, Any], as_json: bool, render: Callable[[dict[str, Any]], None]) -> None:
    """The object as JSON with `--json` (each time also as ISO-8601, `with_iso`), else as `render` draws it."""
    if as_json:
        print_json(with_iso(obj))
    else:
        render(obj)


TIME_KEYS = frozenset({"ts", "start", "end", "estimated_start"})
"""Keys (besides every `*_at`) whose numbers are epoch seconds."""


def with_iso(value: Any) -> Any:
    """`value` with each epoch-seconds time (`*_at`, `ts`, `start`, `end`, `estimated_start`) followed by
    `<key>_iso`, the same instant as ISO-8601 local time with its zone; the seconds are kept as they were."""
    if isinstance(value, list):
        return [with_iso(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        out[key] = with_iso(item)
        is_time = isinstance(key, str) and (key.endswith("_at") or key in TIME_KEYS)
        if is_time and isinstance(item, int | float) and not isinstance(item, bool) and f"{key}_iso" not in value:
            out[f"{key}_iso"] = iso(item)
    return out


def iso(ts: float) -> str:
    """An instant as ISO-8601 local time with its zone, to the second: 2026-12-07T05:12:09+01:00."""
    return dt.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def when(ts: float | None) -> str:
    """A wall time as ISO-8601 local time with its zone (`iso`), or '-' for none."""
    return "-" if ts is None else iso(ts)


def table(title: str, rows: list[dict[str, Any]]) -> None:
    """Rows of one shape as a table with their keys as columns; '<title>: none' for no rows."""
    if not rows:
        console.print(f"{title}: none")
        return
    t = Table(title=title)
    for col in rows[0]:
        t.add_column(col)
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row.values()))
    console.print(t)
