"""The service behind the client and the CLI: submit, state changes and the read models over the store.

Every operation checks all of its input before it writes, so a rejected request leaves nothing behind,
and every write is one store transaction that records its events with it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.control import lineage, progress
from crossrail.control.fallbacks import fallbacks
from crossrail.control.reach import DEFAULT_TIMEOUT_S, Reachability
from crossrail.core import Clock, Event, EventType, RunState, new_uid, priority_rank
from crossrail.core.access import EVERYONE, Actor, Sight, note_hidden
from crossrail.core.api import QUEUE_PAGE
from crossrail.core.events import TERMINAL_RUN_STATES
from crossrail.errors import (
    ConflictError,
    ForbiddenError,
    InfeasibleError,
    NotFoundError,
    Problem,
    SpecError,
    UsageError,
)
from crossrail.store import NewRun, RunRecord, Store
from crossrail.store.access import note_audit_detail
from crossrail.store.records import QueuedKey

# The spec, scheduling and metrics layers, and what only submit, resubmit and show use (control.parents,
# isolation, loaded), load only for the commands that use them: `status` needs none of them.
if TYPE_CHECKING:
    from crossrail.metrics import Report
    from crossrail.spec import Document, Experiment, Fleet, PlacementPolicy

ACTIVE_STATES = (RunState.QUEUED, RunState.ADMITTED, RunState.RUNNING, RunState.SUSPENDED)
RECENT_FAILURES = 5  # failed runs `status` lists with their reason


@dataclass(frozen=True)
class SubmitResult:
    run: RunRecord
    created: bool
    warnings: list[str] = field(default_factory=list)
    crossing: str | None = None  # a parent of another team, by the fleet's sharing: said in the audit log


_FEASIBILITY_PATH = "spec.resources.chips"


@dataclass(frozen=True)
class Preflight:
    """What submit's checks found, before anything is written: problems, warnings and what was resolved."""

    problems: list[Problem]
    warnings: list[str]
    code_commit: str | None
    parent_run: str | None
    parent_checkpoint: str | None
    infeasible: bool = False
    parent_team: str | None = None
    missing_parent: bool = False  # the parent it names has no run yet (one of the problems)

    def error(self) -> SpecError:
        """The problems as one error: an InfeasibleError (also a PlacementError) when no pool could hold it."""
        return InfeasibleError(self.problems) if self.infeasible else SpecError(self.problems)


class _MissingParentError(SpecError):
    """The parent an experiment names has no run its submitter may see."""


@dataclass
class _Prepared:
    new: NewRun
    events: list[Event]
    warnings: list[str]
    crossing: str | None = None


class Service:
    """One workspace's control plane, in process."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet | Callable[[], Fleet],
        policy: PlacementPolicy | Callable[[], PlacementPolicy],
        clock: Clock,
    ) -> None:
        """`fleet` and `policy` may be given as loaders, read the first time a command needs them."""
        self.store = store
        self._fleet_source = fleet
        self._policy_source = policy
        self.clock = clock
        # Lookups shared by the documents of one submit call (a file may change between calls).
        self._git: dict[Path, tuple[str | None, bool, str | None]] = {}
        self._resolved: dict[Path, Path] = {}  # each cwd given, resolved once per call
        self._datasets: dict[str, str] = {}
        self._configs: dict[str, str | BaseException] = {}
        self._reached: dict[str, Reachability] = {}
        self._teams: frozenset[str] | None = None  # the store's team names, read once per submit call
        self.reach_timeout_s = DEFAULT_TIMEOUT_S
        self.workspace_dir: Path | None = None
        """The `.crossrail` directory: its configs/, data/ and checkpoints/ are what requests may name."""
        # How much and how long submit reads to digest a config or an unversioned dataset.
        self.input_limits = lineage.DEFAULT_LIMITS
        # Cores of the host local pools start worker processes on (one per data-parallel worker).
        self.host_cores = os.cpu_count() or 1

    @cached_property
    def fleet(self) -> Fleet:
        src = self._fleet_source
        return src() if callable(src) else src

    def reload_fleet(self, fleet: Fleet | None = None) -> Fleet:
        """Forget the cached fleet; the next use reads it again from its source (or takes `fleet`)."""
        self.__dict__.pop("fleet", None)
        if fleet is not None:
            self.__dict__["fleet"] = fleet
        return self.fleet

    @cached_property
    def policy(self) -> PlacementPolicy:
        src = self._policy_source
        return src() if callable(src) else src

    # --- submit --------------------------------------------------------------------------------

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

    def sight(self, actor: Actor | None) -> Sight:
        """Whose runs `actor` sees and may name (everyone's without an actor: the workspace owner's CLI)."""
        if actor is None:
            return EVERYONE
        return actor.sight(self.fleet.shared_with(actor.team))

    def preflight(
        self,
        doc: Document,
        exp: Experiment,
        cwd: Path,
        *,
        together: frozenset[str] = frozenset(),
        actor: Actor | None = None,
    ) -> Preflight:
        """Every check submit makes beyond the file, writing and digesting nothing: a pool of the fleet can
        ever hold it, its commit is known (or may be missing, by the policy), its dataset is there (one
        bounded stat or HEAD) and its parent exists and can give it a checkpoint. `validate` and `place`
        call this too; each problem names the file, line (or `--set` argument), field and fix.

        `together`: experiments checked with this one (`validate a.yaml b.yaml`); a parent among them that
        has no run yet is taken as one that will be queued first. With `actor`, a parent outside its sight
        is a parent that does not exist (Sight)."""
        from crossrail.spec.problems import locate

        res = lineage.Resolution()
        problems = self._feasibility(exp, doc.source) + self._host_cores(exp, doc.source)
        res.problems += self._new_team(exp.metadata.team, doc.source)
        sight = self.sight(actor)
        res.warnings += self._team_typo(exp.metadata.team, sight)
        commit = exp.spec.code.commit if exp.spec.code else None
        if commit == "auto":
            commit = self._git_head(cwd, doc.source, res)
        refused = self._out_of_reach(exp, doc.source, actor, res)
        if "spec.dataset.uri" not in refused:
            self._dataset_there(exp, doc.source, res)
        if not res.problems:  # the reads submit makes, bounded as there: a FIFO, a device, 60 MB are refused alike
            if exp.spec.config and "spec.config" not in refused:
                self._config_digest(exp.spec.config, doc.source, res)
            if not exp.spec.dataset.version and "spec.dataset.uri" not in refused:
                self._dataset_version(exp.spec.dataset.uri, doc.source, res)
        parent_run = parent_ckpt = parent_team = None
        missing = False
        parent = exp.spec.parent
        if parent is not None and parent.run in together and self.store.find_run(parent.run, teams=sight.teams) is None:
            res.warnings.append(f"{exp.metadata.name} starts from {parent.run}: submit {parent.run} first")
        else:
            try:
                parent_run, parent_ckpt, parent_team = self._parent(exp, doc.source, sight)
            except SpecError as exc:
                problems += exc.problems
                missing = isinstance(exc, _MissingParentError)
        located = locate([*problems, *res.problems], doc)
        infeasible = bool(problems) and problems[0].path == _FEASIBILITY_PATH
        return Preflight(located, res.warnings, commit, parent_run, parent_ckpt, infeasible, parent_team, missing)

    def _out_of_reach(self, exp: Experiment, source: str, actor: Actor | None, res: lineage.Resolution) -> set[str]:
        """The fields naming paths `actor` may not name (control/uris.py), each a problem in `res`; nothing is
        opened to decide, so a refusal says nothing of whether the file exists."""
        from crossrail.control.uris import reach_for

        rule = reach_for(actor is not None, self.workspace_dir, self.fleet.spec.paths.roots)
        named = {"spec.dataset.uri": exp.spec.dataset.uri, "spec.checkpoint.dir": str(exp.spec.checkpoint.dir)}
        if exp.spec.config:
            named["spec.config"] = exp.spec.config
        refused = set()
        for field_path, uri in named.items():
            why = rule.refusal(uri)
            if why is not None:
                refused.add(field_path)
                fix = "name object storage, or a file under an allowed root (an admin can add one)"
                res.problems.append(Problem(source, field_path, f"{uri[:200]} {why}", fix=fix))
        return refused

    def _new_team(self, team: str | None, source: str) -> list[Problem]:
        """A team not yet known (to the fleet or by a run) is named as a DNS-1123 label; known ones keep theirs."""
        from crossrail.core import validate_team

        why = None if team is None else validate_team(team)
        if why is None or team in self.fleet.spec.teams or self.store.list_runs(team=team, limit=1):
            return []
        return [Problem(source, "metadata.team", f"a new team {why}", fix="name the team e.g. `ml-research`")]

    def _team_typo(self, team: str | None, sight: Sight) -> list[str]:
        """A warning for a team no queue, run or token names yet, spelt like one `sight` sees: its runs would go to
        the stage's shared queue and count against no team's budget, which a misspelling rarely means."""
        if team is None:
            return []
        stored = self._teams if self._teams is not None else self.store.team_names()
        known = set(self.fleet.spec.teams) | set(stored)
        if team in known:
            return []
        from crossrail.spec.problems import did_you_mean  # the spec layer loads only on this warning

        hint = did_you_mean(team, sorted(t for t in known if sight.sees(t)))
        return [] if hint is None else [f"team {team!r} is new here (no queue, run or token names it); {hint}"]

    def _feasibility(self, exp: Experiment, source: str) -> list[Problem]:
        """The fleet check (scheduling.require_feasible) as one problem on one line: each pool's reason."""
        from crossrail.errors import PlacementError
        from crossrail.scheduling import require_feasible

        try:
            require_feasible(exp, self.fleet)
        except PlacementError as exc:
            *said, fix = str(exc).splitlines()
            message = said[0] + " " + "; ".join(line.strip() for line in said[1:])
            return [Problem(source, _FEASIBILITY_PATH, message, fix=fix)]
        return []

    def _host_cores(self, exp: Experiment, source: str) -> list[Problem]:
        """A fleet of local pools only starts one process per data-parallel worker on this host: not more
        than its cores unless the experiment says `parallelism.oversubscribe: true`."""
        from crossrail.spec.experiment import host_cores_items
        from crossrail.spec.paths import format_path

        pools = self.fleet.pools
        if not pools or any(p.backend != "local" for p in pools):
            return []
        par = exp.spec.parallelism
        items = host_cores_items(par.data, par.oversubscribe, self.host_cores)
        return [Problem(source, format_path(("spec", "parallelism", *path)), why, fix=fix) for path, why, fix in items]

    def _dataset_there(self, exp: Experiment, source: str, res: lineage.Resolution) -> None:
        """One bounded look at the dataset: missing is a problem; a look that cannot be made is one only when
        submit must read the data to version it (no spec.dataset.version), else a warning."""
        from crossrail.control.reach import reach

        uri, version = exp.spec.dataset.uri, exp.spec.dataset.version
        if uri not in self._reached:
            self._reached[uri] = reach(uri, self.reach_timeout_s)
        found = self._reached[uri]
        if found.state == "missing":
            fix = "fix the URI, or create the data before submitting"
            res.problems.append(Problem(source, "spec.dataset.uri", f"{uri} does not exist", fix=fix))
        elif found.state == "unknown" and version:
            res.warnings.append(f"dataset {uri} could not be checked from here ({found.why}); it is recorded as given")
        elif found.state == "unknown":
            res.problems.append(
                Problem(
                    source,
                    "spec.dataset.uri",
                    f"{uri} could not be reached to resolve its version ({found.why})",
                    fix="give spec.dataset.version, or make the data reachable from here (credentials, gcsfs, s3fs)",
                )
            )

    def _resolve(
        self, exp: Experiment, source: str, commit: str | None, dumped: dict[str, Any]
    ) -> tuple[dict[str, Any], lineage.Resolution]:
        """The spec a run records: `dumped` (the experiment's JSON, left as it is) with its commit and dataset
        version resolved."""
        res = lineage.Resolution(image_digest=lineage.image_digest(exp.spec.image))
        spec = {**dumped["spec"], "dataset": dict(dumped["spec"]["dataset"])}
        if spec.get("code") is not None:
            spec["code"] = dict(spec["code"])
        recorded = {**dumped, "spec": spec}
        res.code_commit = commit
        if exp.spec.dataset.version:
            res.dataset_version = exp.spec.dataset.version
        else:
            res.dataset_version = self._dataset_version(exp.spec.dataset.uri, source, res)
        if exp.spec.config:
            res.config_digest = self._config_digest(exp.spec.config, source, res)
        if res.problems:
            raise SpecError(res.problems)
        if spec.get("code") is not None:
            spec["code"]["commit"] = commit
        spec["dataset"]["version"] = res.dataset_version
        return recorded, res

    def _config_digest(self, uri: str, source: str, res: lineage.Resolution) -> str | None:
        if uri not in self._configs:
            try:
                self._configs[uri] = lineage.config_digest(uri, self.input_limits)
            except (OSError, ImportError, ValueError, lineage.InputRefused) as exc:
                self._configs[uri] = exc
        digest = self._configs[uri]
        if isinstance(digest, lineage.InputRefused):
            res.problems.append(Problem(source, "spec.config", digest.message, fix=digest.fix))
            return None
        if isinstance(digest, BaseException):
            res.warnings.append(f"config {uri} could not be read here ({_short(digest)}); its digest is not recorded")
            return None
        return digest

    def _git_head(self, cwd: Path, source: str, res: lineage.Resolution) -> str | None:
        key = self._resolved.get(cwd)
        if key is None:
            key = self._resolved[cwd] = cwd.resolve()
        if key not in self._git:
            self._git[key] = lineage.git_head(key)
        commit, dirty, error = self._git[key]
        if commit is None and self.policy.portability.code_commit == "required":
            res.problems.append(
                Problem(
                    source,
                    "spec.code.commit",
                    f"is 'auto' but {key} {error} (the placement policy has code_commit: required)",
                    fix=(
                        "submit from a checkout of the training code that has a commit, "
                        "or set spec.code.commit to a commit id"
                    ),
                )
            )
        elif commit is None:
            res.warnings.append(
                f"spec.code.commit is 'auto' but {key} {error}: the run records no commit "
                "(set spec.code.commit, or portability_requirements.code_commit: required to refuse this)"
            )
        elif dirty:
            res.warnings.append(
                f"the checkout at {key} has uncommitted changes; commit {commit[:12]} does not reproduce them"
            )
        return commit

    def _dataset_version(self, uri: str, source: str, res: lineage.Resolution) -> str | None:
        if uri not in self._datasets:
            try:
                self._datasets[uri] = lineage.dataset_version(uri, self.input_limits)
            except lineage.InputRefused as exc:
                res.problems.append(Problem(source, "spec.dataset.uri", exc.message, fix=exc.fix))
                return None
            except FileNotFoundError:
                res.problems.append(
                    Problem(
                        source,
                        "spec.dataset.uri",
                        f"{uri} does not exist",
                        fix="fix the URI, or give spec.dataset.version",
                    )
                )
                return None
            except (OSError, ImportError, ValueError) as exc:
                res.problems.append(
                    Problem(
                        source,
                        "spec.dataset.version",
                        f"is not given and {uri} could not be read to resolve it ({_short(exc)})",
                        fix="give spec.dataset.version, or install the filesystem for this scheme (e.g. gcsfs, s3fs)",
                    )
                )
                return None
        return self._datasets[uri]

    def _parent(
        self, exp: Experiment, source: str, sight: Sight = EVERYONE
    ) -> tuple[str | None, str | None, str | None]:
        """(run id, checkpoint, team) of the parent `exp` names, as `sight` sees runs; a parent of another team is
        taken only where that team shares with the experiment's (`spec.sharing` of the fleet)."""
        from crossrail.control import parents

        parent = exp.spec.parent
        if parent is None:
            return None, None, None
        run = self.find(parent.run, sight)
        if run is None:
            from crossrail.spec.problems import did_you_mean

            close = did_you_mean(parent.run, self.store.run_names(teams=sight.teams))  # only runs `sight` sees
            fix = "submit the parent first, or name an existing run id"
            missing = Problem(source, "spec.parent.run", f"no run or experiment named {parent.run!r}", fix=fix)
            raise _MissingParentError([replace(missing, fix=f"{close[:-1]}, or {fix}") if close else missing])
        refusal = self.unshared(run, exp.metadata.team)
        if refusal is not None:
            raise SpecError([Problem(source, "spec.parent.run", refusal[0], fix=refusal[1])])
        if parent.checkpoint == "latest":
            return run.id, self._parent_latest(run, source), run.team
        match = next((c for c in self.store.checkpoints(run.id) if c.step == parent.checkpoint), None)
        why = None if match is None else parents.why_unusable(match)
        if match is None or why is not None:
            problem = (
                f"run {run.id} has no checkpoint at step {parent.checkpoint}"
                if match is None
                else f"the checkpoint of step {parent.checkpoint} of run {run.id} {why}"
            )
            steps = ", ".join(map(str, parents.usable_steps(self.store, run.id))) or "none"
            fix = "name one of the usable steps, or 'latest'" if steps != "none" else "name another parent run"
            raise SpecError([Problem(source, "spec.parent.checkpoint", f"{problem} (usable steps: {steps})", fix=fix)])
        return run.id, match.uri, run.team

    def unshared(self, parent: RunRecord, team: str | None) -> tuple[str, str] | None:
        """(what, fix) when a run of `team` may not start from `parent`: its team is another that does not
        share with `team` by the fleet's `spec.sharing`; None when it may."""
        if parent.team is None or team is None or parent.team == team or self.fleet.shares(parent.team, team):
            return None
        return (
            f"run {parent.id} belongs to team {parent.team}, which does not share its checkpoints with team {team}",
            f"an admin adds `- {{from: {parent.team}, to: [{team}]}}` under spec.sharing in the fleet "
            "(`crossrail fleet apply`), or name a parent of your own team",
        )

    def _parent_latest(self, run: RunRecord, source: str) -> str:
        """`latest` of a parent that has ended: its newest checkpoint that verifies. Of one still queued or
        running: `latest`, resolved when the child's attempt launches (control/agent.py)."""
        from crossrail.control import parents

        if not parents.ended(run):
            return "latest"
        verified = parents.newest_verified(self.store, run.id)
        if verified.newest is None:
            raise SpecError(
                [
                    Problem(
                        source,
                        "spec.parent.run",
                        parents.no_usable_checkpoint(run, verified),
                        fix=f"run the parent again (`crossrail resubmit {run.id}`), or name another parent",
                    )
                ]
            )
        return verified.newest.uri

    # --- resubmit and state changes --------------------------------------------------------------

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

    # --- read models ---------------------------------------------------------------------------

    def get(self, ref: str, sight: Sight = EVERYONE) -> RunRecord:
        """The run `ref` names, of those `sight` sees; NotFoundError, in the same words, for one it does not."""
        run = self.find(ref, sight)
        if run is None:
            from crossrail.spec.problems import did_you_mean  # the spec layer loads only on this error

            # suggested only from runs `sight` sees: a hidden run's name gets what a nonexistent one gets
            hint = did_you_mean(ref, self.store.run_names(teams=sight.teams))
            raise NotFoundError(f"no run or experiment named {ref!r}; {hint or '`crossrail status` lists runs'}")
        return run

    def find(self, ref: str, sight: Sight = EVERYONE) -> RunRecord | None:
        """The run `ref` names, of those `sight` sees; a run it names but may not see is None, and noted as a
        refusal for the audit log (core.access.note_hidden)."""
        run = self.store.find_run(ref, teams=sight.teams)
        if run is None and sight.teams is not None:
            hidden = self.store.find_run(ref)
            if hidden is not None:
                seen = ", ".join(sorted(sight.teams)) or "none"
                note_hidden(f"run {hidden.id} of team {hidden.team or '(none)'} is not visible to teams {seen}")
        return run

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
        from crossrail.control.loaded import environment_lineage, images_ran, loaded_lineage
        from crossrail.control.placing import placement_history

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


def _crossing(parent_run: str | None, parent_team: str | None, team: str | None) -> str | None:
    """How a run of `team` crossed to a parent of another team, as the audit log says it; None when it did not."""
    if parent_run is None or parent_team is None or team is None or parent_team == team:
        return None
    return f"parent {parent_run} of team {parent_team}, shared with team {team} by the fleet's spec.sharing"


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]


def _by(actor: Actor | None) -> dict[str, str]:
    """Who an event says acted: the token's user, or locally the OS user (a claimed $CROSSRAIL_USER apart)."""
    from crossrail.control.access import local_actor

    return (actor or local_actor()).by()


def _target(new: NewRun) -> Any:
    """The run's `spec.target`, carried by its `submitted` event so metrics can tell when it was met."""
    spec = new.experiment_spec.get("spec")
    return spec.get("target") if isinstance(spec, dict) else None


Admission = tuple[int, float, str]


def _admission(key: QueuedKey) -> Admission:
    """The order runs are considered in: priority, then time queued, then id (as scheduling.estimate orders them)."""
    return (priority_rank(key.priority), key.updated_at, key.id)


def _queued_parent(key: QueuedKey, order: dict[str, tuple[Admission, QueuedKey]]) -> QueuedKey | None:
    """The queued parent whose latest checkpoint the run starts from, if any."""
    if key.parent_checkpoint != "latest" or key.parent_run is None or key.parent_run not in order:
        return None
    return order[key.parent_run][1]
