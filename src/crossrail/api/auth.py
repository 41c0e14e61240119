"""Who a request is and what it may do: bearer tokens, the route table, team scopes and the audit log.

Every route of the app names its action in `ROUTES` (a route missing from it fails `create_app`), so no
endpoint escapes the checks. `AuthMiddleware` authenticates each request (a bearer token, or the dashboard's
cookie), refuses a role that lacks the route's action (403) or a missing or dead token (401) when the server
requires auth, refuses a write a page of another origin may have made a browser send (`check_forgery`: the
cookie's writes need this server's Origin and the session's CSRF token), and writes the audit row of every
write and every refusal. What a role may do to another team's runs, and what it may see of them, is the
workspace's operations' as that actor (crossrail.control.ops.operations), which the endpoints call. docs/auth.md.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.routing import Match

from crossrail.api import errors
from crossrail.client import Client
from crossrail.control.ops.operations import Operations
from crossrail.core.access import DOING, WRITES, Action, Actor, Role, allows, noting_hidden
from crossrail.errors import CrossrailError, ForbiddenError, UnauthenticatedError
from crossrail.store.access import JoinedAudit, joined_audit

COOKIE = "crossrail_token"
ANONYMOUS = "anonymous"

ROUTES: dict[tuple[str, str], Action | None] = {
    # None: open to anyone (probes, the attempt-secret ingest, static files, the login redirect)
    ("GET", "/v1/health"): None,
    ("POST", "/v1/ingest/{run}/{attempt}"): None,
    ("GET", "/ui/static/{name}"): None,
    ("GET", "/v1/docs/static/{name}"): None,  # Swagger UI's own files (crossrail.api.apidocs)
    ("GET", "/"): None,
    ("GET", "/ui"): None,
    ("POST", "/ui/login"): None,
    ("GET", "/ui/"): None,
    ("GET", "/v1/openapi.json"): Action.READ,
    ("GET", "/v1/docs"): Action.READ,
    ("GET", "/metrics"): Action.READ,
    ("POST", "/v1/runs"): Action.SUBMIT,
    ("GET", "/v1/runs"): Action.READ,
    ("GET", "/v1/runs/{ref}"): Action.READ,
    ("POST", "/v1/runs/{ref}/cancel"): Action.CHANGE_RUN,
    ("POST", "/v1/runs/{ref}/suspend"): Action.CHANGE_RUN,
    ("POST", "/v1/runs/{ref}/resume"): Action.CHANGE_RUN,
    ("POST", "/v1/runs/{ref}/resubmit"): Action.SUBMIT,
    ("GET", "/v1/runs/{ref}/logs"): Action.READ,
    ("GET", "/v1/status"): Action.READ,
    ("GET", "/v1/queue"): Action.READ,
    ("GET", "/v1/events"): Action.READ,
    ("GET", "/v1/report"): Action.READ,
    ("POST", "/v1/place"): Action.READ,
    ("GET", "/v1/agents"): Action.READ,
    ("POST", "/v1/sweeps"): Action.SUBMIT,
    ("GET", "/v1/sweeps/{sweep}"): Action.READ,
    ("POST", "/v1/sweeps/{sweep}/cancel"): Action.CHANGE_RUN,
    ("GET", "/v1/sweeps/{sweep}/fit"): Action.READ,
    ("GET", "/v1/runs/{ref}/checkpoints"): Action.READ,
    ("GET", "/v1/runs/{ref}/checkpoints/{step}"): Action.READ,
    ("POST", "/v1/runs/{ref}/checkpoints/verify"): Action.READ,
    ("GET", "/v1/fleet"): Action.READ,
    ("PUT", "/v1/fleet"): Action.FLEET_WRITE,
    ("POST", "/v1/fleet/pools/{pool}/drain"): Action.FLEET_WRITE,
    ("POST", "/v1/fleet/pools/{pool}/undrain"): Action.FLEET_WRITE,
    ("GET", "/v1/fleet/reservations"): Action.READ,
    ("POST", "/v1/fleet/reservations"): Action.FLEET_WRITE,
    ("GET", "/v1/usage"): Action.READ,
    ("GET", "/v1/whoami"): Action.WHOAMI,
    ("GET", "/v1/audit"): Action.AUDIT_READ,
    ("GET", "/v1/tokens"): Action.TOKEN_ADMIN,
    ("POST", "/v1/tokens"): Action.TOKEN_ADMIN,
    ("POST", "/v1/tokens/{token_id}/revoke"): Action.TOKEN_ADMIN,
    ("POST", "/v1/tokens/{token_id}/rotate"): Action.TOKEN_ADMIN,
    ("GET", "/ui/runs"): Action.READ,
    ("GET", "/ui/runs/{ref}"): Action.READ,
    ("GET", "/ui/queues"): Action.READ,
    ("GET", "/ui/compare"): Action.READ,
    ("GET", "/ui/sweeps/{sweep}"): Action.READ,
    ("GET", "/ui/lineage"): Action.READ,
    ("GET", "/ui/fleet"): Action.READ,
    ("GET", "/ui/report"): Action.READ,
    ("GET", "/ui/report/figures/{name}.png"): Action.READ,
}
"""(method, path) -> the action a request needs; every route of the app is here (create_app checks)."""


def routes_of(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path) the app answers, HEAD left out, through included routers too."""
    return [(m, path) for path, methods in _flat(app.router.routes) for m in sorted(methods) if m != "HEAD"]


def _flat(routes: Sequence[Any]) -> list[tuple[str, set[str]]]:
    """(path, methods) of each route; FastAPI keeps an included router as one entry that lists its own."""
    return [(path, methods) for path, methods, _ in _leaves(routes)]


def _leaves(routes: Sequence[Any]) -> list[tuple[str, set[str], Any]]:
    """(path, methods, the route that matches a scope) of every route, included routers' too."""
    out: list[tuple[str, set[str], Any]] = []
    for route in routes:
        included = getattr(route, "effective_candidates", None)
        if callable(included):
            out += _leaves(included())
            continue
        original = getattr(route, "original_route", route)
        matcher = getattr(route, "starlette_route", None) or original
        out.append((str(getattr(route, "path", "")), set(getattr(original, "methods", None) or ()), matcher))
    return out


def check_routes(app: FastAPI) -> None:
    """Every route names its action: a new endpoint without one stops the app from starting."""
    missing = [f"{m} {p}" for m, p in routes_of(app) if (m, p) not in ROUTES]
    if missing:
        raise RuntimeError(f"routes without an action in crossrail.api.auth.ROUTES: {', '.join(missing)}")
    app.state.route_leaves = _leaves(app.router.routes)
    app.state.route_status = {
        (m, path): int(getattr(getattr(route, "original_route", route), "status_code", None) or 200)
        for path, methods, route in app.state.route_leaves
        for m in methods
    }


CREATED = 201
"""The status of a write that created a run (an idempotent replay of one answers 200)."""


def submitted_status(created: bool) -> int:
    return CREATED if created else 200


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


# --- the middleware ---------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


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
                await _login_form(scope, receive, send, exc)  # a browser: the sign-in form, not JSON
                return
            if isinstance(exc, ForbiddenError) and _wants_page(scope):  # a browser: a page saying why
                await errors.answer(scope, errors.body(exc, 403))(scope, receive, send)
                return
            await _answer(send, exc)
            return
        scope.setdefault("state", {})["actor"] = actor
        login = _query_token(scope)
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
                if login and actor is not None and actor.token_id is not None and _keeps_login(scope):
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
        if action is not None and _bearer(scope):  # a token is looked up in the store: off the event loop
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
        return request_actor(client, _bearer(scope), origin, require_auth=self.fastapi_app.state.require_auth)

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


def check_action(actor: Actor, action: Action, method: str, path: str) -> None:
    """ForbiddenError, naming who may, when `actor`'s role lacks `action`."""
    if not allows(actor.role, action):
        raise ForbiddenError(f"{actor.role} tokens may not {DOING[action]} ({method} {path}); {_who_may(action)} may")


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


def _who_may(action: Action) -> str:
    from crossrail.core.access import ROLE_ACTIONS

    return " and ".join(f"{r} tokens" for r, acts in ROLE_ACTIONS.items() if action in acts)


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


def _bearer(scope: Scope) -> str | None:
    return _credential(scope)[0]


def _credential(scope: Scope) -> tuple[str | None, str]:
    """The request's token and where it came from: `bearer` (the Authorization header), `query` (a dashboard
    page's `?token=`), `cookie` (the dashboard's session, which a browser attaches to any request) or `none`."""
    headers = _headers(scope)
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        path = str(scope.get("path", ""))
        return (None, "none") if path.startswith("/v1/ingest/") else (auth[7:].strip(), "bearer")
    login = _query_token(scope)
    if login:
        return login, "query"
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return str(value), "cookie"
    return None, "none"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _query_token(scope: Scope) -> str | None:
    """A dashboard page's `?token=`: taken once, then kept in a cookie."""
    from urllib.parse import parse_qs

    token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return token[0] if token and str(scope.get("path", "")).startswith("/ui") else None


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


def login_cookie(secret: str) -> str:
    """The Set-Cookie value that keeps a dashboard token: the browser sends it back, scripts cannot read it."""
    return f"{COOKIE}={secret}; Path=/; HttpOnly; SameSite=Strict"


# --- writes a page of another origin makes a browser send --------------------------------------------------
# SameSite=Strict does not stop them: another port on the same host is the same site, and its pages' form
# posts carry this server's cookie. What such a page cannot do is choose the Origin header, read this server's
# pages (where the CSRF token is) or read the HttpOnly cookie.

CSRF_HEADER = "X-CSRF-Token"
CSRF_META = "crossrail-csrf"
"""The header a dashboard session's write carries its CSRF token in; the `<meta name>` pages carry it in."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN = ("POST", "/ui/login")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def csrf_token(secret: str) -> str:
    """The CSRF token of the dashboard session holding token `secret`: a digest keyed by that token, so there
    is one per session, the server keeps no state to check it, and it reveals nothing of the token."""
    return hmac.new(secret.encode(), b"crossrail dashboard csrf", hashlib.sha256).hexdigest()


def session_csrf(scope: Scope) -> str | None:
    """The CSRF token a dashboard page hands its browser session (None: the request came without one)."""
    secret, source = _credential(scope)
    return csrf_token(secret) if secret and source in ("cookie", "query") else None


def check_forgery(scope: Scope, method: str, template: str, action: Action | None) -> None:
    """ForbiddenError for a write a page of another origin may have made a browser send: a write authorized by
    the dashboard's cookie needs an Origin (or, lacking one, a Referer) of this server and the session's CSRF
    token; signing in needs an Origin of this server; a write without any token (the anonymous admin of
    loopback) is refused when the browser says it comes from another origin. A bearer token is not checked:
    no other site can make a browser send one."""
    if method in SAFE_METHODS:
        return
    secret, source = _credential(scope)
    if (method, template) == LOGIN:
        _same_origin(scope, "signing in to the dashboard")
    elif action is None or source in ("bearer", "query"):
        return
    elif source == "cookie":
        _same_origin(scope, f"a dashboard session's {method}")
        sent = _headers(scope).get(CSRF_HEADER.lower(), "")
        if not hmac.compare_digest(sent.encode(), csrf_token(secret or "").encode()):
            raise ForbiddenError(
                f"a dashboard session's {method} {scope['path']} must carry the session's CSRF token in the "
                f"{CSRF_HEADER} header (its pages carry it in <meta name={CSRF_META!r}>); "
                "scripts send `Authorization: Bearer <token>` instead"
            )
    elif _claimed_origin(scope) is not None:
        _same_origin(scope, f"a {method} without a token")


def _same_origin(scope: Scope, what: str) -> None:
    claimed, own = _claimed_origin(scope), _own_origin(scope)
    seen = None if claimed is None else _normal_origin(claimed)
    if seen is None or own is None or seen != own:
        said = f"from {claimed}" if claimed else "with no Origin or Referer header"
        proxied = seen is not None and own is not None and seen.startswith("https:") and own.startswith("http:")
        hint = " (behind a proxy that terminates TLS, name it: `crossrail serve --forwarded-allow-ips`)"
        raise ForbiddenError(
            f"{what} must come from a page of this server ({own or 'its Host header'}), not {said}"
            f"{hint if proxied else ''}; scripts send `Authorization: Bearer <token>` instead"
        )


def _claimed_origin(scope: Scope) -> str | None:
    """Where the browser says the request comes from: its Origin, else its Referer (None: neither was sent)."""
    headers = _headers(scope)
    return headers.get("origin") or headers.get("referer") or None


def _own_origin(scope: Scope) -> str | None:
    """This server's origin as the request addressed it: scheme (a trusted proxy's, see `serve
    --forwarded-allow-ips`) and the Host header."""
    host = _headers(scope).get("host")
    if not host and scope.get("server"):
        host = f"{scope['server'][0]}:{scope['server'][1]}"
    return _normal_origin(f"{scope.get('scheme', 'http')}://{host}") if host else None


def _normal_origin(url: str) -> str | None:
    """`scheme://host:port` of a URL, the port always written (None: not an http(s) URL with a host)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.hostname}:{port or _DEFAULT_PORTS[parts.scheme]}"


def _keeps_login(scope: Scope) -> bool:
    """Whether a page's `?token=` goes into the cookie: not when another site's page sent the browser here
    (Sec-Fetch-Site), which would sign the browser in as that site's token."""
    return _headers(scope).get("sec-fetch-site", "none") in ("none", "same-origin")


async def _login_form(scope: Scope, receive: Receive, send: Send, exc: UnauthenticatedError) -> None:
    """Answer a dashboard page that needs a token with the sign-in form (401), back to this page after; a token
    that was sent and is dead is named."""
    from urllib.parse import parse_qsl, urlencode

    from crossrail.api.pages import login_page

    query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")) if k != "token"]
    here = str(scope["path"]) + (f"?{urlencode(query)}" if query else "")
    page = login_page(here, str(exc) if _bearer(scope) else None)
    page.headers.append("www-authenticate", 'Bearer realm="crossrail"')
    await page(scope, receive, send)


def actor_of(request: Request) -> Actor:
    actor: Actor | None = request.scope.get("state", {}).get("actor")
    if actor is None:  # an open route: nothing of a team is read through it
        return Actor(who=ANONYMOUS, team=None, role=Role.VIEWER, origin="unknown")
    return actor


# --- what a request's actor may do to and see of others' runs ---------------------------------------------


def scoped(request: Request) -> Operations:
    """The workspace's operations as the request's actor may use them (crossrail.control.ops.operations: other
    teams' runs hidden, shared runs read-only, queue entries of others redacted; admins see every run)."""
    operations: Operations = request.app.state.operations
    return operations.as_actor(actor_of(request))


def note_run(request: Request, result: dict[str, Any]) -> None:
    """Name the run a write made (submit, resubmit) in the audit row the middleware writes."""
    run = result.get("run") or {}
    if run.get("id"):
        request.scope.setdefault("state", {})["audit_target"] = {"run": run["id"]}
