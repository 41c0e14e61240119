"""Each stage process's running totals, as a file in the rendezvous directory a controller reads.

A stage writes `stats/<part><replica>.<incarnation>.json` whole (aside and rename) at most every
`FLUSH_S`: `{"part", "replica", "samples", "busy_s", "held_s", "idle_s", "max_lag", "at"}` where `samples`
counts completions made (sampler), scored (reward) or learnt from (learner), `held_s` is time a sampler
waited because the lag bound held it back, `idle_s` time the learner waited for samples, `max_lag` the
largest policy lag it used, and `at` the wall-clock time of the write. Totals only grow, so a reader takes
differences between two reads; a replaced process starts a new file beside its predecessor's.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from crossrail.core.clock import Clock
from crossrail.workloads.rl.settings import Rendezvous

FLUSH_S = 0.2


@dataclass
class Totals:
    samples: float = 0.0
    busy_s: float = 0.0
    held_s: float = 0.0
    idle_s: float = 0.0
    max_lag: int = 0


def stats_path(directory: Path, part: str, replica: int, incarnation: int) -> Path:
    return directory / f"{part}{replica}.{incarnation}.json"


class StageStats:
    def __init__(self, directory: Path, part: str, replica: int, incarnation: int, clock: Clock) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = stats_path(directory, part, replica, incarnation)
        self.part, self.replica, self.clock = part, replica, clock
        self.totals = Totals()
        self._written = -FLUSH_S

    def add(self, *, samples: float = 0, busy_s: float = 0, held_s: float = 0, idle_s: float = 0, lag: int = 0) -> None:
        t = self.totals
        t.samples, t.busy_s, t.held_s, t.idle_s = (
            t.samples + samples,
            t.busy_s + busy_s,
            t.held_s + held_s,
            t.idle_s + idle_s,
        )
        t.max_lag = max(t.max_lag, lag)
        now = self.clock.now()
        if now - self._written >= FLUSH_S:
            self._write(now)

    def _write(self, now: float) -> None:
        record = {"part": self.part, "replica": self.replica, **asdict(self.totals), "at": now}
        fd, aside = tempfile.mkstemp(dir=self.path.parent, prefix=".stats-", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
        os.replace(aside, self.path)
        self._written = now


def read_totals(directory: Path) -> dict[str, Totals]:
    """The totals of every stage process that ever ran, summed by part (max_lag: the largest)."""
    out: dict[str, Totals] = defaultdict(Totals)
    for path in sorted(directory.glob("*.json")) if directory.exists() else []:
        try:
            record = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        t = out[record["part"]]
        t.samples += record["samples"]
        t.busy_s += record["busy_s"]
        t.held_s += record["held_s"]
        t.idle_s += record["idle_s"]
        t.max_lag = max(t.max_lag, record["max_lag"])
    return dict(out)


def running(rdv: Rendezvous, counts: Mapping[str, int]) -> bool:
    """Whether replicas 0..n-1 of each part in `counts` run: the newest process of each (the last line of its
    pid file) has written its stats, so it is past its imports and in its loop. A controller counts a window
    only from then on, so it does not judge a size by processes still starting."""
    for part, count in counts.items():
        for replica in range(count):
            pids = rdv.pid_file(part, replica)
            incarnation = len(pids.read_text().split()) - 1 if pids.exists() else -1
            if incarnation < 0 or not stats_path(rdv.stats, part, replica, incarnation).exists():
                return False
    return True
