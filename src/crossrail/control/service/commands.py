"""The commands that change a run: resubmit, cancel, suspend and resume."""

from __future__ import annotations

from crossrail.control.service.base import ACTIVE_STATES, _by, _crossing, _digest
from crossrail.control.service.submit import SubmitResult, Submitting
from crossrail.core import Event, EventType, RunState, new_uid
from crossrail.core.access import Actor
from crossrail.errors import ConflictError, ForbiddenError, UsageError
from crossrail.store import NewRun, RunRecord
from crossrail.store.joined import note_audit_detail


class Commands(Submitting):
    """Resubmit, cancel, suspend and resume: each one guarded transition of a run with its events."""

    def resubmit(
        self,
        ref: str,
        *,
        resume: bool = False,
        from_weights: bool = False,
        idempotency_key: str | None = None,
        actor: Actor | None = None,
    ) -> SubmitResult:
        """A new run of `ref`'s recorded spec. With `resume`, it continues `ref` from its newest checkpoint that
        verifies: that step, optimizer, data cursor and RNG, to the experiment's own total steps. With
        `from_weights`, it is a new training initialised from those weights (its parent is `ref`; it resumes
        nothing).

        A recorded parent of another team that no longer shares with the run's (or never did: runs stored
        before sharing) is kept as it was stored, and refused here, naming the line the fleet needs."""
        from crossrail.control import isolation, parents

        old = self.get(ref, self.sight(actor))
        isolation.check_submission(self.fleet, actor)
        if resume and from_weights:
            raise UsageError("--resume continues the run and --from-weights starts a new training: pick one")
        parent_run, parent_ckpt = old.parent_run, old.parent_checkpoint
        parent_team = None
        if parent_run is not None and not (resume or from_weights):
            parent = self.store.find_run(parent_run)
            refusal = None if parent is None else self.unshared(parent, old.team)
            if refusal is not None:
                raise ForbiddenError(f"run {old.id} starts from {refusal[0]}; {refusal[1]}")
            parent_team = None if parent is None else parent.team
        if resume or from_weights:  # its newest checkpoint that verifies; the runtime checks every checksum
            verified = parents.newest_verified(self.store, old.id)
            if verified.newest is None:
                flag, verb = ("--resume", "resume") if resume else ("--from-weights", "start")
                raise ConflictError(
                    f"run {old.id} has no checkpoint that verifies to {verb} from{verified.describe()}; "
                    f"resubmit without {flag} to start over"
                )
            parent_run, parent_ckpt, parent_team = old.id, verified.newest.uri, old.team
        now = self.clock.now()
        exp_row = {k: v for k, v in old.as_dict().items() if k in NewRun.__dataclass_fields__}
        new = NewRun(
            **{
                **exp_row,
                "experiment_digest": _digest(old.spec),
                "experiment_spec": old.spec,
                "uid": new_uid(now),
                "idempotency_key": idempotency_key,
                # resumed_from == parent_run is how the runtime knows to continue (RuntimeContext.continues_parent)
                "resumed_from": None if from_weights else old.id,
                "parent_run": parent_run,
                "parent_checkpoint": parent_ckpt,
            }
        )
        crossing = _crossing(parent_run, parent_team, old.team)
        if crossing:
            note_audit_detail(crossing)
        events = self._opening_events(new, now, resumed_from=new.resumed_from, parent_team=parent_team)
        run, created = self.store.create_runs([new], now, [events])[0]
        return SubmitResult(run=run, created=created, crossing=crossing)

    def _current_attempt(self, run: RunRecord) -> int | None:
        active = [a.number for a in self.store.attempts(run.id) if a.state in ("starting", "running")]
        return active[-1] if active else None

    def cancel(self, ref: str, reason: str = "cancelled by user", *, by: Actor | None = None) -> RunRecord:
        run = self.get(ref)
        ev = Event(
            EventType.CANCELLED,
            self.clock.now(),
            run.id,
            self._current_attempt(run),
            data={"reason": reason, **_by(by)},
        )
        return self.store.transition(run.id, [str(s) for s in ACTIVE_STATES], RunState.CANCELLED, [ev])

    def suspend(self, ref: str, *, by: Actor | None = None) -> RunRecord:
        run = self.get(ref)
        ev = Event(EventType.SUSPENDED, self.clock.now(), run.id, self._current_attempt(run), data=_by(by))
        allowed = [RunState.QUEUED, RunState.ADMITTED, RunState.RUNNING]
        return self.store.transition(run.id, [str(s) for s in allowed], RunState.SUSPENDED, [ev])

    def resume(self, ref: str, *, by: Actor | None = None) -> RunRecord:
        run = self.get(ref)
        now = self.clock.now()
        events = [
            Event(EventType.RESUMED, now, run.id, data=_by(by)),
            Event(
                EventType.QUEUED,
                now,
                run.id,
                data={"queue": run.queue, "stage": run.stage, "team": run.team, "priority": run.priority},
            ),
        ]
        return self.store.transition(run.id, [RunState.SUSPENDED], RunState.QUEUED, events)
