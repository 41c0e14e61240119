"""`crossrail token create|list|revoke|rotate`, `crossrail whoami` and `crossrail audit` (docs/auth.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from crossrail.cli.common import Home, Json, Server, client, guard
from crossrail.cli.output import console, emit, table, when
from crossrail.core import format_money
from crossrail.core.api import MAX_INT

token_app = typer.Typer(
    help="API tokens: each names a team and a role (viewer, submitter, admin).", no_args_is_help=True
)

TokenId = Annotated[str, typer.Argument(help="The token's id (`crossrail token list`).")]


def _when(ts: float | None) -> str | None:
    return None if ts is None else when(ts)


def _token_rows(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("id", "team", "role", "user", "state")
    return [
        {k: t.get(k) for k in keys} | {"created": _when(t.get("created_at")), "expires": _when(t.get("expires_at"))}
        for t in tokens
    ]


def _one_token(obj: dict[str, Any]) -> None:
    table("token", _token_rows([obj]))
    if obj.get("token"):
        console.print(f"token: {obj['token']}")
        console.print("shown this once: keep it secret; clients pass it as --token or CROSSRAIL_TOKEN")


@token_app.command("create")
def token_create(  # noqa: PLR0917 - typer commands take each option as a parameter
    team: Annotated[str, typer.Option("--team", help="The team the token acts for.")],
    role: Annotated[str, typer.Option("--role", help="viewer, submitter or admin.")],
    user: Annotated[
        str | None, typer.Option("--user", help="Who uses it: audit rows and events name them (default team-role).")
    ] = None,
    expires: Annotated[str | None, typer.Option("--expires", help="Valid for, e.g. 30d (default: no expiry).")] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Make a token; its secret is printed this once (only its sha256 is kept)."""

    def go() -> None:
        with client(home, server) as c:
            emit(c.token_create(team=team, role=role, user=user, expires=expires), as_json, _one_token)

    guard(go)


@token_app.command("list")
def token_list(home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Every token with its team, role, user and state (active, expired, revoked, rotated); never a secret."""

    def go() -> None:
        with client(home, server) as c:
            emit(c.tokens(), as_json, lambda obj: table("tokens", _token_rows(obj["tokens"])))

    guard(go)


@token_app.command("revoke")
def token_revoke(token_id: TokenId, home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Refuse a token from now on."""

    def go() -> None:
        with client(home, server) as c:
            emit(c.token_revoke(token_id), as_json, _one_token)

    guard(go)


@token_app.command("rotate")
def token_rotate(token_id: TokenId, home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Replace a token's secret: a new token of the same team, role and user; the old one is refused."""

    def go() -> None:
        with client(home, server) as c:
            emit(c.token_rotate(token_id), as_json, _one_token)

    guard(go)


def whoami_command(home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Who commands act as: a server's answer for the token, or locally an admin under the OS user."""

    def go() -> None:
        def show(obj: dict[str, Any]) -> None:
            team = obj.get("team") or "(every team)"
            claimed = f" (claims {obj['claimed']})" if obj.get("claimed") else ""
            console.print(f"{obj['user']}{claimed}: {obj['role']} of {team}, from {obj['origin']}")

        with client(home, server) as c:
            emit(c.whoami(), as_json, show)

    guard(go)


def audit_command(  # noqa: PLR0917 - typer commands take each option as a parameter
    since: Annotated[str | None, typer.Option("--since", help="Only the last DURATION, e.g. 2h or 7d.")] = None,
    team: Annotated[str | None, typer.Option("--team", help="Only rows of this team.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, max=MAX_INT, help="Only the newest N rows.")] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Every write and every refused request: who, team, role, action, target, from where, result, when."""

    def go() -> None:
        def show(obj: dict[str, Any]) -> None:
            keys = ("team", "role", "action", "target", "origin", "result")
            rows = [
                {"when": _when(e["ts"]), "who": e["who"] + (f" (claims {e['claimed']})" if e.get("claimed") else "")}
                | {k: e.get(k) for k in keys}
                for e in obj["entries"]
            ]
            table("audit", rows)

        with client(home, server) as c:
            emit(c.audit(since=since, team=team, limit=limit), as_json, show)

    guard(go)


def usage_command(
    since: Annotated[str | None, typer.Option("--since", help="Only the last DURATION, e.g. 30d.")] = None,
    team: Annotated[str | None, typer.Option("--team", help="Only this team.")] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Chip-hours and cost per team (and per stage and pool), from the event log."""

    def go() -> None:
        def show(obj: dict[str, Any]) -> None:
            cur = obj.get("currency") or "USD"
            rows = [{k: r[k] for k in ("team", "stage", "pool", "attempts")} | _money(r, cur) for r in obj["rows"]]
            table("usage by team, stage and pool", rows)
            table("usage by team", [{"team": t["team"]} | _money(t, cur) for t in obj["teams"]])

        with client(home, server) as c:
            emit(c.usage(since=since, team=team), as_json, show)

    guard(go)


def _money(row: dict[str, Any], currency: str) -> dict[str, str]:
    return {"chip_hours": f"{row['chip_hours']:.2f}", "cost": format_money(row["cost"], currency)}
