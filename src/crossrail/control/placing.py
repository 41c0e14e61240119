"""Placement estimates over the store: each pending run's pool with its explanation, and when it starts.

The agent and `crossrail queue` share this: both read runs and attempts from the store, turn them into
the estimator's plain data (scheduling/estimate.py) and call `scheduling.plan.plan`. A run's current
placement is the pool of its latest `planned` or `replaced` event, so an agent restart keeps it.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from crossrail.control.attempts import ended_of
from crossrail.control.budgets import ATTEMPT_EVENTS
from crossrail.core import Event, EventType, parse_duration, priority_rank
from crossrail.metrics.usage import usage
from crossrail.scheduling.decisions import avoided_pool
from crossrail.scheduling.estimate import Busy, Choice, PlacementWork, PoolInfo, StartEstimate, run_time_s
from crossrail.scheduling.plan import Plan, plan
from crossrail.scheduling.quota import QuotaBook
from crossrail.scheduling.rounds import estimated_rates
from crossrail.spec import Fleet, PlacementPolicy, work_digest
from crossrail.store import AttemptRecord, RunRecord, Store

THROUGHPUT_METRIC = "steps_per_hour"
"""What attempts report as their throughput (workloads/loop.py): steps per hour over all their chips."""

PLACEMENT_EVENTS = (str(EventType.PLANNED), str(EventType.REPLACED))
MIN_PREEMPTIONS = 5
"""`preempted` events a pool needs before their rate replaces its declared interruptions_per_chip_hour."""


class Placer:
    """Builds the estimator's inputs from the store for one fleet and policy, and plans the queue."""

    def __init__(self, store: Store, fleet: Fleet, policy: PlacementPolicy) -> None:
        self.store = store
        self.fleet = fleet
        self.policy = policy
        self._measured: dict[str, dict[str, float]] = {}
        self._run_times: dict[str, dict[str, list[float]]] | None = None  # work digest -> pool -> times
        self._scaling: dict[str, dict[str, dict[int, float]]] = {}
        self._shapes: dict[tuple[str, str, str], PlacementWork] = {}
        """(experiment, stage, spec digest) -> its workload: runs of one spec share everything but their
        own fields, so a queue of sweeps reads each spec once."""
        self.quota = QuotaBook(fleet.spec.queues)

    # --- inputs --------------------------------------------------------------------------------

    def pools(self, names: Iterable[str] | None = None, drained: Iterable[str] = ()) -> list[PoolInfo]:
        """The fleet's pools (only `names` when given); pools in `drained` take no new work."""
        wanted = None if names is None else set(names)
        gone = set(drained)
        interruptible = [p.name for p in self.fleet.spec.pools if p.spot or p.interruptions_per_chip_hour > 0]
        measured = measured_interruptions(self.store, interruptible)
        out = []
        for pool in self.fleet.spec.pools:
            if wanted is None or pool.name in wanted:
                info = PoolInfo.from_spec(pool, self.fleet.spec.currency)
                if pool.name in measured:
                    info = info.measured(*measured[pool.name])
                out.append(info if pool.name not in gone else PoolInfo(**{**info.__dict__, "drained": True}))
        return out

    def workload(self, run: RunRecord, *, current: str | None = None, avoid: str | None = None) -> PlacementWork:
        """What placement needs to know about `run`, from its recorded spec, its policy and the store."""
        key = (run.experiment, run.stage, run.spec_digest)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self.workload_of(
                run.id, run.experiment, run.stage, run.spec, priority=run.priority, queued_at=run.updated_at
            )
        own = {
            "run": run.id,
            "current": current,
            "avoid": avoid,
            "rank": priority_rank(run.priority),
            "queued_at": run.updated_at,
            "pools": self.quota.reachable(run.queue),
        }
        # dataclasses.replace would cost several times more per run than this copy of the fields.
        return PlacementWork(**(shape.__dict__ | own))

    def workload_of(
        self, run: str, experiment: str, stage: str, doc: dict[str, Any], *, priority: str, queued_at: float
    ) -> PlacementWork:
        """The workload of an experiment document (as recorded: `spec.resources.duration` etc.)."""
        spec = doc.get("spec", {})
        res, acc = spec.get("resources") or {}, spec.get("accelerators") or {}
        prefer, source = preference(self.policy, stage, acc)
        parts = spec.get("parts") or {}
        return PlacementWork(
            run=run,
            chips=int(res.get("chips") or 1),
            parts=tuple(int(p.get("chips") or 1) * int(p.get("replicas") or 1) for p in parts.values()),
            stage=stage,
            reference_s=_seconds(res.get("duration")),
            prefer=prefer,
            allow=tuple(acc["allow"]) if acc.get("allow") else None,
            objective=str(self.policy.objective_for(stage)),
            checkpoint_every_s=_seconds((spec.get("checkpoint") or {}).get("every")),
            measured=self.measured(experiment),
            scaling=self.scaling(experiment),
            run_times=self.run_times(doc),
            prefer_source=source,
            rank=priority_rank(priority),
            queued_at=queued_at,
        )

    def run_times(self, doc: dict[str, Any]) -> dict[str, list[float]]:
        """Pool -> run times (s) of successful runs of the same work as `doc` (`spec.work_digest`), newest
        first: what a run-time estimate there takes the median of (scheduling.estimate.measured_run_time)."""
        if self._run_times is None:
            self._run_times = measured_run_times(self.store)
        return self._run_times.get(work_digest(doc), {})

    def measured(self, experiment: str) -> dict[str, float]:
        """Chip type -> median throughput per chip (steps per second) its earlier attempts reported."""
        found = self._measured.get(experiment)
        if found is None:
            self.measure([experiment])
            found = self._measured[experiment]
        return found

    def scaling(self, experiment: str) -> dict[str, dict[int, float]]:
        """Chip type -> degree (chips the attempt held) -> median throughput per chip (steps per second) there."""
        found = self._scaling.get(experiment)
        if found is None:
            self.measure([experiment])
            found = self._scaling[experiment]
        return found

    def measure(self, experiments: Iterable[str]) -> None:
        """Read the measured throughputs of all `experiments` not read yet at once (see `measured`, `scaling`)."""
        wanted = set(experiments) - set(self._measured)
        if not wanted:
            return
        samples = self.store.metrics_by_degree(wanted, THROUGHPUT_METRIC)
        for experiment in wanted:
            by_chip = samples.get(experiment, {})
            medians = {c: statistics.median(v for vs in d.values() for v in vs) for c, d in by_chip.items()}
            self._measured[experiment] = {c: m / 3600.0 for c, m in medians.items() if m > 0}
            self._scaling[experiment] = {
                c: {n: m / 3600.0 for n, vs in sorted(d.items()) if (m := statistics.median(vs)) > 0}
                for c, d in by_chip.items()
            }

    def busy(self, attempts: Iterable[AttemptRecord], runs: dict[str, RunRecord], now: float) -> list[Busy]:
        """Running attempts with their expected ends (start + run time on their pool; None if unknown)."""
        infos = {p.name: p for p in self.pools()}
        out = []
        for att in attempts:
            run, pool = runs.get(att.run_id), infos.get(att.pool)
            end = None
            if run is not None and pool is not None:
                run_s, _ = run_time_s(self.workload(run), pool, infos.values())
                end = (att.started_at or att.created_at or now) + run_s if run_s is not None else None
            out.append(Busy(att.run_id, att.pool, att.chips, end))
        return out

    # --- the plan ------------------------------------------------------------------------------

    def plan(
        self,
        queued: Sequence[RunRecord],
        active: Sequence[AttemptRecord],
        pools: Sequence[PoolInfo],
        now: float,
        current: dict[str, str],
        *,
        extra: Sequence[PlacementWork] = (),
        explain_all: bool = True,
    ) -> Plan:
        """Place every queued run (each held to `current` unless clearly better elsewhere), then `extra`
        behind them in admission order, and estimate every start."""
        last = self.store.last_attempts(r.id for r in queued)
        runs = self.store.runs_by_id(a.run_id for a in active)
        self.measure([*(r.experiment for r in queued), *(r.experiment for r in runs.values())])
        works = [self.workload(r, current=current.get(r.id), avoid=_avoid(last.get(r.id))) for r in queued]
        settings = self.fleet.spec.placement
        return plan(
            [*works, *extra],
            self.busy(active, runs, now),
            pools,
            now,
            hysteresis=settings.hysteresis,
            min_gain_s=settings.min_gain_s,
            prefer_margin=settings.prefer_margin,
            explain_all=explain_all,
        )


MEASURED_SCAN = 500
"""How many of the newest successful runs the run-time estimates read (each digest keeps its newest 7)."""


def measured_run_times(store: Store, scan: int = MEASURED_SCAN) -> dict[str, dict[str, list[float]]]:
    """Work digest -> pool -> run times (s) of the newest `scan` successful runs, newest first: from the
    start of the attempt that succeeded to its end (one attempt: a run retried elsewhere measured only there)."""
    runs = store.list_runs(states=["succeeded"], limit=scan)
    last = store.last_attempts(r.id for r in runs)
    out: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        att = last.get(run.id)
        if att is None or att.part is not None or att.started_at is None or att.ended_at is None:
            continue
        digest = work_digest(run.spec)
        out.setdefault(digest, {}).setdefault(att.pool, []).append(att.ended_at - att.started_at)
    return out


def measured_interruptions(store: Store, pools: Iterable[str]) -> dict[str, tuple[float, int, float]]:
    """Pool -> (interruptions per chip-hour, preempted events, chip-hours) for each of `pools` (spot pools and
    pools declaring interruptions) with at least MIN_PREEMPTIONS `preempted` events: their count over the
    chip-hours attempts ran there (metrics.usage), up to the newest of those events."""
    wanted = set(pools)
    if not wanted:
        return {}
    counts = Counter(p for _, p in store.event_values([str(EventType.PREEMPTED)], "pool") if p in wanted)
    enough = {p for p, n in counts.items() if n >= MIN_PREEMPTIONS}
    if not enough:
        return {}
    events = store.events(types=ATTEMPT_EVENTS)  # the chip-hours `usage` counts, as budgets read them
    hours: dict[str, float] = {}
    for row in usage(events, until=max(e.ts for e in events)):
        hours[row.pool] = hours.get(row.pool, 0.0) + row.chip_hours
    return {p: (counts[p] / hours[p], counts[p], hours[p]) for p in sorted(enough) if hours.get(p, 0.0) > 0}


def preference(policy: PlacementPolicy, stage: str, accelerators: Mapping[str, Any]) -> tuple[str, str]:
    """The accelerator a run prefers and where that comes from: its `spec.accelerators`, else its stage's
    placement policy."""
    prefer = accelerators.get("prefer")
    if prefer:
        return str(prefer), " by spec.accelerators.prefer"
    return str(policy.for_stage(stage).preferred_accelerator), f" by the {stage} placement policy"


def _avoid(last: AttemptRecord | None) -> str | None:
    """The pool the run's next attempt tries last (crossrail.scheduling.decisions, as the agent and simulator)."""
    return avoided_pool(ended_of(last))


def current_placements(store: Store, runs: Iterable[str] | None = None) -> dict[str, str]:
    """Run -> pool of its latest `planned` or `replaced` event (only `runs`, when given)."""
    out: dict[str, str] = {}
    for run, pool in store.event_values(PLACEMENT_EVENTS, "pool", runs):
        if pool:
            out[run] = pool
    return out


def placement_events(planned: Plan, current: dict[str, str], now: float) -> list[Event]:
    """`planned` for runs placed the first time, `replaced` for runs the plan moved to another pool."""
    events = []
    for run, choice in planned.choices.items():
        before = current.get(run)
        if choice.pool is None or choice.pool == before:
            continue
        if before is None:
            events.append(Event(EventType.PLANNED, now, run, None, explanation(choice)))
        else:
            events.append(Event(EventType.REPLACED, now, run, None, {"from": before, **explanation(choice)}))
    return events


def explanation(choice: Choice) -> dict[str, Any]:
    """A choice as an event payload (JSON)."""
    return choice.as_dict()


def _seconds(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    return parse_duration(str(value))


class QueuePlacement:
    """The agent's placement memory: each pending run's current pool, kept in step with the event log.

    Planning costs about a quarter of a millisecond per pending run, so it is not redone every pass: a new
    plan is made when the fleet or its drained pools changed, when runs arrived (at most once per four
    times the last plan's cost, so planning takes at most a fifth of the agent's time), and otherwise every
    `replan_s`. Between plans runs keep their placement; runs that arrived since wait for the next one and
    meanwhile are ranked by the cycle's own rule.
    """

    def __init__(self, store: Store, replan_s: float = 5.0) -> None:
        self.store = store
        self.replan_s = replan_s
        self.current: dict[str, str] | None = None
        self._last: tuple[Plan, object, float, float] | None = None
        """The last plan, what it depended on, when it was made (store clock) and what it cost (seconds)."""
        self._rates: dict[str, tuple[tuple[str, float], ...]] = {}
        self._rates_of: object = None  # the plan they were estimated with

    def place(
        self,
        fleet: Fleet,
        policy: PlacementPolicy,
        queued: Sequence[RunRecord],
        active: Sequence[AttemptRecord],
        *,
        drained: Iterable[str],
        now: float,
    ) -> Plan:
        """Plan `queued` on `fleet`'s pools, each held to its current pool unless clearly better elsewhere."""
        if self.current is None:
            self.current = current_placements(self.store)
        basis = (id(fleet), id(policy), frozenset(drained))
        if self._last is not None:
            last, last_basis, made_at, cost_s = self._last
            new = any(r.id not in last.choices for r in queued)
            wait_s = max(4 * cost_s, 0.0 if new else self.replan_s)
            if last_basis == basis and now - made_at < wait_s:
                return last
        started = time.perf_counter()
        placer = Placer(self.store, fleet, policy)
        planned = placer.plan(queued, active, placer.pools(drained=basis[2]), now, self.current)
        self._last = (planned, basis, now, time.perf_counter() - started)
        return planned

    def rates(
        self, fleet: Fleet, policy: PlacementPolicy, runs: Sequence[RunRecord]
    ) -> dict[str, tuple[tuple[str, float], ...]]:
        """Each of `runs`' rate per chip type (scheduling.rounds.estimated_rates) from the estimates placement
        uses: measured runs of the same work, the throughputs its attempts reported, the pools' speeds. Kept
        until the next plan, as placements are, so they change at the replanning cadence, not every pass."""
        made = self._last[2] if self._last is not None else None
        if made != self._rates_of:
            self._rates, self._rates_of = {}, made
        missing = [r for r in runs if r.id not in self._rates]
        if missing:
            placer = Placer(self.store, fleet, policy)
            # Only speeds matter here: the pools as declared, without pools()'s scan of preemption events.
            pools = [PoolInfo.from_spec(p, fleet.spec.currency) for p in fleet.spec.pools]
            placer.measure(r.experiment for r in missing)
            for r in missing:
                self._rates[r.id] = estimated_rates(placer.workload(r), pools)
        return {r.id: self._rates[r.id] for r in runs}

    def record(self, planned: Plan, admitted: Iterable[str], now: float) -> list[Event]:
        """Record `planned` and `replaced` events for runs still pending whose placement is new or moved.

        Runs admitted in the same pass carry their explanation in their `placed` event instead.
        """
        current = self.current if self.current is not None else {}
        gone = set(admitted)
        events = [e for e in placement_events(planned, current, now) if e.run not in gone]
        if events:
            self.store.append_events(events)
        for run, choice in planned.choices.items():
            if choice.pool is not None:
                current[run] = choice.pool
        self.current = current
        return events


def estimated_starts(
    store: Store, fleet: Fleet, policy: PlacementPolicy, queued: Sequence[RunRecord], now: float
) -> dict[str, dict[str, Any]]:
    """Run -> its planned pool and estimated start, for `crossrail queue` (outside the scheduling cycle).

    Runs stay on the pool their latest `planned`/`replaced` event names unless the plan would move them;
    drained pools take nothing. The start is None when no pool of the fleet can ever hold the run.
    """
    placer = Placer(store, fleet, policy)
    current = current_placements(store, (r.id for r in queued))
    drained = [p.name for p in fleet.spec.pools if p.drained]
    pools = placer.pools(drained=drained)
    planned = placer.plan(queued, store.active_attempts(), pools, now, current, explain_all=False)
    out = {}
    for run in queued:
        start = planned.starts.get(run.id)
        at = start.start if start is not None else None
        info = next((p for p in pools if start is not None and p.name == start.pool), None)
        out[run.id] = {
            "planned_pool": start.pool if start is not None else None,
            "estimated_start": at,
            "estimated_start_in_s": None if at is None else round(at - now, 3),
            # how the run time there was estimated: `measured from 7 runs`, or the declared duration's speed
            "run_time_source": None if info is None else run_time_s(placer.workload(run), info, pools)[1],
        }
    return out


def explain(
    store: Store, fleet: Fleet, policy: PlacementPolicy, work: PlacementWork, now: float
) -> tuple[Choice, StartEstimate | None]:
    """Where `work` would be placed if it were queued now, behind everything queued, and when it would start."""
    placer = Placer(store, fleet, policy)
    queued = store.queued_runs()
    current = current_placements(store, (r.id for r in queued))
    drained = [p.name for p in fleet.spec.pools if p.drained]
    pools = placer.pools(drained=drained)
    planned = placer.plan(queued, store.active_attempts(), pools, now, current, extra=[work])
    return planned.choices[work.run], planned.starts.get(work.run)


def placement_history(events: Iterable[Event]) -> list[dict[str, Any]]:
    """Every placement explanation a run's events keep: first picks, moves, and the pool each attempt got."""
    out = []
    for e in events:
        if e.type in (EventType.PLANNED, EventType.REPLACED):
            data = e.data
        elif e.type is EventType.PLACED and isinstance(e.data.get("explanation"), dict):
            data = {**e.data["explanation"], "pool": e.data.get("pool"), "admitted_reason": e.data.get("reason")}
        else:
            continue
        out.append({"ts": e.ts, "type": str(e.type), "attempt": e.attempt, "from": data.get("from"), **data})
    return out
