"""How the command prints: crossrail/v1 JSON objects, rich tables, times and durations (one way each)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crossrail.core import format_duration
from crossrail.core.api import api_object

if TYPE_CHECKING:
    from crossrail.cli.terminal import Console

    console: Console
    """Where tables and lines go (stdout)."""
    err: Console
    """Where warnings and problems go (stderr)."""


def __getattr__(name: str) -> Any:
    """`console`, `err` and their class (`_Console`), made on first use: `--json` output never loads rich."""
    if name not in ("console", "err", "_Console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from crossrail.cli.terminal import Console

    if name == "_Console":
        return Console
    made = globals()[name] = Console(stderr=name == "err", highlight=False)  # later lookups find it here
    return made


def _console(name: str = "console") -> Console:
    made = globals().get(name)
    return __getattr__(name) if made is None else made  # type: ignore[no-any-return]


def take_wide(args: list[str]) -> list[str]:
    """`args` without `--wide` (before a `--`), which makes every table full width, wherever it was given."""
    end = args.index("--") if "--" in args else len(args)
    if "--wide" in args[:end]:
        _console().wide = _console("err").wide = True
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
    from rich.table import Table

    if not rows:
        _console().print(f"{title}: none")
        return
    t = Table(title=title)
    for col in rows[0]:
        t.add_column(col)
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row.values()))
    _console().print(t)
