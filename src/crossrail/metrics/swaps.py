"""A simulator's time-sliced swaps folded into a `MetricsAccumulator` a round at a time, as columns.

Under Gavel's round-based policies most running jobs leave their chips at every round boundary and others
take them: each swap is, to the metrics, a `preempted` (with the useful work kept) and a `queued`, then a
`started` on the new pool. `SwapBook` applies a whole boundary's swaps as numpy steps over the runs it
holds, and gives the accumulator exactly what those events one by one would have:

- the per-run state (when it began waiting or recovering, its attempt, its group) lives in the book's
  columns while it holds the run (`MetricsAccumulator.hold`), and goes back to the accumulator
  (`give_back`) before any event of that run is folded (the accumulator asks its holder) and before a report;
- the per-group figures go in through `MetricsAccumulator.fold`, a boundary's swaps at a time;
- the sums kept per group (chip-hours, cost, useful chip-hours) take a boundary's swaps as one sum, so a
  figure may differ from the events' one-after-another sum in its last bits (tests/unit/sim/test_slicing.py
  compares within a relative 1e-9); the run, queue and recovery times only feed distributions, which do
  not depend on their order: they are kept in growing arrays and handed to the tallies whole (`Durations`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from crossrail.metrics.accumulator import GroupKey, HeldRun, MetricsAccumulator

NONE = math.nan
"""A column's stand-in for None (a run not waiting, not recovering)."""
RUN, QUEUE, RECOVERY = 0, 1, 2
"""A group's kinds of durations in `SwapBook.durations`: its tally's `run_s`, `queue_s`, `recovery_s`."""


class SwapBook:
    """The accumulator's state for the runs a simulator's bulk rounds swap, by row (the caller's numbering)."""

    def __init__(self, metrics: MetricsAccumulator, pools: Sequence[tuple[str, float]]) -> None:
        """`pools`: (name, cost per chip-hour) of each pool, in the caller's pool numbering."""
        self.metrics = metrics
        metrics.lend_to(self)
        self.pool_names = [name for name, _ in pools]
        self.prices = np.array([price for _, price in pools], dtype=float)
        self.ids: list[str] = []
        """Row -> the run it stands for."""
        self.held: dict[str, int] = {}
        """Run -> its row, while the book holds it."""
        n = 0
        self.waiting_since = np.full(n, NONE)
        self.recovering_since = np.full(n, NONE)
        self.last_attempt = np.zeros(n, dtype=np.int64)
        self.key = np.zeros(n, dtype=np.int64)
        """Row -> the group (index into `keys`) the run counts in."""
        self.stage = np.zeros(n, dtype=np.int64)
        self.chips = np.zeros(n)
        self.pool = np.zeros(n, dtype=np.int64)
        """Row -> the pool of its running attempt."""
        self.started = np.full(n, NONE)
        """Row -> when its running attempt started (NaN: none runs)."""
        self.began_seq = np.zeros(n, dtype=np.int64)
        """Row -> the order its running attempt began in, among all the book's starts."""
        self.starts = 0
        self.keys: list[GroupKey] = []
        self.key_id: dict[GroupKey, int] = {}
        self.stages: list[str] = []
        self.stage_keys = np.zeros((0, len(pools)), dtype=np.int64)
        """(stage, pool) -> the group's index in `keys`."""
        self.rehold = False
        """Whether `release_all` gave back runs the rounds may swap again."""
        self.holding = np.zeros(n, dtype=bool)
        """Row -> whether the book holds the run now."""
        self.durations: dict[int, tuple[_Buffer, _Buffer, _Buffer]] = {}
        """Group -> the run, queue and recovery times of its swaps (`RUN`, `QUEUE`, `RECOVERY`), handed to its
        tally as arrays on `release_all` (they only feed distributions, which do not depend on the order of
        their values)."""

    # --- holding and releasing runs ----------------------------------------------------------------

    def hold(self, rows: Sequence[int], run_ids: Sequence[str]) -> None:
        """Take runs over from the accumulator (each not over yet): from now on the book keeps their state
        until `release`."""
        need = max(rows, default=-1) + 1
        if need > len(self.ids):
            self._grow(need)
        for row, run_id in zip(rows, run_ids, strict=True):
            state = self.metrics.hold(run_id)  # ValueError for a run that is over
            self.held[run_id] = row
            self.holding[row] = True
            self.ids[row] = run_id
            self.waiting_since[row] = NONE if state.waiting_since is None else state.waiting_since
            self.recovering_since[row] = NONE if state.recovering_since is None else state.recovering_since
            self.last_attempt[row] = state.last_attempt
            self.key[row] = self._key(state.key)
            self.stage[row] = self._stage(state.key[0])
            self.chips[row] = state.chips
            attempt = state.attempt
            self.started[row] = NONE if attempt is None else attempt[3]
            if attempt is not None:  # held again after a release (a report taken mid-run)
                self.chips[row], self.pool[row] = attempt[1], self.pool_names.index(attempt[0])

    def release(self, run_id: str) -> None:
        """Give the run's state back to the accumulator."""
        row = self.held.pop(run_id, None)
        if row is None:
            return
        self.holding[row] = False
        waiting, recovering, started = (
            float(c[row]) for c in (self.waiting_since, self.recovering_since, self.started)
        )
        pool = int(self.pool[row])
        attempt = None if math.isnan(started) else (self.pool_names[pool], float(self.chips[row]),
                                                    float(self.prices[pool]), started)  # fmt: skip
        state = HeldRun(
            key=self.keys[int(self.key[row])], chips=float(self.chips[row]),
            waiting_since=None if math.isnan(waiting) else waiting,
            recovering_since=None if math.isnan(recovering) else recovering,
            last_attempt=int(self.last_attempt[row]), attempt=attempt,
        )  # fmt: skip
        self.metrics.give_back(run_id, state)

    def release_all(self) -> None:
        """Release every run held (those with an attempt running last, in the order their attempts began: the
        order the accumulator keeps its running attempts in, and sums their usage in), and hand the groups the
        durations kept for them."""
        self.rehold = True
        rows = np.fromiter(self.held.values(), dtype=np.int64, count=len(self.held))
        idle = np.isnan(self.started[rows])
        running = rows[~idle][np.argsort(self.began_seq[rows[~idle]], kind="stable")]
        ids = self.ids
        for row in rows[idle].tolist() + running.tolist():
            self.release(ids[row])
        for k, kept in self.durations.items():  # each as one array, which the distributions take as it is
            run_s, queue_s, recovery_s = (buffer.take() for buffer in kept)
            self.metrics.fold(self.keys[k], durations=(run_s, queue_s, recovery_s))

    def _holding(self, rows: np.ndarray) -> None:
        """Hold again any of `rows` released since (after a report mid-run, the rounds go on)."""
        if self.rehold and not self.holding[rows].all():
            again = [row for row in rows.tolist() if not self.holding[row]]
            self.hold(again, [self.ids[row] for row in again])

    # --- a boundary's swaps --------------------------------------------------------------------------

    def left(self, rows: np.ndarray, ts: float, useful_chip_s: np.ndarray) -> None:
        """As `preempted` (with `useful_chip_s` kept) then `queued`, at `ts`, for each row in turn."""
        if not len(rows):
            return
        self._holding(rows)
        duration = np.maximum(0.0, ts - self.started[rows])
        useful = np.maximum(useful_chip_s, 0.0) / 3600
        chip_hours = self.chips[rows] * duration / 3600
        cost = chip_hours * self.prices[self.pool[rows]]
        order, groups = _groups(self.key[rows])
        if order is not None:
            useful, duration, chip_hours, cost = useful[order], duration[order], chip_hours[order], cost[order]
        for k, a, b in groups:
            self.metrics.fold(
                self.keys[k], useful_chip_hours=float(useful[a:b].sum()), chip_hours=float(chip_hours[a:b].sum()),
                cost=float(cost[a:b].sum()),
            )  # fmt: skip
            self._keep(k, RUN, duration[a:b])
        self.started[rows] = NONE
        self.recovering_since[rows] = ts
        self.waiting_since[rows] = ts  # a running run is never waiting too

    def began(self, rows: np.ndarray, pools: np.ndarray, ts: float) -> None:
        """As `started` at `ts` of each row's next attempt on its pool of `pools`, in turn."""
        if not len(rows):
            return
        self._holding(rows)
        new = self.stage_keys[self.stage[rows], pools]
        waited = np.maximum(0.0, ts - self.waiting_since[rows])  # NaN where it was not waiting
        recovered = np.maximum(0.0, ts - self.recovering_since[rows])  # NaN where it was not recovering
        order, groups = _groups(new)
        if order is not None:
            waited, recovered = waited[order], recovered[order]
        gaps = np.isnan(waited).any() or np.isnan(recovered).any()
        for k, a, b in groups:
            w, r = waited[a:b], recovered[a:b]
            if gaps:
                w, r = w[~np.isnan(w)], r[~np.isnan(r)]
            self.metrics.fold(self.keys[k], started=True, recoveries=len(r))
            self._keep(k, QUEUE, w)
            self._keep(k, RECOVERY, r)
        self.key[rows] = new  # the run counts in this group from now (its count moves there on release)
        self.waiting_since[rows] = NONE
        self.recovering_since[rows] = NONE
        self.last_attempt[rows] += 1
        self.pool[rows] = pools
        self.started[rows] = ts
        self.began_seq[rows] = np.arange(self.starts, self.starts + len(rows))
        self.starts += len(rows)

    # --- storage -------------------------------------------------------------------------------------

    def _keep(self, k: int, kind: int, values: np.ndarray) -> None:
        if len(values):
            kept = self.durations.get(k)
            if kept is None:
                kept = self.durations[k] = (_Buffer(), _Buffer(), _Buffer())
            kept[kind].add(values)

    def _key(self, key: GroupKey) -> int:
        found = self.key_id.get(key)
        if found is None:
            found = self.key_id[key] = len(self.keys)
            self.keys.append(key)
        return found

    def _stage(self, stage: str) -> int:
        if stage not in self.stages:
            self.stages.append(stage)
            ids = [self._key((stage, pool)) for pool in self.pool_names]
            self.stage_keys = np.vstack([self.stage_keys, np.array([ids], dtype=np.int64)])
        return self.stages.index(stage)

    def _grow(self, need: int) -> None:
        extra = max(need - len(self.ids), len(self.ids), 64)
        self.ids.extend([""] * extra)
        for name, fill, dtype in (
            ("waiting_since", NONE, float), ("recovering_since", NONE, float), ("last_attempt", 0, np.int64),
            ("key", 0, np.int64), ("stage", 0, np.int64), ("chips", 0.0, float), ("pool", 0, np.int64),
            ("started", NONE, float), ("began_seq", 0, np.int64), ("holding", False, bool),
        ):  # fmt: skip
            setattr(self, name, np.concatenate([getattr(self, name), np.full(extra, fill, dtype=dtype)]))


class _Buffer:
    """A float64 array grown a slice at a time (doubling), taken out whole."""

    __slots__ = ("data", "size")

    def __init__(self) -> None:
        self.data = np.empty(0)
        self.size = 0

    def add(self, values: np.ndarray) -> None:
        end = self.size + len(values)
        if end > len(self.data):
            grown = np.empty(max(end, 2 * len(self.data), 1024))
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : end] = values
        self.size = end

    def take(self) -> np.ndarray:
        """The values added since the last take; what is handed out is never written again (later values go
        to the room after it)."""
        taken = self.data[: self.size]
        self.data, self.size = self.data[self.size :], 0
        return taken


def _groups(keys: np.ndarray) -> tuple[np.ndarray | None, list[tuple[int, int, int]]]:
    """An order that puts each group's entries together, each group's in their own order (None: all are of one
    group), and each group with its stretch (group, start, end) in that order."""
    groups, start = [], 0
    for k, count in enumerate(np.bincount(keys).tolist()):
        if count:
            groups.append((k, start, start + count))
            start += count
    return (None if len(groups) == 1 else np.argsort(keys, kind="stable")), groups
