"""The audit middleware: who a request is, whether its role may take the route's action, and the audit log.

`AuthMiddleware` authenticates each request (a bearer token, or the dashboard's cookie: api/session.py), refuses
a role that lacks the route's action (api/route_access.py, 403) or a missing or dead token (401) when the server
requires auth, refuses a write a page of another origin may have made a browser send (`check_forgery`), and
writes the audit row of every write and every refusal. What a role may do to another team's runs, and what it
may see of them, is the workspace's operations' as that actor (api/teamview.py), which the endpoints call.
docs/auth.md.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.routing import Match

from crossrail.api import errors
from crossrail.api.route_access import CREATED, ROUTES, check_action
from crossrail.api.session import (
    ANONYMOUS,
    Message,
    Receive,
    Scope,
    Send,
    bearer,
    check_forgery,
    keeps_login,
    login_cookie,
    login_form,
    query_token,
)
from crossrail.client import Client
from crossrail.core.access import WRITES, Action, Actor, Role, noting_hidden
from crossrail.errors import CrossrailError, ForbiddenError, UnauthenticatedError
from crossrail.store.joined import JoinedAudit, joined_audit


class AuthMiddleware:
    """Authenticate, check the role's action, audit writes and refusals (pure ASGI: streams pass through)."""

    def __init__(self, app: Any, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, (template, params) = scope["method"], self._route(scope)
        params = _query_run(scope) | params  # GET /v1/events?run=R reads that run
        action = ROUTES.get((method if method != "HEAD" else "GET", template), Action.READ)
        origin = _origin(scope)
        actor: Actor | None = None
        try:
            actor = await self._who(scope, origin, action)
            if action is not None and actor is not None:
                check_action(actor, action, method, scope["path"])
            check_forgery(scope, method, template, action)
        except (UnauthenticatedError, ForbiddenError) as exc:
            await run_in_threadpool(
                self._audit, actor, origin, method, template, params, errors.status_of(exc), str(exc)
            )
            if isinstance(exc, UnauthenticatedError) and method in ("GET", "HEAD") and scope["path"].startswith("/ui/"):
                await login_form(scope, receive, send, exc)  # a browser: the sign-in form, not JSON
                return
            if isinstance(exc, ForbiddenError) and _wants_page(scope):  # a browser: a page saying why
                await errors.answer(scope, errors.body(exc, 403))(scope, receive, send)
                return
            await _answer(send, exc)
            return
        scope.setdefault("state", {})["actor"] = actor
        login = query_token(scope)
        audited: list[int] = []
        hidden_runs: list[str] = []  # runs it named that its actor may not see (Service.find notes them)
        write = action in WRITES and method != "GET"
        pending = await self._pending(actor, origin, method, template, params) if write else None

        async def audit(code: int) -> None:
            """The audit row of a write or a refusal, written before its answer leaves (a client that has the
            answer finds the row). A write that committed carried its row in its own transaction (`pending`);
            any other ending (a refusal, a failure, a write that changed nothing in the store) is written now."""
            audited.append(code)
            if pending is not None and pending.written and code < 400:
                return
            noted = scope.get("state", {})
            hidden = bool(hidden_runs)  # it named a run it may not see, answered as if none (a 404, or place's problem)
            if code in (401, 403) or write or hidden:
                detail = hidden_runs[0] if hidden else noted.get("refusal") if code >= 400 else None
                where = params | noted.get("audit_target", {})
                refused = "refused" if hidden else None
                await run_in_threadpool(self._audit, actor, origin, method, template, where, code, detail, refused)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                await audit(int(message["status"]))
                if login and actor is not None and actor.token_id is not None and keeps_login(scope):
                    cookie = login_cookie(login)  # the dashboard's ?token=, kept for the next pages
                    message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie.encode("latin-1"))]
            await send(message)

        try:
            await self._serve(scope, receive, sending, pending, hidden_runs)
        finally:
            if not audited:  # it failed before answering
                await audit(500)

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, pending: JoinedAudit | None, hidden_runs: list[str]
    ) -> None:
        """The app's answer, the write joined to its audit row, noting the runs it named but may not see."""
        with noting_hidden(hidden_runs):
            if pending is None:
                await self.app(scope, receive, send)
            else:
                with joined_audit(pending):
                    await self.app(scope, receive, send)

    async def _who(self, scope: Scope, origin: str, action: Action | None) -> Actor | None:
        if action is not None and bearer(scope):  # a token is looked up in the store: off the event loop
            return await run_in_threadpool(self._actor, scope, origin, True)
        return self._actor(scope, origin, action is not None)

    async def _pending(
        self, actor: Actor | None, origin: str, method: str, template: str, params: dict[str, Any]
    ) -> JoinedAudit:
        joined = functools.partial(self._joined, actor, origin, method, template, params)
        if {"ref", "run"} & params.keys():  # naming a run reads the store (its uid): off the event loop
            return await run_in_threadpool(joined)
        return joined()

    def _joined(
        self, actor: Actor | None, origin: str, method: str, template: str, params: dict[str, Any]
    ) -> JoinedAudit:
        """The audit row of a write the request is about to make, to be inserted in the write's own transaction:
        it names the run the path names (or, for a submit, the run it creates) and answers the route's status
        (201 when a run was created)."""
        client: Client = self.fastapi_app.state.client
        row = request_row(client, actor, origin, f"{method} {template}", params, 200, None)
        status = self.fastapi_app.state.route_status.get((method, template), 200)
        return JoinedAudit(row=row, now=client.clock.now, status=status, created_status=CREATED)

    def _route(self, scope: Scope) -> tuple[str, dict[str, Any]]:
        """The template of the route the request goes to (`/v1/runs/{ref}`) and its path parameters."""
        leaves = self.fastapi_app.state.route_leaves
        for path, _, matcher in leaves:
            match, child = matcher.matches(scope)
            if match is Match.FULL:
                return path, dict(child.get("path_params", {}))
        partial = next((leaf for leaf in leaves if leaf[2].matches(scope)[0] is Match.PARTIAL), None)
        return (
            (partial[0], dict(partial[2].matches(scope)[1].get("path_params", {}))) if partial else (scope["path"], {})
        )

    def _actor(self, scope: Scope, origin: str, needed: bool) -> Actor | None:
        """The request's actor: its token's; without one, anonymous (an admin) where auth is not required."""
        if not needed:  # an open route reads nobody's token
            return None
        client: Client = self.fastapi_app.state.client
        return request_actor(client, bearer(scope), origin, require_auth=self.fastapi_app.state.require_auth)

    def _audit(  # noqa: PLR0917 - called through run_in_threadpool, which passes positional arguments
        self,
        actor: Actor | None,
        origin: str,
        method: str,
        template: str,
        params: dict[str, Any],
        status: int,
        detail: str | None,
        result: str | None = None,
    ) -> None:
        client = self.fastapi_app.state.client
        client.service.store.append_audit(
            request_row(client, actor, origin, f"{method} {template}", params, status, detail, result)
        )


def request_actor(client: Client, secret: str | None, origin: str, *, require_auth: bool) -> Actor:
    """The actor of a request carrying bearer `secret` (None: none): the token's; without one, anonymous (an
    admin) where auth is not required; UnauthenticatedError otherwise or for a dead token. The one rule of the
    API, the dashboard and an agent's /metrics."""
    if secret:
        from crossrail.control.access import authenticate

        return authenticate(client.service.store, secret, origin=origin, now=client.clock.now())
    if not require_auth and not _shared(client):
        return Actor(who=ANONYMOUS, team=None, role=Role.ADMIN, origin=origin)
    why = "this server requires a token" if require_auth else "this workspace has tokens, so loopback needs one too"
    raise UnauthenticatedError(
        f"{why}: pass --token, set CROSSRAIL_TOKEN or send `Authorization: Bearer ...`"
        " (the dashboard takes ?token=... once); an admin makes one with `crossrail token create`"
    )


def _shared(client: Client) -> bool:
    """Whether others act in this workspace (it has tokens, or its fleet isolates runs): then a request without a
    token is nobody's, even on loopback, where the commands of isolated runs could otherwise reach the server as
    its anonymous admin (docs/auth.md)."""
    from crossrail.control.isolation import isolating

    return isolating(client.fleet, client.service.store)


def request_row(  # noqa: PLR0917 - one row's fields
    client: Client,
    actor: Actor | None,
    origin: str,
    action: str,
    params: dict[str, Any],
    status: int,
    detail: str | None,
    result: str | None = None,
) -> dict[str, Any]:
    """The audit row of a request (`action`: "METHOD /route/{template}") that ended (or, joined to its write, will
    end) with `status`; `result` overrides the one the status says (a 404 for a run the actor may not see is
    a refusal)."""
    from crossrail.control.access import audit_row

    now = client.clock.now()
    target, run_uid = _target(client, params)
    result = result or ("ok" if status < 400 else "refused" if status in (401, 403) else "failed")
    if actor is None:
        return {"ts": now, "who": ANONYMOUS, "action": action, "target": target, "run_uid": run_uid} | {
            "origin": origin,
            "result": result,
            "status": status,
            "detail": detail,
        }
    return audit_row(
        actor, action, now=now, result=result, target=target, run_uid=run_uid, status=status, detail=detail
    )


def _target(client: Client, params: dict[str, Any]) -> tuple[str | None, str | None]:
    """What a request names: a run (its id and uid, when it exists), a pool or a token."""
    for key in ("ref", "run"):
        if key in params:
            found = client.service.store.find_run(str(params[key]))
            return (found.id, found.uid) if found is not None else (str(params[key]), None)
    for key in ("pool", "token_id"):
        if key in params:
            return str(params[key]), None
    return None, None


def _query_run(scope: Scope) -> dict[str, str]:
    from urllib.parse import parse_qs

    run = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("run")
    return {"run": run[0]} if run else {}


def _origin(scope: Scope) -> str:
    peer = scope.get("client")
    return f"{peer[0]}:{peer[1]}" if peer else "unknown"


def _wants_page(scope: Scope) -> bool:
    from crossrail.api.pages import wants_page

    return wants_page(scope)


async def _answer(send: Send, exc: CrossrailError) -> None:
    status = errors.status_of(exc)
    body = json.dumps(errors.body(exc, status)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="crossrail"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
