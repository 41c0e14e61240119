"""Tokens, actors and the audit log over a store: create, rotate, revoke, authenticate, record (docs/auth.md).

A token is `crt_<id>_<secret>`: the id names it in lists and the audit log, the secret (32 random bytes) is
shown once and kept only as its sha256. The local CLI acts under the OS user: an admin when it owns the workspace.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from crossrail.core import validate_team
from crossrail.core.access import Action, Actor, Role, role
from crossrail.errors import ConflictError, NotFoundError, UnauthenticatedError, UsageError
from crossrail.store import Store

PREFIX = "crt_"


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


LOCAL_TEAM = "local"
"""The team of an audit row of a local CLI write that belongs to no one team (its role is admin)."""


def local_actor(root: Path | None = None) -> Actor:
    """The local CLI's actor, named by the OS, with `$CROSSRAIL_USER` kept apart as a claim: an admin when it is
    the owner of the workspace `root` (the OS user who owns that `.crossrail` directory) or root, else a viewer.
    Another user of the machine, or a run's command under its team's uid, is not the workspace's admin."""
    user = os_user()
    claimed = os.environ.get("CROSSRAIL_USER") or None
    return Actor(who=user, team=None, role=local_role(root), origin=f"local:{user}", claimed=claimed)


def local_role(root: Path | None) -> Role:
    """The one rule of who administers a workspace from this machine (without `root`: the one who asks)."""
    euid = os.geteuid()
    if root is None or euid == 0:
        return Role.ADMIN
    try:
        owner = root.stat().st_uid
    except OSError:  # no workspace there yet: whoever makes it will own it
        return Role.ADMIN
    return Role.ADMIN if owner == euid else Role.VIEWER


def _sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _new_row(
    team: str, who_role: Role, user: str, *, by: str, now: float, expires_at: float | None
) -> tuple[dict[str, Any], str]:
    token_id = secrets.token_hex(6)
    secret = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    row = {
        "id": token_id,
        "secret_sha256": _sha(secret),
        "team": team,
        "role": str(who_role),
        "user": user,
        "created_at": now,
        "created_by": by,
        "expires_at": expires_at,
    }
    return row, secret


def create_token(
    store: Store, *, team: str, role_name: str, user: str | None, expires_s: float | None, by: str, now: float
) -> dict[str, Any]:
    """A new token for `team` with `role_name`; the returned `token` is the only time its secret is seen."""
    problems = []
    bad_team = validate_team(team)  # a new team is a DNS-1123 label (docs/auth.md)
    if bad_team is not None:
        problems.append(f"--team {bad_team}")
    try:
        who_role = role(role_name)
    except ValueError as exc:
        problems.append(f"{exc}; pass --role viewer, submitter or admin")
    if expires_s is not None and expires_s <= 0:
        problems.append(f"--expires must be a positive duration (got {expires_s:g}s); write e.g. 30d")
    if problems:
        raise UsageError("; ".join(problems))
    row, secret = _new_row(
        team, who_role, user or f"{team}-{who_role}", by=by, now=now, expires_at=_expiry(now, expires_s)
    )
    store.add_token(row)
    return _public(row) | {"token": secret}


def rotate_token(store: Store, token_id: str, *, by: str, now: float) -> dict[str, Any]:
    """A new secret for the token's team, role, user and expiry; the old one is refused from now on."""
    old = next((r for r in store.tokens() if r["id"] == token_id), None)
    if old is None:
        raise NotFoundError(f"no token {token_id!r}; `crossrail token list` shows the tokens")
    if token_state(old, now) == "expired":
        raise ConflictError(f"token {token_id} is expired; make a new one with `crossrail token create`")
    row, secret = _new_row(
        old["team"], Role(old["role"]), old["user"], by=by, now=now, expires_at=old["expires_at"]
    )  # the same expiry: rotating does not extend a token's life
    store.rotate_token(token_id, row, now)
    return _public(row) | {"token": secret, "replaces": token_id}


def _expiry(now: float, expires_s: float | None) -> float | None:
    return None if expires_s is None else now + expires_s


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "secret_sha256"}


def token_state(row: dict[str, Any], now: float) -> str:
    if row.get("rotated_to"):
        return "rotated"
    if row.get("revoked_at") is not None:
        return "revoked"
    if row.get("expires_at") is not None and now >= row["expires_at"]:
        return "expired"
    return "active"


def authenticate(store: Store, secret: str, *, origin: str, now: float) -> Actor:
    """The actor a bearer secret stands for; UnauthenticatedError when it is unknown or no longer valid."""
    row = store.token_by_hash(_sha(secret)) if secret.startswith(PREFIX) else None
    if row is None or not hmac.compare_digest(row["secret_sha256"], _sha(secret)):
        raise UnauthenticatedError("the bearer token is not a crossrail token of this server; ask an admin for one")
    state = token_state(row, now)
    if state != "active":
        more = f" (replaced by token {row['rotated_to']})" if state == "rotated" else ""
        raise UnauthenticatedError(f"token {row['id']} is {state}{more}; ask an admin for a new one")
    return Actor(who=row["user"], team=row["team"], role=Role(row["role"]), origin=origin, token_id=row["id"])


def audit_row(
    actor: Actor,
    action: Action | str,
    *,
    now: float,
    result: str,
    target: str | None = None,
    run_uid: str | None = None,
    status: int | None = None,
    detail: str | None = None,
    team: str | None = None,
) -> dict[str, Any]:
    """One audit row: who (and what they claimed), their team and role, what, on what, from where, how it ended."""
    return {
        "ts": now,
        "who": actor.who,
        "claimed": actor.claimed,
        "team": team if team is not None else actor.team,
        "role": str(actor.role),
        "token_id": actor.token_id,
        "action": str(action),
        "target": target,
        "run_uid": run_uid,
        "origin": actor.origin,
        "result": result,
        "status": status,
        "detail": None if detail is None else detail[:2000],
    }
