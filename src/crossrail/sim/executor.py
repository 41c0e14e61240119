"""The simulated executor: a run's restore, its compute with blocking checkpoints, and its end.

No per-chip state and no event per checkpoint: an attempt is one record with its speed, the work it
started the current stretch with, and two timers (its end and its next interruption). Between events
its progress follows the closed form of `checkpointing.Stretch`: compute for the chooser's interval
tau, write a blocking checkpoint of delta, repeat (with delta 0 all progress is committed as made).
Work since the last committed checkpoint is lost when an attempt is interrupted, or stopped without time
to checkpoint; a restarted attempt restores first. Interruptions strike only while running, never
during a restore or an elastic pause. An elastic run that keeps enough hosts pauses, keeps its work and
runs slower until the failed hosts return from repair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from crossrail.metrics import Sample
from crossrail.sim.checkpointing import Cadence, CheckpointModel, IntervalChooser, Stretch, StretchState, plan_recovery
from crossrail.sim.engine import URGENT, Engine, Timer
from crossrail.sim.failures import FailureModel
from crossrail.sim.quality import QualityCurve
from crossrail.sim.records import SimRunRecord
from crossrail.sim.workload import SimJob

RESTORE, RUN, STOPPING = "restore", "run", "stopping"
NO_CADENCE = Cadence(math.inf, 0.0)


@dataclass
class Attempt:
    """One attempt of a job on `chips` chips (`hosts` hosts) of `pool`, at `full_rate` work/s when whole."""

    job: SimJob
    record: SimRunRecord
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
    base: float = 0.0
    """Work done when the current stretch (or stop) began."""
    run_at: float = 0.0
    stretch: Stretch | None = None
    start_work: float = 0.0
    timer: Timer | None = None
    fault: Timer | None = None
    aging_from: float | None = None
    """When the attempt first computed: a Weibull run's age counts from there (nothing fails during a restore)."""
    provisioning_s: float = 0.0
    """The wait for its pool's nodes to be provisioned (flex-start, autoscaled) before it restores and runs."""
    held_chip_s: float = 0.0
    """Chip-seconds held at sizes before the current one (an attempt grown by the scheduler)."""
    sized_at: float | None = None
    """When it took its current size, when that was after its start (None: it has held `chips` since then)."""

    @property
    def rate(self) -> float:
        return self.full_rate * (self.hosts - self.hosts_out) / self.hosts

    def chip_s(self, now: float) -> float:
        """Chip-seconds it has held by `now`, each size for its own time."""
        since = self.started_at if self.sized_at is None else self.sized_at
        return self.held_chip_s + self.chips * (now - since)


Ended = Callable[[Attempt, str, float], None]
"""(attempt, how: succeeded | interrupted | preempted | cancelled, lost compute seconds) -> None."""


class SimExecutor:
    """Runs attempts on the engine's clock and calls back when they end."""

    def __init__(
        self, engine: Engine, checkpoint: CheckpointModel, failures: FailureModel | None, *, ended: Ended
    ) -> None:
        self.engine = engine
        self.spec = checkpoint
        self.chooser = IntervalChooser(checkpoint)
        self.delta_s = checkpoint.delta_s
        self.failures = failures
        self.ended = ended
        self.live: dict[str, Attempt] = {}
        self.faults = 0
        self.exposure_chip_s = 0.0
        self._tau: dict[float, float] = {}
        self.samples: list[Sample] = []
        """The metric samples attempts reported: each evaluation of a job with a quality curve."""

    # --- running -------------------------------------------------------------------------------

    def start(self, att: Attempt) -> None:
        """Begin `att`: restore (when there is work to restore, or after a failure), then run."""
        self.live[att.job.name] = att
        att.base = att.start_work = att.committed
        restore = self.spec.restore_s if att.committed > 0 or att.number > 1 else 0.0
        att.record.restore_s += restore
        if restore + att.provisioning_s > 0:  # the chips are held while the nodes arrive
            self._pause(att, att.provisioning_s + restore)
        else:  # nothing to restore: run now rather than through an event at this same instant
            att.phase, att.stretch = RESTORE, None
            self._run(att)

    def _pause(self, att: Attempt, seconds: float) -> None:
        att.phase, att.stretch = RESTORE, None
        self._set_timer(att, seconds, lambda: self._run(att))

    def _set_timer(self, att: Attempt, delay_s: float, action: Callable[[], None]) -> None:
        if att.timer is not None:
            att.timer.cancel()
        att.timer = self.engine.after(delay_s, action) if math.isfinite(delay_s) else None

    def _run(self, att: Attempt, phase_s: float = 0.0) -> None:
        """Run from `att.base` at the current speed, continuing the checkpoint cadence at `phase_s`."""
        if att.aging_from is None:
            att.aging_from = self.engine.now()
        if att.fault is None:
            self._arm_fault(att)
        att.phase, att.run_at = RUN, self.engine.now()
        att.stretch = Stretch(self._cadence(att), att.rate, phase_s)
        finish = att.stretch.finish_in_s(att.job.work_s - att.base)
        self._set_timer(att, finish, lambda: self._finish(att))

    def _cadence(self, att: Attempt) -> Cadence:
        if att.job.checkpoint_every_s is not None:  # the run's own spec.checkpoint.every
            return Cadence(att.job.checkpoint_every_s, self.delta_s)
        if self.spec.interval == "adaptive":
            tau = self.chooser.interval_s(att.run_mtbf_s, self._observed_mtbf(att))
        else:  # the interval depends on the run's MTBF alone: choose it once per size
            known = self._tau.get(att.run_mtbf_s)
            tau = known if known is not None else self.chooser.interval_s(att.run_mtbf_s)
            self._tau[att.run_mtbf_s] = tau
        if tau <= 0:
            return Cadence(0.0, 0.0) if self.delta_s == 0 else NO_CADENCE
        return Cadence(tau, self.delta_s)

    def state(self, att: Attempt, now: float) -> StretchState | None:
        """Where the running stretch stands at `now` (None while restoring, pausing or stopping)."""
        if att.phase != RUN or att.stretch is None:
            return None
        return att.stretch.at(now - att.run_at)

    def progress(self, att: Attempt, now: float) -> float:
        """Work done by `now`, committed or not."""
        st = self.state(att, now)
        return att.base if st is None else min(att.base + st.computed_work_s, att.job.work_s)

    def kept(self, att: Attempt, now: float) -> float:
        """Work a failure at `now` would leave: up to the last completed checkpoint (all of it when free)."""
        st = self.state(att, now)
        if st is None or not (st.checkpoints or (att.stretch and att.stretch.cadence.tau_s == 0)):
            return att.committed
        return att.base + st.committed_work_s

    def last_checkpoint_at(self, att: Attempt, now: float) -> float | None:
        """When the attempt last committed a checkpoint, None when it has not (for the scheduler's victims)."""
        st = self.state(att, now)
        if st is None or not st.checkpoints or att.stretch is None:
            return None
        return now - st.phase_s

    def _close_stretch(self, att: Attempt, now: float) -> None:
        """Fold the running stretch into the record: its checkpoints, their time, what they committed."""
        st = self.state(att, now)
        if st is None:
            return
        att.record.checkpoints += st.checkpoints
        att.record.checkpoint_s += st.checkpoint_s
        att.committed = max(att.committed, self.kept(att, now))
        reached = min(att.base + st.computed_work_s, att.job.work_s)
        if att.job.quality is not None:
            self._evaluated(att, att.job.quality, reached)
        att.base = reached
        att.stretch = None

    def _evaluated(self, att: Attempt, curve: QualityCurve, reached: float) -> None:
        """The evaluations the stretch passed, each at the time its work reached that point."""
        stretch = att.stretch
        assert stretch is not None
        for work_s, samples, loss in curve.evals(att.base, reached):
            ts = att.run_at + stretch.finish_in_s(work_s - att.base)
            self.samples.append(Sample(att.job.name, att.number, ts, curve.metric, loss, samples))

    def _observed_mtbf(self, att: Attempt) -> float | None:
        """Interruptions seen so far across the fleet, as an MTBF for a run of this size (None before any)."""
        if not self.faults:
            return None
        return self.exposure_chip_s / self.faults / max(att.chips, 1)

    # --- faults --------------------------------------------------------------------------------

    def _arm_fault(self, att: Attempt) -> None:
        if self.failures is None:
            return
        now = self.engine.now()
        hit = self.failures.sample(att.chips, att.hosts, now - (att.aging_from if att.aging_from is not None else now))
        if math.isfinite(hit.after_s):
            att.fault = self.engine.after(hit.after_s, lambda: self._fault(att, hit.hosts_lost, hit.repair_s), URGENT)

    def _fault(self, att: Attempt, hosts_lost: int, repair_s: float) -> None:
        att.fault = None
        self.faults += 1
        att.record.interruptions += 1
        hosts = att.hosts - att.hosts_out
        plan = plan_recovery(self.spec, hosts, max(hosts_lost, 1), att.min_hosts, elastic=att.job.elastic)
        if plan.kind == "shrink" and att.phase == RUN:
            self._shrink(att, att.hosts - att.hosts_out - plan.hosts_after, plan.downtime_s, repair_s)
        else:
            self._stop(att, "interrupted")

    def _shrink(self, att: Attempt, lost: int, pause_s: float, repair_s: float) -> None:
        """Elastic: keep all work, pause, then run without `lost` hosts until they are repaired."""
        now = self.engine.now()
        self._close_stretch(att, now)
        att.committed = att.base  # the failed hosts' state is rebuilt from their peers: nothing rolls back
        att.hosts_out += lost
        att.record.paused_s += pause_s
        self._pause(att, pause_s)
        self.engine.after(pause_s + repair_s, lambda: self._repaired(att, lost))

    def _repaired(self, att: Attempt, hosts: int) -> None:
        if self.live.get(att.job.name) is not att:
            return
        st = self.state(att, self.engine.now())
        self._close_stretch(att, self.engine.now())
        att.hosts_out -= hosts
        if st is not None:  # rebase the running stretch on the new speed, keeping its cadence
            self._run(att, st.phase_s)

    # --- growing -------------------------------------------------------------------------------

    def resize(self, att: Attempt, chips: int, hosts: int, full_rate: float, run_mtbf_s: float) -> bool:
        """Grow `att` in place to `chips` on `hosts` hosts: it keeps all its work and computes at `full_rate` (its
        job's rate scaled by chips, as at admission) from now on; failures strike it as a run of the new size.
        False when it is stopping (its chips go back to the pool)."""
        if self.live.get(att.job.name) is not att or att.phase == STOPPING:
            return False
        now = self.engine.now()
        st = self.state(att, now)
        self._close_stretch(att, now)
        att.held_chip_s = att.chip_s(now)
        att.sized_at = now
        att.chips, att.hosts, att.full_rate, att.run_mtbf_s = chips, hosts, full_rate, run_mtbf_s
        if att.fault is not None:  # a run of the new size fails at its own rate, from its age
            att.fault.cancel()
            att.fault = None
            self._arm_fault(att)
        if st is not None:  # rebase the running stretch on the new speed, keeping its place in the cadence
            tau = self._cadence(att).tau_s
            self._run(att, st.phase_s if st.phase_s < tau else 0.0)
        return True

    # --- stopping ------------------------------------------------------------------------------

    def preempt(self, run: str, grace_s: float) -> None:
        """Stop `run` for the scheduler: checkpoint first when the grace allows it, else stop now."""
        att = self.live.get(run)
        if att is None or att.phase == STOPPING:
            return
        if att.phase == RUN and self.delta_s <= grace_s:
            now = self.engine.now()
            self._close_stretch(att, now)
            att.committed = att.base  # the final checkpoint, written in the grace period
            att.record.checkpoints += 1
            att.record.checkpoint_s += self.delta_s
            att.phase = STOPPING
            if self.delta_s > 0:
                self._set_timer(att, self.delta_s, lambda: self._stop(att, "preempted"))
            else:  # a free checkpoint: stopped at once (a round boundary stops many runs each round)
                self._stop(att, "preempted")
            return
        self._stop(att, "preempted")

    def interrupt(self, run: str) -> None:
        """A failure of `run`'s attempt now, as a scripted scenario wants it: it is lost, as a drawn fault is."""
        att = self.live.get(run)
        if att is not None and att.phase != STOPPING:
            self.faults += 1
            att.record.interruptions += 1
            self._stop(att, "interrupted")

    def cancel(self, run: str) -> None:
        """Stop `run`'s attempt now for good (a part of a pipeline that ended): it ends `cancelled`, keeping the
        work it committed."""
        att = self.live.get(run)
        if att is not None:
            self._stop(att, "cancelled")

    def _finish(self, att: Attempt) -> None:
        self._close_stretch(att, self.engine.now())
        att.committed = att.base = att.job.work_s
        self._close(att)
        self.ended(att, "succeeded", 0.0)

    def _stop(self, att: Attempt, how: str) -> None:
        now = self.engine.now()
        self._close_stretch(att, now)
        lost_s = max(att.base - att.committed, 0.0) / att.rate
        att.record.lost_s += lost_s
        self._close(att)
        self.ended(att, how, lost_s)

    def _close(self, att: Attempt) -> None:
        for timer in (att.timer, att.fault):
            if timer is not None:
                timer.cancel()
        att.timer = att.fault = None
        chip_s = att.chip_s(self.engine.now())
        att.record.allocated_chip_s += chip_s
        self.exposure_chip_s += chip_s
        useful_s = max(att.committed - att.start_work, 0.0) / att.full_rate
        att.record.useful_s += useful_s
        att.record.useful_chip_s += useful_s * att.chips
        del self.live[att.job.name]
