"""The simulated executor: a run's progress through restore, compute and blocking checkpoints, and its end.

No per-chip state: each running attempt is one record with its speed, committed work and two timers (its
next phase change and its next interruption). A run computes for the chooser's interval, writes a blocking
checkpoint, and repeats (with a checkpoint cost of 0 all progress is committed as it is made). Work since
the last committed checkpoint is lost when an attempt is interrupted or stopped without time to
checkpoint; a restarted attempt restores first. Interruptions strike only while computing or
checkpointing, never during a restore or an elastic pause. An elastic run that keeps enough hosts pauses,
keeps its work and runs slower until the failed hosts return from repair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from crossrail.sim.checkpointing import CheckpointSpec, IntervalChooser, plan_recovery
from crossrail.sim.engine import URGENT, Engine, Timer
from crossrail.sim.failures import FailureModel
from crossrail.sim.records import RunRecord
from crossrail.sim.workload import SimJob

RESTORE, COMPUTE, CHECKPOINT, STOPPING = "restore", "compute", "checkpoint", "stopping"


@dataclass
class Attempt:
    """One attempt of a job on `chips` chips (`hosts` hosts) of `pool`, at `full_rate` work/s when whole."""

    job: SimJob
    record: RunRecord
    pool: str
    chips: int
    hosts: int
    full_rate: float
    number: int
    started_at: float
    run_mtbf_s: float
    committed: float
    """Work kept at the last committed checkpoint (or at this attempt's start)."""
    min_hosts: int = 1
    hosts_out: int = 0
    """Hosts away for repair while the (elastic) attempt runs on without them."""
    phase: str = RESTORE
    phase_at: float = 0.0
    progress_at_phase: float = 0.0
    tau_left_s: float = math.inf
    banked_to: float = 0.0
    timer: Timer | None = None
    fault: Timer | None = None

    @property
    def rate(self) -> float:
        return self.full_rate * (self.hosts - self.hosts_out) / self.hosts


Ended = Callable[[Attempt, str, float], None]
"""(attempt, how: succeeded | interrupted | preempted, lost compute seconds) -> None."""


class SimExecutor:
    """Runs attempts on the engine's clock and calls back when they checkpoint or end."""

    def __init__(
        self,
        engine: Engine,
        checkpoint: CheckpointSpec,
        failures: FailureModel | None,
        *,
        ended: Ended,
        checkpointed: Callable[[Attempt], None],
    ) -> None:
        self.engine = engine
        self.spec = checkpoint
        self.chooser = IntervalChooser(checkpoint)
        self.delta_s = checkpoint.delta_s
        self.failures = failures
        self.ended = ended
        self.checkpointed = checkpointed
        self.live: dict[str, Attempt] = {}
        self.faults = 0
        self.exposure_chip_s = 0.0

    # --- phases --------------------------------------------------------------------------------

    def start(self, att: Attempt) -> None:
        """Begin `att`: restore (when there is work to restore, or after a failure), then compute."""
        self.live[att.job.name] = att
        att.banked_to = att.progress_at_phase = att.committed
        restore = self.spec.restore_s if att.committed > 0 or att.number > 1 else 0.0
        att.record.restore_s += restore
        self._enter(att, RESTORE, restore)

    def _enter(self, att: Attempt, phase: str, duration_s: float) -> None:
        att.progress_at_phase = self.progress(att, self.engine.now())
        att.phase, att.phase_at = phase, self.engine.now()
        if att.timer is not None:
            att.timer.cancel()
        att.timer = self.engine.after(duration_s, lambda: self._phase_done(att))

    def _compute(self, att: Attempt, tau_s: float | None = None) -> None:
        """Compute until the interval `tau_s` is spent (a new one by default) or the work is done."""
        if att.fault is None:
            self._arm_fault(att)
        if tau_s is None:
            tau_s = self.chooser.interval_s(att.run_mtbf_s, self._observed_mtbf(att))
            tau_s = math.inf if tau_s <= 0 else tau_s  # 0: checkpoints are free and continuous
        att.tau_left_s = tau_s
        left_s = (att.job.work_s - att.progress_at_phase) / att.rate
        self._enter(att, COMPUTE, min(left_s, tau_s))

    def _phase_done(self, att: Attempt) -> None:
        now = self.engine.now()
        if att.phase == COMPUTE:
            if self.progress(att, now) >= att.job.work_s * (1 - 1e-12):
                return self._finish(att)
            att.record.checkpoint_s += self.delta_s
            return self._enter(att, CHECKPOINT, self.delta_s)
        if att.phase == CHECKPOINT:
            self._commit(att)
        elif att.phase == STOPPING:
            return self._stop(att, "preempted")
        self._compute(att)
        return None

    def _commit(self, att: Attempt) -> None:
        att.committed = att.progress_at_phase
        att.record.checkpoints += 1
        self.checkpointed(att)

    def progress(self, att: Attempt, now: float) -> float:
        """Work done by `now`, committed or not."""
        if att.phase == COMPUTE:
            return min(att.progress_at_phase + (now - att.phase_at) * att.rate, att.job.work_s)
        return att.progress_at_phase

    def kept(self, att: Attempt, now: float) -> float:
        """Work that survives a stop at `now`: all of it when checkpoints are free, else the committed part."""
        return self.progress(att, now) if self.delta_s == 0 and self.spec.interval != "fixed" else att.committed

    def _observed_mtbf(self, att: Attempt) -> float | None:
        """Interruptions seen so far across the fleet, as an MTBF for a run of this size (None before any)."""
        if not self.faults:
            return None
        return self.exposure_chip_s / self.faults / max(att.chips, 1)

    # --- faults --------------------------------------------------------------------------------

    def _arm_fault(self, att: Attempt) -> None:
        if self.failures is None:
            return
        hit = self.failures.sample(att.chips, att.hosts, self.engine.now() - att.started_at)
        if math.isfinite(hit.after_s):
            att.fault = self.engine.after(hit.after_s, lambda: self._fault(att, hit.hosts_lost, hit.repair_s), URGENT)

    def _fault(self, att: Attempt, hosts_lost: int, repair_s: float) -> None:
        att.fault = None
        self.faults += 1
        att.record.interruptions += 1
        plan = plan_recovery(self.spec, att.hosts - att.hosts_out, max(hosts_lost, 1), att.min_hosts)
        if att.job.elastic and plan.kind == "shrink" and att.phase in (COMPUTE, CHECKPOINT):
            return self._shrink(att, att.hosts - att.hosts_out - plan.hosts_after, plan.downtime_s, repair_s)
        self._stop(att, "interrupted")
        return None

    def _shrink(self, att: Attempt, lost: int, pause_s: float, repair_s: float) -> None:
        """Elastic: keep all work, pause, then run without `lost` hosts until they are repaired."""
        now = self.engine.now()
        att.committed = att.progress_at_phase = self.progress(att, now)
        att.hosts_out += lost
        att.record.paused_s += pause_s
        att.phase = RESTORE  # a pause: no progress, no interruptions
        self._enter(att, RESTORE, pause_s)
        self.engine.after(pause_s + repair_s, lambda: self._repaired(att, lost))

    def _repaired(self, att: Attempt, hosts: int) -> None:
        if self.live.get(att.job.name) is not att:
            return None
        now = self.engine.now()
        if att.phase == COMPUTE:  # rebase the running phase on the new speed
            att.progress_at_phase = self.progress(att, now)
            att.tau_left_s -= now - att.phase_at
            att.hosts_out -= hosts
            return self._compute(att, max(att.tau_left_s, 0.0))
        att.hosts_out -= hosts
        return None

    # --- stopping ------------------------------------------------------------------------------

    def preempt(self, run: str, grace_s: float) -> None:
        """Stop `run` for the scheduler: checkpoint first when the grace allows it, else stop now."""
        att = self.live.get(run)
        if att is None or att.phase == STOPPING:
            return
        if att.phase == COMPUTE and 0 < self.delta_s <= grace_s:
            att.record.checkpoint_s += self.delta_s
            self._enter(att, STOPPING, self.delta_s)
        elif att.phase == CHECKPOINT and self.delta_s <= grace_s:
            att.phase = STOPPING  # the checkpoint under way commits, then the attempt stops
        else:
            self._stop(att, "preempted")

    def _finish(self, att: Attempt) -> None:
        att.committed = att.job.work_s
        self._close(att)
        self.ended(att, "succeeded", 0.0)

    def _stop(self, att: Attempt, how: str) -> None:
        now = self.engine.now()
        if att.phase == STOPPING and how == "preempted":
            self._commit(att)
        done = self.progress(att, now)
        att.committed = max(att.committed, self.kept(att, now))
        lost_s = max(done - att.committed, 0.0) / att.rate
        att.record.lost_s += lost_s
        self._close(att)
        self.ended(att, how, lost_s)

    def _close(self, att: Attempt) -> None:
        for timer in (att.timer, att.fault):
            if timer is not None:
                timer.cancel()
        att.timer = att.fault = None
        now = self.engine.now()
        self._bank(att, att.committed)
        chip_s = att.chips * (now - att.started_at)
        att.record.allocated_chip_s += chip_s
        self.exposure_chip_s += chip_s
        del self.live[att.job.name]

    def _bank(self, att: Attempt, kept: float) -> None:
        """Count the work kept by this attempt as useful compute: seconds at the speed of all its hosts."""
        useful_s = max(kept - att.banked_to, 0.0) / att.full_rate
        att.record.useful_s += useful_s
        att.record.useful_chip_s += useful_s * att.chips
        att.banked_to = max(att.banked_to, kept)
