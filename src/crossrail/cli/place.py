"""`crossrail place FILE [--explain]`: where an experiment would run if submitted now, and why.

Nothing is written: the experiment is checked like `submit` checks it, then placed behind everything
queued, by the same estimates the agent uses (docs/scheduling.md). `--explain` prints every candidate pool
with each term: queue wait, run time (and whether measured), recovery overhead, time to result, cost and
the score under the stage's objective. Exit status: 0 placed, 1 bad input or no pool can take it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from crossrail.errors import CrossrailError, SpecError


def place_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    file: Annotated[Path, typer.Argument(help="Experiment file.")],
    explain: Annotated[bool, typer.Option("--explain", help="Print every candidate pool with each term.")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a field: spec.resources.chips=4.")] = None,
    home: Annotated[
        Path | None,
        typer.Option("--home", envvar="CROSSRAIL_HOME", help="Workspace directory (default: nearest .crossrail/)."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Placement policy (default: the workspace's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the crossrail/v1 JSON object.")] = False,
) -> None:
    """Where an experiment would be placed if submitted now, and why (writes nothing)."""
    from crossrail.client import Client

    try:
        with Client(home, policy=policy) as client:
            obj = client.place(file, sets=set_ or [])
    except CrossrailError as exc:
        typer.echo(exc.render() if isinstance(exc, SpecError) else f"crossrail: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    if as_json:
        sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    else:
        render_placement(obj, explain=explain)
    if obj["pool"] is None:
        raise typer.Exit(1)


def render_placement(obj: dict[str, Any], *, explain: bool) -> None:
    from crossrail.cli import render

    start = obj["estimated_start_in_s"]
    when = "never" if start is None else ("now" if start <= 0 else f"in {render.secs(start)}")
    parent = obj.get("waiting_for_parent")
    if parent:  # it starts from the parent's latest checkpoint, so not before the parent ends
        when = f"after parent {parent['run']} ends ({render.parent_note(parent)})"
    pool = obj["pool"] or "nowhere"
    render.console.print(
        f"[bold]{obj['experiment']}[/] ({obj['stage']}, {obj['chips']} chips, objective {obj['objective']}) "
        f"-> [bold]{pool}[/], would start {when}"
    )
    render.console.print(f"why: {obj['reason']}")
    if explain:
        render.candidates(obj["candidates"], chosen=obj["pool"])
