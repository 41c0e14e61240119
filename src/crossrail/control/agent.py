"""The reconcile agent: store state + executor observations + report channels -> decisions -> actions.

Level-triggered: every pass reads what is (attempts in the store, processes the executor sees, records
the runtime wrote) and moves each thing one step towards what should be. Every step is one guarded
store transaction that records its events, and every executor action is idempotent, so the agent can be
killed at any line and started again: it loses no attempt and starts none twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from crossrail.control import parents
from crossrail.control.attempts import classify, launch_request, new_attempt, report_uri
from crossrail.control.executor import AttemptStatus, Executor
from crossrail.control.placing import Placer, QueuePlacement, explanation
from crossrail.control.service import Service
from crossrail.control.storewatch import StoreWatch, WatchConfig
from crossrail.core import Event, EventType, parse_duration
from crossrail.errors import ConflictError, CrossrailError, StoreUnavailableError, WorkspaceError
from crossrail.runtime.report import read_new
from crossrail.scheduling import Request, Running, Scheduler, SchedulerConfig
from crossrail.scheduling.fifo import Decision, Pending
from crossrail.scheduling.plan import Plan
from crossrail.store import AttemptRecord, RunRecord

TERMINAL = ("succeeded", "failed", "cancelled")


REPLACED_DETAIL = "withdrawn from its engine's queue and re-placed on"
"""Marks the end of an attempt moved off its pool before it started (no back-off follows it)."""

STALE_NUMBER_DETAIL = "its number is held by an attempt the executor ran for an earlier store"
"""Marks the end of an attempt whose number an executor had already used (a store reset or restore): the
run is offered again at once under the next number, no retry spent."""


@dataclass(frozen=True)
class AgentConfig:
    poll_s: float = 0.5
    stop_grace_s: float = 30.0
    fallback_wait_s: float = 60.0
    heartbeat_s: float = 10.0
    heartbeat_timeout_s: float = 60.0
    unplaced_backoff_s: float = 30.0  # a run its engine could not place waits this long before it is offered again
    store_check_s: float = 60.0  # how often a pass also runs the store's quick integrity check (0: every pass)
    store_wait_s: float = 300.0  # how long an unreachable store (a restarting server) is waited for before stopping


@dataclass(frozen=True)
class Tick:
    """What one pass saw: active attempts and queued runs after it, and how many it admitted and ended."""

    running: int
    queued: int
    admitted: int
    ended: int

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.queued == 0


@contextmanager
def agent_lock(root: Path) -> Iterator[None]:
    """One agent per workspace: an exclusive flock on the workspace directory itself, released when the process dies.

    The lock is on the directory, not on `agent.lock`: a lock on a file is lost the moment someone deletes or
    replaces the file (the next agent creates a new one and locks that), while the directory cannot be
    replaced under a running agent without moving the whole workspace, state and all. `agent.lock` only
    tells people which process holds it. (The `agents` table records liveness for the store; it cannot be
    the lock, because a crashed agent leaves its row behind, and a lock must vanish with its process.)
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise WorkspaceError(f"cannot open the workspace {root}: {exc.strerror}; `crossrail init` makes one") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkspaceError(f"another crossrail agent is running on {root} (see {root / 'agent.lock'})") from None
        _write_pid(root / "agent.lock")
        yield
    finally:
        os.close(fd)


def _write_pid(path: Path) -> None:
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(f"{os.getpid()}\n")
        tmp.replace(path)
    except OSError as exc:
        raise WorkspaceError(
            f"cannot write {path}: {exc.strerror}; the agent keeps its state in the workspace {path.parent}, "
            "so it must run as a user who can write there (read-only commands such as status still work)"
        ) from None


def agent_running(root: Path) -> bool:
    try:
        with agent_lock(root):
            return False
    except WorkspaceError:
        return True


class Agent:
    def __init__(self, service: Service, executor: Executor, reports_dir: Path, config: AgentConfig | None = None):
        self.service = service
        self.store = service.store
        self.executor = executor
        self.reports_dir = reports_dir
        self.config = config or AgentConfig()
        self.clock = service.clock
        self.scheduler: Scheduler | None = None
        self.fleet_path: Path | None = None
        self._fleet_mtime: int | None = None
        self.warnings: list[str] = []
        self.placing = QueuePlacement(service.store)
        self._plan = Plan({}, {})
        self._pending_checked: dict[str, float] = {}
        self._engine_queued: list[tuple[RunRecord, AttemptRecord]] = []
        """When each attempt waiting in its engine's queue was last weighed for a move (store clock)."""
        self.workspace_root: Path | None = None
        watch = WatchConfig(self.config.heartbeat_s, self.config.store_check_s, self.config.store_wait_s)
        self.watch = StoreWatch(service.store, self.clock, watch)

    # --- the loop ------------------------------------------------------------------------------

    def run(
        self,
        *,
        until_idle: bool = False,
        should_stop: Callable[[], bool] = lambda: False,
        on_tick: Callable[[Tick], None] | None = None,
    ) -> None:
        """Pass after pass until `should_stop` (or idle). A store that is damaged, deleted or replaced stops the
        agent (StoreDamagedError) before it writes anything more; an unreachable one is waited for."""
        self.watch.workspace = str(self.workspace_root) if self.workspace_root else None
        self.watch.start()
        try:
            while not should_stop():
                try:
                    tick = self.reconcile()
                except StoreUnavailableError as exc:
                    self.watch.unavailable(exc, self.config.poll_s)
                    time.sleep(self.config.poll_s)
                    continue
                if on_tick is not None:
                    on_tick(tick)
                if until_idle and tick.idle:
                    return
                time.sleep(self.config.poll_s)
        finally:
            self.watch.stop()

    def reconcile(self) -> Tick:
        """One level-triggered pass: (0) the store is still ours, fleet changes, (1) attempts, (2) executor records
        the store does not hold, (3) admission."""
        self.watch.before_pass()
        self._follow_fleet()
        statuses = {(s.run, s.attempt): s for s in self.executor.observe()}
        ended = 0
        self._engine_queued = []
        active = self.store.active_attempts()
        for att in active:
            ended += self._reconcile_attempt(att, statuses.get((att.run_id, att.number)))
        ended += self._replace_pending(self._engine_queued)
        tracked = {(a.run_id, a.number) for a in active}
        self.watch.unknown_attempts(s for key, s in statuses.items() if key not in tracked)
        self._forget_recorded(statuses)
        admitted = self._schedule()
        running = len(self.store.active_attempts())
        queued = sum(count for _stage, st, count, _chips in self.store.state_counts() if st == "queued")
        return Tick(running=running, queued=queued, admitted=admitted, ended=ended)

    # --- one attempt ---------------------------------------------------------------------------

    def _reconcile_attempt(self, att: AttemptRecord, status: AttemptStatus | None) -> int:
        run = self.store.get_run(att.run_id)
        att = self._ingest(att)
        if status is None and att.state == "starting":
            if run.state in ("cancelled", "suspended"):
                status = AttemptStatus(
                    att.run_id,
                    att.number,
                    "exited",
                    stopped_by=_stop_reason(run.state),
                    detail="stopped before it was launched",
                )
            else:
                self._launch(run, att)
                return 0
        if status is None:
            status = AttemptStatus(att.run_id, att.number, "lost", detail="the executor has no record of it")
        if status.phase == "pending":  # the engine is still placing it: nothing runs, nothing to watch yet
            if run.state in ("cancelled", "suspended"):
                self.executor.stop(run.id, att.number, self.config.stop_grace_s, _stop_reason(run.state))
                return 0
            self._engine_queued.append((run, att))  # weighed for a move once every attempt has been seen
            return 0
        if status.phase == "running":
            return self._watch(run, att, status)
        if att.state == "starting" and status.started_at is not None:
            # It started and ended while no agent watched: record the start first, so no attempt ends unstarted.
            self._started(run, att, status.started_at)
        att = self._ingest(att)  # whatever the process wrote before it ended
        return self._end(run, att, status)

    def _replace_pending(self, waiting: list[tuple[RunRecord, AttemptRecord]]) -> int:
        """Attempts waiting in their engine's own queue (Kueue) move when another pool is clearly better now.

        One plan for all of them, as for queued runs, each held to its attempt's pool by the hysteresis (a
        drained pool lets go at once), at most every `replan_s` per run. The engine must withdraw an attempt
        untouched; then it ends `unplaced` (no retry spent), a `replaced` event explains the move, and the
        next placement puts the run on the better pool.
        """
        now = self.clock.now()
        checked = {a.run_id: t for _, a in waiting if (t := self._pending_checked.get(a.run_id)) is not None}
        due = [(r, a) for r, a in waiting if now - checked.get(a.run_id, -math.inf) >= self.placing.replan_s]
        self._pending_checked = checked | {a.run_id: now for _, a in due}  # only runs still waiting are kept
        withdraw = getattr(self.executor, "withdraw", None)
        if withdraw is None or not due:
            return 0
        fleet = self.service.fleet
        placer = Placer(self.store, fleet, self.service.policy)
        moving = {a.run_id for _, a in due}
        others = [a for a in self.store.active_attempts() if a.run_id not in moving]
        drained = [p.name for p in fleet.spec.pools if p.drained]
        current = {a.run_id: a.pool for _, a in due}
        planned = placer.plan([r for r, _ in due], others, placer.pools(drained=drained), now, current)
        ended = 0
        for run, att in due:
            choice = planned.choices.get(run.id)
            if choice is None or choice.pool is None or choice.pool == att.pool or not withdraw(run.id, att.number):
                continue
            moved = Event(EventType.REPLACED, now, run.id, None, {"from": att.pool, **explanation(choice)})
            self.store.append_events([moved])
            if self.placing.current is not None:
                self.placing.current[run.id] = choice.pool
            detail = f"{REPLACED_DETAIL} {choice.pool}: {choice.reason}"
            ended += self._end(run, att, AttemptStatus(run.id, att.number, "unplaced", detail=detail))
        return ended

    def _watch(self, run: RunRecord, att: AttemptRecord, status: AttemptStatus) -> int:
        now = self.clock.now()
        if att.state == "starting":
            self._started(run, att, status.started_at or now)
        if run.state in ("cancelled", "suspended"):
            self.executor.stop(run.id, att.number, self.config.stop_grace_s, _stop_reason(run.state))
        elif not getattr(self.executor, "sees_processes", True):
            last = att.last_heartbeat or att.started_at or now
            if now - last > self.config.heartbeat_timeout_s:
                lost = AttemptStatus(run.id, att.number, "lost", detail=f"no heartbeat for {now - last:.0f}s")
                self.executor.stop(run.id, att.number, 0.0, "preempted")
                return self._end(run, att, lost)
        return 0

    def _launch(self, run: RunRecord, att: AttemptRecord) -> None:
        parent = att.parent_checkpoint or self._parent_checkpoint(run)  # resolved at admission (older: now)
        parent_uid = self.store.get_run(run.parent_run).uid if run.parent_run else None
        request = launch_request(
            run, att, parent_checkpoint=parent, heartbeat_s=self.config.heartbeat_s, parent_uid=parent_uid
        )
        try:
            status = self.executor.launch(request)
        except OSError as exc:
            lost = AttemptStatus(run.id, att.number, "lost", detail=f"could not be launched: {exc}")
            self._end(run, att, lost)
            return
        except ConflictError as exc:  # the executor used this number before (the store was reset or restored)
            detail = f"{STALE_NUMBER_DETAIL} ({exc}); offered again under the next number"
            self._end(run, att, AttemptStatus(run.id, att.number, "unplaced", detail=detail))
            return
        if status.phase == "running":
            self._started(run, att, status.started_at or self.clock.now())

    def _started(self, run: RunRecord, att: AttemptRecord, ts: float) -> None:
        data = {
            "pool": att.pool,
            "accelerator": att.accelerator,
            "chip_type": att.chip_type,
            "chips": att.chips,
            "cost_per_chip_hour": att.cost_per_chip_hour,
        }
        self.store.mark_started(run.id, att.number, ts, [Event(EventType.STARTED, ts, run.id, att.number, data)])

    def _end(self, run: RunRecord, att: AttemptRecord, status: AttemptStatus) -> int:
        spec = run.spec.get("spec", {})
        retries = spec.get("retries") or {}
        outcome = classify(status, run, list(retries.get("exit_codes") or []))
        now = status.ended_at or self.clock.now()
        events: list[Event] = []
        run_state: str | None = None
        if outcome.succeeded:
            events.append(Event(EventType.SUCCEEDED, now, run.id, att.number, {"pool": att.pool}))
            run_state = "succeeded"
        elif outcome.attempt_state == "unplaced":  # it never ran: back to the queue, no retry spent
            queued = {"queue": run.queue, "stage": run.stage, "team": run.team, "priority": run.priority}
            events += [
                Event(EventType.UNPLACED, now, run.id, att.number, {"pool": att.pool, "reason": outcome.reason}),
                Event(EventType.QUEUED, now, run.id, None, queued),
            ]
            run_state = "queued"
        elif not outcome.by_user:
            # A preemption is crossrail's doing: it requeues the run without spending its retries.
            retry = outcome.attempt_state == "preempted" or (
                outcome.retryable and self._retries_used(run.id) < int(retries.get("max") or 0)
            )
            reason = (
                outcome.reason
                if retry or not outcome.retryable
                else (f"{outcome.reason}; no retries left (spec.retries.max = {int(retries.get('max') or 0)})")
            )
            kind = EventType.PREEMPTED if outcome.attempt_state == "preempted" else EventType.FAILED
            events.append(
                Event(
                    kind,
                    now,
                    run.id,
                    att.number,
                    {
                        "pool": att.pool,
                        "reason": reason,
                        "exit_code": status.exit_code,
                        "signal": status.signal,
                        "retryable": outcome.retryable,
                        "final": not retry,
                    },
                )
            )
            if retry:
                events += [
                    Event(EventType.RETRIED, now, run.id, None, {"next_attempt": att.number + 1, "reason": reason}),
                    Event(
                        EventType.QUEUED,
                        now,
                        run.id,
                        None,
                        {"queue": run.queue, "stage": run.stage, "team": run.team, "priority": run.priority},
                    ),
                ]
            run_state = "queued" if retry else "failed"
        changed = self.store.end_attempt(
            run.id,
            att.number,
            state=outcome.attempt_state,
            ended_at=now,
            exit_code=status.exit_code,
            signal=status.signal,
            stopped_by=status.stopped_by,
            reason=outcome.reason,
            run_state=run_state,
            events=events,
        )
        self.executor.forget(run.id, att.number)
        return int(changed)

    def _retries_used(self, run_id: str) -> int:
        """Attempts of the run that ended in a failure (preemptions and user stops do not count)."""
        return sum(1 for a in self.store.attempts(run_id) if a.state in ("failed", "lost"))

    def _forget_recorded(self, statuses: dict[tuple[str, int], AttemptStatus]) -> None:
        """Executor records of attempts whose end the store already holds (a crash between the two steps)."""
        active = {(a.run_id, a.number) for a in self.store.active_attempts()}
        for key, status in statuses.items():
            if status.phase != "running" and key not in active:
                self.executor.forget(*key)

    # --- report channel ------------------------------------------------------------------------

    def _ingest(self, att: AttemptRecord) -> AttemptRecord:
        if not att.report_uri:
            return att
        records, cursor = read_new(att.report_uri, att.report_cursor)
        if not records and cursor == att.report_cursor:
            return att
        events, samples, ckpts, beat = _translate(att, records, self.clock.now())
        self.store.ingest(
            att.run_id,
            att.number,
            old_cursor=att.report_cursor,
            new_cursor=cursor,
            events=events,
            samples=samples,
            checkpoints=ckpts,
            heartbeat=beat,
        )
        return _replace(att, report_cursor=cursor, last_heartbeat=beat or att.last_heartbeat)

    # --- admission -----------------------------------------------------------------------------

    def _follow_fleet(self) -> None:
        """Move the scheduling core to a fleet file changed by `crossrail fleet` or by hand."""
        path = self.fleet_path
        if path is None or self.scheduler is None:
            return
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._fleet_mtime:
            return
        self._fleet_mtime = mtime
        try:
            self.service.reload_fleet()
            self.scheduler.apply_fleet(self._local_fleet())
        except CrossrailError as exc:  # a broken hand edit: keep scheduling on the last good fleet
            self.service.reload_fleet(self.scheduler.fleet)
            self.warnings.append(f"fleet file not applied: {exc}")

    def _scheduler(self) -> Scheduler:
        """The scheduling core, made on the first pass and kept: it holds fair-share history and
        preemption counts between passes."""
        if self.scheduler is None:
            fleet = self._local_fleet()
            config = SchedulerConfig.from_fleet(fleet, fallback_wait_s=self.config.fallback_wait_s)
            self.scheduler = Scheduler.from_fleet(fleet, config)
            if self.fleet_path is not None and self.fleet_path.exists():
                self._fleet_mtime = self.fleet_path.stat().st_mtime_ns
        return self.scheduler

    def _schedule(self) -> int:
        """Feed the core what is queued and running, run one cycle, act on its preemptions and admissions."""
        now = self.clock.now()
        queued = self.store.list_runs(states=["queued"], newest_first=False)
        active = self.store.active_attempts()
        by_id = self.store.runs_by_id(a.run_id for a in active)
        pending = [
            Request.from_pending(p, team=r.team, duration_s=_duration_s(r))
            for r in queued
            if (p := self._pending(r, now)) is not None
        ]
        attained = self.store.attained_chip_s((p.run for p in pending), now)  # what `las`-style policies order by
        pending = [dataclasses.replace(p, attained_s=attained[p.run]) if p.run in attained else p for p in pending]
        running = []
        for a in active:
            r, ckpts = by_id[a.run_id], self.store.checkpoints(a.run_id)
            req = Request(r.id, r.queue, a.chips, priority=r.priority, team=r.team, duration_s=_duration_s(r))
            checkpointed = ckpts[-1].committed_at if ckpts else None
            running.append(Running(req, a.pool, a.chips, a.started_at or a.created_at or now, checkpointed))
        scheduler = self._scheduler()
        pending = self._placed(scheduler, pending, queued, active, now)
        scheduler.sync(pending, running, now)
        result = scheduler.cycle(now)
        self.placing.record(self._plan, (a.run for a in result.admitted), now)
        attempt = {a.run_id: a.number for a in active}
        for victim in result.preempted:  # stopped with grace; the attempt ends `preempted` and is requeued
            self.executor.stop(victim.run, attempt[victim.run], victim.grace_s, "preempted")
        runs = {r.id: r for r in queued}
        return sum(self._admit(runs[a.run], a, now) for a in result.admitted)

    def _placed(
        self, scheduler: Scheduler, pending: list[Request], queued: list[RunRecord], active: Any, now: float
    ) -> list[Request]:
        """Each pending request with the pool the estimates pick (control/placing.py), and why."""
        waiting = {req.run for req in pending}
        drained = [p.name for p in scheduler.pool_status() if p.drained]
        runs = [r for r in queued if r.id in waiting]
        self._plan = self.placing.place(scheduler.fleet, self.service.policy, runs, active, drained=drained, now=now)
        choices = self._plan.choices
        return [
            dataclasses.replace(req, pool=c.pool, pool_reason=c.reason) if (c := choices.get(req.run)) else req
            for req in pending
        ]

    def _pending(self, run: RunRecord, now: float) -> Pending | None:
        if not self._parent_ready(run, now):
            return None
        spec = run.spec.get("spec", {})
        res = spec.get("resources") or {}
        acc = spec.get("accelerators") or {}
        prefer, source = acc.get("prefer"), " by spec.accelerators.prefer"
        if not prefer:
            prefer = str(self.service.policy.for_stage(run.stage).preferred_accelerator)
            source = f" by the {run.stage} placement policy"
        attempts = self.store.attempts(run.id)
        last = attempts[-1] if attempts else None
        # a move or a stale number, not a refusal: no back-off
        moved = last is not None and any(d in (last.reason or "") for d in (REPLACED_DETAIL, STALE_NUMBER_DETAIL))
        unplaced_at = last.ended_at if last is not None and last.state == "unplaced" and not moved else None
        if unplaced_at is not None and now - unplaced_at < self.config.unplaced_backoff_s:
            return None  # its engine had no room a moment ago: asking again at once would only churn attempts
        avoid = last.pool if last is not None and last.state in ("failed", "preempted", "lost") else None
        return Pending(
            run=run.id,
            queue=run.queue,
            priority=run.priority,
            queued_at=run.updated_at,
            chips=int(res.get("chips") or run.chips),
            min_chips=res.get("min_chips"),
            max_chips=res.get("max_chips"),
            allow=tuple(acc["allow"]) if acc.get("allow") else None,
            prefer=str(prefer),
            avoid_pool=avoid,
            prefer_source=source,
        )

    def _admit(self, run: RunRecord, d: Decision, now: float) -> int:
        parent = self._resolve_parent(run, now)
        if parent is False:
            return 0
        pool = self.service.fleet.pool(d.pool)
        number = len(self.store.attempts(run.id)) + 1
        report = report_uri(run, number, str(pool.backend), self.reports_dir)
        att = new_attempt(run, number, pool, d.chips, report=report, now=now, parent_checkpoint=parent)
        placed = {
            "pool": pool.name,
            "accelerator": str(pool.accelerator),
            "chip_type": pool.chip_type,
            "chips": d.chips,
            "cost_per_chip_hour": pool.cost_per_chip_hour,
            "reason": d.reason,
        }
        choice = self._plan.choices.get(run.id)
        if choice is not None and choice.pool == pool.name:
            placed["explanation"] = choice.as_dict()
        events = [
            Event(EventType.PLACED, now, run.id, number, placed),
            Event(EventType.ADMITTED, now, run.id, number, {"pool": pool.name, "chips": d.chips}),
        ]
        if self.store.admit(att, events) is None:
            return 0
        if "://" not in report:  # a remote channel's writer creates its prefix
            Path(report).parent.mkdir(parents=True, exist_ok=True)
        self._launch(self.store.get_run(run.id), att)
        return 1

    def _local_fleet(self) -> Any:
        """The pools the executor can run on: every backend a router serves, else only `local`."""
        fleet = self.service.fleet
        backends = getattr(self.executor, "backends", None) or ("local",)
        pools = [p for p in fleet.spec.pools if str(p.backend) in backends]
        return fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"pools": pools})})

    # --- parents -------------------------------------------------------------------------------

    def _parent_ready(self, run: RunRecord, now: float) -> bool:
        """A run that starts from another run's `latest` checkpoint waits until that run has ended; when it
        ended with no checkpoint the store still offers, the run ends failed with that reason."""
        if run.parent_checkpoint != "latest" or run.parent_run is None:
            return True
        parent = self.store.get_run(run.parent_run)
        if parent.state not in TERMINAL:
            return False
        if self.store.checkpoints(parent.id, usable=True):
            return True
        self._fail_child(run, parent, parents.newest_verified(self.store, parent.id), now)
        return False

    def _resolve_parent(self, run: RunRecord, now: float) -> str | Literal[False] | None:
        """The checkpoint URI the run's next attempt starts from, resolved as it is admitted and launched.

        `latest` becomes the parent's newest checkpoint that verifies (the cheap check; the runtime checks every
        checksum and falls back further). False, with the run ended failed, when none does.
        """
        if run.parent_checkpoint != "latest" or run.parent_run is None:
            return run.parent_checkpoint
        parent = self.store.get_run(run.parent_run)
        verified = parents.newest_verified(self.store, parent.id)
        if verified.newest is not None:
            return verified.newest.uri
        self._fail_child(run, parent, verified, now)
        return False

    def _fail_child(self, run: RunRecord, parent: RunRecord, verified: parents.Verified, now: float) -> None:
        reason = parents.no_usable_checkpoint(parent, verified)
        ev = Event(EventType.FAILED, now, run.id, None, {"reason": reason, "retryable": False, "final": True})
        with contextlib.suppress(ConflictError):  # cancelled or suspended meanwhile: that stands
            self.store.transition(run.id, ["queued"], "failed", [ev])

    def _parent_checkpoint(self, run: RunRecord) -> str | None:
        """For an attempt admitted before attempts recorded their parent checkpoint."""
        if run.parent_checkpoint != "latest" or run.parent_run is None:
            return run.parent_checkpoint
        return parents.newest_verified(self.store, run.parent_run).newest_uri


def _duration_s(run: RunRecord) -> float | None:
    duration = (run.spec.get("spec", {}).get("resources") or {}).get("duration")
    return parse_duration(duration) if duration else None


def _stop_reason(state: str) -> Any:
    return "cancelled" if state == "cancelled" else "suspended"


def _replace(att: AttemptRecord, **changes: Any) -> AttemptRecord:
    from dataclasses import replace

    return replace(att, **changes)


def _translate(
    att: AttemptRecord, records: list[dict[str, Any]], now: float
) -> tuple[list[Event], list[dict[str, Any]], list[dict[str, Any]], float | None]:
    """Runtime records -> events, metric samples and checkpoints to index, plus the last heartbeat time."""
    events: list[Event] = []
    samples: list[dict[str, Any]] = []
    ckpts: list[dict[str, Any]] = []
    beat: float | None = None
    for r in records:
        ts = float(r.get("ts") or now)
        kind = r.get("type")
        if kind == "metric":
            samples.append(
                {
                    "run_id": att.run_id,
                    "attempt": att.number,
                    "ts": ts,
                    "step": r.get("step"),
                    "name": str(r["name"]),
                    "value": float(r["value"]),
                }
            )
        elif kind == "heartbeat":
            beat = max(beat or ts, ts)
            events.append(Event(EventType.HEARTBEAT, ts, att.run_id, att.number, {"step": r.get("step")}))
        elif kind == "checkpoint":
            beat = max(beat or ts, ts)
            ckpts.append({"step": int(r["step"]), "uri": str(r["uri"]), "ts": ts})
        elif kind == "event":
            events.append(
                Event(
                    EventType.REPORTED, ts, att.run_id, att.number, {"name": r.get("name"), "data": r.get("data") or {}}
                )
            )
        else:
            line = str(r.get("line", ""))[:200]
            events.append(
                Event(
                    EventType.REPORTED,
                    now,
                    att.run_id,
                    att.number,
                    {"name": "invalid", "data": {"reason": r.get("reason"), "line": line}},
                )
            )
    return events, samples, ckpts, beat
