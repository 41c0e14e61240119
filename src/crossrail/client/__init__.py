"""The Python client: the one contract the CLI and the REST API speak, over any transport.

Every method returns a JSON-able object carrying `"apiVersion": "crossrail/v1"` and a `kind`; the CLI's
`--json` output is exactly this object (docs/cli.md). Each operation is written once, in
`crossrail.control.ops.operations.Operations`; a method here names it and the `/v1` request that asks a server
for it, and the client's transport (crossrail.client.transport) answers it in this process or over HTTP.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.client.transport import ASGITransport, Call, HTTPTransport, LocalTransport, Transport
from crossrail.core.api import API_VERSION, QUEUE_PAGE, api_object
from crossrail.errors import SpecError, UsageError

if TYPE_CHECKING:
    from crossrail.control.ops.local import Local
    from crossrail.core import Clock

__all__ = ["API_VERSION", "ASGITransport", "Call", "Client", "HTTPTransport", "LocalTransport", "Transport"]

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


def _transport(
    home: str | os.PathLike[str] | None,
    server: str | None,
    *,
    token: str | None,
    clock: Clock | None,
    cwd: Path | None,
    policy: str | os.PathLike[str] | None,
    audit_writes: bool,
) -> Transport:
    """The transport the arguments name: a server at `server` (or $CROSSRAIL_SERVER when neither `home` nor
    `server` is given), else the workspace at `home` (or found from `cwd`)."""
    if server == "":
        warnings.warn(
            "Client(server='') is deprecated and goes in the next release: Client.local(home) opens the "
            "workspace whatever $CROSSRAIL_SERVER says",
            DeprecationWarning,
            stacklevel=3,
        )
    url = server if server is not None or home is not None else os.environ.get("CROSSRAIL_SERVER")
    if not url:
        return LocalTransport(home, clock=clock, cwd=cwd, policy=policy, audit_writes=audit_writes)
    if policy is not None:
        raise UsageError(f"--policy {policy} lints against a workspace; a server lints with its own policy")
    return HTTPTransport(url, token=token or os.environ.get("CROSSRAIL_TOKEN") or None)


class Client:
    """A crossrail workspace, here or behind a server; nothing is read until a method needs it.

    `Client(home)` opens the workspace at `home` (else the nearest `.crossrail/` above `cwd`) in this process;
    `Client(server=URL, token=...)` (or `$CROSSRAIL_SERVER` and `$CROSSRAIL_TOKEN` when neither `home` nor
    `server` is given) asks a `crossrail serve`; `Client.local()` opens the workspace whatever the environment
    says; `Client(transport=...)` takes any transport (an `ASGITransport` over `create_app(home)` in tests). The
    methods and their values are the same over each. What only a workspace of this machine has (its store,
    executors, agents, fleet and policy files) is `require_local`'s, and a UsageError over a server.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        server: str | None = None,
        token: str | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        cwd: Path | None = None,
        policy: str | os.PathLike[str] | None = None,
        audit_writes: bool = True,
    ) -> None:
        """`audit_writes`: record this client's writes in the audit log under the OS user (the local CLI).
        `token` (else $CROSSRAIL_TOKEN) goes with every request to a server as `Authorization: Bearer ...`."""
        if transport is None:
            transport = _transport(
                home, server, token=token, clock=clock, cwd=cwd, policy=policy, audit_writes=audit_writes
            )
        self.transport: Transport = transport

    @classmethod
    def local(
        cls,
        home: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        cwd: Path | None = None,
        policy: str | os.PathLike[str] | None = None,
        audit_writes: bool = True,
    ) -> Client:
        """The workspace at `home` (else found from `cwd`) in this process, whatever $CROSSRAIL_SERVER says."""
        return cls(transport=LocalTransport(home, clock=clock, cwd=cwd, policy=policy, audit_writes=audit_writes))

    def _send(self, call: Call) -> dict[str, Any]:
        answer: dict[str, Any] = self.transport.send(call)  # every operation answers one crossrail/v1 object
        return answer

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- what only a workspace of this machine has ---------------------------------------------------

    def require_local(self, what: str) -> Local:
        """The workspace this client opens in this process; UsageError saying `what` needs it over a server."""
        local = self.transport.local
        if local is None:
            raise UsageError(
                f"{what} works on a workspace of this machine, not through a server; run it beside the "
                "workspace, without --server (and with $CROSSRAIL_SERVER unset)"
            )
        return local

    @property
    def is_local(self) -> bool:
        """Whether this client opens its workspace in this process (else it asks a server)."""
        return self.transport.local is not None

    @property
    def workspace(self) -> Any:
        return self.require_local("the workspace's directory").workspace

    @property
    def service(self) -> Any:
        return self.require_local("the workspace's store").service

    @property
    def executor(self) -> Any:
        """The executor router (crossrail.control.router): each attempt runs on its pool's backend."""
        return self.require_local("the executors").executor

    def agent(self, config: Any = None) -> Any:
        """The reconcile agent over this workspace (crossrail.control.agent.loop.Agent); run it under `agent_lock`."""
        return self.require_local("an agent").agent(config)

    @property
    def policy(self) -> Any:
        """The placement policy the workspace's experiments are linted against (`--policy`, else its own)."""
        return self.require_local("the placement policy file").policy

    def load_fleet(self) -> Any:
        """The workspace's fleet as the file says now (the service caches it until it is changed)."""
        return self.require_local("the fleet file").load_fleet()

    @property
    def fleet(self) -> Any:
        return self.service.fleet

    @property
    def clock(self) -> Any:
        local = self.transport.local
        if local is not None:
            return local.clock
        from crossrail.core import SystemClock

        return SystemClock()

    @property
    def cwd(self) -> Path:
        local = self.transport.local
        return local.cwd if local is not None else Path.cwd().resolve()

    def has_workspace(self) -> bool:
        """Whether this client found a workspace of this machine (a `.crossrail/` with its fleet and policy)."""
        local = self.transport.local
        return local is not None and local.has_workspace()

    # --- workspace -----------------------------------------------------------------------------

    @staticmethod
    def init(directory: str | os.PathLike[str] = ".", *, force: bool = False) -> dict[str, Any]:
        from crossrail.control.ops import workspace as ws_mod
        from crossrail.spec import ARTICLE_POLICY_YAML

        ws, files = ws_mod.init(directory, ARTICLE_POLICY_YAML, force=force)
        return api_object("Workspace", path=str(ws.root), files=[str(p.relative_to(ws.root)) for p in files])

    # --- validate and submit -------------------------------------------------------------------

    def validate(self, paths: Sequence[str | os.PathLike[str]], *, offline: bool = False) -> dict[str, Any]:
        """Every problem in `paths`; with a workspace (and not `offline`), also every check submit makes against
        it: fleet feasibility, parent, dataset reachability, code commit (Service.preflight). Over a server only
        `offline` checks, against the default policy (`place` asks a server for its checks)."""
        from crossrail.spec import default_policy
        from crossrail.spec.validate import check_files

        warned: list[str] = []
        check = None
        local = self.transport.local
        if local is None and not offline:
            raise UsageError(
                "validate checks files against a workspace of this machine; over a server, `crossrail place FILE` "
                "runs every check submit makes there, and `crossrail validate --offline FILE` checks the files alone"
            )
        if local is None:
            policy = default_policy()
            warned.append("checked against the default policy: a server lints against its own policy at submit")
        else:
            policy = local.policy
        if not offline and local is not None and local.has_workspace():
            # Experiments validated together may name each other as parents, as init's examples do.
            together = _experiment_names(paths)
            service = local.service

            def check(doc: Any, exp: Any) -> list[Any]:
                pre = service.preflight(doc, exp, local.cwd, together=together)
                warned.extend(pre.warnings)
                return list(pre.problems)

        found = check_files([str(p) for p in paths], policy, check)
        problems = found.problems
        warned.extend(f"{w.source}: {w.render()}" for w in found.warnings)
        return api_object(
            "ValidationResult",
            valid=not problems,
            files=[str(p) for p in paths],
            workspace=None if check is None or local is None else str(local.workspace.root),
            problems=[p.as_dict() for p in problems],
            warnings=list(dict.fromkeys(warned)),
        )

    def submit(
        self, path: str | os.PathLike[str], *, sets: Sequence[str] = (), idempotency_key: str | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self.submit_many([path], sets=sets, idempotency_keys=[idempotency_key])["results"][0]
        return result

    def submit_many(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        sets: Sequence[str] = (),
        idempotency_keys: Sequence[str | None] | None = None,
    ) -> dict[str, Any]:
        """Submit several files at once: all are read and checked first, then created in one transaction (over
        HTTP each file is its own request, so its own transaction)."""
        read = _read_all(paths)
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(read)
        if not self.is_local:
            results = [
                self.submit_text(text, source=source, sets=sets, idempotency_key=key)
                for (source, text, _), key in zip(read, keys, strict=True)
            ]
            return api_object("SubmitResults", results=results)
        docs = [doc for _, _, doc in read]
        args = {"sets": sets, "idempotency_keys": keys, "target": ",".join(str(p) for p in paths)}
        return self._send(Call("submit", {"docs": docs, **args}))

    def submit_documents(
        self, docs: Sequence[Any], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> dict[str, Any]:
        """Submit parsed documents (crossrail.spec.Document) at once, in one transaction in this process."""
        if not self.is_local:
            import json

            keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(docs)
            results = [
                self.submit_text(json.dumps(d.data), source=d.source, idempotency_key=k)
                for d, k in zip(docs, keys, strict=True)
            ]
            return api_object("SubmitResults", results=results)
        return self._send(Call("submit", {"docs": docs, "idempotency_keys": idempotency_keys}))

    def submit_text(
        self, text: str, *, source: str, sets: Sequence[str] = (), idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Submit the experiment written in `text` (YAML or JSON); its problems name `source`. A server takes
        the run's team from the request's token."""
        args = {"text": text, "source": source, "sets": list(sets), "idempotency_key": idempotency_key}
        body = {"document": text, "source": source, "sets": list(sets), "idempotencyKey": idempotency_key}
        return self._send(Call("submit_text", args, "POST", "/runs", body=body))

    def resubmit(
        self, ref: str, *, resume: bool = False, from_weights: bool = False, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """A new run of `ref`'s recorded spec; with `resume`, continuing it from its newest checkpoint that
        verifies; with `from_weights`, a new training initialised from that checkpoint's weights."""
        args = {"ref": ref, "resume": resume, "from_weights": from_weights, "idempotency_key": idempotency_key}
        body = {"resume": resume, "fromWeights": from_weights, "idempotencyKey": idempotency_key}
        return self._send(Call("resubmit", args, "POST", f"/runs/{ref}/resubmit", body=body))

    def place(self, path: str | os.PathLike[str], *, sets: Sequence[str] = ()) -> dict[str, Any]:
        """Where the experiment in `path` would be placed if submitted now, and why (nothing is written)."""
        ((source, text, doc),) = _read_all([path])
        if not self.is_local:
            return self.place_text(text, source=source, sets=sets)
        return self._send(Call("place", {"doc": doc, "sets": sets}))

    def place_text(self, text: str, *, source: str, sets: Sequence[str] = ()) -> dict[str, Any]:
        """`place` for an experiment written in `text`; a server names a parent as the request's token sees runs."""
        body = {"document": text, "source": source, "sets": list(sets)}
        return self._send(
            Call("place_text", {"text": text, "source": source, "sets": sets}, "POST", "/place", body=body)
        )

    # --- runs ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self._send(Call("status", {}, "GET", "/status"))

    def show(self, ref: str) -> dict[str, Any]:
        return self._send(Call("show", {"ref": ref}, "GET", f"/runs/{ref}"))

    def queue(self, *, limit: int = QUEUE_PAGE, offset: int = 0) -> dict[str, Any]:
        """Pending runs per queue with estimated starts: `limit` runs of each queue from position `offset` + 1
        (0: every one), with each queue's total."""
        page = {"limit": limit, "offset": offset}
        return self._send(Call("queue", page, "GET", "/queue", params=page))

    def events(
        self,
        ref: str | None = None,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        args = {"ref": ref, "after_seq": after_seq, "limit": limit, "types": types}
        params = {"run": ref, "after": after_seq, "limit": limit, "type": list(types) if types else None}
        return self._send(Call("events", args, "GET", "/events", params=params))

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
        args: dict[str, Any] = {"states": states, "stage": stage, "team": team, "experiment": experiment}
        args |= {"limit": limit, "cursor": cursor}
        params = {"state": list(states) if states else None} | {k: v for k, v in args.items() if k != "states"}
        return self._send(Call("runs", args, "GET", "/runs", params=params))

    def agents(self, *, stale_s: float = 120.0) -> dict[str, Any]:
        """Agents registered on the store, each `alive` when it has not stopped and beat within `stale_s`
        (a server's own bound)."""
        return self._send(Call("agents", {"stale_s": stale_s}, "GET", "/agents"))

    def cancel(self, ref: str) -> dict[str, Any]:
        return self._send(Call("cancel", {"ref": ref}, "POST", f"/runs/{ref}/cancel"))

    def suspend(self, ref: str) -> dict[str, Any]:
        return self._send(Call("suspend", {"ref": ref}, "POST", f"/runs/{ref}/suspend"))

    def resume(self, ref: str) -> dict[str, Any]:
        return self._send(Call("resume", {"ref": ref}, "POST", f"/runs/{ref}/resume"))

    def logs(self, ref: str, attempt: int | None = None, part: str | None = None) -> dict[str, Any]:
        """Each attempt's log (of `attempt` only; of a pipeline's part `part` only), its pool and how it ended."""
        args = {"ref": ref, "attempt": attempt, "part": part}
        params = {"attempt": attempt, "part": part}
        return self._send(Call("logs", args, "GET", f"/runs/{ref}/logs", params=params))

    def wait(self, ref: str, *, timeout_s: float | None = None, on_tick: Any = None) -> dict[str, Any]:
        """Block until the run ends: in this process an agent runs here when none runs on the workspace; over a
        server its agents run it and the run is polled."""
        import time

        from crossrail.errors import WorkspaceError

        local = self.transport.local
        run_id = self.show(ref)["run"]["id"]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def state() -> str:
            if local is not None:  # one row, read every tick of the agent
                return str(local.service.store.get_run(run_id).state)
            return str(self.show(run_id)["run"]["state"])

        def done() -> bool:
            if deadline is not None and time.monotonic() > deadline:
                raise WorkspaceError(f"run {run_id} did not end within {timeout_s:g}s; it keeps running")
            return state() in TERMINAL

        if local is not None:
            from crossrail.control.agent.lock import agent_lock
            from crossrail.errors import AgentRunningError

            try:
                with agent_lock(local.workspace.root):
                    local.agent().run(should_stop=done, on_tick=on_tick)
                return self.show(run_id)
            except AgentRunningError:
                pass
        while not done():
            time.sleep(0.5)
        return self.show(run_id)

    def report(self) -> dict[str, Any]:
        """The event-log metrics, with each group's median reported `tokens_per_second` beside them."""
        return self._send(Call("report", {}, "GET", "/report"))

    # --- sweeps and scaling fits (docs/sweeps.md) -----------------------------------------------------

    def sweep_submit(
        self,
        path: str | os.PathLike[str],
        *,
        grid: Sequence[str],
        sets: Sequence[str] = (),
        random: int | None = None,
        seed: int = 0,
    ) -> dict[str, Any]:
        """One run per point of `grid` (`KEY=V1,V2,...` each) over the experiment in `path`, with `sets`
        applied to every point; `random` draws that many points by `seed`. Submitting the same sweep again
        answers its runs already there and creates nothing."""
        ((source, text, _),) = _read_all([path])
        return self.sweep_submit_text(text, source=source, grid=grid, sets=sets, random=random, seed=seed)

    def sweep_submit_text(
        self,
        text: str,
        *,
        source: str,
        grid: Sequence[str],
        sets: Sequence[str] = (),
        random: int | None = None,
        seed: int = 0,
    ) -> dict[str, Any]:
        """`sweep_submit` for an experiment written in `text`; its problems name `source`."""
        draw: dict[str, Any] = {"random": random, "seed": seed}
        args = {"text": text, "source": source, "grid": list(grid), "sets": list(sets)} | draw
        body = {"document": text, "source": source, "grid": list(grid), "sets": list(sets)} | draw
        return self._send(Call("sweep_submit", args, "POST", "/sweeps", body=body))

    def sweep_show(self, sweep: str, *, metric: str = "loss", better: str | None = None) -> dict[str, Any]:
        """The sweep's members (the runs this client may see), ranked by their last reported `metric`."""
        args = {"sid": sweep, "metric": metric, "better": better}
        params = {"metric": metric, "better": better}
        return self._send(Call("sweep_show", args, "GET", f"/sweeps/{sweep}", params=params))

    def sweep_cancel(self, sweep: str) -> dict[str, Any]:
        """Cancel every member of the sweep that has not ended."""
        return self._send(Call("sweep_cancel", {"sid": sweep}, "POST", f"/sweeps/{sweep}/cancel"))

    def fit(
        self,
        sweep: str,
        *,
        x: str = "spec.resources.chips",
        y: str = "tokens_per_second",
        target_tokens: float | None = None,
        at: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Amdahl and a power law fitted per pool to the sweep's measured `y` against `x`, with their errors, and
        the time, chip-hours and cost to `target_tokens` at each chip count measured (or `at`)."""
        args = {"sid": sweep, "x": x, "y": y, "target_tokens": target_tokens, "at": list(at) if at else None}
        params = {"x": x, "y": y, "target_tokens": target_tokens, "at": list(at) if at else None}
        return self._send(Call("fit", args, "GET", f"/sweeps/{sweep}/fit", params=params))

    # --- checkpoints ----------------------------------------------------------------------------

    def ckpt_ls(self, ref: str, *, verify: bool = True) -> dict[str, Any]:
        """A run's committed checkpoints, oldest first, each with its size and whether it verifies (`ckpt ls`)."""
        args = {"ref": ref, "verify": verify}
        return self._send(Call("ckpt_ls", args, "GET", f"/runs/{ref}/checkpoints", params={"verify": verify}))

    def ckpt_show(self, ref: str, *, step: int | None = None) -> dict[str, Any]:
        """The manifest of a run's checkpoint at `step` (default: its newest), tensors not verified."""
        which = "latest" if step is None else str(step)
        return self._send(Call("ckpt_show", {"ref": ref, "step": step}, "GET", f"/runs/{ref}/checkpoints/{which}"))

    def ckpt_verify(self, ref: str, *, every: bool = False) -> dict[str, Any]:
        """Check every tensor of a run's newest checkpoint (or of `every` one) against its checksums."""
        args = {"ref": ref, "every": every}
        path = f"/runs/{ref}/checkpoints/verify"
        return self._send(Call("ckpt_verify", args, "POST", path, params={"all": every}))

    # --- fleet ----------------------------------------------------------------------------------

    def fleet_show(self) -> dict[str, Any]:
        return self._send(Call("fleet_show", {}, "GET", "/fleet"))

    def fleet_apply(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        def body() -> dict[str, Any]:  # read only for a server: the workspace reads its file itself
            return {"document": _read_all([path])[0][1], "source": str(path)}

        return self._send(Call("fleet_apply", {"path": path}, "PUT", "/fleet", body=body))

    def drain(self, pool: str, *, drained: bool = True) -> dict[str, Any]:
        path = f"/fleet/pools/{pool}/{'drain' if drained else 'undrain'}"
        return self._send(Call("drain", {"pool": pool, "drained": drained}, "POST", path))

    def reserve(
        self, pool: str, *, chips: int, start: str, duration: str, team: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        args = {"chips": chips, "start": start, "duration": duration, "team": team, "name": name}
        call = Call("reserve", {"pool": pool, **args}, "POST", "/fleet/reservations", body={"pool": pool, **args})
        return self._send(call)

    def reservations(self) -> dict[str, Any]:
        return self._send(Call("reservations", {}, "GET", "/fleet/reservations"))

    # --- tokens, identity, usage and the audit log ------------------------------------------------

    def token_create(
        self, *, team: str, role: str, user: str | None = None, expires: str | None = None
    ) -> dict[str, Any]:
        """A new token (its secret is in `token`, shown this once); `expires` like `30d`, none by default."""
        args = {"team": team, "role": role, "user": user, "expires": expires}
        return self._send(Call("token_create", args, "POST", "/tokens", body=args))

    def tokens(self) -> dict[str, Any]:
        return self._send(Call("tokens", {}, "GET", "/tokens"))

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        return self._send(Call("token_revoke", {"token_id": token_id}, "POST", f"/tokens/{token_id}/revoke"))

    def token_rotate(self, token_id: str) -> dict[str, Any]:
        return self._send(Call("token_rotate", {"token_id": token_id}, "POST", f"/tokens/{token_id}/rotate"))

    def whoami(self) -> dict[str, Any]:
        """Who this client acts as: a server's answer for its token, else an admin under the OS user."""
        return self._send(Call("whoami", {}, "GET", "/whoami"))

    def audit(self, *, since: str | None = None, team: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """The audit log, oldest first; `since` a duration back from now (`2h`) or epoch seconds."""
        args = {"since": since, "team": team, "limit": limit}
        return self._send(Call("audit", args, "GET", "/audit", params=args))

    def usage(self, *, since: str | None = None, team: str | None = None) -> dict[str, Any]:
        """Chip-hours and cost per team x stage x pool over the last `since` (all time by default)."""
        args = {"since": since, "team": team}
        return self._send(Call("usage", args, "GET", "/usage", params=args))


def _read_all(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[str, str, Any]]:
    """(source, text, document) of each file, read once and bounded (what is checked is what is sent); a
    SpecError listing every file's problems, the lines the local CLI prints, when any does not parse."""
    from crossrail.spec import parse_document
    from crossrail.spec.loader import read_text

    read, problems = [], []
    for path in paths:
        try:
            text = read_text(path)
            read.append((str(path), text, parse_document(text, str(path))))
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
    return read


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
