"""`crossrail place FILE [--explain]`: where an experiment would run if submitted now, and why.

Nothing is written: the experiment is checked like `submit` checks it, then placed behind everything
queued, by the same estimates the agent uses (docs/scheduling.md). `--explain` prints every candidate pool
with each term: queue wait, run time (and whether measured), recovery overhead, time to result, cost and
the score under the stage's objective. Exit status: 0 placed, 1 bad input or no pool can take it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from crossrail.cli.common import Home, Json, Policy, Server, client, guard
from crossrail.cli.output import console, emit, secs
from crossrail.errors import Problem, SpecError


def place_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    file: Annotated[Path, typer.Argument(help="Experiment file.")],
    explain: Annotated[bool, typer.Option("--explain", help="Print every candidate pool with each term.")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a field: spec.resources.chips=4.")] = None,
    home: Home = None,
    server: Server = None,
    policy: Policy = None,
    as_json: Json = False,
) -> None:
    """Where an experiment would be placed if submitted now, and why (writes nothing)."""

    def go() -> None:
        with client(home, server, policy) as c:
            obj = c.place(file, sets=set_ or [])
            if explain:
                obj = {**obj, "hypothesis": hypothesis(c, obj["stage"])}
        emit(obj, as_json, lambda o: render_placement(o, explain=explain))
        if obj.get("problems"):  # placed all the same (a parent not yet submitted); submit refuses it
            raise SpecError([problem_of(p) for p in obj["problems"]])
        if obj["pool"] is None:
            raise typer.Exit(1)

    guard(go)


def problem_of(obj: dict[str, Any]) -> Problem:
    """A problem as `as_dict` wrote it (in a placement's `problems`)."""
    return Problem.from_dict(obj)


def hypothesis(c: Any, stage: str) -> dict[str, Any] | None:
    """What the workspace's runs say of the stage's preferred accelerator (`crossrail policy check`); None over
    a server, whose store is not read here."""
    if not c.is_local:
        return None
    from crossrail.control.reports.facts import workspace_runs
    from crossrail.metrics.hypotheses import check_stage

    wanted = c.policy.for_stage(stage)
    runs = workspace_runs(c.service.store, c.clock.now())
    return check_stage(stage, wanted.preferred_accelerator, wanted.metrics, runs).as_dict()


def render_placement(obj: dict[str, Any], *, explain: bool) -> None:
    from crossrail.cli import render

    start = obj["estimated_start_in_s"]
    when = "never" if start is None else ("now" if start <= 0 else f"in {secs(start)}")
    parent = obj.get("waiting_for_parent")
    if parent:  # it starts from the parent's latest checkpoint, so not before the parent ends
        when = f"after parent {parent['run']} ends ({render.parent_note(parent)})"
    elif any(p["path"] == "spec.parent.run" for p in obj.get("problems", [])):
        when = "once its parent is submitted and ends"
    pool = obj["pool"] or "nowhere"
    console.print(
        f"[bold]{obj['experiment']}[/] ({obj['stage']}, {obj['chips']} chips, objective {obj['objective']}) "
        f"-> [bold]{pool}[/], would start {when}"
    )
    console.print(f"why: {obj['reason']}")
    if explain:
        render.candidates(obj["candidates"], chosen=obj["pool"], currency=obj.get("currency") or "USD")
        found = obj.get("hypothesis")
        if found:  # the policy's preference for this stage, as the measured runs judge it
            console.print(f"policy check ({found['status']}): {found['sentence']}")
