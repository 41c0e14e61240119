"""The read models over the store: what `status`, `queue`, `show`, `place`, `events` and `report` print."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.control.service import progress
from crossrail.control.service.base import ACTIVE_STATES
from crossrail.control.service.fallbacks import fallbacks
from crossrail.control.service.preflight import Preflighting
from crossrail.core import Event, EventType, RunState, priority_rank
from crossrail.core.access import Actor
from crossrail.core.api import QUEUE_PAGE
from crossrail.core.events import TERMINAL_RUN_STATES
from crossrail.errors import UsageError
from crossrail.store import RunRecord
from crossrail.store.records import QueuedKey

# The spec, scheduling and metrics layers, and what only submit, resubmit and show use (control.parents,
# isolation, loaded), load only for the commands that use them: `status` needs none of them.
if TYPE_CHECKING:
    from crossrail.metrics import Report
    from crossrail.spec import Document

RECENT_FAILURES = 5  # failed runs `status` lists with their reason


class Queries(Preflighting):
    """The read models: status, queue, show, where a run would be placed, events and the report."""

    def status(self, limit: int = 50) -> dict[str, Any]:
        stages: dict[str, dict[str, int]] = {}
        for stage, state, count, chips in self.store.state_counts():
            row = stages.setdefault(stage, {"runs": 0, "chips_requested_active": 0})
            row[state] = count
            row["runs"] += count
            if state in ACTIVE_STATES:
                row["chips_requested_active"] += chips
        active = self.store.list_runs(states=[str(s) for s in ACTIVE_STATES], limit=limit)
        failed = self.store.list_runs(states=[RunState.FAILED], limit=RECENT_FAILURES)
        shown = progress.run_progress(self.store, active)
        fell = fallbacks(self.store, active)
        return {
            "agent": progress.agent_liveness(self.store, self.clock.now()),
            "stages": [
                {"stage": s, **{str(k): stages[s].get(str(k), 0) for k in RunState}, **stages[s]}
                for s in sorted(stages)
            ],
            "active": [summary(r, self.clock.now()) | shown[r.id] | {"fallback": fell.get(r.id)} for r in active],
            "active_total": sum(r.get(str(st), 0) for r in stages.values() for st in ACTIVE_STATES),
            "recently_failed": [summary(r, self.clock.now()) | {"reason": self.end_reason(r)} for r in failed],
        }

    def end_reason(self, run: RunRecord) -> str | None:
        """Why an ended run ended as it did (the reason of its final failed or cancelled event); None otherwise."""
        if run.state not in (RunState.FAILED, RunState.CANCELLED):
            return None
        ends = self.store.events(run=run.id, types=[EventType.FAILED, EventType.CANCELLED])
        final = [e for e in ends if e.type == EventType.CANCELLED or e.data.get("final", True)]
        return str(final[-1].data.get("reason")) if final and final[-1].data.get("reason") else None

    def queue(self, *, limit: int = QUEUE_PAGE, offset: int = 0) -> dict[str, Any]:
        """Pending runs per queue in admission order, with estimated starts: the `limit` runs from position
        `offset` + 1 of each queue (every one with `limit=0`), and each queue's `pending_total`.

        1. Order every queued run from one light read (queue, priority, time queued).
        2. Plan only the runs ahead of the last one shown, in admission order, and the parents those shown
           wait for: a run's estimated start depends on the runs ahead of it, never on those behind, so the
           page is what planning the whole queue would say, at the cost of the page.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise UsageError(f"limit must be a whole number >= 0 (got {limit!r}); 0 lists every pending run")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError(f"offset must be a whole number >= 0 (got {offset!r})")
        now = self.clock.now()
        order = {key.id: (_admission(key), key) for key in self.store.queued_keys()}
        by_queue: dict[str, list[QueuedKey]] = {}
        for _, key in sorted(order.values(), key=lambda item: item[0]):
            by_queue.setdefault(key.queue, []).append(key)
        shown = {name: runs[offset : offset + limit] if limit else runs[offset:] for name, runs in by_queue.items()}
        asked, pending = self._planned(
            order, [k for page in shown.values() for k in page], every=not limit and not offset
        )
        # One view: a run admitted or cancelled between the two reads is gone from the second, so it is left
        # out of its queue (page, positions and total) rather than shown queued; one queued since the first
        # read waits for the next view.
        pending = [r for r in pending if r.id in order]
        records = {r.id: r for r in pending}
        gone = asked - records.keys()
        if gone:
            by_queue = {name: [k for k in runs if k.id not in gone] for name, runs in by_queue.items()}
            shown = {name: [k for k in page if k.id not in gone] for name, page in shown.items()}
        position = {k.id: i + 1 for runs in by_queue.values() for i, k in enumerate(runs)}
        starts = self._estimated_starts(pending, now)
        if self.fleet.spec.budgets:
            from crossrail.control import budgets  # the scheduling core loads only for a fleet with budgets

            held = budgets.holds(self.store, self.fleet, now)
        else:
            held = {}
        for run in pending:
            if run.team in held:  # its team's budget holds it: no estimate of chips says when it starts
                starts[run.id] = {**starts.get(run.id, {}), "held": held[run.team]}
        names = [q.name for q in self.fleet.spec.queues] + sorted(
            set(by_queue) - {q.name for q in self.fleet.spec.queues}
        )
        out = []
        for name in names:
            runs = [records[k.id] for k in shown.get(name, [])]
            q = next((q for q in self.fleet.spec.queues if q.name == name), None)
            out.append(
                {
                    "name": name,
                    "stage": str(q.stage) if q is not None else (runs[0].stage if runs else None),
                    "team": q.team if q is not None else None,
                    "teams": list(q.teams) if q is not None else [],
                    "quota": dict(q.quota) if q is not None else {},
                    "pending_total": len(by_queue.get(name, [])),
                    "pending": [
                        {
                            "position": position[r.id],
                            **summary(r, now),
                            "waiting_s": round(now - r.updated_at, 3),
                            **starts.get(r.id, {}),
                        }
                        for r in runs
                    ],
                }
            )
        return {"queues": out, "limit": limit, "offset": offset}

    def _planned(
        self, order: dict[str, tuple[Admission, QueuedKey]], shown: list[QueuedKey], *, every: bool
    ) -> tuple[set[str], list[RunRecord]]:
        """The ids of `order` asked for and the queued runs among them to plan for showing `shown`: every one
        up to the last of them in admission order, and each one's queued parent when it starts from that
        parent's latest checkpoint (`order`: every queued run's admission order and key, by id). An id asked
        for and not returned left the queue since `order` was read."""
        if every:
            return set(order), self.store.queued_runs()
        last = [*shown, *(p for k in shown if (p := _queued_parent(k, order)) is not None)]
        if not last:
            return set(), []
        cut = max(order[k.id][0] for k in last)
        asked = {rid for rid, (at, _) in order.items() if at <= cut}
        return asked, self.store.queued_runs(ids=asked)

    def _estimated_starts(self, pending: list[RunRecord], now: float) -> dict[str, dict[str, Any]]:
        """Each pending run's planned pool and estimated start (control/placing.py); a run that starts from
        its parent's `latest` checkpoint and whose parent has not ended waits for it, not for chips."""
        from crossrail.control.placing import estimated_starts

        starts = estimated_starts(self.store, self.fleet, self.policy, pending, now)
        # Read each parent once, not once per child: a sweep of thousands of children shares a few parents.
        parents = self.store.runs_by_id(
            r.parent_run for r in pending if r.parent_run is not None and r.parent_checkpoint == "latest"
        )
        for run in pending:
            waiting_for = self._unended_parent(run, starts, parents)
            if waiting_for is not None:
                starts[run.id] = {**starts.get(run.id, {}), "waiting_for_parent": waiting_for}
        return starts

    def _unended_parent(
        self, run: RunRecord, starts: dict[str, dict[str, Any]], parents: dict[str, RunRecord] | None = None
    ) -> dict[str, Any] | None:
        """The parent a run waits for (its id, state and estimated start when queued), or None. Parents
        are looked up in `parents` (run id -> record) first, and those read from the store are added to it."""
        if run.parent_run is None or run.parent_checkpoint != "latest":
            return None
        parents = {} if parents is None else parents
        parent = parents.get(run.parent_run)
        if parent is None:
            parent = parents[run.parent_run] = self.store.get_run(run.parent_run)
        if RunState(parent.state) in TERMINAL_RUN_STATES:
            return None
        grandparent = self._unended_parent(parent, starts, parents)
        return {
            "run": parent.id,
            "state": parent.state,
            # A parent that waits for its own parent has no start of its own to show.
            "estimated_start_in_s": None if grandparent else starts.get(parent.id, {}).get("estimated_start_in_s"),
            "waiting_for_parent": grandparent["run"] if grandparent else None,
        }

    def show(self, ref: str) -> dict[str, Any]:
        from crossrail.control.placing import placement_history
        from crossrail.control.service.loaded import environment_lineage, images_ran, loaded_lineage

        run = self.get(ref)
        events = self.store.events(run=run.id)
        attempts = self.store.attempts(run.id)
        lineage = lineage_of(run)
        # `latest` names a step once an attempt launched: show what it resolved to, and what was asked
        launched = [a.parent_checkpoint for a in attempts if a.parent_checkpoint]
        if launched:
            lineage["parent_checkpoint"] = launched[-1]
        lineage |= loaded_lineage(run, attempts, events)  # then what the runtime reports it loaded
        backends = {str(p.name): str(p.backend) for p in self.fleet.spec.pools}
        lineage |= environment_lineage(events, [backends.get(a.pool, "") for a in attempts], run.image_digest)
        parts = {a.part: a for a in attempts if a.part is not None}  # a pipeline: each part's hardware, latest attempt
        if parts:
            lineage["parts"] = {
                name: {"pool": a.pool, "accelerator": a.accelerator, "chip_type": a.chip_type, "chips": a.chips}
                for name, a in parts.items()
            }
        now = self.clock.now()
        where = {run.id: attempts[-1].pool} if attempts else {}  # where it runs, or ran last
        shown = progress.run_progress(self.store, [run], where)[run.id]
        ran = images_ran(events)  # each attempt's image as its pod ran it (Kubernetes)
        return {
            "run": summary(run, now) | {"reason": self.end_reason(run)} | shown,
            "agent": progress.agent_liveness(self.store, now),
            "lineage": lineage,
            "spec": run.spec,
            "attempts": [a.as_dict() | {"image_ran": ran.get(a.number)} for a in attempts],
            "checkpoints": [c.as_dict() for c in self.store.checkpoints(run.id)],
            "placements": placement_history(events),
            "events": [e.as_dict() for e in events],
        }

    def place(
        self, doc: Document, sets: Sequence[str] = (), cwd: Path | None = None, *, actor: Actor | None = None
    ) -> dict[str, Any]:
        """Where an experiment would be placed if submitted now, every candidate's terms, and its start.

        The experiment is checked as submit checks it (preflight) first: a request submit would refuse is
        refused here with the same problems."""
        from crossrail.control.placing import Placer, explain
        from crossrail.scheduling.quota import QuotaBook
        from crossrail.spec import apply_overrides, check_experiment

        doc = apply_overrides(doc, sets) if sets else doc
        exp = check_experiment(doc, self.policy)
        self._reached.clear()
        self._configs.clear()
        self._datasets.clear()
        pre = self.preflight(doc, exp, cwd or Path.cwd(), actor=actor)
        # a parent not yet submitted is its one problem: it is placed all the same, and the problem returned
        if pre.problems and not (pre.missing_parent and len(pre.problems) == 1):
            raise pre.error()
        now = self.clock.now()
        recorded = exp.model_dump(mode="json", by_alias=True)
        stage = str(exp.spec.stage)
        work = Placer(self.store, self.fleet, self.policy).workload_of(
            f"{exp.metadata.name} (not submitted)",
            exp.metadata.name,
            stage,
            recorded,
            priority=str(exp.spec.priority),
            queued_at=now,
        )
        queue = self.fleet.queue_for(exp.spec.stage, exp.metadata.team)
        if queue is not None:
            work = replace(work, pools=QuotaBook(self.fleet.spec.queues).reachable(queue.name))
        choice, start = explain(self.store, self.fleet, self.policy, work, now)
        at = start.start if start is not None else None
        return {
            "experiment": exp.metadata.name,
            "stage": stage,
            "chips": exp.spec.resources.chips,
            "prefer": work.prefer,
            "estimated_start": at,
            "estimated_start_in_s": None if at is None else round(at - now, 3),
            "waiting_for_parent": self._parent_wait(pre.parent_run, pre.parent_checkpoint, now),
            **choice.as_dict(),
            "currency": self.fleet.spec.currency,  # of each candidate's cost
            "problems": [p.as_dict() for p in pre.problems],
        }

    def _parent_wait(self, parent_run: str | None, checkpoint: str | None, now: float) -> dict[str, Any] | None:
        """For `place`: the unended parent an experiment would wait for, with its own estimate."""
        if parent_run is None or checkpoint != "latest":
            return None
        parent = self.store.get_run(parent_run)
        if RunState(parent.state) in TERMINAL_RUN_STATES:
            return None
        queued = self.store.queued_runs()
        probe = replace(parent, parent_run=parent.id, parent_checkpoint="latest")
        return self._unended_parent(probe, self._estimated_starts(queued, now))

    def events(self, ref: str | None = None, *, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        run_id = self.get(ref).id if ref else None
        return self.store.events(run=run_id, after_seq=after_seq, limit=limit)

    def report(self) -> Report:
        from crossrail.metrics import compute

        return compute(self.store.events(), self.clock.now())


def summary(run: RunRecord, now: float) -> dict[str, Any]:
    return {
        "id": run.id,
        "uid": run.uid,
        "experiment": run.experiment,
        "stage": run.stage,
        "team": run.team,
        "owner": run.owner,
        "state": run.state,
        "priority": run.priority,
        "chips": run.chips,
        "queue": run.queue,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "age_s": round(now - run.created_at, 3),
    }


def lineage_of(run: RunRecord) -> dict[str, Any]:
    return {
        "dataset_uri": run.dataset_uri,
        "dataset_version": run.dataset_version,
        "code_repo": run.code_repo,
        "code_commit": run.code_commit,
        "config_uri": run.config_uri,
        "config_digest": run.config_digest,
        "image": run.image,
        "image_digest": run.image_digest,
        "checkpoint_dir": run.checkpoint_dir,
        "run_checkpoint_dir": run.run_checkpoint_dir,
        "parent_run": run.parent_run,
        "parent_checkpoint": run.parent_checkpoint,
        "resumed_from": run.resumed_from,
        "spec_digest": run.spec_digest,
        "idempotency_key": run.idempotency_key,
    }


Admission = tuple[int, float, str]


def _admission(key: QueuedKey) -> Admission:
    """The order runs are considered in: priority, then time queued, then id (as scheduling.estimate orders them)."""
    return (priority_rank(key.priority), key.updated_at, key.id)


def _queued_parent(key: QueuedKey, order: dict[str, tuple[Admission, QueuedKey]]) -> QueuedKey | None:
    """The queued parent whose latest checkpoint the run starts from, if any."""
    if key.parent_checkpoint != "latest" or key.parent_run is None or key.parent_run not in order:
        return None
    return order[key.parent_run][1]
