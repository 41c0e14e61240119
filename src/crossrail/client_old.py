"""The Python client: the one contract the CLI (and later the REST API) speaks.

Every method returns a JSON-able object carrying `"apiVersion": "crossrail/v1"` and a `kind`; the CLI's
`--json` output is exactly this object (docs/cli.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from crossrail.control import workspace as ws_mod
from crossrail.core import Clock, SystemClock
from crossrail.core.access import Action, Actor
from crossrail.core.api import API_VERSION, QUEUE_PAGE, api_object
from crossrail.errors import SpecError

_obj = api_object
__all__ = ["API_VERSION", "Client"]


def _experiment_names(paths: Sequence[str | os.PathLike[str]]) -> frozenset[str]:
    """metadata.name of every file in `paths` that reads as an Experiment (the others are left to validate)."""
    from crossrail.spec import load_document

    names = set()
    for path in paths:
        try:
            data = load_document(path).data
        except SpecError:
            continue
        name = (data.get("metadata") or {}).get("name") if data.get("kind") == "Experiment" else None
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


class Client:
    """A crossrail workspace, opened lazily: nothing is read until a method needs it.

    `Client(server=URL)` (or `CROSSRAIL_SERVER` when neither `home` nor `server` is given) talks to a
    `crossrail serve` instead, with the same methods and return values (crossrail.client_http); `server=""`
    opens the local workspace whatever the environment says.
    """

    def __new__(cls, home: str | os.PathLike[str] | None = None, *, server: str | None = None, **_: Any) -> Client:
        url = server if server is not None or home is not None else os.environ.get("CROSSRAIL_SERVER")
        if cls is Client and url:
            from crossrail.client_http import RemoteClient

            return super().__new__(RemoteClient)
        return super().__new__(cls)

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        cwd: Path | None = None,
        policy: str | os.PathLike[str] | None = None,
        server: str | None = None,
        token: str | None = None,
        audit_writes: bool = True,
    ) -> None:
        """`audit_writes`: record this client's writes in the audit log under the OS user (the local CLI);
        the API server passes False and audits each request under its token instead. `token` is for a server."""
        self.cwd = (cwd or Path.cwd()).resolve()
        self.workspace = ws_mod.find(home, self.cwd)
        self.clock = clock or SystemClock()
        self._policy_path = Path(policy) if policy else None
        self.audit_writes = audit_writes

    # --- workspace -----------------------------------------------------------------------------

    @staticmethod
    def init(directory: str | os.PathLike[str] = ".", *, force: bool = False) -> dict[str, Any]:
        from crossrail.spec import ARTICLE_POLICY_YAML

        ws, files = ws_mod.init(directory, ARTICLE_POLICY_YAML, force=force)
        return _obj("Workspace", path=str(ws.root), files=[str(p.relative_to(ws.root)) for p in files])

    @cached_property
    def policy(self) -> Any:
        from crossrail.spec import default_policy, load_policy

        if self._policy_path is not None:
            return load_policy(self._policy_path)
        if self.workspace.policy_path.is_file():
            return load_policy(self.workspace.policy_path)
        return default_policy()

    def load_fleet(self) -> Any:
        """The workspace's fleet as the file says now (the service caches it until it is changed)."""
        from crossrail.spec import load_fleet

        return load_fleet(self.workspace.check().fleet_path)

    @property
    def fleet(self) -> Any:
        return self.service.fleet

    @cached_property
    def service(self) -> Any:
        from crossrail.control.service import Service

        self.workspace.check()
        service = Service(ws_mod.open_store(self.workspace), self.load_fleet, lambda: self.policy, self.clock)
        service.workspace_dir = self.workspace.root
        return service

    @cached_property
    def executor(self) -> Any:
        """The executor router (crossrail.control.router): each attempt runs on its pool's backend."""
        from crossrail.control.router import Router

        return Router(self.workspace.check().root, lambda: self.service.fleet, self._pool_of, run_uid=self._run_uid)

    def _pool_of(self, run: str, attempt: int) -> str | None:
        return next((a.pool for a in self.service.store.attempts(run) if a.number == attempt), None)

    def _run_uid(self, run: str) -> str | None:
        found = self.service.store.find_run(run)
        return found.uid if found is not None and found.id == run else None

    def agent(self, config: Any = None) -> Any:
        """The reconcile agent over this workspace (crossrail.control.agent.Agent); run it under `agent_lock`."""
        from crossrail.control.agent import Agent

        agent = Agent(self.service, self.executor, self.workspace.root / "reports", config)
        agent.fleet_path = self.workspace.fleet_path
        agent.workspace_root = self.workspace.root
        return agent

    def close(self) -> None:
        if "service" in self.__dict__:
            self.service.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- validate and submit -------------------------------------------------------------------

    def validate(self, paths: Sequence[str | os.PathLike[str]], *, offline: bool = False) -> dict[str, Any]:
        """Every problem in `paths`; with a workspace (and not `offline`), also every check submit makes
        against it: fleet feasibility, parent, dataset reachability, code commit (Service.preflight)."""
        from crossrail.spec import validate_files

        warnings: list[str] = []
        check = None
        if not offline and self.has_workspace():
            # Experiments validated together may name each other as parents, as init's examples do.
            together = _experiment_names(paths)

            def check(doc: Any, exp: Any) -> list[Any]:
                pre = self.service.preflight(doc, exp, self.cwd, together=together)
                warnings.extend(pre.warnings)
                return list(pre.problems)

        problems = validate_files([str(p) for p in paths], self.policy, check)
        return _obj(
            "ValidationResult",
            valid=not problems,
            files=[str(p) for p in paths],
            workspace=None if check is None else str(self.workspace.root),
            problems=[p.as_dict() for p in problems],
            warnings=list(dict.fromkeys(warnings)),
        )

    def has_workspace(self) -> bool:
        """Whether this client found a workspace (a `.crossrail/` with its fleet and policy)."""
        ws = self.workspace
        return ws.fleet_path.is_file() and ws.policy_path.is_file()

    def submit(
        self,
        path: str | os.PathLike[str],
        *,
        sets: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        return self.submit_many([path], sets=sets, idempotency_keys=[idempotency_key])["results"][0]  # type: ignore[no-any-return]

    def submit_many(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        sets: Sequence[str] = (),
        idempotency_keys: Sequence[str | None] | None = None,
    ) -> dict[str, Any]:
        """Submit several files at once: all are checked first, then created in one transaction."""
        from crossrail.spec import load_document

        docs, problems = [], []
        for p in paths:
            try:
                docs.append(load_document(p))
            except SpecError as exc:
                problems.extend(exc.problems)
        if problems:
            raise SpecError(problems)

        def go() -> Any:
            return self.service.submit_many(docs, sets=sets, idempotency_keys=idempotency_keys, cwd=self.cwd)

        results = self._audited(Action.SUBMIT, ",".join(str(p) for p in paths), go)
        return _obj("SubmitResults", results=[self._submitted(r) for r in results])

    def submit_documents(
        self, docs: Sequence[Any], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> dict[str, Any]:
        def go() -> Any:
            return self.service.submit_many(docs, idempotency_keys=idempotency_keys, cwd=self.cwd)

        results = self._audited(Action.SUBMIT, None, go)
        return _obj("SubmitResults", results=[self._submitted(r) for r in results])

    def resubmit(
        self,
        ref: str,
        *,
        resume: bool = False,
        from_weights: bool = False,
        idempotency_key: str | None = None,
        actor: Actor | None = None,
    ) -> dict[str, Any]:
        def go() -> Any:
            key, weights = idempotency_key, from_weights
            return self.service.resubmit(ref, resume=resume, from_weights=weights, idempotency_key=key, actor=actor)

        return self._submitted(self._audited(Action.SUBMIT, ref, go, verb="resubmit"))

    def _audited(self, action: Action, target: str | None, fn: Callable[[], Any], *, verb: str | None = None) -> Any:
        """`fn()`, recorded in the audit log under the OS user when this client audits its writes."""
        if not self.audit_writes:
            return fn()
        from crossrail.control.access import audit_row, local_actor
        from crossrail.errors import CrossrailError, ForbiddenError

        actor, what = local_actor(self.workspace.root), verb or str(action)
        try:
            if not actor.admin:
                raise ForbiddenError(
                    f"{actor.who} does not own the workspace {self.workspace.root}, so may not {what} here; its "
                    "owner (or root) may, or a server's token of your team may"
                )
            result = fn()
        except CrossrailError as exc:
            if "service" in self.__dict__:  # the store opened: a refusal of this write is recorded
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
        runs = [getattr(getattr(r, "run", r), "id", None) for r in (result if isinstance(result, list) else [result])]
        ids = [r for r in runs if isinstance(r, str)]
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
            elif target is not None and "service" in self.__dict__:
                run = self.service.store.find_run(target)
                found = {run.team} if run is not None else set()
        elif action is Action.TOKEN_ADMIN and isinstance(result, dict):
            found = {result.get("team")}
        (team,) = found if len(found) == 1 else (None,)
        return team if isinstance(team, str) and team else LOCAL_TEAM

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

    # --- runs ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return _obj("Status", workspace=str(self.workspace.root), **self.service.status())

    def show(self, ref: str) -> dict[str, Any]:
        return _obj("Run", **self.service.show(ref))

    def queue(self, *, limit: int = QUEUE_PAGE, offset: int = 0) -> dict[str, Any]:
        """Pending runs per queue with estimated starts: `limit` runs of each queue from position `offset` + 1
        (0: every one), with each queue's total."""
        return _obj("QueueList", **self.service.queue(limit=limit, offset=offset))

    def submit_text(
        self,
        text: str,
        *,
        source: str,
        sets: Sequence[str] = (),
        idempotency_key: str | None = None,
        actor: Actor | None = None,
    ) -> dict[str, Any]:
        """Submit the experiment written in `text` (YAML or JSON); its problems name `source`. With a token's
        `actor` (the API), the run is the actor's team's (Service.submit_many)."""
        from crossrail.spec import parse_document

        def go() -> Any:
            return self.service.submit_many(
                [parse_document(text, source)], sets=sets, idempotency_keys=[idempotency_key], cwd=self.cwd, actor=actor
            )

        return self._submitted(self._audited(Action.SUBMIT, source, go)[0])

    def place_text(
        self, text: str, *, source: str, sets: Sequence[str] = (), actor: Actor | None = None
    ) -> dict[str, Any]:
        """`place` for an experiment written in `text`; with a token's `actor`, a parent is named as it sees runs."""
        from crossrail.spec import parse_document

        return _obj("Placement", **self.service.place(parse_document(text, source), sets, self.cwd, actor=actor))

    def place(self, path: str | os.PathLike[str], *, sets: Sequence[str] = ()) -> dict[str, Any]:
        """Where the experiment in `path` would be placed if submitted now, and why (nothing is written)."""
        from crossrail.spec import load_document

        return _obj("Placement", **self.service.place(load_document(path), sets, self.cwd))

    def events(
        self,
        ref: str | None = None,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        if types:
            run_id = self.service.get(ref).id if ref else None
            events = self.service.store.events(run=run_id, after_seq=after_seq, types=types, limit=limit)
        else:
            events = self.service.events(ref, after_seq=after_seq, limit=limit)
        return _obj("EventList", events=[e.as_dict() for e in events])

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

    def cancel(self, ref: str, *, actor: Actor | None = None) -> dict[str, Any]:
        return self._changed(
            self._audited(Action.CHANGE_RUN, ref, lambda: self.service.cancel(ref, by=actor), verb="cancel")
        )

    def suspend(self, ref: str, *, actor: Actor | None = None) -> dict[str, Any]:
        return self._changed(
            self._audited(Action.CHANGE_RUN, ref, lambda: self.service.suspend(ref, by=actor), verb="suspend")
        )

    def resume(self, ref: str, *, actor: Actor | None = None) -> dict[str, Any]:
        return self._changed(
            self._audited(Action.CHANGE_RUN, ref, lambda: self.service.resume(ref, by=actor), verb="resume")
        )

    def _changed(self, run: Any) -> dict[str, Any]:
        from crossrail.control.service import summary

        return _obj("RunStateChange", run=summary(run, self.clock.now()))

    def logs(self, ref: str, attempt: int | None = None) -> dict[str, Any]:
        run = self.service.get(ref)
        attempts = self.service.store.attempts(run.id)
        chosen = [a for a in attempts if attempt is None or a.number == attempt]
        if attempt is not None and not chosen:
            from crossrail.errors import NotFoundError

            raise NotFoundError(f"run {run.id} has no attempt {attempt} (it has {len(attempts)})")
        return _obj(
            "Logs",
            run=run.id,
            state=run.state,
            reason=self.service.end_reason(run),
            attempts=[
                {
                    "attempt": a.number,
                    "pool": a.pool,
                    "state": a.state,
                    "exit_code": a.exit_code,
                    "signal": a.signal,
                    "reason": a.reason,
                    "log": self.executor.logs(run.id, a.number),
                }
                for a in chosen
            ],
        )

    def wait(self, ref: str, *, timeout_s: float | None = None, on_tick: Any = None) -> dict[str, Any]:
        """Block until the run ends, running an agent in this process when none runs on the workspace."""
        import time

        from crossrail.control.agent import agent_lock
        from crossrail.errors import AgentRunningError, WorkspaceError

        run_id = self.service.get(ref).id
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def done() -> bool:
            if deadline is not None and time.monotonic() > deadline:
                raise WorkspaceError(f"run {run_id} did not end within {timeout_s:g}s; it keeps running")
            return self.service.store.get_run(run_id).state in ("succeeded", "failed", "cancelled")

        try:
            with agent_lock(self.workspace.root):
                self.agent().run(should_stop=done, on_tick=on_tick)
        except AgentRunningError:
            while not done():
                time.sleep(0.5)
        return self.show(run_id)

    # --- checkpoints ----------------------------------------------------------------------------

    def ckpt_ls(self, ref: str, *, verify: bool = True) -> dict[str, Any]:
        """A run's committed checkpoints, oldest first, each with its size and whether it verifies (`ckpt ls`)."""
        from crossrail.runtime import Checkpointer, InvalidCheckpoint, check

        ckpt = Checkpointer(self.service.get(ref).run_checkpoint_dir)
        items = []
        for info in ckpt.list(damaged=True):
            item: dict[str, Any] = {"step": info.step, "uri": info.uri, "sizeBytes": ckpt.size(info.step)}
            item |= {"verified": None, "problem": None}
            try:
                if verify:
                    ckpt.verify(info.step)
                    item["verified"] = True
                else:
                    check(info.uri)
            except InvalidCheckpoint as exc:
                item |= {"verified": False, "problem": str(exc)}
            items.append(item)
        return _obj("CheckpointList", uri=ckpt.uri, items=items)

    def ckpt_show(self, ref: str, *, step: int | None = None) -> dict[str, Any]:
        """The manifest of a run's checkpoint at `step` (default: its newest), tensors not verified."""
        from crossrail.runtime.reading import manifest_in

        store, name = self._checkpoints(ref, step)[-1]
        return _obj("CheckpointManifest", uri=store.child(name), manifest=manifest_in(store, name))

    def ckpt_verify(self, ref: str, *, every: bool = False) -> dict[str, Any]:
        """Check every tensor of a run's newest checkpoint (or of `every` one) against its checksums."""
        from crossrail.runtime import CheckpointError
        from crossrail.runtime.reading import read

        found = self._checkpoints(ref, None)
        results = []
        for store, name in found if every else found[-1:]:
            result: dict[str, Any] = {"uri": store.child(name), "step": None, "ok": False, "problem": None}
            try:
                result["step"] = read(store, name, load=False)[1]["step"]
                result["ok"] = True
            except (CheckpointError, OSError) as exc:
                result["problem"] = str(exc)
            results.append(result)
        uri = self.service.get(ref).run_checkpoint_dir
        return _obj("CheckpointVerification", uri=uri, ok=all(r["ok"] for r in results), results=results)

    def _checkpoints(self, ref: str, step: int | None) -> list[tuple[Any, str]]:
        from crossrail.errors import NotFoundError
        from crossrail.runtime import Checkpointer
        from crossrail.runtime.stores import step_dirname

        run = self.service.get(ref)
        ckpt = Checkpointer(run.run_checkpoint_dir)
        found = [info.step for info in ckpt.list(damaged=True) if step is None or info.step == step]
        if not found:
            which = "no committed checkpoint" if step is None else f"no checkpoint at step {step}"
            raise NotFoundError(f"run {run.id} has {which} in {run.run_checkpoint_dir}")
        return [(ckpt.store, step_dirname(s)) for s in found]

    # --- fleet ----------------------------------------------------------------------------------

    def fleet_show(self) -> dict[str, Any]:
        from crossrail.control import fleetops

        return _obj("FleetStatus", **fleetops.status(self.service))

    def fleet_apply(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        from crossrail.control import fleetops

        changes = self._audited(
            Action.FLEET_WRITE,
            str(path),
            lambda: fleetops.apply(self.service, self.workspace, Path(path)),
            verb="fleet_apply",
        )
        return _obj("FleetChange", changes=changes)

    def drain(self, pool: str, *, drained: bool = True) -> dict[str, Any]:
        from crossrail.control import fleetops

        changes = self._audited(
            Action.FLEET_WRITE,
            pool,
            lambda: fleetops.set_drained(self.service, self.workspace, pool, drained),
            verb="drain" if drained else "undrain",
        )
        return _obj("FleetChange", changes=changes)

    def reserve(
        self, pool: str, *, chips: int, start: str, duration: str, team: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        from crossrail.control import fleetops

        def go() -> Any:
            return fleetops.reserve(
                self.service,
                self.workspace,
                pool=pool,
                chips=chips,
                start=start,
                duration=duration,
                team=team,
                name=name,
            )

        return _obj("FleetChange", changes=self._audited(Action.FLEET_WRITE, pool, go, verb="reserve"))

    def reservations(self) -> dict[str, Any]:
        return _obj("ReservationList", reservations=self.fleet_show()["reservations"])

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

    # --- tokens, identity and the audit log -------------------------------------------------------

    def token_create(
        self, *, team: str, role: str, user: str | None = None, expires: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """A new token (its secret is in `token`, shown this once); `expires` like `30d`, none by default.
        `by`: who made it (default: the OS user)."""
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
                by=by or access.local_actor().who,
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

    def token_rotate(self, token_id: str, *, by: str | None = None) -> dict[str, Any]:
        from crossrail.control import access

        def go() -> dict[str, Any]:
            who = by or access.local_actor().who
            return access.rotate_token(self.service.store, token_id, by=who, now=self.clock.now())

        return _obj("Token", **self._token_view(self._audited(Action.TOKEN_ADMIN, token_id, go, verb="token_rotate")))

    def _token_view(self, row: dict[str, Any]) -> dict[str, Any]:
        from crossrail.control.access import token_state

        view = {k: v for k, v in row.items() if k != "secret_sha256"}
        return view | {"state": token_state(row, self.clock.now())}

    def whoami(self, actor: Actor | None = None) -> dict[str, Any]:
        """Who this client acts as: locally an admin under the OS user (a claimed $CROSSRAIL_USER apart)."""
        from crossrail.control.access import local_actor

        a = actor or local_actor(self.workspace.root)
        return _obj(
            "Identity", user=a.who, team=a.team, role=str(a.role), token=a.token_id, origin=a.origin, claimed=a.claimed
        )

    def audit(self, *, since: str | None = None, team: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """The audit log, oldest first; `since` a duration back from now (`2h`) or epoch seconds."""
        return _obj("AuditLog", entries=self.service.store.audit(since=self._since(since), team=team, limit=limit))

    def usage(self, *, since: str | None = None, team: str | None = None) -> dict[str, Any]:
        """Chip-hours and cost per team x stage x pool from the event log (crossrail.metrics.usage), over the
        last `since` (a duration, e.g. 30d; all time by default), of `team` only when given, with team totals."""
        from crossrail.control.budgets import USAGE_EVENTS
        from crossrail.metrics.usage import by_team, usage

        now, start = self.clock.now(), self._since(since)
        rows = usage(self.service.store.events(types=[str(t) for t in USAGE_EVENTS]), now, start)
        rows = [r for r in rows if team is None or r.team == team]
        totals = [{"team": t, "chip_hours": h, "cost": c} for t, (h, c) in sorted(by_team(rows).items())]
        return _obj("Usage", since=start, until=now, rows=[r.as_dict() for r in rows], teams=totals)

    def _since(self, since: str | None) -> float | None:
        from crossrail.core import parse_duration
        from crossrail.errors import UsageError

        if since is None:
            return None
        try:
            return self.clock.now() - parse_duration(since)
        except ValueError as exc:
            raise UsageError(f"--since: {exc}") from None
