"""The report's figures as PNG images, drawn with matplotlib (Agg) from metrics' per-run facts.

One function per figure; each returns a `Figure` whose `png` is None, with a note saying why, when the runs
hold nothing to draw. `crossrail report --out` and the dashboard's report page both use `figures()`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from crossrail.core.extras import require
from crossrail.metrics import METRICS, Change, RunFacts, Verdict, format_value

if TYPE_CHECKING:
    from matplotlib.axes import Axes

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.5, 100
"""Every figure is WIDTH_IN x HEIGHT_IN inches at DPI: 800 x 450 pixels."""
SIZE_PX = (int(WIDTH_IN * DPI), int(HEIGHT_IN * DPI))
BINS = 12
"""Goodput over time: the span of the runs' attempts is cut into this many windows."""


@dataclass(frozen=True)
class Figure:
    name: str
    """File stem: `<name>.png`."""
    title: str
    png: bytes | None
    note: str
    """What the figure shows, or why there is none."""


def figures(runs: Sequence[RunFacts], verdict: Verdict | None = None, compared: str = "") -> list[Figure]:
    """Every figure of the report, in order; `verdict` (with `compared`, saying what) adds the compare view."""
    out = [queue_wait_cdf(runs), cost_by_pool(runs), goodput_over_time(runs)]
    out.append(compare_view(verdict, compared) if verdict is not None else _no_compare())
    return [*out, rl_backlog(runs)]


# --- the figures -------------------------------------------------------------------------------------


def queue_wait_cdf(runs: Sequence[RunFacts]) -> Figure:
    name, title = "queue-wait-cdf", "Queue wait per stage (CDF)"
    waits: dict[str, list[float]] = {}
    for run in runs:
        if run.queue_s is not None:
            waits.setdefault(run.stage, []).append(run.queue_s / 60)
    if not waits:
        return Figure(name, title, None, "no run has started yet, so no queue wait is known")

    def draw(ax: Axes) -> None:
        for stage in sorted(waits):
            xs = sorted(waits[stage])
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step([0.0, *xs], [0.0, *ys], where="post", label=f"{stage} (n={len(xs)})")
        ax.set_xlabel("queue wait (minutes, all attempts of a run)")
        ax.set_ylabel("fraction of runs")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right")

    note = "Share of runs that waited at most x minutes in their queues, one line per stage."
    return Figure(name, title, _png(title, draw), note)


def cost_by_pool(runs: Sequence[RunFacts]) -> Figure:
    name, title = "cost-by-pool", "Cost per effective run and cost to target, by pool"
    by_pool: dict[str, list[RunFacts]] = {}
    for run in runs:
        if run.attempts:
            by_pool.setdefault(run.dimension("pool"), []).append(run)
    pools = sorted(by_pool)
    effective = [METRICS["cost_per_effective_run"].value(by_pool[p]) for p in pools]
    to_target = [METRICS["cost_to_target"].value(by_pool[p]) for p in pools]
    if all(v is None for v in effective + to_target):
        return Figure(name, title, None, "no run has succeeded or met its target yet")

    def draw(ax: Axes) -> None:
        width = 0.38
        for offset, values, label in (
            (-width / 2, effective, "per effective run"),
            (width / 2, to_target, "to target"),
        ):
            if all(v is None for v in values):
                continue
            xs = [i + offset for i, v in enumerate(values) if v is not None]
            heights = [v for v in values if v is not None]
            bars = ax.bar(xs, heights, width, label=label)
            ax.bar_label(bars, fmt="%.2f", fontsize=8)
        ax.set_xticks(range(len(pools)), pools)
        ax.set_ylabel("cost (the pools' currency)")
        ax.legend()

    note = (
        "Cost of all attempts divided by the runs that succeeded, and cost spent until each run's target was "
        "first met (runs with a target), grouped by the pool of each run's last attempt."
    )
    if all(v is None for v in to_target):
        note += " No run met a target yet (`spec.target`), so only cost per effective run is drawn."
    return Figure(name, title, _png(title, draw), note)


def goodput_over_time(runs: Sequence[RunFacts]) -> Figure:
    name, title = "goodput-over-time", "Goodput over time"
    ended = [a for run in runs for a in run.attempts if a.ended_ts is not None and a.useful_chip_s is not None]
    if not ended:
        return Figure(name, title, None, "no ended attempt reported its useful chip-seconds (useful_chip_s)")
    start = min(a.started_ts for a in ended)
    stop = max(a.ended_ts or start for a in ended)
    width_s = max((stop - start) / BINS, 1.0)
    series: dict[str, list[list[float]]] = {}
    for a in ended:
        slot = min(int(((a.ended_ts or start) - start) / width_s), BINS - 1)
        for key in ("all pools", a.pool):
            bins = series.setdefault(key, [[0.0, 0.0] for _ in range(BINS)])
            bins[slot][0] += a.useful_chip_s or 0.0
            bins[slot][1] += a.chips * max((a.ended_ts or start) - a.started_ts, 0.0)
    times = [datetime.fromtimestamp(start + (i + 0.5) * width_s, UTC).replace(tzinfo=None) for i in range(BINS)]

    def draw(ax: Axes) -> None:
        lowest = 1.0
        for key in ["all pools", *sorted(k for k in series if k != "all pools")]:
            points = [(t, u / s) for t, (u, s) in zip(times, series[key], strict=True) if s > 0]
            lowest = min([lowest, *(g for _, g in points)])
            style = {"linewidth": 2.5, "color": "black"} if key == "all pools" else {"linewidth": 1.2}
            when = np.array([t for t, _ in points], dtype="datetime64[s]")
            ax.plot(when, [g for _, g in points], marker="o", label=key, **style)
        ax.set_ylabel("goodput (useful / used chip-time)")
        ax.set_ylim(max(0.0, lowest - 0.05), 1.01)  # losses of a few percent stay visible
        ax.legend(loc="lower left")
        ax.figure.autofmt_xdate()

    note = (
        f"Useful chip-seconds over chip-seconds used, of the attempts that ended in each of {BINS} windows "
        f"of {width_s / 3600:.2g} h (UTC), over all pools and per pool."
    )
    return Figure(name, title, _png(title, draw), note)


def rl_backlog(runs: Sequence[RunFacts]) -> Figure:
    """The queues of each RL pipeline over time, as its learner reported them: samples made and not yet scored,
    scored and not yet learnt from."""
    name, title = "rl-backlog", "RL backlog: items waiting in each pipeline's queues"
    series = {
        (run.id, queue): [(s.ts, s.value) for s in run.samples if s.name == f"backlog_{queue}_length"]
        for run in runs
        for queue in ("samples", "scored")
    }
    series = {key: points for key, points in series.items() if points}
    if not series:
        return Figure(name, title, None, "no RL pipeline reported its backlog (backlog_samples_length)")

    def draw(ax: Axes) -> None:
        for (run, queue), points in sorted(series.items()):
            when = np.array([datetime.fromtimestamp(t, UTC).replace(tzinfo=None) for t, _ in points], "datetime64[s]")
            ax.plot(when, [v for _, v in points], label=f"{run} {queue}")
        ax.set_ylabel("items waiting")
        ax.legend(loc="upper left", fontsize=8)
        ax.figure.autofmt_xdate()

    note = (
        "Per RL pipeline, the samples made but not yet scored (`samples`) and scored but not yet learnt from"
        " (`scored`), as its learner reported them each step (UTC); their ages are metrics by name."
    )
    return Figure(name, title, _png(title, draw), note)


def compare_view(verdict: Verdict, compared: str = "") -> Figure:
    """One panel per metric, each in its own units: before and after, the after bar's whisker the 95% interval
    of the change applied to before; a shared axis would let one metric's scale flatten the rest."""
    name, title = "compare", "Before / after: one panel per metric, 95% intervals"
    changes = [c for c in [verdict.cycle, *verdict.explain] if c.change is not None and c.before is not None]
    if not changes:
        return Figure(name, title, None, f"no metric has values on both sides: {verdict.sentence}")

    def draw(ax: Axes, c: Change) -> None:
        from matplotlib.ticker import FuncFormatter

        before, after = c.before or 0.0, c.after or 0.0
        color = "tab:green" if c.better else "tab:red" if c.better is False else "tab:gray"
        ax.bar([0, 1], [before, after], color=["tab:blue", color], width=0.6)
        if c.ci is not None:
            lo, hi = before * (1 + c.ci[0]), before * (1 + c.ci[1])
            ax.errorbar([1], [after], yerr=[[max(0.0, after - lo)], [max(0.0, hi - after)]], color="black", capsize=4)
        ax.set_xticks([0, 1], [f"before\nn={c.n_before}", f"after\nn={c.n_after}"])
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_value(c.metric, v)))
        change = f"{(c.change or 0.0) * 100:+.0f}%"
        ax.set_title(f"{c.metric}\n{change}" + (" (significant)" if c.significant else ""), fontsize=8, color=color)
        ax.tick_params(labelsize=7)

    note = (
        f"{compared}: {verdict.sentence}. One panel per metric in its own units; green: significantly better;"
        " red: worse; gray: not significant. "
    )
    return Figure(name, title, _panels(title, changes, draw), note + verdict.method)


def _no_compare() -> Figure:
    note = "no before/after given: pass --before SEL --after SEL (as `crossrail compare` takes them) to draw it"
    return Figure("compare", "Before / after: relative change with 95% intervals", None, note)


# --- drawing -----------------------------------------------------------------------------------------


def _panels(title: str, changes: Sequence[Change], draw: Callable[[Axes, Change], None]) -> bytes:
    """One small panel per change on one 800 x 450 canvas, four to a row."""
    require("matplotlib", extra="reports", needed_for="the report's figures")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    cols = min(4, len(changes))
    rows = -(-len(changes) // cols)
    fig.suptitle(title, fontsize=10)
    for i, c in enumerate(changes):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.grid(True, axis="y", alpha=0.3)
        draw(ax, c)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _png(title: str, draw: Callable[[Axes], None]) -> bytes:
    """Draw one figure on a fresh Agg canvas and return its PNG bytes (no global pyplot state)."""
    require("matplotlib", extra="reports", needed_for="the report's figures")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    fig.suptitle(title)
    ax.grid(True, alpha=0.3)
    draw(ax)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
