"""Every operation of the client over one workspace, as one actor may do it: the objects `--json` prints.

`Operations(local)` is the workspace owner's (the local CLI: every run, writes audited under the OS user).
`Operations(local, actor)` is a request's (the API): by the one visibility rule (core.access.Sight) a run of a
team the actor does not see is, to it, a run that does not exist (NotFoundError, the same words, noted for
the audit log by Service.find); a run it sees but that is not its team's (shared with it by the fleet) may be read
and named as a parent, not changed (ForbiddenError); queue entries of other teams keep only their position and
size. Admins see and change every run. The API audits its requests itself, so `audit_writes` is False there.

The client's transports call these methods (crossrail.client.transport.LocalTransport), and so do the API's
routes and dashboard; an operation is written here once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.core.access import Action, Actor, Sight
from crossrail.core.api import QUEUE_PAGE, api_object

if TYPE_CHECKING:
    from crossrail.control.ops.local import Local
    from crossrail.control.service import Service

_obj = api_object

QUEUE_FIELDS = frozenset(
    {"position", "stage", "team", "state", "priority", "chips", "queue", "created_at", "updated_at", "age_s"}
    | {"waiting_s", "planned_pool", "estimated_start", "estimated_start_in_s"}
)
"""What a queue entry of another team's run keeps: its place and size, not what it is."""


class Operations:
    """The workspace's operations as `actor` may use them (None: the workspace owner, who sees every run)."""

    def __init__(
        self,
        local: Local,
        actor: Actor | None = None,
        *,
        audit_writes: bool = True,
    ) -> None:
        """`audit_writes`: record writes in the audit log under the OS user (the local CLI)."""
        self.local = local
        self.actor = actor
        self.audit_writes = audit_writes
        self._sight: Sight | None = None

    def as_actor(self, actor: Actor) -> Operations:
        """These operations as a request's `actor` does them (its writes audited by the API, not here)."""
        return Operations(self.local, actor, audit_writes=False)

    @property
    def service(self) -> Service:
        return self.local.service

    @property
    def clock(self) -> Any:
        return self.local.clock

    @property
    def everyone(self) -> bool:
        """Whether this actor sees and changes every run: the workspace owner and admins."""
        return self.actor is None or self.actor.admin

    @property
    def sight(self) -> Sight:
        if self._sight is None:
            self._sight = self.service.sight(self.actor)
        return self._sight

    # --- who sees what ---------------------------------------------------------------------------

    def seen(self, ref: str) -> Any:
        """The run `ref` names, of those the actor sees; NotFoundError as for a run that does not exist otherwise
        (and, when it does exist, the refusal is noted for the audit log: Service.find)."""
        return self.service.get(ref, self.sight)

    def own(self, ref: str, what: str) -> Any:
        """The run `ref` names, when the actor may `what` it: NotFoundError for a run it does not see,
        ForbiddenError naming both teams for one it sees but does not own (a shared run)."""
        from crossrail.errors import ForbiddenError

        run = self.seen(ref)
        if self.actor is not None and not self.actor.sees_team(run.team):
            raise ForbiddenError(
                f"run {run.id} belongs to team {run.team or '(none)'}; the token of {self.actor.who} is team "
                f"{self.actor.team} and may not {what} it (only admins act across teams)"
            )
        return run

    def _check(self, ref: str) -> None:
        """Refuse a run the actor does not see before reading it (the owner and admins see every run)."""
        if not self.everyone:
            self.seen(ref)

    def _team_filter(self, team: str | None) -> str | None:
        from crossrail.errors import ForbiddenError

        if self.actor is None or self.actor.admin:
            return team
        if team is not None and team != self.actor.team:
            raise ForbiddenError(
                f"the request names team {team} but the token of {self.actor.who} is team {self.actor.team}; "
                "leave the team out (it comes from the token) or use a token of that team"
            )
        return self.actor.team

    def _named_team(self, team: str | None) -> None:
        """NotFoundError for a team neither the fleet nor this store names (a run, a token, an audit row), with a
        did-you-mean among the teams the actor sees: a misspelt `--team` is not an empty answer."""
        from crossrail.errors import NotFoundError
        from crossrail.spec.problems import did_you_mean

        if team is None:
            return
        known = set(self.service.fleet.spec.teams) | set(self.service.store.team_names())
        if team in known:
            return
        seen = sorted(t for t in known if self.sight.sees(t))
        hint = did_you_mean(team, seen) or (f"teams: {', '.join(seen)}" if seen else "no team is named here yet")
        raise NotFoundError(f"no team {team!r} in the fleet or the store; {hint}")

    def visible(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows (run summaries) of runs this actor may see."""
        return [r for r in rows if self.sight.sees(r.get("team"))]

    def _teams(self, runs: Iterable[str | None]) -> dict[str, str | None]:
        ids = {r for r in runs if r}
        return {rid: rec.team for rid, rec in self.service.store.runs_by_id(ids).items()}

    # --- submit ------------------------------------------------------------------------------------

    def submit(
        self,
        docs: Sequence[Any],
        *,
        sets: Sequence[str] = (),
        idempotency_keys: Sequence[str | None] | None = None,
        target: str | None = None,
    ) -> dict[str, Any]:
        """Submit parsed documents at once: all are checked first, then created in one transaction. With an
        actor, each run is its team's (Service.submit_many). `target` names them in the audit log."""
        results = self._submit(lambda: docs, sets, idempotency_keys, target)
        return _obj("SubmitResults", results=[self._submitted(r) for r in results])

    def submit_text(
        self, text: str, *, source: str, sets: Sequence[str] = (), idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Submit the experiment written in `text` (YAML or JSON); its problems name `source`."""
        from crossrail.spec import parse_document

        results = self._submit(lambda: [parse_document(text, source)], sets, [idempotency_key], source)
        return self._submitted(results[0])

    def _submit(
        self,
        docs: Callable[[], Sequence[Any]],
        sets: Sequence[str],
        keys: Sequence[str | None] | None,
        target: str | None,
    ) -> Any:
        from crossrail.errors import ConflictError, ForbiddenError

        def go() -> Any:
            return self.service.submit_many(
                docs(), sets=sets, idempotency_keys=keys, cwd=self.local.cwd, actor=self.actor
            )

        try:
            return self._audited(Action.SUBMIT, target, go)
        except ConflictError:
            named = [k for k in keys or () if k]
            if self.actor is None or len(named) != 1:
                raise
            taken, team = self.service.store.key_owner(named[0])
            if taken and not self.actor.sees_team(team):  # the conflict would name another team's run
                raise ForbiddenError(
                    f"idempotency key {named[0]!r} is taken by a run of team {team}; the token of {self.actor.who} "
                    f"is team {self.actor.team}: submit with another key"
                ) from None
            raise

    def resubmit(
        self, ref: str, *, resume: bool = False, from_weights: bool = False, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        if not self.everyone:
            self.own(ref, "resubmit")

        def go() -> Any:
            key, weights = idempotency_key, from_weights
            return self.service.resubmit(
                ref, resume=resume, from_weights=weights, idempotency_key=key, actor=self.actor
            )

        return self._submitted(self._audited(Action.SUBMIT, ref, go, verb="resubmit"))

    def _submitted(self, result: Any) -> dict[str, Any]:
        from crossrail.control.service import lineage_of, summary

        run = result.run
        return _obj(
            "SubmitResult",
            created=result.created,
            run=summary(run, self.clock.now()),
            lineage=lineage_of(run),
            warnings=list(result.warnings),
        )

    def place(self, doc: Any, *, sets: Sequence[str] = ()) -> dict[str, Any]:
        """Where the parsed experiment would be placed if submitted now, and why (nothing is written); a parent
        is named as the actor sees runs."""
        return _obj("Placement", **self.service.place(doc, sets, self.local.cwd, actor=self.actor))

    def place_text(self, text: str, *, source: str, sets: Sequence[str] = ()) -> dict[str, Any]:
        from crossrail.spec import parse_document

        return self.place(parse_document(text, source), sets=sets)

    # --- runs ----------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        out = _obj("Status", workspace=str(self.local.workspace.root), **self.service.status())
        if self.everyone:
            return out
        for key in ("active", "recently_failed"):
            out[key] = [r for r in out.get(key, []) if self.sight.sees(r.get("team"))]
        return out

    def show(self, ref: str) -> dict[str, Any]:
        self._check(ref)
        return _obj("Run", **self.service.show(ref))

    def queue(self, *, limit: int = QUEUE_PAGE, offset: int = 0) -> dict[str, Any]:
        """Pending runs per queue with estimated starts: `limit` runs of each queue from position `offset` + 1
        (0: every one), with each queue's total; other teams' entries keep only their place and size."""
        out = _obj("QueueList", **self.service.queue(limit=limit, offset=offset))
        if self.everyone:
            return out
        for q in out.get("queues", []):
            q["pending"] = [p if self.sight.sees(p.get("team")) else _redacted(p) for p in q.get("pending", [])]
        return out

    def events(
        self,
        ref: str | None = None,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        if ref is not None:
            self._check(ref)
        if types:
            run_id = self.service.get(ref).id if ref else None
            events = self.service.store.events(run=run_id, after_seq=after_seq, types=types, limit=limit)
        else:
            events = self.service.events(ref, after_seq=after_seq, limit=limit)
        rows = [e.as_dict() for e in events]
        if not (self.everyone or ref is not None):
            teams = self._teams(e.get("run") for e in rows)
            rows = [e for e in rows if e.get("run") is None or self.sight.sees(teams.get(e["run"]))]
        return _obj("EventList", events=rows)

    def runs(
        self,
        *,
        states: Sequence[str] | None = None,
        stage: str | None = None,
        team: str | None = None,
        experiment: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Runs newest first, filtered; `next` is the cursor of the following page (None on the last)."""
        from crossrail.control.service import summary
        from crossrail.errors import UsageError

        team = self._team_filter(team)
        self._named_team(team)
        after: tuple[float, str] | None = None
        if cursor:
            stamp, _, rid = cursor.partition("/")
            try:
                after = (float(stamp), rid)
            except ValueError:
                raise UsageError(f"cursor {cursor!r} was not returned by a runs page; omit it to start over") from None
        picked = self.service.store.list_runs(
            states=states or None, stage=stage, experiment=experiment, team=team, before=after, limit=limit + 1
        )
        now = self.clock.now()
        more = len(picked) > limit
        page = picked[:limit]
        last = page[-1] if more and page else None
        return _obj(
            "RunList",
            runs=[summary(r, now) for r in page],
            next=None if last is None else f"{last.created_at!r}/{last.id}",
        )

    def agents(self, *, stale_s: float = 120.0) -> dict[str, Any]:
        """Agents registered on the store, each `alive` when it has not stopped and beat within `stale_s`."""
        now = self.clock.now()
        rows = []
        for row in self.service.store.agents():
            beat = row.get("heartbeat_at")
            alive = row.get("stopped_at") is None and beat is not None and now - float(beat) <= stale_s
            rows.append({**row, "alive": alive})
        return _obj("AgentList", agents=rows)

    def cancel(self, ref: str) -> dict[str, Any]:
        return self._change(ref, "cancel", lambda: self.service.cancel(ref, by=self.actor))

    def suspend(self, ref: str) -> dict[str, Any]:
        return self._change(ref, "suspend", lambda: self.service.suspend(ref, by=self.actor))

    def resume(self, ref: str) -> dict[str, Any]:
        return self._change(ref, "resume", lambda: self.service.resume(ref, by=self.actor))

    def _change(self, ref: str, verb: str, fn: Callable[[], Any]) -> dict[str, Any]:
        from crossrail.control.service import summary

        if not self.everyone:
            self.own(ref, verb)
        run = self._audited(Action.CHANGE_RUN, ref, fn, verb=verb)
        return _obj("RunStateChange", run=summary(run, self.clock.now()))

    def logs(self, ref: str, attempt: int | None = None, part: str | None = None) -> dict[str, Any]:
        """Each attempt's log, with its pool and how it ended: of `attempt` only, of pipeline part `part` only."""
        from crossrail.errors import NotFoundError

        self._check(ref)
        run = self.service.get(ref)
        attempts = self.service.store.attempts(run.id)
        if part is not None:
            named = _part_of(run, part)
            attempts = [a for a in attempts if a.part == named]
        chosen = [a for a in attempts if attempt is None or a.number == attempt]
        if attempt is not None and not chosen:
            of = "" if part is None else f" of part {part}"
            raise NotFoundError(f"run {run.id} has no attempt {attempt}{of} (it has {len(attempts)})")
        return _obj(
            "Logs",
            run=run.id,
            state=run.state,
            reason=self.service.end_reason(run),
            attempts=[
                {
                    "attempt": a.number,
                    "part": a.part,
                    "pool": a.pool,
                    "state": a.state,
                    "exit_code": a.exit_code,
                    "signal": a.signal,
                    "reason": a.reason,
                    "log": self.local.executor.logs(run.id, a.number),
                }
                for a in chosen
            ],
        )

    def report(self) -> dict[str, Any]:
        """The event-log metrics, with each group's median reported `tokens_per_second` beside them."""
        from crossrail.metrics import percentile

        body = self.service.report().as_dict()
        samples = self.service.store.metric_by_group("tokens_per_second")
        for group in body["groups"]:
            values = samples.get((group["stage"], group["pool"]))
            group["tokens_per_second_p50"] = percentile(values, 50) if values else None
        every = [v for vs in samples.values() for v in vs]
        body["totals"]["tokens_per_second_p50"] = percentile(every, 50) if every else None
        return _obj("Report", **body)

    # --- sweeps and scaling fits (crossrail.control.ops.sweeps, docs/sweeps.md) ---------------------------

    def sweep_submit(
        self,
        text: str,
        *,
        source: str,
        grid: Sequence[str],
        sets: Sequence[str] = (),
        random: int | None = None,
        seed: int = 0,
    ) -> dict[str, Any]:
        """One run per point of the grid over the experiment written in `text`: every point is checked before
        any is created, then all are created in one transaction. The same file, sets, grid and draw name the
        same sweep, whose runs already there are answered (`created` false), nothing new submitted."""
        from crossrail.control.ops import sweeps
        from crossrail.errors import ForbiddenError, SpecError
        from crossrail.spec import apply_overrides, parse_document

        axes = sweeps.parse_grid(grid)
        pts = sweeps.points(axes, sample=random, seed=seed)
        sid = sweeps.sweep_id(text, sets, axes, random, seed)
        existing = sorted(self.service.store.runs_keyed(sweeps.KEY_PREFIX + sid + ":"), key=sweeps.point_index)
        if existing:
            seen = [r for r in existing if self.sight.sees(r.team)]
            if not seen:
                raise ForbiddenError(
                    f"sweep {sid} was submitted by another team; change the file, a --set or the --seed to submit "
                    "your own"
                )
            return self._sweep_submitted(sid, axes, seen, created=False)
        doc = parse_document(text, source)
        docs, problems = [], []
        for p in pts:
            try:
                docs.append(sweeps.labelled(apply_overrides(doc, [*sets, *p.sets(axes)]), sid, p))
            except SpecError as exc:
                problems.extend(exc.problems)
        if problems:
            raise SpecError(sweeps.grid_problems(problems, axes, pts))
        keys = [sweeps.member_key(sid, p) for p in pts]
        try:
            results = self._submit(lambda: docs, (), keys, f"sweep {sid}")
        except SpecError as exc:
            raise type(exc)(sweeps.grid_problems(exc.problems, axes, pts)) from None
        return self._sweep_submitted(sid, axes, [r.run for r in results], created=True)

    def _sweep_submitted(self, sid: str, axes: Sequence[Any], runs: Sequence[Any], *, created: bool) -> dict[str, Any]:
        from crossrail.control.ops import sweeps
        from crossrail.control.service import summary

        now = self.clock.now()
        return _obj(
            "SweepSubmitResult",
            id=sid,
            created=created,
            parameters=[a.key for a in axes],
            runs=[summary(r, now) | {"params": sweeps.point_of(r.spec)} for r in runs],
        )

    def _sweep_members(self, sid: str) -> list[Any]:
        """The runs of sweep `sid` this actor sees; NotFoundError as for a sweep that does not exist otherwise."""
        from crossrail.control.ops import sweeps
        from crossrail.errors import NotFoundError

        runs = [r for r in self.service.store.runs_keyed(sweeps.KEY_PREFIX + sid + ":") if self.sight.sees(r.team)]
        runs.sort(key=sweeps.point_index)
        if not runs:
            raise NotFoundError(f"no sweep {sid!r}; `crossrail sweep submit` prints a sweep's id")
        return runs

    def sweep_show(self, sid: str, *, metric: str = "loss", better: str | None = None) -> dict[str, Any]:
        """The sweep's members the actor sees, ranked by each one's last reported `metric` (`better`: lower or
        higher; by default the metric's own direction, lower for one crossrail does not name)."""
        from crossrail.control.ops import sweeps
        from crossrail.core.metric_names import METRIC_NAMES
        from crossrail.errors import UsageError

        if better is None:
            better = METRIC_NAMES[metric].better if metric in METRIC_NAMES else "lower"
        if better not in ("lower", "higher"):
            raise UsageError(f"--better {better!r}: say lower or higher")
        runs = self._sweep_members(sid)
        latest = self.service.store.latest_samples([r.id for r in runs], metric)
        pools = self.service.store.last_attempts([r.id for r in runs])
        members = []
        for r in runs:
            sample = latest.get(r.id)
            attempt = pools.get(r.id)
            members.append(
                {
                    "run": r.id,
                    "state": r.state,
                    "team": r.team,
                    "point": sweeps.point_index(r),
                    "params": sweeps.point_of(r.spec),
                    "metric": None if sample is None else float(sample["value"]),
                    "step": None if sample is None else sample.get("step"),
                    "pool": None if attempt is None else attempt.pool,
                }
            )
        parameters = list(dict.fromkeys(k for m in members for k in m["params"]))
        states: dict[str, int] = {}
        for m in members:
            states[m["state"]] = states.get(m["state"], 0) + 1
        return _obj(
            "Sweep",
            id=sid,
            experiment=runs[0].experiment,
            parameters=parameters,
            metric=metric,
            better=better,
            states=states,
            members=sweeps.ranked(members, better),
        )

    def sweep_cancel(self, sid: str) -> dict[str, Any]:
        """Cancel every member of the sweep that has not ended (each one as `cancel` does it)."""
        from crossrail.control.service import ACTIVE_STATES

        active = {str(s) for s in ACTIVE_STATES}
        members = self._sweep_members(sid)
        going = [r for r in members if r.state in active]
        if not self.everyone:
            for r in going:  # every member the actor may change, or none is cancelled
                self.own(r.id, "cancel")
        cancelled = [self.cancel(r.id)["run"] for r in going]
        ended = [{"id": r.id, "state": r.state} for r in members if r.state not in active]
        return _obj("SweepCancel", id=sid, cancelled=cancelled, ended=ended)

    def fit(
        self,
        sid: str,
        *,
        x: str = "spec.resources.chips",
        y: str = "tokens_per_second",
        target_tokens: float | None = None,
        at: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Amdahl and a power law fitted to each pool's measurements of the sweep's members (x: a path of the
        run's recorded experiment, y: the median of a reported metric over each member's attempts on the pool),
        with each fit's error and, given `target_tokens`, the time, chip-hours and cost to it at each chip count
        measured (or `at`). crossrail.metrics.scaling_fit."""
        from crossrail.errors import UsageError
        from crossrail.metrics.scaling_fit import AMDAHL, POWER
        from crossrail.metrics.scaling_fit import fit as fit_model

        if target_tokens is not None and not target_tokens > 0:
            raise UsageError(f"--target-tokens {target_tokens:g}: must be > 0")
        measured: dict[str, list[dict[str, Any]]] = {}
        for r in self._sweep_members(sid):
            for pool, point in self._measured(r, x, y).items():
                measured.setdefault(pool, []).append(point)
        if not measured:
            raise UsageError(f"no member of sweep {sid} reported {y!r} with a numeric {x}; nothing to fit")
        costs = {p.name: p.cost_per_chip_hour for p in self.service.fleet.spec.pools}
        pools = []
        for pool, pts in sorted(measured.items()):
            xs, ys = [p["x"] for p in pts], [p["y"] for p in pts]
            entry: dict[str, Any] = {"pool": pool, "points": pts, "fits": {}, "predictions": []}
            for model in (AMDAHL, POWER):
                try:
                    entry["fits"][model] = fit_model(model, xs, ys).as_dict()
                except ValueError as exc:
                    entry["fits"][model] = None
                    entry["unfitted"] = str(exc)
            if target_tokens is not None and entry["fits"][AMDAHL] is not None:
                chips = at or sorted({int(v) if v.is_integer() else v for v in xs})
                entry["predictions"] = _predictions(entry["fits"], chips, target_tokens, costs.get(pool))
            pools.append(entry)
        return _obj(
            "ScalingFit",
            sweep=sid,
            x=x,
            y=y,
            target_tokens=target_tokens,
            currency=self.service.fleet.spec.currency,
            pools=pools,
        )

    def _measured(self, run: Any, x: str, y: str) -> dict[str, dict[str, Any]]:
        """One point per pool the run reported `y` on: its `x` (its point's value, else its experiment's) and the
        median of what its attempts there reported."""
        from crossrail.control.ops import sweeps
        from crossrail.errors import UsageError
        from crossrail.metrics import percentile

        raw = sweeps.point_of(run.spec).get(x, sweeps.value_at(run.spec, x))
        if raw is None:
            return {}
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise UsageError(f"--x {x}: run {run.id} has {raw!r} there, not a number; name a numeric field")
        pools = {a.number: a.pool for a in self.service.store.attempts(run.id)}
        by_pool: dict[str, list[float]] = {}
        for s in self.service.store.metric_samples(run.id, y):
            pool = pools.get(int(s["attempt"] or 0))
            if pool is not None:
                by_pool.setdefault(pool, []).append(float(s["value"]))
        return {pool: {"run": run.id, "x": float(raw), "y": percentile(v, 50)} for pool, v in by_pool.items()}

    # --- checkpoints ----------------------------------------------------------------------------------

    def ckpt_ls(self, ref: str, *, verify: bool = True) -> dict[str, Any]:
        """A run's committed checkpoints, oldest first, each with its size and whether it verifies (`ckpt ls`)."""
        from crossrail.runtime import Checkpointer
        from crossrail.runtime.checkpoint import listing

        self._check(ref)
        ckpt = Checkpointer(self.service.get(ref).run_checkpoint_dir)
        items = listing(ckpt, verify=verify)
        return _obj("CheckpointList", uri=ckpt.uri, items=items)

    def ckpt_show(self, ref: str, *, step: int | None = None) -> dict[str, Any]:
        """The manifest of a run's checkpoint at `step` (default: its newest), tensors not verified."""
        from crossrail.runtime.reading import manifest_in

        store, name = self._checkpoints(ref, step)[-1]
        return _obj("CheckpointManifest", uri=store.child(name), manifest=manifest_in(store, name))

    def ckpt_verify(self, ref: str, *, every: bool = False) -> dict[str, Any]:
        """Check every tensor of a run's newest checkpoint (or of `every` one) against its checksums."""
        from crossrail.runtime.checkpoint import verification

        found = self._checkpoints(ref, None)
        results = [verification(store, name) for store, name in (found if every else found[-1:])]
        uri = self.service.get(ref).run_checkpoint_dir
        return _obj("CheckpointVerification", uri=uri, ok=all(r["ok"] for r in results), results=results)

    def _checkpoints(self, ref: str, step: int | None) -> list[tuple[Any, str]]:
        from crossrail.errors import NotFoundError
        from crossrail.runtime import Checkpointer
        from crossrail.runtime.stores import step_dirname

        self._check(ref)
        run = self.service.get(ref)
        ckpt = Checkpointer(run.run_checkpoint_dir)
        found = [info.step for info in ckpt.list(damaged=True) if step is None or info.step == step]
        if not found:
            which = "no committed checkpoint" if step is None else f"no checkpoint at step {step}"
            raise NotFoundError(f"run {run.id} has {which} in {run.run_checkpoint_dir}")
        return [(ckpt.store, step_dirname(s)) for s in found]

    # --- fleet (fleet writes, tokens and the audit log are admins' by the API's route table) -------------

    def fleet_show(self) -> dict[str, Any]:
        from crossrail.control.ops import fleetops

        return _obj("FleetStatus", **fleetops.status(self.service))

    def fleet_apply(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        from crossrail.control.ops import fleetops

        changes = self._audited(
            Action.FLEET_WRITE,
            str(path),
            lambda: fleetops.apply(self.service, self.local.workspace, Path(path)),
            verb="fleet_apply",
        )
        return _obj("FleetChange", changes=changes)

    def drain(self, pool: str, *, drained: bool = True) -> dict[str, Any]:
        from crossrail.control.ops import fleetops

        changes = self._audited(
            Action.FLEET_WRITE,
            pool,
            lambda: fleetops.set_drained(self.service, self.local.workspace, pool, drained),
            verb="drain" if drained else "undrain",
        )
        return _obj("FleetChange", changes=changes)

    def reserve(
        self, pool: str, *, chips: int, start: str, duration: str, team: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        from crossrail.control.ops import fleetops

        def go() -> Any:
            ws = self.local.workspace
            return fleetops.reserve(
                self.service, ws, pool=pool, chips=chips, start=start, duration=duration, team=team, name=name
            )

        return _obj("FleetChange", changes=self._audited(Action.FLEET_WRITE, pool, go, verb="reserve"))

    def reservations(self) -> dict[str, Any]:
        return _obj("ReservationList", reservations=self.fleet_show()["reservations"])

    # --- tokens, identity, usage and the audit log ------------------------------------------------------

    def token_create(
        self, *, team: str, role: str, user: str | None = None, expires: str | None = None
    ) -> dict[str, Any]:
        """A new token (its secret is in `token`, shown this once); `expires` like `30d`, none by default."""
        from crossrail.control import access
        from crossrail.core import parse_duration
        from crossrail.errors import UsageError

        try:
            expires_s = None if expires is None else parse_duration(expires)
        except ValueError as exc:
            raise UsageError(f"--expires: {exc}") from None

        def go() -> dict[str, Any]:
            return access.create_token(
                self.service.store,
                team=team,
                role_name=role,
                user=user,
                expires_s=expires_s,
                by=self._who(),
                now=self.clock.now(),
            )

        row = self._audited(Action.TOKEN_ADMIN, f"team {team}", go, verb="token_create")
        return _obj("Token", **self._token_view(row))

    def tokens(self) -> dict[str, Any]:
        return _obj("TokenList", tokens=[self._token_view(r) for r in self.service.store.tokens()])

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        row = self._audited(
            Action.TOKEN_ADMIN,
            token_id,
            lambda: self.service.store.revoke_token(token_id, self.clock.now()),
            verb="token_revoke",
        )
        return _obj("Token", **self._token_view(row))

    def token_rotate(self, token_id: str) -> dict[str, Any]:
        from crossrail.control import access

        def go() -> dict[str, Any]:
            return access.rotate_token(self.service.store, token_id, by=self._who(), now=self.clock.now())

        return _obj("Token", **self._token_view(self._audited(Action.TOKEN_ADMIN, token_id, go, verb="token_rotate")))

    def _who(self) -> str:
        """Who makes a token: the request's token user, else the OS user."""
        from crossrail.control import access

        return self.actor.who if self.actor is not None else access.local_actor().who

    def _token_view(self, row: dict[str, Any]) -> dict[str, Any]:
        from crossrail.control.access import token_state

        view = {k: v for k, v in row.items() if k != "secret_sha256"}
        return view | {"state": token_state(row, self.clock.now())}

    def whoami(self) -> dict[str, Any]:
        """Who acts: a request's token, else locally an admin under the OS user (a claimed $CROSSRAIL_USER apart)."""
        from crossrail.control.access import local_actor

        a = self.actor or local_actor(self.local.workspace.root)
        return _obj(
            "Identity", user=a.who, team=a.team, role=str(a.role), token=a.token_id, origin=a.origin, claimed=a.claimed
        )

    def audit(self, *, since: str | None = None, team: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """The audit log, oldest first; `since` a duration back from now (`2h`) or epoch seconds."""
        self._named_team(team)
        return _obj("AuditLog", entries=self.service.store.audit(since=self._since(since), team=team, limit=limit))

    def usage(self, *, since: str | None = None, team: str | None = None) -> dict[str, Any]:
        """Chip-hours and cost per team x stage x pool from the event log (crossrail.metrics.usage), over the
        last `since` (a duration, e.g. 30d; all time by default), of `team` only when given (a team's token:
        its own), with team totals."""
        from crossrail.control.budgets import USAGE_EVENTS
        from crossrail.metrics.usage import by_team, usage

        team = self._team_filter(team)
        self._named_team(team)
        now, start = self.clock.now(), self._since(since)
        rows = usage(self.service.store.events(types=[str(t) for t in USAGE_EVENTS]), now, start)
        rows = [r for r in rows if team is None or r.team == team]
        totals = [{"team": t, "chip_hours": h, "cost": c} for t, (h, c) in sorted(by_team(rows).items())]
        currency = self.service.fleet.spec.currency  # of every cost
        return _obj("Usage", since=start, until=now, currency=currency, rows=[r.as_dict() for r in rows], teams=totals)

    def _since(self, since: str | None) -> float | None:
        from crossrail.core import parse_duration
        from crossrail.errors import UsageError

        if since is None:
            return None
        try:
            return self.clock.now() - parse_duration(since)  # type: ignore[no-any-return]
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None

    # --- the local audit log ---------------------------------------------------------------------------

    def _audited(self, action: Action, target: str | None, fn: Callable[[], Any], *, verb: str | None = None) -> Any:
        """`fn()`, recorded in the audit log under the OS user when these operations audit their writes."""
        if not self.audit_writes:
            return fn()
        from crossrail.control.access import audit_row, local_actor
        from crossrail.errors import CrossrailError, ForbiddenError

        root = self.local.workspace.root
        actor, what = local_actor(root), verb or str(action)
        try:
            if not actor.admin:
                raise ForbiddenError(
                    f"{actor.who} does not own the workspace {root}, so may not {what} here; its "
                    "owner (or root) may, or a server's token of your team may"
                )
            result = fn()
        except CrossrailError as exc:
            if self.local.opened:  # the store opened: a refusal of this write is recorded
                row = audit_row(
                    actor,
                    what,
                    now=self.clock.now(),
                    result="failed",
                    target=target,
                    detail=str(exc),
                    team=self._audit_team(action, target, None),
                )
                self.service.store.append_audit(row)
            raise
        listed = result if isinstance(result, list) else [result]
        uids = [getattr(getattr(r, "run", r), "uid", None) for r in listed]
        ids = [r for r in (getattr(getattr(r, "run", r), "id", None) for r in listed) if isinstance(r, str)]
        row = audit_row(
            actor,
            what,
            now=self.clock.now(),
            result="ok",
            target=",".join(ids) if ids and action in (Action.SUBMIT, Action.CHANGE_RUN) else target,
            run_uid=uids[0] if len(uids) == 1 and isinstance(uids[0], str) else None,
            team=self._audit_team(action, target, result),
            detail="; ".join(c for r in listed if isinstance(c := getattr(r, "crossing", None), str)) or None,
        )
        self.service.store.append_audit(row)
        return result

    def _audit_team(self, action: Action, target: str | None, result: Any) -> str:
        """The team a local write's audit row names: the team of the run(s) it wrote (or, when it failed, of the
        run it named), the team of the token it made or changed; `local` when the write belongs to no one team
        (the fleet, several teams' runs, a file that did not parse)."""
        from crossrail.control.access import LOCAL_TEAM

        found: set[str | None] = set()
        if action in (Action.SUBMIT, Action.CHANGE_RUN):
            if result is not None:
                found = {
                    getattr(getattr(r, "run", r), "team", None)
                    for r in (result if isinstance(result, list) else [result])
                }
            elif target is not None and self.local.opened:
                run = self.service.store.find_run(target)
                found = {run.team} if run is not None else set()
        elif action is Action.TOKEN_ADMIN and isinstance(result, dict):
            found = {result.get("team")}
        (team,) = found if len(found) == 1 else (None,)
        return team if isinstance(team, str) and team else LOCAL_TEAM


def _redacted(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k in QUEUE_FIELDS} | {"hidden": True}


def _part_of(run: Any, part: str) -> str:
    """`part` when pipeline `run` has a part of that name; else a UsageError for a run without parts, or a
    NotFoundError naming its parts (and the close one)."""
    from crossrail.errors import NotFoundError, UsageError
    from crossrail.spec.problems import did_you_mean

    parts = sorted((run.spec.get("spec") or {}).get("parts") or {})
    if not parts:
        raise UsageError(f"run {run.id} is not a pipeline: it has no parts to select; leave out --part")
    if part not in parts:
        close = did_you_mean(part, parts)
        hint = f"{close} " if close else ""
        raise NotFoundError(f"run {run.id} has no part {part!r}; {hint}its parts: {', '.join(parts)}")
    return part


def _predictions(
    fits: dict[str, Any], chips: Sequence[float], tokens: float, cost_per_chip_hour: float | None
) -> list[dict[str, Any]]:
    """Throughput, time (s), chip-hours and cost to `tokens` at each chip count, by each fitted model."""
    from crossrail.metrics.scaling_fit import Fit, to_target

    rows = []
    for n in chips:
        row: dict[str, Any] = {"chips": n}
        for model, f in fits.items():
            if f is None:
                continue
            fitted = Fit(f["model"], f["params"], f["stderr"], f["rms"], f["points"])
            reached = {k: v for k, v in to_target(fitted, n, tokens).items() if k != "chips"}
            hours = reached["chip_hours"]
            cost = None if cost_per_chip_hour is None or hours is None else hours * cost_per_chip_hour
            row[model] = reached | {"cost": cost}
        rows.append(row)
    return rows
