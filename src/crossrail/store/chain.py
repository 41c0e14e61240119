"""The event log's hash chains: one per run (and one for events of no run), so appends never serialise across runs.

Each event stores `hash = sha256(previous hash of its chain + its canonical content)`. Triggers refuse UPDATE
and DELETE (store/append_only.py); the chain catches a rewrite made around them (drop the trigger, change a
row, put the trigger back): the changed event no longer matches its hash, and the event after a deleted one
no longer follows from the hash before it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GENESIS = ""
"""The `previous hash` of a chain's first event."""

NO_RUN = "(no run)"
"""How the chain of events that belong to no run is named in findings."""


def canonical(ts: float, type_: str, run: str | None, attempt: int | None, data: Any) -> bytes:
    """The bytes an event's hash covers: everything but its seq, in one stable JSON form."""
    body = {"ts": float(ts), "type": str(type_), "run": run, "attempt": attempt, "data": data}
    if not _flat(data):
        # Round-trip through JSON first, so what is hashed is what the database gives back (tuples become lists,
        # keys strings). A flat mapping of strings to plain values reads back as it is: no round trip needed.
        body = json.loads(json.dumps(body))
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _flat(data: Any) -> bool:
    """Whether `data` is a dict of str keys to str, int, float, bool or None values (exactly those types)."""
    return type(data) is dict and all(type(k) is str and type(v) in _PLAIN for k, v in data.items())


def event_hash(previous: str | None, content: bytes) -> str:
    return hashlib.sha256((previous or GENESIS).encode() + b"\n" + content).hexdigest()


def row_hash(previous: str | None, row: dict[str, Any]) -> str:
    """The hash of an event row (the mapping inserted into or read from the events table)."""
    return event_hash(previous, canonical(row["ts"], row["type"], row["run_id"], row["attempt"], row["data"]))


@dataclass(frozen=True)
class ChainProblem:
    """One event whose hash does not follow: where it is and what that means."""

    run: str | None
    seq: int
    message: str

    def render(self) -> str:
        return f"run {self.run or NO_RUN} seq {self.seq}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run, "seq": self.seq, "message": self.message}


class ChainCheck:
    """Walks events in seq order keeping each chain's last stored hash, and collects every problem."""

    def __init__(self) -> None:
        self.events = 0
        self.problems: list[ChainProblem] = []
        self._last: dict[str | None, str] = {}

    @property
    def chains(self) -> int:
        return len(self._last)

    def feed(self, rows: Iterable[Any]) -> None:
        for row in rows:
            m = row._mapping if hasattr(row, "_mapping") else row
            self.events += 1
            run, stored = m["run_id"], m["hash"]
            if stored is None:
                self.problems.append(ChainProblem(run, m["seq"], "has no hash: it was written around the store"))
            elif row_hash(self._last.get(run), m) != stored:
                self.problems.append(ChainProblem(run, m["seq"], MISMATCH))
            # The next event is checked against what is stored, so one changed event is named once, by itself.
            self._last[run] = stored or ""


MISMATCH = "does not match its hash: it was changed after it was appended, or the event before it was deleted"
