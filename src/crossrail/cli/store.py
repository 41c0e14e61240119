"""`crossrail store check|backup|restore` and `crossrail events --verify`: looking after the state store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from crossrail.cli.common import Home, Json, guard
from crossrail.cli.output import print_object

store_app = typer.Typer(help="Check, back up and restore the workspace's state store.", no_args_is_help=True)


def _workspace(home: Path | None) -> Any:
    from crossrail.control.ops import workspace

    return workspace.find(home).check()


def _out(kind: str, body: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print_object(kind, body)
    else:
        typer.echo("\n".join(lines))


@store_app.command("check")
def check_command(home: Home = None, as_json: Json = False) -> None:
    """The database's integrity check (SQLite integrity_check, PostgreSQL amcheck) and the event log's hash chains."""

    def go() -> None:
        from crossrail.control.ops import storeops

        result = storeops.check(_workspace(home))
        _out("StoreCheck", result, as_json, check_lines(result))
        if damaged(result):
            raise typer.Exit(1)

    guard(go)


def damaged(result: dict[str, Any]) -> bool:
    """Problems found (an unavailable amcheck is said, not failed)."""
    events = result["events"]
    return bool(result["integrity"]["problems"]) or events is None or bool(events["problems"])


def check_lines(result: dict[str, Any]) -> list[str]:
    integrity, events = result["integrity"], result["events"]
    lines = [f"store {result['store']} ({result['engine']}, id {result['store_id']})"]
    if not integrity["checked"]:
        lines.append(f"  integrity: not checked: {integrity['note']}")
    elif integrity["problems"]:
        lines.append(f"  integrity: {len(integrity['problems'])} problems (damaged)")
        lines += [f"    {p}" for p in integrity["problems"]]
    else:
        lines.append("  integrity: ok")
    if events is not None:
        lines += chain_lines(events)
    if damaged(result):
        lines.append("DAMAGED: restore a backup with `crossrail store restore BACKUP` (docs/operations.md)")
    else:
        lines.append("ok" if result["ok"] else "ok as far as checked")
    return lines


def chain_lines(events: dict[str, Any]) -> list[str]:
    found = events["problems"]
    head = f"  events: {events['events']} in {events['chains']} hash chains"
    if not found:
        return [f"{head}: ok"]
    lines = [f"{head}: {len(found)} do not follow (rewritten around the append-only triggers)"]
    return lines + [f"    run {p['run'] or '(no run)'} seq {p['seq']}: {p['message']}" for p in found]


@store_app.command("backup")
def backup_command(
    dest: Annotated[Path, typer.Argument(help="The backup file to write.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite DEST if it exists.")] = False,
    home: Home = None,
    as_json: Json = False,
) -> None:
    """Copy the SQLite store to DEST while agents keep running (SQLite's online backup API)."""

    def go() -> None:
        from crossrail.control.ops import storeops

        r = storeops.backup(_workspace(home), dest, force=force)
        line = f"backed up {r['store']} to {r['backup']}: {r['runs']} runs, {r['events']} events ({r['bytes']} bytes)"
        _out("StoreBackup", r, as_json, [line])

    guard(go)


@store_app.command("restore")
def restore_command(
    src: Annotated[Path, typer.Argument(help="A file `crossrail store backup` wrote.")],
    other_store: Annotated[
        bool, typer.Option("--other-store", help="Restore a backup of another store as this workspace's store.")
    ] = False,
    home: Home = None,
    as_json: Json = False,
) -> None:
    """Put a backup in place of the SQLite store (no agent may run); the replaced file is kept aside."""

    def go() -> None:
        from crossrail.control.ops import storeops
        from crossrail.core import SystemClock

        r = storeops.restore(_workspace(home), src, SystemClock(), other_store=other_store)
        lines = [f"restored {r['store']} from {r['restored_from']}: {r['runs']} runs, {r['events']} events"]
        lines += [f"  the replaced file is kept as {p}" for p in r["set_aside"]]
        _out("StoreRestore", r, as_json, lines)

    guard(go)


def verify_events(client: Any, ref: str | None, as_json: bool) -> None:
    """`crossrail events --verify [--run RUN]`: recompute the hash chains; exit 1 naming each event off its chain."""
    store = client.service.store
    run = None if ref is None else client.service.get(ref).id
    check = store.verify_events(run)
    body = {"events": check.events, "chains": check.chains, "problems": [p.as_dict() for p in check.problems]}
    _out("EventVerification", body, as_json, chain_lines(body))
    if check.problems:
        raise typer.Exit(1)
