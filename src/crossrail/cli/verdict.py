"""`crossrail compare` and `crossrail policy check`: did a change shorten the research cycle, and do the runs
bear out the placement policy (docs/metrics.md#verdicts)?

A selection (SEL) is either event filters over the workspace's runs (`stage=post_training,pool=h100,
since=2026-11-01,until=2026-12-01,team=nlp`) or a simulation result written by `simulate --json --records`
(`sim:result.json`, optionally followed by filters: `sim:result.json,stage=eval`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crossrail.cli.common import Home, Json, Policy, Server, client, guard
from crossrail.cli.output import console, print_json
from crossrail.core.api import api_object
from crossrail.errors import UsageError

if TYPE_CHECKING:
    from crossrail.metrics import Change, FleetTimeline, RunFacts

Sel = Annotated[str, typer.Option(help="Event filters (stage=...,pool=...,since=...,until=...,team=...) or sim:FILE.")]
Resamples = Annotated[int, typer.Option("--resamples", min=100, help="Bootstrap resamples.")]
Seed = Annotated[int, typer.Option("--seed", help="Bootstrap seed: the same seed gives the same intervals.")]
AllowConfounds = Annotated[
    bool,
    typer.Option(
        "--allow-confounds",
        help="Judge sides that differ in experiment, arguments, commit, dataset or framework (each is named).",
    ),
]


def compare_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    before: Annotated[str, typer.Option("--before", help="Runs before: filters or sim:FILE.")],
    after: Annotated[str, typer.Option("--after", help="Runs after: filters or sim:FILE.")],
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
    resamples: Resamples = 2000,
    seed: Seed = 0,
    allow_confounds: AllowConfounds = False,
    cost: Annotated[
        str,
        typer.Option(
            "--cost",
            help="allocated (the runs' chip-hours) or fleet (the fleet's, its idle share included): cost per run.",
        ),
    ] = "allocated",
) -> None:
    """Did the research cycle get shorter from BEFORE to AFTER? A verdict with bootstrap intervals.

    Sides that did not measure the same work (experiment digest, arguments, code commit, dataset version,
    framework) are refused (exit status 1) unless --allow-confounds; a fleet whose capacity or load differs
    between the sides is a named warning."""

    def go() -> None:
        from crossrail.metrics import compare
        from crossrail.metrics.verdict import COSTS

        if cost not in COSTS:
            raise UsageError(f"--cost must be one of {', '.join(COSTS)} (got {cost!r})")
        loaded = _Loader(home, server)
        runs_before, runs_after = loaded.runs(before, "--before"), loaded.runs(after, "--after")
        fleet = loaded.fleet() if not (before.startswith("sim:") or after.startswith("sim:")) else None
        verdict = compare(
            runs_before, runs_after, resamples=resamples, seed=seed, fleet=fleet, allow_confounds=allow_confounds,
            cost=cost,
        )  # fmt: skip
        if as_json:
            print_json(api_object("Verdict", before=before, after=after, **verdict.as_dict()))
        else:
            console.print(f"before: {before} ({len(runs_before)} runs)   after: {after} ({len(runs_after)} runs)")
            for d in verdict.confounds:
                console.print(f"[red]confound:[/] {d.sentence()}")
            for d in verdict.warnings:
                console.print(f"[yellow]warning:[/] {d.sentence()}")
            if not verdict.refused:
                _changes([verdict.cycle, *verdict.explain])
            console.print(f"[bold]{verdict.sentence}[/]")
            console.print(verdict.cycle_definition, style="dim")
            console.print(verdict.cost_basis, style="dim")
            console.print(f"method: {verdict.method}", style="dim")
        if verdict.refused:
            raise typer.Exit(1)

    guard(go)


def policy_check_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    runs: Annotated[
        str | None, typer.Option("--runs", help="Judge these runs (filters or sim:FILE) instead of the workspace's.")
    ] = None,
    home: Home = None,
    server: Server = None,
    policy: Policy = None,
    as_json: Json = False,
    resamples: Resamples = 2000,
    seed: Seed = 0,
    allow_confounds: AllowConfounds = False,
) -> None:
    """Each stage's preferred accelerator as a hypothesis: do the runs support it, contradict it, or not tell yet?

    A stage whose runs on the two accelerators did not measure the same work is not judged ("not
    comparable", each difference named) unless --allow-confounds."""

    def go() -> None:
        from crossrail.control.reports.facts import SIM
        from crossrail.metrics.hypotheses import check, describe_method
        from crossrail.spec import default_policy, load_policy

        loaded = _Loader(home, server)
        chosen = loaded.runs(runs or "", "--runs")
        if policy is not None:
            rules = load_policy(policy)
        else:  # judged against the workspace's policy; simulated runs alone, against the article's
            rules = default_policy() if (runs or "").startswith(SIM) else loaded.policy()
        findings = check(rules, chosen, resamples=resamples, seed=seed, allow_confounds=allow_confounds)
        if as_json:
            method = describe_method(resamples, seed)
            print_json(api_object("PolicyCheck", findings=[f.as_dict() for f in findings], method=method))
            return
        for f in findings:
            console.print(f"[bold]{f.stage}[/] prefers {f.preferred}: [bold]{f.status}[/]")
            console.print(f"  {f.sentence}")
            for note in f.notes:
                console.print(f"  [yellow]{note}[/]")
            if f.changes:
                _changes(list(f.changes), indent="  ", sides=(f.preferred, f.other or "other"))
        console.print(f"method: {describe_method(resamples, seed)}", style="dim")

    guard(go)


SHOWN = ("research_cycle_seconds", "experiment_queue_seconds", "success_rate", "goodput", "cost_per_effective_run",
         "tokens_per_second", "steps_per_hour")  # fmt: skip
TO_TARGET = ("time_to_target_seconds", "chip_hours_to_target", "cost_to_target", "target_met_rate")


def metrics_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    by: Annotated[str, typer.Option("--by", help="Group by: stage, pool, team, chip_type, framework, window, ...")] = (
        "stage,pool"
    ),
    select: Annotated[str, typer.Option("--select", help="Which runs: filters or sim:FILE (default: all).")] = "",
    window: Annotated[str | None, typer.Option("--window", help="Window length for --by window, e.g. 1d.")] = None,
    metric: Annotated[
        list[str] | None, typer.Option("--metric", help="A metric to show (repeat; default: a few).")
    ] = None,
    to_target: Annotated[
        bool,
        typer.Option("--to-target", help="Time, chip-hours and cost to target by pool, chip, framework, precision."),
    ] = False,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Research-cycle metrics of the runs, grouped as asked (definitions: docs/metrics.md)."""

    def go() -> None:
        from crossrail.core import parse_duration
        from crossrail.metrics import table

        dims = ("pool", "chip_type", "framework", "precision") if to_target else tuple(filter(None, by.split(",")))
        names = metric or (TO_TARGET if to_target else SHOWN)
        try:
            window_s = parse_duration(window) if window is not None else None
        except ValueError as exc:
            raise UsageError(f"--window: {exc}") from None
        runs = _Loader(home, server).runs(select, "--select")
        result = table(runs, dims, window_s=window_s, metrics=names)
        if as_json:
            print_json(api_object("MetricsTable", **result.as_dict()))
            return
        _table(result)

    guard(go)


def _table(result: Any) -> None:
    from rich.table import Table

    from crossrail.metrics import format_value

    t = Table(box=None, pad_edge=False)
    for col in (*result.by, "runs", *result.metrics):
        t.add_column(col, overflow="fold")
    for row in result.rows:
        t.add_row(*row.key.values(), str(row.runs), *(format_value(m, row.values[m]) for m in result.metrics))
    console.print(t if result.rows else "no runs")


class _Loader:
    """Runs of the workspace (read once) or of simulation results, as the selections name them."""

    def __init__(self, home: Path | None, server: str | None) -> None:
        self.home, self.server = home, server
        self._workspace: list[RunFacts] | None = None
        self._policy: Any = None
        self._fleet: FleetTimeline | None = None

    def runs(self, text: str, flag: str) -> list[RunFacts]:
        from crossrail.control.reports.facts import select_runs

        return select_runs(text, flag, self._read_workspace, self._simulation)

    def _simulation(self, name: str, flag: str) -> list[RunFacts]:
        """`sim:NAME`: a result file read here, or the id of one `simulate --store` kept in the workspace."""
        from crossrail.control.reports.facts import sim_file_runs, stored_sim_runs
        from crossrail.store.simulations import SIM_ID

        if Path(name).exists() or not SIM_ID.fullmatch(name):
            return sim_file_runs(name, flag)
        with client(self.home, self.server) as c:
            local = c.require_local(f"{flag} sim:{name} (a simulation stored in the workspace)")
            return stored_sim_runs(local.service.store)(name, flag)

    def fleet(self) -> FleetTimeline | None:
        """The workspace's fleet around its runs (capacity and load), once the workspace was read."""
        return self._fleet

    def policy(self) -> Any:
        if self._policy is None:
            with client(self.home, self.server) as c:
                self._policy = c.policy
        return self._policy

    def _read_workspace(self) -> list[RunFacts]:
        from crossrail.control.reports.facts import local_pools, pool_peaks, workspace_fleet, workspace_runs

        if self._workspace is None:
            with client(self.home, self.server) as c:
                local = c.require_local("compare, policy check and metrics (or run them on sim:FILE results)")
                fleet = local.service.fleet
                now = local.clock.now()
                self._workspace = workspace_runs(
                    local.service.store, now, virtual_pools=local_pools(fleet), peaks=pool_peaks(fleet)
                )
                self._fleet = workspace_fleet(local.service.store, self._workspace)
                self._policy = local.policy
        return self._workspace


def _changes(changes: list[Change], *, indent: str = "", sides: tuple[str, str] = ("before", "after")) -> None:
    from rich.table import Table

    from crossrail.metrics import format_value

    t = Table(box=None, pad_edge=False)
    for col in ("metric", sides[0], sides[1], "change", "95% CI", "n", "runs needed", "detectable"):
        t.add_column(col)
    for c in changes:
        ci = f"{c.ci[0] * 100:+.0f}% to {c.ci[1] * 100:+.0f}%" if c.ci else "-"
        t.add_row(
            indent + c.metric, format_value(c.metric, c.before), format_value(c.metric, c.after),
            f"{c.change * 100:+.0f}%" if c.change is not None else "-", ci,
            f"{c.n_before}/{c.n_after}", str(c.needed) if c.needed is not None and not c.significant else "-",
            f"±{c.detectable * 100:.0f}%" if c.detectable is not None else "-",
        )  # fmt: skip
    console.print(t)


policy_app = typer.Typer(help="Check the placement policy's hypotheses against measured runs.", no_args_is_help=True)
policy_app.command("check")(policy_check_command)
