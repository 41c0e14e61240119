"""A request's view of the workspace: its actor, as the middleware found it, and the workspace's operations as
that actor may use them (other teams' runs hidden, shared runs read-only, queue entries of others redacted;
admins see every run). The endpoints call these.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from crossrail.api.session import ANONYMOUS
from crossrail.control.ops.operations import Operations
from crossrail.core.access import Actor, Role


def actor_of(request: Request) -> Actor:
    """The actor the middleware found for the request; an open route's is an anonymous viewer."""
    actor: Actor | None = request.scope.get("state", {}).get("actor")
    if actor is None:  # an open route: nothing of a team is read through it
        return Actor(who=ANONYMOUS, team=None, role=Role.VIEWER, origin="unknown")
    return actor


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
