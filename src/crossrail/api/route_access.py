"""The action each route needs, and whether a role has it.

Every route of the app names its action in `ROUTES` (a route missing from it fails `create_app`), so no
endpoint escapes the checks; `AuthMiddleware` (api/middleware.py) refuses a role that lacks it (403). docs/auth.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from crossrail.core.access import DOING, Action, Actor, allows
from crossrail.errors import ForbiddenError

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
        raise RuntimeError(f"routes without an action in crossrail.api.route_access.ROUTES: {', '.join(missing)}")
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


def check_action(actor: Actor, action: Action, method: str, path: str) -> None:
    """ForbiddenError, naming who may, when `actor`'s role lacks `action`."""
    if not allows(actor.role, action):
        raise ForbiddenError(f"{actor.role} tokens may not {DOING[action]} ({method} {path}); {_who_may(action)} may")


def _who_may(action: Action) -> str:
    from crossrail.core.access import ROLE_ACTIONS

    return " and ".join(f"{r} tokens" for r, acts in ROLE_ACTIONS.items() if action in acts)
