"""`crossrail readiness`: the workspace scored against the article's four checks, with evidence and fixes."""

from __future__ import annotations

from typing import Annotated

import typer

from crossrail.cli.common import Home, Json, Policy, Server, client, guard
from crossrail.cli.output import console, print_json

MinScore = Annotated[
    float | None,
    typer.Option("--min-score", min=0, max=100, help="Exit with status 1 when the score (0-100) is below this."),
]


def readiness_command(
    home: Home = None, server: Server = None, policy: Policy = None, as_json: Json = False, min_score: MinScore = None
) -> None:
    """Score the workspace against the four checks to pass before mixing TPUs and GPUs (docs/readiness.md)."""
    below = False

    def go() -> None:
        nonlocal below
        from crossrail.control.reports.readiness import audit
        from crossrail.spec import load_policy

        with client(home, server) as c:
            local = c.require_local("readiness (it reads the workspace's store)")
            rules = load_policy(policy) if policy is not None else local.policy
            result = audit(local.service.store, local.service.fleet, rules, local.clock.now())
        below = min_score is not None and result.score < min_score
        if as_json:
            print_json({**result.as_dict(), "min_score": min_score, "below_min_score": below})
            return
        for number, check in enumerate(result.checks, start=1):
            console.print(f"[bold]{number}. {check.title}[/]: {check.status} ({check.score * 100:.0f}/100)")
            for line in check.evidence:
                console.print(f"   {line}", markup=False)
            for fix in check.fixes:
                console.print(f"   fix: {fix}", markup=False)
        verdict = f"readiness {result.score:.0f}/100 over {result.runs} runs"
        if min_score is not None:
            verdict += f" (below the minimum {min_score:g})" if below else f" (minimum {min_score:g} met)"
        console.print(f"[bold]{verdict}[/]")

    guard(go)
    if below:
        raise typer.Exit(1)
