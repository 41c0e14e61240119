"""`crossrail sweep submit|show|cancel` and `crossrail fit` (docs/sweeps.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from crossrail.cli.common import Home, Json, Policy, Server, client, guard
from crossrail.cli.output import console, emit, table
from crossrail.core import format_money
from crossrail.core.api import MAX_INT

sweep_app = typer.Typer(
    help="Sweeps: one run per point of a grid of values, submitted, ranked and cancelled together.",
    no_args_is_help=True,
)

SweepId = Annotated[str, typer.Argument(help="The sweep's id (`sweep submit` prints it).")]


@sweep_app.command("submit")
def sweep_submit(  # noqa: PLR0917 - typer commands take each option as a parameter
    file: Annotated[Path, typer.Argument(help="Experiment file.")],
    grid: Annotated[
        list[str],
        typer.Option("--grid", help="A key and its values, each a YAML scalar: spec.resources.chips=1,2,4."),
    ],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a field of every point.")] = None,
    random: Annotated[
        int | None, typer.Option("--random", min=1, max=MAX_INT, help="Draw this many points without replacement.")
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_INT, help="The draw's seed (same seed, same points).")
    ] = 0,
    home: Home = None,
    server: Server = None,
    policy: Policy = None,
    as_json: Json = False,
) -> None:
    """Submit one ordinary run per point of the grid; submitting the same sweep again creates nothing."""

    def go() -> None:
        with client(home, server, policy) as c:
            result = c.sweep_submit(file, grid=grid, sets=set_ or [], random=random, seed=seed)
        emit(result, as_json, _submitted)

    guard(go)


@sweep_app.command("show")
def sweep_show(  # noqa: PLR0917 - typer commands take each option as a parameter
    sweep: SweepId,
    metric: Annotated[str, typer.Option("--metric", help="Rank by each run's last reported value of this.")] = "loss",
    better: Annotated[
        str | None, typer.Option("--better", help="lower or higher (default: the metric's own; lower if unknown).")
    ] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """The sweep's runs you may see, best first by a reported metric."""

    def go() -> None:
        with client(home, server) as c:
            emit(c.sweep_show(sweep, metric=metric, better=better), as_json, _ranked)

    guard(go)


@sweep_app.command("cancel")
def sweep_cancel(sweep: SweepId, home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Cancel every run of the sweep that has not ended."""

    def go() -> None:
        with client(home, server) as c:
            emit(c.sweep_cancel(sweep), as_json, _cancelled)

    guard(go)


def fit_command(  # noqa: PLR0917 - typer commands take each option as a parameter
    sweep: SweepId,
    x: Annotated[str, typer.Option("--x", help="The chips of each run: a path of its experiment.")] = (
        "spec.resources.chips"
    ),
    y: Annotated[str, typer.Option("--y", help="The throughput: a metric the runs report.")] = "tokens_per_second",
    target_tokens: Annotated[
        float | None, typer.Option("--target-tokens", min=0.0, help="Predict time and chip-hours to this many tokens.")
    ] = None,
    at: Annotated[
        list[int] | None,
        typer.Option("--at", min=1, max=MAX_INT, help="Predict at these chip counts (default: measured)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Draw each pool's points and fitted curves to this PNG file.")
    ] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Fit Amdahl's law and a power law to a sweep's throughput per pool, with their errors, and predict the
    time and chip-hours to a target."""

    def go() -> None:
        with client(home, server) as c:
            result = c.fit(sweep, x=x, y=y, target_tokens=target_tokens, at=at)
        if out is not None:
            from crossrail.control.reports.sweep_figure import draw_fit

            draw_fit(result, out)
            result = {**result, "figure": str(out)}
        emit(result, as_json, _fitted)

    guard(go)


# --- rendering ----------------------------------------------------------------------------------------


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600


def _submitted(obj: dict[str, Any]) -> None:
    said = "submitted" if obj["created"] else "already submitted: nothing new"
    console.print(f"sweep {obj['id']}: {len(obj['runs'])} runs {said}")
    table("runs", [{"run": r["id"], "state": r["state"]} | r["params"] for r in obj["runs"]])


def _ranked(obj: dict[str, Any]) -> None:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(obj["states"].items()))
    console.print(
        f"sweep {obj['id']} of {obj['experiment']}: {counts}; ranked by {obj['metric']} ({obj['better']} is better)"
    )
    rows = [
        {"rank": m["rank"], "run": m["run"], "state": m["state"], "pool": m["pool"]}
        | {k: _value(m["params"].get(k)) for k in obj["parameters"]}
        | {obj["metric"]: _value(m["metric"])}
        for m in obj["members"]
    ]
    table("members", rows)


def _cancelled(obj: dict[str, Any]) -> None:
    console.print(f"sweep {obj['id']}: {len(obj['cancelled'])} runs cancelled, {len(obj['ended'])} had ended")


def _fitted(obj: dict[str, Any]) -> None:
    currency = obj.get("currency") or "USD"
    for pool in obj["pools"]:
        console.print(f"pool {pool['pool']}: {len(pool['points'])} runs measured ({obj['y']} against {obj['x']})")
        rows = []
        for name, f in pool["fits"].items():
            if f is None:
                rows.append({"model": name, "parameters": pool.get("unfitted", "not fitted"), "rms": "-"})
                continue
            params = ", ".join(
                f"{k}={v:.4g}" + ("" if f["stderr"][k] is None else f" ± {f['stderr'][k]:.2g}")
                for k, v in f["params"].items()
            )
            rows.append({"model": name, "parameters": params, "rms": f"{f['rms']:.4g}"})
        table("fits", rows)
        if pool["predictions"]:
            table(
                f"to {obj['target_tokens']:g} tokens",
                [
                    {"chips": p["chips"], "model": m}
                    | {"tokens/s": _value(r["throughput"]), "hours": _value(_hours(r["time_s"]))}
                    | {"chip-h": _value(r["chip_hours"]), "cost": format_money(r["cost"], currency)}
                    for p in pool["predictions"]
                    for m, r in p.items()
                    if m != "chips"
                ],
            )
    if obj.get("figure"):
        console.print(f"figure: {obj['figure']}")
