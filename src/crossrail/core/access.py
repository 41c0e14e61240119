"""Who may do what: the one table of roles and actions every face checks (docs/auth.md).

A token carries a team and a role. A role allows a set of actions; an action on a run is further limited to
the token's team (`TEAM_SCOPED`), except for admins. Pure: the API and the local CLI read the same table.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    SUBMITTER = "submitter"
    ADMIN = "admin"


class Action(StrEnum):
    """What a request does; every API route names one (crossrail.api.route_access.ROUTES)."""

    READ = "read"  # runs, queue, events, logs, checkpoints, fleet, report, metrics, dashboard
    SUBMIT = "submit"  # a new run (and resubmit)
    CHANGE_RUN = "change_run"  # cancel, suspend, resume
    FLEET_WRITE = "fleet_write"  # apply, drain, undrain, reserve
    AUDIT_READ = "audit_read"
    TOKEN_ADMIN = "token_admin"  # create, list, revoke, rotate tokens
    WHOAMI = "whoami"


DOING: dict[Action, str] = {
    Action.READ: "read",
    Action.SUBMIT: "submit runs",
    Action.CHANGE_RUN: "cancel, suspend or resume runs",
    Action.FLEET_WRITE: "change the fleet",
    Action.AUDIT_READ: "read the audit log",
    Action.TOKEN_ADMIN: "manage tokens",
    Action.WHOAMI: "say who they are",
}
"""Each action as refusals say it: `viewer tokens may not manage tokens`."""

ROLE_ACTIONS: dict[Role, frozenset[Action]] = {
    Role.VIEWER: frozenset({Action.READ, Action.WHOAMI}),
    Role.SUBMITTER: frozenset({Action.READ, Action.WHOAMI, Action.SUBMIT, Action.CHANGE_RUN}),
    Role.ADMIN: frozenset(Action),
}
"""Each role's actions: viewers read, submitters also submit and change their team's runs, admins do all."""

WRITES = frozenset({Action.SUBMIT, Action.CHANGE_RUN, Action.FLEET_WRITE, Action.TOKEN_ADMIN})
"""Actions that change the store: each one is audited, allowed or not."""

TEAM_SCOPED = frozenset({Action.SUBMIT, Action.CHANGE_RUN})
"""Actions a non-admin may take only on its own team's runs (reads are scoped by the visibility rules)."""


def role(value: str) -> Role:
    """The Role named `value`, or a ValueError listing the roles."""
    try:
        return Role(value)
    except ValueError:
        raise ValueError(f"role {value!r} is not one of {', '.join(r.value for r in Role)}") from None


def allows(who: Role, action: Action) -> bool:
    return action in ROLE_ACTIONS[who]


@dataclass(frozen=True)
class Actor:
    """Who a request or command acts as: from a token (server) or the OS user (local CLI, an admin).

    `claimed` is what `$CROSSRAIL_USER` said locally, kept beside the real name and never instead of it.
    """

    who: str
    team: str | None
    role: Role
    origin: str
    token_id: str | None = None
    claimed: str | None = None

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN

    def sees_team(self, team: str | None) -> bool:
        """Whether this actor may see the specs, logs and metrics of a run of `team`."""
        return self.admin or (team is not None and team == self.team)

    def sight(self, shared_with: frozenset[str] = frozenset()) -> Sight:
        """Whose runs this actor sees and may name: every team's (admins), else its own team's and those of
        `shared_with`, the teams that share with it (Fleet.shared_with)."""
        if self.admin:
            return Sight(None)
        own = frozenset() if self.team is None else frozenset({self.team})
        return Sight(own | shared_with)

    def by(self) -> dict[str, str]:
        """What events record of who acted: `by`, and the locally claimed user apart when one was claimed."""
        return {"by": self.who} | ({"claimed_by": self.claimed} if self.claimed else {})


@dataclass(frozen=True)
class Sight:
    """The one visibility rule: the teams whose runs an actor may see and name (`None`: every team's).

    A run outside it is, to that actor, a run that does not exist: the same 404 and the same words, on
    every path that names a run (show, logs, checkpoints, events, parents at submit, place and validate,
    resubmit, compare and report selectors, the dashboard)."""

    teams: frozenset[str] | None

    def sees(self, team: str | None) -> bool:
        return self.teams is None or (team is not None and team in self.teams)


EVERYONE = Sight(None)
"""What an admin, and the workspace owner's own CLI, see: every run."""


_HIDDEN: ContextVar[list[str] | None] = ContextVar("crossrail_hidden_runs", default=None)


def note_hidden(detail: str) -> None:
    """Tell the request under way that it named a run its actor may not see: it is answered as for no run,
    and audited as a refusal saying `detail` (the API's middleware collects these, `noting_hidden`)."""
    noted = _HIDDEN.get()
    if noted is not None:
        noted.append(detail)


@contextmanager
def noting_hidden(into: list[str]) -> Iterator[list[str]]:
    """Within this context (and the worker threads it starts), `note_hidden` appends to `into`."""
    token = _HIDDEN.set(into)
    try:
        yield into
    finally:
        _HIDDEN.reset(token)
