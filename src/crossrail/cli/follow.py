"""Long-lived reads: `logs -f`, `events --follow` and `status --watch`, each a poll of the client's plain reads.

They use only the client's public reads (`logs`, `events`, `status`), so they work the same over a workspace
and over `--server`. Ctrl-C ends each with exit 0.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from crossrail.cli import render
from crossrail.cli.output import console, print_json_line
from crossrail.core import TERMINAL_RUN_STATES
from crossrail.core.attempts import ACTIVE_ATTEMPT_STATES

EVENT_BATCH = 500


def follow_logs(
    client: Any,
    ref: str,
    attempt: int | None,
    *,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
    part: str | None = None,
) -> None:
    """Print each attempt's log as `logs` does, then the followed attempt's new output until it ends.

    The followed attempt is `attempt`, else the run's latest one (of pipeline part `part` when given; waited
    for while the run has none and has not ended). The last line says how it ended.
    """
    shown: dict[int, int] = {}  # attempt number -> characters of its log printed so far
    closed: set[int] = set()
    while True:
        obj = client.logs(ref, attempt, part)
        if not obj["attempts"] and obj.get("state") in TERMINAL_RUN_STATES:
            render.logs(obj)  # it ended before any attempt started, and says why
            return
        for a in obj["attempts"]:
            if a["attempt"] not in shown:
                render.attempt_rule(obj["run"], a)
                shown[a["attempt"]] = 0
            text = a["log"] or ""
            console.print(text[shown[a["attempt"]] :], markup=False, highlight=False, end="")
            shown[a["attempt"]] = len(text)
            if a is not obj["attempts"][-1] and a["attempt"] not in closed:  # a later attempt exists: it ended
                _close(a)
                closed.add(a["attempt"])
        followed = obj["attempts"][-1] if obj["attempts"] else None
        if followed is not None and followed["state"] not in ACTIVE_ATTEMPT_STATES:
            _close(followed)
            how = render.attempt_how(followed)
            console.print(f"{obj['run']} attempt {followed['attempt']} ended: {how}", markup=False)
            return
        sleep(interval_s)


def _close(a: dict[str, Any]) -> None:
    """End an attempt's printed log on a line of its own, saying so when it printed nothing."""
    if not a["log"]:
        console.print("(no output)", markup=False)
    elif not a["log"].endswith("\n"):
        console.print()


def follow_events(
    client: Any,
    ref: str | None,
    after: int,
    *,
    as_json: bool,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Print the event log from seq `after` on, one line (or one JSON object) per event, as events are appended."""
    cursor = after
    while True:
        batch = client.events(ref, after_seq=cursor, limit=EVENT_BATCH)["events"]
        for e in batch:
            if as_json:
                print_json_line(e)
            else:
                console.print(render.event_line(e), markup=False, highlight=False, soft_wrap=True)
            cursor = max(cursor, int(e["seq"]))
        if len(batch) < EVENT_BATCH:
            sleep(interval_s)


def watch_status(
    client: Any, *, interval_s: float, count: int | None, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Redraw `status` in place every `interval_s` (rich Live), `count` times or until Ctrl-C."""
    from rich.live import Live

    drawn = 0
    with Live(render.status_view(client.status()), console=console, auto_refresh=False) as live:
        while True:
            drawn += 1
            if count is not None and drawn >= count:
                return
            sleep(interval_s)
            live.update(render.status_view(client.status()), refresh=True)


def until_interrupted(fn: Callable[[], None]) -> None:
    """Run `fn`; Ctrl-C ends it quietly (exit 0), as it ends `tail -f`."""
    with contextlib.suppress(KeyboardInterrupt):
        fn()
