"""The FastAPI app: `create_app(home)` serves one workspace's operations under `/v1` (docs/api.md)."""

from __future__ import annotations

import importlib
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from crossrail.api import apidocs, dashboard, errors, ingest, limits, prom, route_access, routes
from crossrail.api.middleware import AuthMiddleware
from crossrail.core import Clock
from crossrail.core.api import API_VERSION

# What the client's methods import lazily (spec parsing, scheduling, lineage's storage): loaded at start.
WARM = (
    "crossrail.spec",
    "crossrail.scheduling",
    "crossrail.control.service.lineage",
    "crossrail.control.placing",
    "fsspec",
)


def create_app(
    home: Path | None = None,
    *,
    agent: bool = False,
    agent_config: Any = None,
    clock: Clock | None = None,
    require_auth: bool = False,
) -> FastAPI:
    """The app for the workspace at `home` (default: the nearest `.crossrail/` above the current directory).

    With `agent`, one reconcile agent runs in a thread of this process while the app is up (a single machine's
    deployment); otherwise agents run apart and the app only reads and writes the store. `clock` is the
    requests' clock (the system's by default). With `require_auth` every request but the health probe, the
    ingest (its attempt's secret) and static files needs a bearer token (crossrail.api.middleware); without it a
    request with no token acts as an anonymous admin (a server on loopback), and one with a token as that token.
    """
    from crossrail.client import Client, LocalTransport

    transport = LocalTransport(home, clock=clock, audit_writes=False)  # requests are audited under their tokens
    c = Client(transport=transport)
    c.workspace.check()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        thread = _start_agent(app, home, agent_config) if agent else None
        try:
            yield
        finally:
            app.state.stopping = True
            if thread is not None:
                thread.join()
            c.close()

    app = FastAPI(
        title="crossrail",
        version="1",
        summary="Control plane for training fleets that mix TPUs and GPUs",
        openapi_url="/v1/openapi.json",
        docs_url=None,  # served from the vendored Swagger UI (crossrail.api.apidocs), never a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.home = home
    app.state.client = c
    app.state.operations = transport.operations  # what the routes call, as each request's actor
    app.state.write_lock = threading.Lock()
    app.state.require_auth = require_auth
    app.state.stopping = False
    # Whoever runs the app may say it is shutting down before the lifespan ends (uvicorn waits for open
    # streams first): following streams end when this answers True (crossrail.cli.serve wires uvicorn's flag).
    app.state.stop_requested = lambda: False
    c.service  # noqa: B018 - opened now, before requests race to open it
    for module in WARM:  # imported now, not by the first request that submits or plans
        importlib.import_module(module)
    errors.install(app)

    @app.get("/v1/health", summary="The server is up; which agent leads and which stand by")
    def health() -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "Health", "ok": True, "agents": _agents(c)}

    app.include_router(routes.router)
    app.include_router(ingest.router)
    app.include_router(prom.router)
    app.include_router(dashboard.router)
    app.include_router(apidocs.router)
    route_access.check_routes(app)
    app.add_middleware(limits.BodyLimits)  # inside auth's: a body refused for its size or depth is audited
    app.add_middleware(AuthMiddleware, fastapi_app=app)
    return app


HEARTBEAT_EXPIRY_S = 15.0
"""A standby's heartbeat expires this long after it was written: an agent beats every 10 s (AgentConfig.heartbeat_s)
at its next pass, so a live one is never older than that plus one pass; a killed one drops out within 15 s."""


def _agents(c: Any) -> dict[str, Any]:
    """The leader and its standbys for /v1/health, which answers without a token: agent ids and hosts, no pids. A
    standby whose heartbeat expired (HEARTBEAT_EXPIRY_S) is not one: a killed agent never says it stopped. A store
    that cannot be read now is said, not raised: the server itself is up (a liveness probe must not restart it for
    its database's outage)."""
    from crossrail.control.service.progress import agent_liveness
    from crossrail.errors import StoreError

    now = c.clock.now()
    try:
        live = agent_liveness(c.service.store, now)
    except StoreError as exc:
        return {"error": str(exc)}
    leader = live.get("leader")
    standbys = [a for a in live.get("standbys", []) if now - a["heartbeat_at"] <= HEARTBEAT_EXPIRY_S]
    return {
        "alive": live["alive"],
        "term": live.get("term"),
        "leader": None if leader is None else {k: leader[k] for k in ("id", "host", "term")},
        "standbys": [{k: a[k] for k in ("id", "host")} for a in standbys],
    }


def _start_agent(app: FastAPI, home: Path | None, config: Any) -> threading.Thread:
    """One agent over the workspace, in a thread, holding the workspace's agent lock until the app stops."""
    from crossrail.client import Client
    from crossrail.control.agent.lock import agent_lock

    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with Client.local(home) as c, agent_lock(c.workspace.root):
                ready.set()
                c.agent(config).run(should_stop=lambda: bool(app.state.stopping))
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=run, name="crossrail-agent", daemon=True)
    thread.start()
    ready.wait()
    if failure:
        raise failure[0]
    return thread
