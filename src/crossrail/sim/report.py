"""Simulation results for people: rich tables, the comparison sentence, and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crossrail.core import format_duration, format_money
from crossrail.core.extras import require
from crossrail.sim.records import SimResult

secs = format_duration


def frac(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def money(value: float | None, currency: str = "USD") -> str:
    """An amount in `currency` (the simulated fleet's), as crossrail writes money everywhere (core.format_money)."""
    return format_money(value, currency)


SUMMARY_ROWS: tuple[tuple[str, Callable[[SimResult, str], str]], ...] = (
    # each cell from a result and the fleet's currency
    ("jobs finished", lambda r, _: f"{r.finished:,} / {r.jobs:,}"),
    ("average JCT", lambda r, _: secs(r.avg_jct_s)),
    ("p95 JCT", lambda r, _: secs(r.p95_jct_s)),
    ("makespan", lambda r, _: secs(r.makespan_s)),
    ("average queue", lambda r, _: secs(r.avg_queue_s)),
    ("goodput", lambda r, _: frac(r.goodput)),
    ("utilization", lambda r, _: frac(r.utilization)),
    ("success rate", lambda r, _: frac(r.report.totals.success_rate)),
    ("interruptions", lambda r, _: f"{r.interruptions:,}"),
    ("recovery p50", lambda r, _: secs(r.report.totals.recovery_time.p50)),
    ("cost per effective run", lambda r, cur: money(r.report.totals.cost_per_effective_run, cur)),
    ("events (per wall second)", lambda r, _: f"{r.events:,} ({r.events / max(r.wall_s, 1e-9):,.0f}/s)"),
    ("wall time", lambda r, _: f"{r.wall_s:.2f}s"),
)


def summary_table(results: Sequence[SimResult], currency: str = "USD") -> Table:
    """Each result's figures in a column; costs in `currency`, the simulated fleet's."""
    first = results[0]
    t = Table(title=f"simulation of {first.jobs:,} jobs on {first.fleet} ({first.chips:,} chips), seed {first.seed}")
    t.add_column("")
    for r in results:
        t.add_column(r.policy, justify="right")
    for label, cell in SUMMARY_ROWS:
        t.add_row(label, *(cell(r, currency) for r in results))
    return t


def stage_table(result: SimResult, currency: str = "USD") -> Table:
    t = Table(title=f"per stage ({result.policy})")
    for col in ("stage", "jobs", "done", "avg JCT", "p95 JCT", "queue p50", "queue p95", "goodput", "cost/run"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for s in result.stages:
        t.add_row(
            s.stage,
            f"{s.jobs:,}",
            f"{s.finished:,}",
            secs(s.avg_jct_s),
            secs(s.p95_jct_s),
            secs(s.queue_p50_s),
            secs(s.queue_p95_s),
            frac(s.goodput),
            money(s.cost_per_effective_run, currency),
        )
    return t


def comparison(base: SimResult, other: SimResult) -> str:
    """One sentence: how much `other` changes average JCT against `base`."""
    a, b = base.avg_jct_s, other.avg_jct_s
    if not a or b is None:
        return f"{other.policy} vs {base.policy}: average JCT not comparable (a run finished no job)"
    change = (a - b) / a
    verb = "lowers" if change > 0 else "raises"
    return (
        f"{other.policy} {verb} average JCT by {abs(change):.1%} against {base.policy} "
        f"({secs(a)} -> {secs(b)}; {a / b:.2f}x)"
    )


def print_results(results: Sequence[SimResult], console: Console, currency: str = "USD") -> None:
    console.print(summary_table(results, currency))
    for r in results:
        console.print(stage_table(r, currency))
        for note in r.notes:
            console.print(f"[yellow]note[/yellow] ({r.policy}): {note}")
    for other in results[1:]:
        console.print(comparison(results[0], other))


def plot(results: Sequence[SimResult], path: Path) -> Path:
    """JCT distribution per policy and per-stage queue p50/p95, as one PNG."""
    matplotlib = require("matplotlib", extra="sim", needed_for="the simulation's plots")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in results:
        jcts = sorted(j / 3600 for rec in r.runs.values() if (j := rec.jct_s) is not None)
        if jcts:
            left.plot(jcts, [(i + 1) / len(jcts) for i in range(len(jcts))], label=r.policy)
    left.set(xlabel="job completion time (h)", ylabel="fraction of jobs", title="JCT distribution")
    left.legend()
    stages = sorted({s.stage for r in results for s in r.stages})
    width = 0.8 / max(len(results), 1)
    for k, r in enumerate(results):
        by = r.per_stage
        p95 = [(by[s].queue_p95_s or 0) / 3600 if s in by else 0 for s in stages]
        p50 = [(by[s].queue_p50_s or 0) / 3600 if s in by else 0 for s in stages]
        xs = [i + k * width for i in range(len(stages))]
        right.bar(xs, p95, width, label=f"{r.policy} p95", alpha=0.5)
        right.bar(xs, p50, width, label=f"{r.policy} p50")
    right.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(stages))], stages, rotation=20)
    right.set(ylabel="queue time (h)", title="queue time per stage")
    right.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
