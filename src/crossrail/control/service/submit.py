"""Submit: one or many experiments, each checked in full before its run and events are written together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.control.service.base import _crossing, _digest
from crossrail.control.service.preflight import Preflighting
from crossrail.core import Event, EventType, new_uid
from crossrail.core.access import Actor
from crossrail.errors import ForbiddenError, InfeasibleError, SpecError
from crossrail.store import NewRun, RunRecord
from crossrail.store.joined import note_audit_detail

# The spec, scheduling and metrics layers, and what only submit, resubmit and show use (control.parents,
# isolation, loaded), load only for the commands that use them: `status` needs none of them.
if TYPE_CHECKING:
    from crossrail.spec import Document, Experiment


@dataclass(frozen=True)
class SubmitResult:
    run: RunRecord
    created: bool
    warnings: list[str] = field(default_factory=list)
    crossing: str | None = None  # a parent of another team, by the fleet's sharing: said in the audit log


@dataclass
class _Prepared:
    new: NewRun
    events: list[Event]
    warnings: list[str]
    crossing: str | None = None


class Submitting(Preflighting):
    """Submit: a document checked whole, then its run and opening events written in one transaction."""

    def submit(
        self,
        doc: Document,
        *,
        sets: Sequence[str] = (),
        idempotency_key: str | None = None,
        cwd: Path | None = None,
    ) -> SubmitResult:
        return self.submit_many([doc], sets=sets, idempotency_keys=[idempotency_key], cwd=cwd)[0]

    def submit_many(
        self,
        docs: Sequence[Document],
        *,
        sets: Sequence[str] = (),
        idempotency_keys: Sequence[str | None] | None = None,
        cwd: Path | None = None,
        actor: Actor | None = None,
    ) -> list[SubmitResult]:
        """Check every document, then create all runs in one transaction (all or none).

        With a token's `actor`, each run is its team's: a document naming another team is refused (admins
        excepted), one naming none gets the actor's team, and its queue must admit that team."""
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(docs)
        if len(keys) != len(docs):
            raise ValueError("one idempotency key (or None) per document")
        now = self.clock.now()
        self._git.clear()
        self._resolved.clear()
        self._datasets.clear()
        self._configs.clear()
        self._reached.clear()
        prepared, problems, infeasible = [], [], False
        self._teams = frozenset(self.store.team_names())
        try:
            for doc, key in zip(docs, keys, strict=True):
                try:
                    prepared.append(self._prepare(doc, sets, key, cwd or Path.cwd(), now, actor=actor))
                except SpecError as exc:
                    problems.extend(exc.problems)
                    infeasible = infeasible or isinstance(exc, InfeasibleError)
        finally:
            self._teams = None  # other calls read the names afresh
        if problems:
            raise InfeasibleError(problems) if infeasible else SpecError(problems)
        crossings = [p.crossing for p in prepared if p.crossing]
        if crossings:  # said in the audit row the write carries (an API request's), as the result says it locally
            note_audit_detail("; ".join(crossings))
        runs = self.store.create_runs([p.new for p in prepared], now, [p.events for p in prepared])
        return [
            SubmitResult(run=run, created=created, warnings=p.warnings, crossing=p.crossing)
            for (run, created), p in zip(runs, prepared, strict=True)
        ]

    def _prepare(
        self, doc: Document, sets: Sequence[str], key: str | None, cwd: Path, now: float, *, actor: Actor | None = None
    ) -> _Prepared:
        from crossrail.control import isolation
        from crossrail.spec import apply_overrides, check_experiment, experiment_digest
        from crossrail.spec.problems import locate

        doc = apply_overrides(doc, sets) if sets else doc
        if actor is not None and actor.team is not None:
            doc = self._as_team(doc, actor)
        exp = check_experiment(doc, self.policy)
        if actor is not None and actor.team is not None:
            self._check_queue_admits(exp, actor)
            isolation.check_submission(self.fleet, actor, exp)
        pre = self.preflight(doc, exp, cwd, actor=actor)
        if pre.problems:
            raise pre.error()
        dumped = exp.model_dump(mode="json", by_alias=True)  # the experiment as written; _resolve records a copy
        try:
            recorded, res = self._resolve(exp, doc.source, pre.code_commit, dumped)
        except SpecError as exc:
            raise SpecError(locate(exc.problems, doc)) from None
        res.warnings[:] = dict.fromkeys([*pre.warnings, *res.warnings])  # a read both made warns once
        parent_run, parent_ckpt = pre.parent_run, pre.parent_checkpoint
        queue = self.fleet.queue_for(exp.spec.stage, exp.metadata.team)
        queue_name = queue.name if queue is not None else str(exp.spec.stage)
        spec_digest = _digest(recorded)
        run_dir = str(exp.spec.checkpoint.dir).rstrip("/")
        new = NewRun(
            experiment=exp.metadata.name,
            experiment_digest=experiment_digest(exp),
            experiment_spec=dumped,
            stage=str(exp.spec.stage),
            team=exp.metadata.team,
            owner=exp.metadata.owner,
            priority=str(exp.spec.priority),
            chips=exp.spec.resources.chips,
            queue=queue_name,
            spec=recorded,
            spec_digest=spec_digest,
            dataset_uri=exp.spec.dataset.uri,
            dataset_version=str(res.dataset_version),
            image=exp.spec.image,
            image_digest=res.image_digest,
            checkpoint_dir=run_dir,
            uid=new_uid(now),
            idempotency_key=key,
            parent_run=parent_run,
            parent_checkpoint=parent_ckpt,
            code_repo=exp.spec.code.repo if exp.spec.code else None,
            code_commit=res.code_commit,
            config_uri=exp.spec.config,
            config_digest=res.config_digest,
        )
        crossing = _crossing(pre.parent_run, pre.parent_team, exp.metadata.team)
        events = self._opening_events(new, now, resumed_from=None, parent_team=pre.parent_team)
        return _Prepared(new=new, events=events, warnings=res.warnings, crossing=crossing)

    @staticmethod
    def _as_team(doc: Document, actor: Actor) -> Document:
        """The document as the actor's team submits it: its team the actor's (ForbiddenError naming both if
        it names another and the actor is no admin)."""
        from crossrail.spec import apply_overrides

        meta = doc.data.get("metadata") if isinstance(doc.data, dict) else None
        named = meta.get("team") if isinstance(meta, dict) else None
        if named is None:
            return apply_overrides(doc, [f"metadata.team={actor.team}"])
        if named != actor.team and not actor.admin:
            raise ForbiddenError(
                f"{doc.source}: metadata.team is {named!r} but the token of {actor.who} is team {actor.team!r}; "
                f"submit as team {actor.team} (leave metadata.team out) or with a token of team {named}"
            )
        return doc

    def _check_queue_admits(self, exp: Experiment, actor: Actor) -> None:
        """A stage whose queues all name their teams takes only those teams' runs (admins excepted)."""
        stage, team = exp.spec.stage, exp.metadata.team
        of_stage = [q for q in self.fleet.spec.queues if q.stage is stage]
        if actor.admin or not of_stage or self.fleet.queue_for(stage, team) is not None:
            return
        which = "; ".join(f"{q.name} admits {', '.join(q.teams)}" for q in of_stage)
        raise ForbiddenError(
            f"no {stage} queue admits team {team!r} ({which}); ask an admin to add the team to a queue's `teams`"
        )

    def _opening_events(
        self, new: NewRun, now: float, resumed_from: str | None, *, parent_team: str | None = None
    ) -> list[Event]:
        shared = parent_team is not None and new.team is not None and parent_team != new.team
        return [
            Event(
                EventType.SUBMITTED,
                now,
                data={
                    "uid": new.uid,
                    "experiment": new.experiment,
                    "stage": new.stage,
                    "team": new.team,
                    "owner": new.owner,
                    "chips": new.chips,
                    "spec_digest": new.spec_digest,
                    "idempotency_key": new.idempotency_key,
                    "resumed_from": resumed_from,
                    "parent_run": new.parent_run,
                    # lineage of a crossing: the parent's team, which shares with this run's by the fleet
                    **({"parent_team": parent_team, "shared_from": parent_team} if shared else {}),
                    "target": _target(new),
                },
            ),
            Event(
                EventType.QUEUED,
                now,
                data={
                    "queue": new.queue,
                    "stage": new.stage,
                    "team": new.team,
                    "priority": new.priority,
                },
            ),
        ]


def _target(new: NewRun) -> Any:
    """The run's `spec.target`, carried by its `submitted` event so metrics can tell when it was met."""
    spec = new.experiment_spec.get("spec")
    return spec.get("target") if isinstance(spec, dict) else None
