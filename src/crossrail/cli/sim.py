"""`crossrail simulate` and `crossrail plan`: the fleet simulator from the command line (docs/simulator.md).

Bad input is a one-line (or one-block) message and exit code 1, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from crossrail.cli.common import Home, guard
from crossrail.cli.output import print_json
from crossrail.errors import UsageError

FleetFile = Annotated[Path | None, typer.Option("--fleet", help="Fleet file (crossrail/v1 Fleet).")]
Pools = Annotated[
    str | None, typer.Option("--pools", help="Pools instead of a fleet file: name:chips[:per_host[:price]],...")
]
Workload = Annotated[
    str, typer.Option("--workload", help="FILE, gavel:TRACE, philly:CSV or synthetic:jobs=N,span=7d,...")
]
Throughputs = Annotated[Path | None, typer.Option("--throughputs", help="Gavel throughput matrix (JSON).")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed: the same seed gives the same result.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ChipMtbf = Annotated[str | None, typer.Option("--chip-mtbf", help="Per-chip MTBF, e.g. 50000h (default: none).")]
HostMtbf = Annotated[str | None, typer.Option("--host-mtbf", help="Per-host MTBF (default: none).")]
CkptCost = Annotated[str | None, typer.Option("--ckpt-cost", help="Blocking checkpoint cost, e.g. 30s.")]
CkptInterval = Annotated[
    str, typer.Option("--ckpt-interval", help="daly, young, adaptive or a fixed duration such as 30m.")
]
Restore = Annotated[str | None, typer.Option("--restore", help="Restore time after a restart, e.g. 5m.")]


def _duration(text: str | None, flag: str) -> float | None:
    from crossrail.core import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _jobs_and_fleet(  # noqa: PLR0917 (the parsed command line, passed on)
    fleet: Path | None,
    pools: str | None,
    workload: str,
    throughputs: Path | None,
    seed: int,
    time_sliced: bool = False,
    round_s: float | None = None,
) -> Any:
    from crossrail.sim.fleets import pools_fleet
    from crossrail.sim.generated import JobStream
    from crossrail.sim.workload import parse_workload
    from crossrail.spec import load_fleet

    if (fleet is None) == (pools is None):
        raise UsageError("give exactly one of --fleet FLEET.yaml or --pools name:chips,...")
    if time_sliced and fleet is not None:
        raise UsageError("--time-sliced marks the pools of --pools; in a fleet file set time_sliced: true per pool")
    jobs = parse_workload(workload, throughputs=str(throughputs) if throughputs else None, seed=seed)
    if fleet is not None:
        return jobs, load_fleet(fleet)
    shapes = jobs.shapes() if isinstance(jobs, JobStream) else jobs
    return jobs, pools_fleet(str(pools), shapes, time_sliced=time_sliced, round_s=round_s)


def _reliability(
    chip_mtbf: str | None, host_mtbf: str | None, cost: str | None, interval: str, restore: str | None
) -> Any:
    from crossrail.sim.checkpointing import CheckpointModel
    from crossrail.sim.failures import FailureSpec
    from crossrail.sim.plan import with_interval

    chip, host = _duration(chip_mtbf, "--chip-mtbf"), _duration(host_mtbf, "--host-mtbf")
    failures = FailureSpec(chip_mtbf_s=chip, host_mtbf_s=host) if chip or host else None
    spec = CheckpointModel(cost_s=_duration(cost, "--ckpt-cost"), restore_s=_duration(restore, "--restore") or 0.0)
    return failures, with_interval(spec, interval)


def simulate_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    workload: Workload,
    fleet: FleetFile = None,
    pools: Pools = None,
    throughputs: Throughputs = None,
    policy: Annotated[
        str, typer.Option("--policy", help="Scheduling policy (crossrail.scheduling.policies).")
    ] = "fifo",
    compare: Annotated[list[str] | None, typer.Option("--compare", help="Also run this policy and compare.")] = None,
    seed: Seed = 0,
    as_json: Json = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write JCT and queue-time plots to this PNG.")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Stop at this virtual time, e.g. 30d.")] = None,
    quantum: Annotated[float, typer.Option("--quantum", help="Seconds within which cycles are batched.")] = 1.0,
    round_s: Annotated[float | None, typer.Option("--round", help="Round length of round-based policies (s).")] = None,
    time_sliced: Annotated[
        bool, typer.Option("--time-sliced", help="Mark every pool of --pools time-sliced (Gavel's rounds).")
    ] = False,
    chip_mtbf: ChipMtbf = None,
    host_mtbf: HostMtbf = None,
    ckpt_cost: CkptCost = None,
    ckpt_interval: CkptInterval = "daly",
    restore: Restore = None,
    records: Annotated[
        bool, typer.Option("--records", help="With --json: add every run's record, for `crossrail compare sim:FILE`.")
    ] = False,
    store: Annotated[
        bool,
        typer.Option(
            "--store",
            help="Keep each policy's per-run records in the workspace's store and print its id, for "
            "`compare sim:ID` over --server and the dashboard's report.",
        ),
    ] = False,
    home: Home = None,
) -> None:
    """Simulate a workload on a fleet with the scheduling core the agent runs; compare policies."""

    def go() -> None:
        if records and not as_json:
            raise UsageError("--records adds per-run records to the JSON result; give --json too")
        reliability = _reliability(chip_mtbf, host_mtbf, ckpt_cost, ckpt_interval, restore)
        until_s = _duration(until, "--until")
        policies = [policy, *(compare or [])]
        args = (workload, fleet, pools, throughputs, policies, seed, as_json, plot, until_s, quantum, round_s)
        keep = _keeper(home) if store else None
        _simulate(*args, reliability, time_sliced=time_sliced, records=records, keep=keep)

    guard(go)


def _simulate(  # noqa: PLR0917 (the parsed command line, passed on)
    workload: str,
    fleet_file: Path | None,
    pools: str | None,
    throughputs: Path | None,
    policies: list[str],
    seed: int,
    as_json: bool,
    plot_path: Path | None,
    until_s: float | None,
    quantum_s: float,
    round_s: float | None,
    reliability: tuple[Any, Any],
    *,
    time_sliced: bool = False,
    records: bool = False,
    keep: Any = None,
) -> None:
    """`keep(policy, records)`, when given, stores each result's per-run records and returns their id."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from crossrail.sim import report
    from crossrail.sim.facts import run_facts
    from crossrail.sim.simulation import Simulation

    jobs, fleet = _jobs_and_fleet(fleet_file, pools, workload, throughputs, seed, time_sliced, round_s)
    failures, checkpoint = reliability
    sims = [
        Simulation(fleet, jobs, policy=p, failures=failures, checkpoint=checkpoint, seed=seed, quantum_s=quantum_s,
                   round_s=round_s, record_events=records or keep is not None)
        for p in policies
    ]  # fmt: skip
    console = Console(stderr=as_json, highlight=False)
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} jobs"))
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
        for sim in sims:
            task = bar.add_task(f"simulating {sim.policy_name}", total=sim.measuring)

            def tick(done: int, _total: int, _now: float, task: Any = task) -> None:
                bar.update(task, completed=done)

            results.append(sim.run(until_s, progress=tick))
    if plot_path is not None:
        report.plot(results, plot_path)
    rows_of: list[list[dict[str, Any]] | None] = [
        None
        if sim.events is None
        else [r.as_dict() for r in run_facts(sim.events, fleet, result.end_s, sim.executor.samples)]
        for sim, result in zip(sims, results, strict=True)
    ]
    stored = [
        keep(sim.policy_name, rows) if keep is not None and rows is not None else None
        for sim, rows in zip(sims, rows_of, strict=True)
    ]
    if as_json:
        outs: list[dict[str, Any]] = [r.to_json() for r in results]
        for one, rows, sim_id in zip(outs, rows_of, stored, strict=True):
            if records and rows is not None:
                one["records"] = rows
            if sim_id is not None:
                one["stored"] = f"sim:{sim_id}"
        out = outs[0]
        if len(results) > 1:
            out["compare"] = outs[1:]
            out["comparison"] = [report.comparison(results[0], r) for r in results[1:]]
        print_json(out)
        return
    report.print_results(results, console, fleet.spec.currency)
    for sim, sim_id in zip(sims, stored, strict=True):
        if sim_id is not None:
            console.print(f"{sim.policy_name}: stored as sim:{sim_id} (`crossrail compare --before sim:{sim_id} ...`)")
    if plot_path is not None:
        console.print(f"plots: {plot_path}")


def _keeper(home: Path | None) -> Any:
    """A function storing one result's records in the workspace at `home` (found as every command finds it),
    returning its id; the workspace is opened before the simulation runs, so a missing one fails at once."""
    from crossrail.cli.common import client
    from crossrail.control.access import local_actor

    c = client(home)
    c.service  # noqa: B018 - open the store now: no workspace is an error before minutes of simulation

    def keep(policy: str, rows: list[dict[str, Any]]) -> str:
        sim_id: str = c.service.store.add_simulation(rows, policy=policy, by=local_actor().who, now=c.clock.now())
        return sim_id

    return keep


def plan_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    workload: Annotated[
        str | None, typer.Option("--workload", help="FILE, gavel:TRACE, philly:CSV or synthetic:jobs=N,...")
    ] = None,
    pools: Annotated[
        str | None, typer.Option("--pools", help="Pool shapes and prices: name:chips:per_host:price,...")
    ] = None,
    grid: Annotated[
        str | None, typer.Option("--grid", help="Chips to try per pool: 'h100:0/256/512;tpu:512/1024'.")
    ] = None,
    target: Annotated[
        list[str] | None, typer.Option("--target", help="STAGE=DURATION queue-time target (repeat).")
    ] = None,
    rl: Annotated[
        list[str] | None,
        typer.Option("--rl", help="Size RL pipelines instead: PART=CHIP_TYPE:CHIPS:RATE for sampler, reward, learner."),
    ] = None,
    rl_fleet: Annotated[
        str | None, typer.Option("--rl-fleet", help="With --rl: chips per chip type, e.g. tpu-v5e=4096,h100=1024.")
    ] = None,
    lag: Annotated[int, typer.Option("--lag", help="With --rl: bound on policy lag in steps (0: synchronous).")] = 2,
    most: Annotated[int, typer.Option("--most", help="With --rl: the most sampler replicas per learner tried.")] = 16,
    percentile: Annotated[int, typer.Option("--percentile", help="Queue-time percentile judged: 50 or 95.")] = 95,
    move: Annotated[list[str] | None, typer.Option("--move", help="What-if: STAGE=tpu|gpu (repeat).")] = None,
    ckpt_intervals: Annotated[
        list[str] | None, typer.Option("--ckpt-intervals", help="What-if: checkpoint interval (repeat).")
    ] = None,
    throughputs: Throughputs = None,
    policy: Annotated[str, typer.Option("--policy", help="Scheduling policy.")] = "fifo",
    seed: Seed = 0,
    as_json: Json = False,
    chip_mtbf: ChipMtbf = None,
    host_mtbf: HostMtbf = None,
    ckpt_cost: CkptCost = None,
    ckpt_interval: CkptInterval = "daly",
    restore: Restore = None,
) -> None:
    """Find the cheapest fleet mix that meets per-stage queue-time targets (and try what-ifs)."""

    def go() -> None:
        from crossrail.sim import plan
        from crossrail.sim.workload import parse_workload

        if rl:
            _plan_rl(rl, rl_fleet, lag, most, as_json)
            return
        given = {"--workload": workload, "--pools": pools, "--grid": grid, "--target": target}
        missing = [flag for flag, value in given.items() if not value]
        if missing or workload is None or pools is None or grid is None or target is None:
            raise UsageError(f"plan needs {', '.join(missing)} (or --rl ... --rl-fleet ... to size RL pipelines)")
        if percentile not in (50, 95):
            raise UsageError(f"--percentile must be 50 or 95 (got {percentile})")
        template = plan.template_pools(pools)
        cands = plan.candidates(grid, template, moves=move or (), intervals=ckpt_intervals or ())
        goals = plan.targets(target)
        jobs = parse_workload(workload, throughputs=str(throughputs) if throughputs else None, seed=seed)
        if not isinstance(jobs, list):
            raise UsageError("plan sweeps a finite workload; gavel-gen never ends, use `simulate` for it")
        failures, checkpoint = _reliability(chip_mtbf, host_mtbf, ckpt_cost, ckpt_interval, restore)
        outcomes = _sweep(plan, cands, template, jobs, goals, policy, seed, percentile, failures, checkpoint)
        _print_plan(outcomes, percentile, as_json)

    guard(go)


def _plan_rl(stages_given: list[str], fleet_chips: str | None, lag: int, most: int, as_json: bool) -> None:
    """`plan --rl`: every sampler:learner ratio's steady state on the fleet, and the one to use."""
    from rich.console import Console
    from rich.table import Table

    from crossrail.sim.rl_plan import parse_fleet_chips, parse_stages, plan_ratios, recommend

    if fleet_chips is None:
        raise UsageError("--rl needs --rl-fleet CHIP_TYPE=CHIPS,... (the chips the pipelines may hold)")
    if lag < 0 or most < 1:
        raise UsageError(f"--lag must be >= 0 and --most >= 1 (got {lag} and {most})")
    rows = plan_ratios(parse_stages(stages_given), parse_fleet_chips(fleet_chips), lag, most)
    best = recommend(rows)
    if as_json:
        data = [
            {"samplers_per_learner": r.samplers, "reward_workers": r.reward_workers, "pipelines": r.pipelines,
             "samples_per_second": r.samples_per_second, "learner_idle": r.learner_idle, "chips": r.chips,
             "samples_per_chip_second": r.samples_per_chip_second}
            for r in rows
        ]  # fmt: skip
        print_json({"max_policy_lag_steps": lag, "best": best.samplers if best else None, "ratios": data})
    else:
        console = Console(highlight=False)
        mode = "synchronous" if lag == 0 else f"policy lag <= {lag}"
        t = Table(title=f"RL pipelines per sampler:learner ratio ({mode})")
        for col in ("samplers:learner", "reward", "pipelines", "samples/s", "learner idle", "samples/s/chip", "chips"):
            t.add_column(col)
        for r in rows:
            chips = ", ".join(f"{k} {v}" for k, v in r.chips.items())
            t.add_row(
                f"{r.samplers}:1", str(r.reward_workers), str(r.pipelines), f"{r.samples_per_second:,.1f}",
                f"{r.learner_idle:.0%}", f"{r.samples_per_chip_second:.3f}", chips,
            )  # fmt: skip
        console.print(t)
        if best is not None:
            console.print(
                f"recommended: {best.samplers} sampler replicas and {best.reward_workers} reward workers per learner, "
                f"{best.pipelines} pipelines: {best.samples_per_second:,.0f} samples/s, learner idle "
                f"{best.learner_idle:.0%}"
            )
    if best is None:
        if not as_json:
            Console(highlight=False).print("no ratio fits one pipeline on this fleet; give it more chips")
        raise typer.Exit(1)


def _sweep(plan: Any, cands: Any, template: Any, jobs: Any, goals: Any, *rest: Any) -> Any:
    from rich.console import Console
    from rich.progress import Progress

    policy, seed, percentile, failures, checkpoint = rest
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"simulating {len(cands)} candidate fleets", total=len(cands))
        return plan.sweep(
            cands, template, jobs, goals, policy=policy, seed=seed, percentile=percentile, failures=failures,
            checkpoint=checkpoint, done=lambda _o: bar.advance(task),
        )  # fmt: skip


def _print_plan(outcomes: Any, percentile: int, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from crossrail.sim.report import frac, money, secs

    best = next((o for o in outcomes if o.meets), None)
    if as_json:
        rows = [
            {"fleet": o.candidate.label, "cost_per_hour": o.cost_per_hour, "meets": o.meets, "why": o.why,
             "queue_s": o.queue_s, "avg_jct_s": o.result.avg_jct_s if o.result else None,
             "goodput": o.result.goodput if o.result else None}
            for o in outcomes
        ]  # fmt: skip
        best_label = best.candidate.label if best else None
        print_json({"best": best_label, "candidates": rows})
        if best is None:
            raise typer.Exit(1)
        return
    console = Console(highlight=False)
    t = Table(title=f"candidate fleets, cheapest first (queue p{percentile} targets)")
    for col in ("fleet", "cost/hour", "meets", "avg JCT", "goodput", "utilization", "why"):
        t.add_column(col)
    for o in outcomes:
        r = o.result
        t.add_row(
            o.candidate.label, money(o.cost_per_hour), "yes" if o.meets else "no",
            secs(r.avg_jct_s if r else None), frac(r.goodput if r else None), frac(r.utilization if r else None), o.why,
        )  # fmt: skip
    console.print(t)
    if best is None:
        console.print("no candidate meets every target; widen the grid")
        raise typer.Exit(1)
    console.print(f"cheapest fleet meeting the targets: {best.candidate.label} at {money(best.cost_per_hour)}/hour")
