"""The reconcile agent: observe (store, executor, report channels) -> decide (crossrail.scheduling) -> act.

Level-triggered: every pass reads what is (attempts in the store, processes the executor sees, records
the runtime wrote) and moves each thing one step towards what should be. What an end means, which pool a
retry avoids, how long it backs off and whether waiting work moves are decided by crossrail.scheduling
(decisions.py, the same functions the simulator calls); the agent records each decision in one guarded
store transaction with its events, and every executor action is idempotent, so the agent can be killed
at any line and started again: it loses no attempt and starts none twice.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossrail.control import budgets, isolation, parents
from crossrail.control.agent import capacity, channel, pipesize
from crossrail.control.agent.cause import cause_line
from crossrail.control.agent.leader import DEFAULT_LEASE_S, Leadership, LeaseConfig
from crossrail.control.agent.secrets import attempt_secret
from crossrail.control.agent.storewatch import StoreWatch, WatchConfig
from crossrail.control.attempts import history, launch_request, new_attempt, report_uri
from crossrail.control.executor import AttemptStatus, Executor, LaunchRequest, StopReason
from crossrail.control.placing import Placer, QueuePlacement, explanation, preference
from crossrail.control.service import Service
from crossrail.core import EndReason, Event, EventType, RunState, format_duration, parse_duration
from crossrail.core.attempts import AttemptState, RunAs
from crossrail.errors import ConflictError, CrossrailError, FencedError, StoreUnavailableError, UsageError
from crossrail.executors import sandbox
from crossrail.scheduling import Request, Running, Scheduler, SchedulerConfig, decisions, reconcile
from crossrail.scheduling.backlog import LEARNER, Resize
from crossrail.scheduling.decisions import EndDecision, EngineQueued, RetryPolicy
from crossrail.scheduling.growth import resized_data
from crossrail.scheduling.pipeline import parts_of, retry_part
from crossrail.scheduling.plan import Plan
from crossrail.scheduling.rounds import served_by_type
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import PART_SEP, Admission, Decision, Growth, Pending, part_key
from crossrail.spec import Part, Pool
from crossrail.store import AttemptRecord, RunRecord

__all__ = ["Agent", "AgentConfig", "Tick"]

ONE_OBJECT_BACKENDS = frozenset({"kubernetes"})
"""Backends that run the parts of a pipeline admitted together as one object (Kubernetes: one JobSet)."""


@dataclass(frozen=True)
class AgentConfig:
    poll_s: float = 0.5
    stop_grace_s: float = 30.0
    fallback_wait_s: float = 60.0
    heartbeat_s: float = 10.0
    heartbeat_timeout_s: float = 60.0  # for executors that cannot see processes: silent this long is lost
    store_check_s: float = 60.0  # how often a pass also runs the store's quick integrity check (0: every pass)
    store_wait_s: float = 300.0  # how long an unreachable store (a restarting server) is waited for before stopping
    report_url: str | None = None  # an API server: attempts on remote backends report to its /v1/ingest
    lease_s: float = DEFAULT_LEASE_S  # on a server store: the leader's lease (control/agent/leader.py)
    backlog_window_s: float = (
        10.0  # the backlog controller's window and cooldown per pipeline (control/agent/pipesize.py)
    )


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
        """When each attempt waiting in its engine's queue was last weighed for a move (store clock)."""
        self._engine_queued: list[tuple[RunRecord, AttemptRecord]] = []
        self._weighed: dict[str, float] = {}
        """When the backlog controller last weighed each running pipeline (store clock)."""
        self._unlaunched: dict[str, list[AttemptRecord]] = {}
        """Each run's parts recorded but not launched (an agent stopped between the two), as a pass finds them."""
        self._parts_waiting = 0
        """Parts of running pipelines that wait to be offered again (back-off or room), as of the last pass."""
        self._held: dict[tuple[str, int], int] = {}
        """(run, attempt) -> the chips each running attempt holds: its own, or what a growth resized it to."""
        self.workspace_root: Path | None = None
        watch = WatchConfig(self.config.heartbeat_s, self.config.store_check_s, self.config.store_wait_s)
        self.watch = StoreWatch(service.store, self.clock, watch)
        self.leadership: Leadership | None = None
        """On a server store (several agents may share it) the election; SQLite keeps one agent by its lock."""

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
        if self.store.path is None and self.watch.agent_id is not None:
            lease = LeaseConfig(self.config.lease_s, look_s=self.config.poll_s)
            self.leadership = Leadership(self.store, self.clock, self.watch.agent_id, socket.gethostname(), lease)
            self.leadership.renew_in_background()
        try:
            while not should_stop():
                try:
                    if not self._lead():
                        if until_idle and self._store_idle():  # the leader finished the work: nothing to stand by for
                            return
                        time.sleep(self.config.poll_s)
                        continue
                    tick = self.reconcile()
                except FencedError as exc:
                    self._step_down(str(exc))
                    continue
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
            if self.leadership is not None:
                self.leadership.release()
            self.watch.stop()

    def _lead(self) -> bool:
        """Whether this agent leads for the coming pass (always, without an election); a standby only beats."""
        if self.leadership is None:
            return True
        was = self.leadership.leading
        leading = self.leadership.step()
        if was and not leading:
            self._forget_state()
        if not leading:
            self.watch.before_pass()
        return leading

    def _store_idle(self) -> bool:
        queued = any(state == "queued" and count for _stage, state, count, _chips in self.store.state_counts())
        return not queued and not self.store.active_attempts()

    def _step_down(self, why: str) -> None:
        """A write was refused for a newer term: stand by, with nothing of the old term's plans kept."""
        if self.leadership is not None:  # only an elected agent's writes carry a fence
            self.leadership.step_down(why)
        self._forget_state()

    def _forget_state(self) -> None:
        """What a leader held between passes; the next leadership rebuilds it from the store."""
        self.scheduler = None
        self._fleet_mtime = None
        self._plan = Plan({}, {})
        self._pending_checked = {}
        self._engine_queued = []
        self._held = {}
        self.placing = QueuePlacement(self.service.store)

    def reconcile(self) -> Tick:
        """One level-triggered pass: (0) the store is still ours, fleet changes, (1) attempts, (2) executor records
        the store does not hold, (3) admission."""
        self.watch.before_pass()
        self._follow_fleet()
        statuses = {(s.run, s.attempt): s for s in self.executor.observe()}
        ended = 0
        self._engine_queued = []
        active = self.store.active_attempts()
        self._unlaunched = {}
        for att in active:
            ended += self._reconcile_attempt(att, statuses.get((att.run_id, att.number)))
        for rid, parts in self._unlaunched.items():  # recorded, never launched (the agent stopped between the two)
            self._launch_parts(self.store.get_run(rid), parts)
        ended += self._replace_pending(self._engine_queued)
        tracked = {(a.run_id, a.number) for a in active}
        self.watch.unknown_attempts(s for key, s in statuses.items() if key not in tracked)
        self._forget_recorded(statuses)
        admitted = self._schedule()
        self._size_pipelines()
        running = len(self.store.active_attempts())
        queued = sum(count for _stage, st, count, _chips in self.store.state_counts() if st == "queued")
        queued += self._parts_waiting  # parts of running pipelines to offer again: not idle while they wait
        return Tick(running=running, queued=queued, admitted=admitted, ended=ended)

    # --- one attempt ---------------------------------------------------------------------------

    def _reconcile_attempt(self, att: AttemptRecord, status: AttemptStatus | None) -> int:
        run = self.store.get_run(att.run_id)
        att = self._ingest(att)
        if status is None and att.state == AttemptState.STARTING:
            if _halted(run, att):
                status = AttemptStatus(
                    att.run_id,
                    att.number,
                    "exited",
                    stopped_by=_stop_reason(run.state),
                    detail="stopped before it was launched",
                )
            elif att.part is not None:  # launched with the other parts recorded with it, after this pass's loop
                self._unlaunched.setdefault(run.id, []).append(att)
                return 0
            else:
                self._launch(run, att)
                return 0
        if status is None:
            status = AttemptStatus(att.run_id, att.number, "lost", detail="the executor has no record of it")
        if status.phase == "pending":  # the engine is still placing it: nothing runs, nothing to watch yet
            if _halted(run, att):
                self.executor.stop(run.id, att.number, self.config.stop_grace_s, _stop_reason(run.state))
                return 0
            self._engine_queued.append((run, att))  # weighed for a move once every attempt has been seen
            return 0
        if status.phase == "running":
            return self._watch(run, att, status)
        if att.state == AttemptState.STARTING and status.started_at is not None:
            # It started and ended while no agent watched: record the start first, so no attempt ends unstarted.
            self._started(run, att, status.started_at, status.image_digest)
        att = self._ingest(att)  # whatever the process wrote before it ended
        return self._end(run, att, status)

    def _replace_pending(self, waiting: list[tuple[RunRecord, AttemptRecord]]) -> int:
        """Attempts waiting in their engine's own queue (Kueue) move when another pool is clearly better now.

        One plan for all that are due (decisions.replan_due), each held to its attempt's pool by the
        hysteresis (a drained pool lets go at once). The engine must withdraw an attempt untouched; then it
        ends `replaced` (no retry spent, no back-off), a `replaced` event explains the move, and the next
        placement puts the run on the better pool.
        """
        now = self.clock.now()
        queue = [EngineQueued(a.run_id, a.number, a.pool) for _, a in waiting]
        due, self._pending_checked = decisions.replan_due(queue, self._pending_checked, now, self.placing.replan_s)
        if not due or not self.executor.capabilities.can_withdraw:
            return 0
        runs, atts = {r.id: r for r, _ in waiting}, {a.run_id: a for _, a in waiting}
        fleet = self.service.fleet
        placer = Placer(self.store, fleet, self.service.policy)
        others = [a for a in self.store.active_attempts() if a.run_id not in runs]
        pools = placer.pools(drained=[p.name for p in fleet.spec.pools if p.drained])
        planned = placer.plan([runs[w.run] for w in due], others, pools, now, {w.run: w.pool for w in due})
        ended = 0
        for move in decisions.moves(due, {run: c.pool for run, c in planned.choices.items()}):
            if not self.executor.withdraw(move.run, move.attempt):
                continue
            choice = planned.choices[move.run]
            data = {"from": move.from_pool, **explanation(choice)}
            self.store.append_events([Event(EventType.REPLACED, now, move.run, None, data)])
            if self.placing.current is not None:
                self.placing.current[move.run] = move.to_pool
            detail = f"withdrawn from its engine's queue and re-placed on {move.to_pool}: {choice.reason}"
            status = AttemptStatus(move.run, move.attempt, "unplaced", detail=detail)
            ended += self._end(runs[move.run], atts[move.run], status, (EndReason.REPLACED, detail))
        return ended

    def _watch(self, run: RunRecord, att: AttemptRecord, status: AttemptStatus) -> int:
        now = self.clock.now()
        if att.state == AttemptState.STARTING:
            self._started(run, att, status.started_at or now, status.image_digest)
        if _halted(run, att):  # cancelled or suspended; or a part of a pipeline that ended: stopped with grace
            self.executor.stop(run.id, att.number, self.config.stop_grace_s, _stop_reason(run.state))
            return 0
        if self.executor.capabilities.sees_processes:
            return 0
        timeout_s = self.config.heartbeat_timeout_s
        silent = decisions.heartbeat_silence_s(att.last_heartbeat, att.started_at, now, timeout_s)
        if silent is None:
            return 0
        self.executor.stop(run.id, att.number, 0.0, "preempted")
        lost = AttemptStatus(run.id, att.number, "lost", ended_at=now)
        return self._end(
            run, att, lost, (EndReason.HEARTBEAT_TIMEOUT, f"lost: no heartbeat for {format_duration(silent)}")
        )

    def _run_as(self, run: RunRecord, att: AttemptRecord) -> RunAs | None:
        """Who the attempt's command runs as on a local pool (crossrail.control.isolation); None: as the agent's
        user, the workspace owner's own run in a one-person workspace (or an attempt of another backend)."""
        fleet = self.service.fleet
        pool = next((p for p in fleet.spec.pools if p.name == att.pool), None)
        if (pool is not None and str(pool.backend) != "local") or not isolation.isolating(fleet, self.store):
            return None
        who = isolation.run_as(fleet, run.team)
        if isolation.can_isolate():
            if self.workspace_root is not None:
                isolation.harden(self.workspace_root)
            parent = self.store.find_run(run.parent_run) if run.parent_run else None
            if parent is not None:  # a parent written before isolation becomes its team's, readable as shared
                sandbox.adopt(parent.run_checkpoint_dir, isolation.run_as(fleet, parent.team))
        return who

    def _launch(self, run: RunRecord, att: AttemptRecord) -> None:
        request = self._request(run, att)
        if request is None:
            return
        try:
            status = self.executor.launch(request)
        except (OSError, ConflictError) as exc:
            self._not_launched(run, att, exc)
            return
        if status.phase == "running":
            self._started(run, att, status.started_at or self.clock.now(), status.image_digest)

    def _launch_parts(self, run: RunRecord, atts: list[AttemptRecord]) -> None:
        """Launch the parts of a pipeline admitted together: as one, where the executor launches parts together
        (`launch_parts`: on Kubernetes one JobSet, a replicated job per part), else each alone."""
        together = getattr(self.executor, "launch_parts", None)
        fleet = self.service.fleet
        as_one = [a for a in atts if together is not None and _backend(fleet, a.pool) in ONE_OBJECT_BACKENDS]
        for att in atts:
            if att not in as_one:
                self._launch(run, att)
        ready = [(att, request) for att in as_one if (request := self._request(run, att)) is not None]
        if not ready or together is None:
            return
        try:
            statuses: list[AttemptStatus] = together([request for _, request in ready])
        except (OSError, ConflictError) as exc:
            for att, _ in ready:
                self._not_launched(run, att, exc)
            return
        for (att, _), status in zip(ready, statuses, strict=True):
            if status.phase == "running":
                self._started(run, att, status.started_at or self.clock.now(), status.image_digest)

    def _not_launched(self, run: RunRecord, att: AttemptRecord, exc: Exception) -> None:
        """End an attempt the executor could not launch: lost, or (a number the executor used before, for an
        earlier store) unplaced and offered again under the next number."""
        if isinstance(exc, ConflictError):
            detail = f"its number is held by an attempt the executor ran for an earlier store ({exc})"
            why = (EndReason.STALE_NUMBER, f"{detail}; offered again under the next number")
            self._end(run, att, AttemptStatus(run.id, att.number, "unplaced"), why)
            return
        lost = AttemptStatus(run.id, att.number, "lost")
        self._end(run, att, lost, (EndReason.LAUNCH_FAILED, f"lost: could not be launched: {exc}"))

    def _request(self, run: RunRecord, att: AttemptRecord) -> LaunchRequest | None:
        """What `att` is launched with, once its launch is recorded (fenced); None when it must not be launched
        (ended meanwhile, or a deposed leader) or could not be prepared (then it ended lost)."""
        parent = att.parent_checkpoint or parents.launch_checkpoint(self.store, run)  # resolved at admission
        parent_uid = self.store.get_run(run.parent_run).uid if run.parent_run else None
        secret = None
        if (att.report_uri or "").startswith(("http://", "https://")):
            secret = attempt_secret(self.workspace_root or self.reports_dir.parent, run.id, att.number)
        request = launch_request(
            run,
            att,
            parent_checkpoint=parent,
            heartbeat_s=self.config.heartbeat_s,
            parent_uid=parent_uid,
            report_secret=secret,
        )
        if not self.store.record_launch(run.id, att.number):  # fenced: a deposed leader never gets past this
            return None
        try:
            slowdown = next((p.slowdown for p in self.service.fleet.spec.pools if p.name == att.pool), 1.0)
            return dataclasses.replace(request, run_as=self._run_as(run, att), slowdown=slowdown)
        except (UsageError, OSError) as exc:  # a user this machine lacks, a team's uid taken, a parent's files
            self._not_launched(run, att, exc)
            return None

    def _started(self, run: RunRecord, att: AttemptRecord, ts: float, image_digest: str | None = None) -> None:
        """Record that the attempt started, on what, and the digest of the image it ran where the executor saw one."""
        data: dict[str, Any] = {
            "pool": att.pool,
            "accelerator": att.accelerator,
            "chip_type": att.chip_type,
            "chips": att.chips,
            "cost_per_chip_hour": att.cost_per_chip_hour,
        }
        if att.part is not None:
            data["part"] = att.part
        if image_digest is not None:
            data["image_digest"] = image_digest
        self.store.mark_started(run.id, att.number, ts, [Event(EventType.STARTED, ts, run.id, att.number, data)])

    def _with_cause(self, run: RunRecord, att: AttemptRecord, detail: str) -> str:
        """`detail` with the cause line of the attempt's log (the last exception or error line), when it has one."""
        try:
            cause = cause_line(self.executor.logs(run.id, att.number)[-65536:])
        except (OSError, CrossrailError):
            return detail  # a log that cannot be read (gone, or its pod's API unreachable) says nothing more
        return detail if cause is None else f"{detail}; cause: {cause}"

    def _end(
        self, run: RunRecord, att: AttemptRecord, status: AttemptStatus, why: tuple[EndReason, str] | None = None
    ) -> int:
        """Decide what the attempt's end means (scheduling.decisions) and record it, once, with its events.

        `why` is the reason when the agent itself ended the attempt (a move, a silent heartbeat, a failed
        launch); otherwise the executor's observation says it. The typed reason is kept on the attempt
        (`end_reason`), beside the reason crossrail gave the executor's stop(), if it stopped it (`stopped_by`).
        """
        retries = RetryPolicy.from_spec(run.experiment_spec.retries)
        reason, detail = why or decisions.end_reason(status, run.state, retries.exit_codes)
        if reason is EndReason.EXIT:  # a failure of the training code: its own words say why
            detail = self._with_cause(run, att, detail)
        ended = run.state in (RunState.SUCCEEDED, RunState.FAILED)
        if att.part is not None and ended and reason is not EndReason.SUCCEEDED:
            reason, detail = EndReason.CANCELLED, f"stopped by crossrail: its pipeline run {run.state}"
        now = status.ended_at or self.clock.now()
        # A part's retries and back-off count that part's attempts only (a part is retried alone).
        mine = (a for a in self.store.attempts(run.id) if a.number != att.number and a.part == att.part)
        decision = decisions.decide_end(reason, detail, pool=att.pool, retries=retries, history=history(mine), now=now)
        run_state = decision.run_state if att.part is None else _pipeline_state(run, att.part, decision)
        changed = self.store.end_attempt(
            run.id,
            att.number,
            state=decision.attempt_state,
            ended_at=now,
            exit_code=status.exit_code,
            signal=status.signal,
            stopped_by=status.stopped_by,
            end_reason=reason,
            reason=decision.detail,
            run_state=run_state,
            events=_end_events(run, att, status, decision, run_state),
        )
        self.executor.forget(run.id, att.number)
        return int(changed)

    def _forget_recorded(self, statuses: dict[tuple[str, int], AttemptStatus]) -> None:
        """Executor records of attempts whose end the store already holds (a crash between the two steps)."""
        active = {(a.run_id, a.number) for a in self.store.active_attempts()}
        for key, status in statuses.items():
            if status.phase != "running" and key not in active:
                self.executor.forget(*key)

    # --- report channel ------------------------------------------------------------------------

    def _ingest(self, att: AttemptRecord) -> AttemptRecord:
        return channel.ingest(self.store, att, self.clock.now())

    # --- admission -----------------------------------------------------------------------------

    def _follow_fleet(self) -> None:
        """Move the scheduling core to a fleet file changed by `crossrail fleet` or by hand."""
        path = self.fleet_path
        if self._fleet_mtime is None:  # a first pass (or a new leader's): the fleet as it is, before any start
            capacity.record_capacity(self.store, self.service.fleet, self.clock.now())
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
            capacity.record_capacity(self.store, self.service.fleet, self.clock.now())  # utilization's denominator
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
            budgets.seed(self.store, self.scheduler, self.clock.now())
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
            _with_parts(Request.from_pending(p, team=r.team, duration_s=_duration_s(r)), r)
            for r in queued
            if (p := self._pending(r, now)) is not None
        ]
        scheduler = self._scheduler()
        specs = {p.name: p for p in scheduler.fleet.spec.pools}
        # What `las`-style policies order by: every attempt's chip-seconds by pool, a running one's up to now
        served = self.store.attained_by_pool([*(p.run for p in pending), *(a.run_id for a in active)], now)
        # ... and heterogeneity-aware ones the run's rate on each chip type, from the placement estimates
        speeds = self._speeds(scheduler, queued, by_id.values()) if scheduler.hetero else {}
        pending = [_served(p, served.get(p.run, {}), specs, speeds.get(p.run, ())) for p in pending]
        running = []
        live = {(a.run_id, a.number) for a in active}  # built once: the attempts running this pass
        self._held = {key: n for key, n in self._held.items() if key in live}
        for a in active:
            r, ckpts = by_id[a.run_id], self.store.checkpoints(a.run_id)
            held = a.chips * max(now - a.started_at, 0.0) if a.started_at is not None else 0.0
            before = dict(served.get(r.id, {}))  # the running attempt's own is counted by the round
            before[a.pool] = max(before.get(a.pool, 0.0) - held, 0.0)
            chips, low, high = self._holds(r, a)
            req = Request(r.id, r.queue, chips, priority=r.priority, team=r.team, duration_s=_duration_s(r))
            req = dataclasses.replace(req, min_chips=low, max_chips=high)
            req = _served(dataclasses.replace(req, workers=_workers(r)), before, specs, speeds.get(r.id, ()))
            if a.part is not None:  # a part holds chips under its own key, as the cycle admitted it
                req = dataclasses.replace(
                    req, run=part_key(r.id, a.part), workers=_part_workers(r, a.part, a.chips), part=a.part
                )
            checkpointed = ckpts[-1].committed_at if ckpts else None
            running.append(Running(req, a.pool, chips, a.started_at or a.created_at or now, checkpointed))
        pending = self._placed(scheduler, pending, queued, active, now) + self._part_retries(active, now)
        scheduler.sync(pending, running, now)
        result = scheduler.cycle(now)
        budgets.record(self.store, result, now)
        self.placing.record(self._plan, (_pipeline_of(a) for a in result.admitted), now)
        attempt = {a.run_id if a.part is None else part_key(a.run_id, a.part): a.number for a in active}
        for victim in result.preempted:  # stopped with grace; the attempt ends `preempted` and is requeued
            run_id, _, _part = victim.run.partition(PART_SEP)
            self.executor.stop(run_id, attempt[victim.run], victim.grace_s, victim.stop)
        runs = {r.id: r for r in queued}
        admitted = sum(self._admit(runs[d.run], d, now) for d in result.admitted if d.part is None)
        parts: dict[str, list[Admission]] = {}
        for d in result.admitted:
            if d.part is not None:
                parts.setdefault(_pipeline_of(d), []).append(d)
        for rid, admissions in parts.items():  # a pipeline's parts together; or one part's retry
            admitted += self._admit_parts(runs.get(rid) or self.store.get_run(rid), admissions, now)
        self._grow(scheduler, result.grown, active, now)
        return admitted

    def _holds(self, run: RunRecord, att: AttemptRecord) -> tuple[int, int | None, int | None]:
        """The chips a running attempt holds (its own, or the latest growth's: `resized` events the agent wrote
        carry `chips`, the runtime's never do) and the range it may be resized within, as it was admitted
        (`min_chips`, and `max_chips` or its spec's chips; None for a part, whose size is its controller's)."""
        key = (att.run_id, att.number)
        if key not in self._held:
            grown = [
                e.data["chips"]
                for e in self.store.events(run=att.run_id, types=[EventType.RESIZED.value])
                if e.attempt == att.number and e.data.get("part") is None and isinstance(e.data.get("chips"), int)
            ]
            self._held[key] = grown[-1] if grown else att.chips
        if att.part is not None:
            return self._held[key], None, None
        res = run.experiment_spec.resources
        declared = int(res.get("chips") or run.chips)
        low = res.get("min_chips")
        return self._held[key], low, max(int(res.get("max_chips") or declared), declared)

    def _grow(self, scheduler: Scheduler, grown: list[Growth], active: list[AttemptRecord], now: float) -> None:
        """Act on the cycle's growth proposals (step 7, `CycleResult.grown`), as the simulator does: ask the
        executor to give the running attempt the extra chips in place. Where it can, the scheduler holds the new
        size and a `resized` event records it (crossrail.scheduling.growth); where it cannot (the local, Ray and
        Kubernetes executors say False), the run keeps its size and nothing is recorded or restarted."""
        running = {a.run_id: a for a in active if a.part is None and a.state == AttemptState.RUNNING}
        for growth in grown:
            att = running.get(growth.run)
            if att is None or not self.executor.resize(growth.run, att.number, growth.chips_to):
                continue
            self.store.append_events([Event(EventType.RESIZED, now, growth.run, att.number, resized_data(growth))])
            self._held[(growth.run, att.number)] = growth.chips_to
            scheduler.resized(growth.run, growth.chips_to, now)

    def _part_retries(self, active: list[AttemptRecord], now: float) -> list[Request]:
        """The parts of running pipelines to offer again: each part whose last attempt ended and was not the
        pipeline's end, once its own back-off is over, away from the pool it was lost on (retry_part)."""
        busy = {(a.run_id, a.part) for a in active if a.part is not None}
        out = []
        self._parts_waiting = 0
        for run in self.store.list_runs(states=[RunState.ADMITTED, RunState.RUNNING], newest_first=False):
            declared = run.experiment_spec.parts
            if not declared:
                continue
            attempts = self.store.attempts(run.id)
            retries = RetryPolicy.from_spec(run.experiment_spec.retries)
            pipeline = _with_parts(Request(run.id, run.queue, run.chips, priority=run.priority, team=run.team), run)
            wanted = pipesize.current_sizes(self.store, run, _parts(run), {}).wanted  # as the last resizes left them
            pipeline = dataclasses.replace(pipeline, parts=parts_of(_resized(_parts(run), wanted)))
            prefer, source = preference(self.service.policy, run.stage, run.experiment_spec.accelerators)
            pipeline = dataclasses.replace(pipeline, prefer=prefer, prefer_source=source)
            for name in declared:
                mine = [a for a in attempts if a.part == name]
                if (run.id, name) in busy or not mine or mine[-1].state == AttemptState.SUCCEEDED:
                    continue
                self._parts_waiting += 1
                offer = decisions.next_offer(history(mine), retries)
                if offer.waiting(now):
                    continue
                queued_at = mine[-1].ended_at or now
                out.append(retry_part(pipeline, name, queued_at=queued_at, avoid_pool=offer.avoid_pool))
        return out

    def _size_pipelines(self) -> None:
        """The backlog controller over each running pipeline (control/agent/pipesize.py): resizes decided, recorded
        and made real by restarting the part at its new size."""
        now = self.clock.now()
        running: dict[str, dict[str, AttemptRecord]] = {}
        for a in self.store.active_attempts():
            if a.part is not None and a.state == AttemptState.RUNNING:
                running.setdefault(a.run_id, {})[a.part] = a
        for rid, atts in running.items():
            run = self.store.get_run(rid)
            parts, rdv = _parts(run), pipesize.rendezvous(run)
            if run.state != RunState.RUNNING or rdv is None or not (rdv / "control.json").exists():
                continue
            plan = pipesize.current_sizes(self.store, run, parts, atts)
            self._apply_sizes(run, plan, rdv)  # a resize recorded before an agent died is made real here
            resizes = self._weigh(run, parts, plan, rdv, now)
            if not resizes:
                continue
            self.store.append_events([pipesize.resize_event(run, atts[r.part], r, parts[r.part], now) for r in resizes])
            for r in resizes:
                if self.scheduler is not None:
                    self.scheduler.resized(part_key(rid, r.part), r.new * parts[r.part].chips, now)
            self._apply_sizes(run, pipesize.current_sizes(self.store, run, parts, atts), rdv)

    def _weigh(
        self, run: RunRecord, parts: dict[str, Part], plan: pipesize.PipelineSizing, rdv: Path, now: float
    ) -> list[Resize]:
        """The resizes the last window calls for: none until every part has run a whole window at its size
        and a window has passed since the run's last resize (so sizes do not flap); weighed once a window."""
        window, atts = self.config.backlog_window_s, plan.running
        settled = all(a.started_at is not None and a.started_at <= now - window for a in atts.values())
        cooled = plan.last_resize_at is None or plan.last_resize_at <= now - window
        if set(atts) != set(parts) or LEARNER not in atts or not settled or not cooled or plan.sizes != plan.wanted:
            return []
        if now - self._weighed.get(run.id, -window) < window:
            return []
        self._weighed[run.id] = now
        learner = [s for s in self.store.metric_samples(run.id) if s["attempt"] == atts[LEARNER].number]
        metrics = pipesize.window_metrics(learner, now - window, now)
        if metrics is None:
            return []
        free = {name: self._free_chips(a.pool, run.queue, now) for name, a in atts.items()}
        return pipesize.decide(metrics, plan, parts, free, pipesize.lag_bound(rdv))

    def _apply_sizes(self, run: RunRecord, plan: pipesize.PipelineSizing, rdv: Path) -> None:
        """Make the sizes the latest resizes want real: control.json, and each part running at another size
        stopped with grace to start again at its own (offered again by _part_retries, no retry spent)."""
        changed = {p: n for p, n in plan.wanted.items() if p in plan.sizes and plan.sizes[p] != n}
        if not changed:
            return
        pipesize.write_sizes(rdv, plan.wanted, reason="resized by the backlog controller")
        for part in changed:
            self.executor.stop(run.id, plan.running[part].number, self.config.stop_grace_s, "preempted")

    def _free_chips(self, pool: str | None, queue: str, now: float) -> int:
        """Chips a part on `pool` could grow by: the pool's free chips within its queue's quota headroom."""
        if self.scheduler is None or pool is None:
            return 0
        free = next((p.free for p in self.scheduler.pool_status() if p.name == pool), 0)
        return min(free, Snapshot(self.scheduler.cache, now).headroom(queue, pool))

    def _speeds(
        self, scheduler: Scheduler, queued: list[RunRecord], running: Iterable[RunRecord]
    ) -> dict[str, tuple[tuple[str, float], ...]]:
        """Each run's rate per chip type for a heterogeneity-aware policy (scheduling.rounds.estimated_rates)."""
        return self.placing.rates(scheduler.fleet, self.service.policy, [*queued, *running])

    def _placed(
        self, scheduler: Scheduler, pending: list[Request], queued: list[RunRecord], active: Any, now: float
    ) -> list[Request]:
        """Each pending request with the pool the estimates pick (control/placing.py), and why."""
        waiting = {req.run for req in pending}
        drained = [p.name for p in scheduler.pool_status() if p.drained]
        runs = [r for r in queued if r.id in waiting]
        self._plan = self.placing.place(scheduler.fleet, self.service.policy, runs, active, drained=drained, now=now)
        return reconcile.placed(pending, self._plan.choices)  # as the simulator's requests are (sim/placing.py)

    def _pending(self, run: RunRecord, now: float) -> Pending | None:
        if not parents.ready(self.store, run, now):
            return None
        spec = run.experiment_spec
        res, acc = spec.resources, spec.accelerators
        prefer, source = preference(self.service.policy, run.stage, acc)
        retries = RetryPolicy.from_spec(spec.retries)
        offer = decisions.next_offer(history(self.store.attempts(run.id)), retries)
        if offer.waiting(now):  # backing off after a failure, or after its engine had no room a moment ago
            return None
        return Pending(
            run=run.id,
            queue=run.queue,
            priority=run.priority,
            queued_at=run.updated_at,
            chips=int(res.get("chips") or run.chips),
            min_chips=res.get("min_chips"),
            max_chips=res.get("max_chips"),
            allow=tuple(acc["allow"]) if acc.get("allow") else None,
            prefer=prefer,
            avoid_pool=offer.avoid_pool,
            prefer_source=source,
            workers=_workers(run),
        )

    def _admit_parts(self, run: RunRecord, admissions: list[Admission], now: float) -> int:
        """One attempt per admitted part (its replicas in it, as the JobSet runs a part as one replicated job),
        recorded together, then each launched with its part; 1 when recorded."""
        parent = parents.resolve(self.store, run, now)
        if parent is False:
            return 0
        number = len(self.store.attempts(run.id))
        atts, events = [], []
        for d in admissions:
            number += 1
            pool = self.service.fleet.pool(d.pool)
            report = report_uri(run, number, str(pool.backend), self.reports_dir, server=self.config.report_url)
            att = new_attempt(run, number, pool, d.chips, report=report, now=now, parent_checkpoint=parent)
            atts.append(dataclasses.replace(att, part=d.part))
            placed = {"part": d.part, **_placement(pool, d)}
            admitted = {"part": d.part, "pool": pool.name, "chips": d.chips}
            events += [
                Event(EventType.PLACED, now, run.id, number, placed),
                Event(EventType.ADMITTED, now, run.id, number, admitted),
            ]
        if not self.store.admit_parts(run.id, atts, events):
            return 0
        run = self.store.get_run(run.id)
        for att in atts:
            if "://" not in (att.report_uri or ""):
                Path(att.report_uri or "").parent.mkdir(parents=True, exist_ok=True)
        self._launch_parts(run, atts)
        return 1

    def _admit(self, run: RunRecord, d: Decision, now: float) -> int:
        parent = parents.resolve(self.store, run, now)
        if parent is False:
            return 0
        pool = self.service.fleet.pool(d.pool)
        number = len(self.store.attempts(run.id)) + 1
        report = report_uri(run, number, str(pool.backend), self.reports_dir, server=self.config.report_url)
        att = new_attempt(run, number, pool, d.chips, report=report, now=now, parent_checkpoint=parent)
        placed = _placement(pool, d)
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
        backends = self.executor.capabilities.backends
        pools = [p for p in fleet.spec.pools if str(p.backend) in backends]
        return fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"pools": pools})})


def _placement(pool: Any, d: Decision) -> dict[str, Any]:
    """A `placed` event's hardware and reason (lineage reads each attempt's, a part's among them)."""
    return {
        "pool": pool.name,
        "accelerator": str(pool.accelerator),
        "chip_type": pool.chip_type,
        "chips": d.chips,
        "cost_per_chip_hour": pool.cost_per_chip_hour,
        "reason": d.reason,
    }


def _backend(fleet: Any, pool: str | None) -> str | None:
    """The backend of `pool` in `fleet` (None for a pool no longer there)."""
    found = next((p for p in fleet.spec.pools if p.name == pool), None)
    return None if found is None else str(found.backend)


def _parts(run: RunRecord) -> dict[str, Part]:
    return {name: Part.model_validate(p) for name, p in run.experiment_spec.parts.items()}


def _resized(parts: dict[str, Part], replicas: dict[str, int]) -> dict[str, Part]:
    """The parts with the replica counts the backlog controller gave them."""
    return {name: p.model_copy(update={"replicas": replicas.get(name, p.replicas)}) for name, p in parts.items()}


def _with_parts(req: Request, run: RunRecord) -> Request:
    """A pipeline run's request carries its parts (scheduling.pipeline.parts_of, as the simulator's does)."""
    parts = _parts(run)
    return dataclasses.replace(req, parts=parts_of(parts)) if parts else req


def _part_workers(run: RunRecord, part: str, chips: int) -> int:
    """The workers of a part's attempt of `chips` chips: its replicas (as the controller may have resized
    them) times each replica's data-parallel workers."""
    declared = _parts(run).get(part)
    if declared is None:
        return 1
    return max(chips // declared.chips, 1) * declared.parallelism.data


def _pipeline_of(a: Admission) -> str:
    """The run an admission is for: the pipeline of a part's admission."""
    return a.run if a.part is None else a.run.removesuffix(PART_SEP + a.part)


def _workers(run: RunRecord) -> int:
    """The run's data-parallel workers (`spec.parallelism.data`, default 1): one gang in the scheduling core."""
    return run.experiment_spec.data_parallel


def _served(
    req: Request, by_pool: dict[str, float], specs: dict[str, Pool], speeds: tuple[tuple[str, float], ...] = ()
) -> Request:
    """`req` with the service its run's attempts received, in all and by chip type (`las` orders by it), its
    rates per chip type where a heterogeneity-aware policy needs them, and the work its declared duration
    leaves after that service (`min_jct` orders by it): seconds at speed 1, each chip type's service counted
    at its rate, as the simulator counts it. What the agent knows, with no step counts."""
    chip_s = sum(by_pool.values())
    by_type = served_by_type(by_pool, specs)
    left = None
    if req.duration_s is not None:
        rate = dict(speeds)
        done = sum(s * rate.get(t, 0.0) for t, s in by_type) if speeds else chip_s
        left = max(req.duration_s - done / max(req.chips, 1), 0.0)
    return dataclasses.replace(req, attained_s=chip_s, attained_by_type=by_type, throughput=speeds, remaining=left)


def _duration_s(run: RunRecord) -> float | None:
    duration = run.experiment_spec.duration
    return parse_duration(duration) if duration else None


def _stop_reason(state: str) -> StopReason:
    """Why an attempt of a run in `state` is stopped (scheduling.reconcile)."""
    return reconcile.stop_reason(state)


def _halted(run: RunRecord, att: AttemptRecord) -> bool:
    """Whether `att` must stop: its run was cancelled or suspended, or it is a part of a pipeline that ended."""
    return reconcile.halted(run.state, att.part)


def _pipeline_state(run: RunRecord, part: str, d: EndDecision) -> str | None:
    """The pipeline run's next state when its part `part` ends as `d` decided (scheduling.reconcile); while
    it keeps running the part is offered again alone (`_part_retries`)."""
    parts = run.experiment_spec.parts
    return reconcile.pipeline_state(list(parts), part, d.run_state)


def _end_events(
    run: RunRecord, att: AttemptRecord, status: AttemptStatus, d: EndDecision, run_state: str | None
) -> list[Event]:
    """The events that record decision `d` for attempt `att`: its end, then the run's retry and queueing. A
    pipeline part's success that leaves its run going (`run_state` None) says `final: false`, as a retried
    failure does, so the log tells a part's end from its run's."""
    if d.event is None:  # cancelled or suspended: the command recorded the run's state
        return []
    part = {} if att.part is None else {"part": att.part}
    data = part | d.data(att.pool)
    if att.part is not None and d.event is EventType.SUCCEEDED and run_state is None:
        data["final"] = False
    if d.event in (EventType.FAILED, EventType.PREEMPTED):
        data |= {"exit_code": status.exit_code, "signal": status.signal}
    events = [Event(d.event, d.ended_at, run.id, att.number, data)]
    queued = {"queue": run.queue, "stage": run.stage, "team": run.team, "priority": run.priority}
    if d.retry and d.event is not EventType.UNPLACED:
        retried = part | {"next_attempt": att.number + 1, "reason": d.detail, "cause": str(d.reason)}
        events.append(Event(EventType.RETRIED, d.ended_at, run.id, None, retried))
    if d.retry and att.part is None:  # a part is offered again alone; its run stays where it is
        events.append(Event(EventType.QUEUED, d.ended_at, run.id, None, queued))
    return events
