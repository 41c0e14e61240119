"""Who a local attempt's command runs as, and what of the workspace it can reach (docs/auth.md).

A run's command is not the workspace owner. Where the workspace is shared (the store holds a token) or the
fleet declares `spec.isolation`, every attempt on a local pool runs under a uid of its team's own (or the
user `spec.isolation.run_as` names), with an environment of its own: it reaches its own checkpoints,
report file and home, the workspace's `data/`, `configs/` and `checkpoints/`, and the checkpoints of the
teams that share with its team (as their group); never the store, the keys or the agent's records.

A per-team uid needs no /etc/passwd entry: it is a number in a reserved range, derived from the team's name
(or pinned in `spec.isolation.uids`), and its gid is the same number. Dropping to it takes root; where the
agent is not root, runs go on as its user and the API refuses team submissions that could land on a local
pool an admin has not marked `trusted: true`.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

from crossrail.core.access import Actor
from crossrail.core.attempts import RunAs
from crossrail.errors import ForbiddenError, UsageError

PER_TEAM = "per-team"
UID_BASE = 200_000_000
"""Per-team uids lie in [UID_BASE, UID_BASE + UID_SPAN): above login users and the usual subordinate ranges."""
UID_SPAN = 100_000_000
NO_TEAM = ""
"""The runs that name no team share the uid of this name (no team name is empty)."""

PUBLIC = frozenset({"data", "configs", "checkpoints", "reports", "homes"})
"""What an isolated attempt may reach under `.crossrail/` (each entry then guards its own contents); every
other entry (the store, the ingest key, the agent's records, fleet and policy files) is the owner's alone."""


def team_uid(team: str | None, pinned: Mapping[str, int] | None = None) -> int:
    """The uid (and gid) of `team`'s attempts: pinned in the fleet, else derived from the name."""
    name = team or NO_TEAM
    if pinned and name in pinned:
        return int(pinned[name])
    digest = hashlib.sha256(f"crossrail-team:{name}".encode()).digest()
    return UID_BASE + int.from_bytes(digest[:8], "big") % UID_SPAN


def isolating(fleet: Any, store: Any) -> bool:
    """Whether attempts run apart from the owner: the fleet says so, or the workspace has tokens (others submit)."""
    return getattr(fleet.spec, "isolation", None) is not None or bool(store.has_tokens())


def run_as(fleet: Any, team: str | None) -> RunAs:
    """The identity attempts of `team`'s runs run under, with the gids of the teams that share with it."""
    spec = getattr(fleet.spec, "isolation", None)
    mode = spec.run_as if spec is not None else PER_TEAM
    if mode != PER_TEAM:
        try:
            user = pwd.getpwnam(mode)
        except KeyError:
            raise UsageError(f"spec.isolation.run_as names {mode!r}, which is no user of this machine") from None
        return RunAs(name=mode, uid=user.pw_uid, gid=user.pw_gid, groups=tuple(os.getgrouplist(mode, user.pw_gid)))
    pinned = dict(spec.uids) if spec is not None else {}
    uid = team_uid(team, pinned)
    known = {NO_TEAM, *getattr(fleet.spec, "teams", ()), *pinned} - {team or NO_TEAM}
    twin = next((t for t in sorted(known) if team_uid(t, pinned) == uid), None)
    if twin is not None:
        raise UsageError(
            f"teams {team or '(none)'} and {twin or '(none)'} would share uid {uid}; pin another one for either in the "
            "fleet's spec.isolation.uids"
        )
    try:  # a derived uid that a real account holds would hand the team that account's files
        holder = pwd.getpwuid(uid).pw_name
    except KeyError:
        holder = None
    if holder is not None and (team or NO_TEAM) not in pinned:  # a pinned uid may be an account made for it
        raise UsageError(
            f"the uid of team {team or '(none)'}, {uid}, is user {holder}'s on this machine; pin another one in "
            "the fleet's spec.isolation.uids"
        )
    sharing = getattr(fleet, "shared_with", None)  # spec.sharing: the teams whose checkpoints this one may read
    shared = sorted(team_uid(t, pinned) for t in (sharing(team) if sharing is not None else ()))
    return RunAs(name=f"team:{team or NO_TEAM}", uid=uid, gid=uid, groups=tuple(g for g in shared if g != uid))


def can_isolate() -> bool:
    """Only root can start a process under another uid."""
    return os.geteuid() == 0


def check_submission(fleet: Any, actor: Actor | None, exp: Any = None) -> None:
    """ForbiddenError when a team token's run could land on a local pool whose commands cannot be isolated
    (this process is not root) and that an admin has not marked `trusted: true`; `exp`: the experiment, to
    look only at the pools that could hold it (None: every pool). Admins and the local CLI are the owner's."""
    if actor is None or actor.team is None or actor.admin or can_isolate():
        return
    fits = None
    if exp is not None and not exp.spec.parts:
        from crossrail.scheduling.feasibility import feasible_pools

        fits = [f.pool for f in feasible_pools(exp, fleet) if f.fits]
    open_pools = [
        p.name
        for p in fleet.spec.pools
        if str(p.backend) == "local" and not getattr(p, "trusted", False) and (fits is None or p.name in fits)
    ]
    if open_pools:
        pools = f"local pool {open_pools[0]}" if len(open_pools) == 1 else f"local pools {', '.join(open_pools)}"
        raise ForbiddenError(
            f"the run could be placed on {pools}, where its command would run as this server's own OS user (uid "
            f"{os.geteuid()}, not root, so it cannot run it under a uid of team {actor.team}'s own); an admin runs "
            "the server as root, or marks the pool `trusted: true` in the fleet to accept that risk"
        )


# --- what an isolated attempt can reach -------------------------------------------------------------------


def harden(root: Path) -> None:
    """Make `.crossrail/` traversable but not listable, and every entry but PUBLIC's the owner's alone."""
    with suppress(FileNotFoundError):
        os.chmod(root, 0o711)
    for entry in root.iterdir():
        try:
            info = entry.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        if entry.name in PUBLIC:
            if stat.S_ISDIR(info.st_mode) and entry.name in ("reports", "homes"):
                os.chmod(entry, 0o711)  # each attempt's own file or home under it is named, never listed
            if stat.S_ISDIR(info.st_mode) and entry.name == "reports":
                _close_reports(entry)
            continue
        if info.st_mode & 0o077:
            os.chmod(entry, stat.S_IMODE(info.st_mode) & 0o700)


def _close_reports(reports: Path) -> None:
    """Report files written before isolation (mode 0644) become their owner's alone, like the ones made since."""
    for run in reports.iterdir():
        if not run.is_dir() or run.is_symlink():
            continue
        for report in run.iterdir():
            with suppress(FileNotFoundError):
                info = report.lstat()
                if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077:
                    os.chmod(report, stat.S_IMODE(info.st_mode) & 0o600)
