"""`crossrail report --out DIR`: the workspace's research-cycle report as Markdown and HTML beside its PNG figures.

The document holds the figures (control/reports/figures.py), chip-hours and cost per team x stage x pool over a
window (metrics/usage.py), each team budget's spend this period, and, with a before and after selection, the
verdict of `crossrail compare`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crossrail.control import budgets
from crossrail.control.reports.facts import (
    SIM,
    SimulationReader,
    local_pools,
    pool_peaks,
    select_runs,
    workspace_fleet,
    workspace_runs,
)
from crossrail.control.reports.figures import Figure, figures
from crossrail.core.access import EVERYONE, Sight
from crossrail.errors import WorkspaceError
from crossrail.metrics import Difference, FleetTimeline, RunFacts, Verdict, compare, format_value
from crossrail.metrics.usage import Usage, usage
from crossrail.spec import Fleet
from crossrail.store import Store

MARKDOWN, HTML = "report.md", "report.html"


@dataclass(frozen=True)
class ReportDoc:
    fleet: str
    generated_at: float
    since: float | None
    until: float
    runs: int
    figures: list[Figure]
    usage: list[Usage]
    budgets: list[dict[str, Any]] = field(default_factory=list)
    verdict: Verdict | None = None
    compared: str = ""


def build(
    store: Store,
    fleet: Fleet,
    now: float,
    *,
    since: float | None = None,
    before: str | None = None,
    after: str | None = None,
    sight: Sight = EVERYONE,
    simulation: SimulationReader | None = None,
) -> ReportDoc:
    """The report of the store's runs as of `now`; `since` bounds the cost table's window, `before` and
    `after` (selections as `crossrail compare` takes them: filters or `sim:NAME`) add the verdict and its
    figure. The selections pick only runs of teams `sight` sees; `simulation` reads `sim:NAME` (default: a
    file, as the local CLI reads it; a server passes facts.stored_sim_runs)."""
    runs = workspace_runs(store, now, virtual_pools=local_pools(fleet), peaks=pool_peaks(fleet))
    seen = runs if sight.teams is None else [r for r in runs if sight.sees(None if r.team == "-" else r.team)]
    verdict, compared = _verdict(seen, before, after, simulation, workspace_fleet(store, runs))
    return ReportDoc(
        fleet=fleet.name,
        generated_at=now,
        since=since,
        until=now,
        runs=len(runs),
        figures=figures(runs, verdict, compared),
        usage=usage(store.events(types=[str(t) for t in budgets.USAGE_EVENTS]), now, since),
        budgets=budgets.status(store, fleet, now),
        verdict=verdict,
        compared=compared,
    )


def _verdict(
    runs: Sequence[RunFacts],
    before: str | None,
    after: str | None,
    simulation: SimulationReader | None = None,
    fleet: FleetTimeline | None = None,
) -> tuple[Verdict | None, str]:
    if before is None and after is None:
        return None, ""
    from crossrail.errors import UsageError

    if before is None or after is None:
        raise UsageError("give both --before and --after (filters or sim:FILE, as `crossrail compare` takes them)")
    sides = ((before, "--before"), (after, "--after"))
    picked = [select_runs(text, flag, lambda: runs, simulation) for text, flag in sides]
    compared = f"before {before} ({len(picked[0])} runs), after {after} ({len(picked[1])} runs)"
    simulated = before.startswith(SIM) or after.startswith(SIM)
    return compare(picked[0], picked[1], fleet=None if simulated else fleet), compared


def write(doc: ReportDoc, out: Path) -> list[Path]:
    """Write the PNGs, report.md and report.html under `out` (made if missing); the paths written.

    Checked before anything is written: `out` is a directory or a new path, and each file it would write
    there is a regular file or new (never a device, FIFO or link written through)."""
    files = [(f"{fig.name}.png", fig.png) for fig in doc.figures if fig.png is not None]
    files += [(MARKDOWN, markdown(doc).encode()), (HTML, to_html(doc).encode())]
    check_out(out, [name for name, _ in files])
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files:
            (out / name).write_bytes(data)
            written.append(out / name)
    except OSError as exc:
        raise WorkspaceError(f"cannot write the report into {out}: {exc.strerror or exc}") from None
    return written


def check_out(out: Path, names: Sequence[str] = ()) -> None:
    """WorkspaceError unless `out` is a directory or a new path and each of `names` in it is a regular file or new."""
    try:
        if out.exists() and not out.is_dir():
            raise WorkspaceError(f"{out} exists and is not a directory; --out names a directory (new or existing)")
        for name in names:
            path = out / name
            if path.is_symlink() or (path.exists() and not path.is_file()):
                raise WorkspaceError(f"{path} is not a regular file; remove it or write the report elsewhere")
    except OSError as exc:  # a symbolic link loop, a part of the path that is a file, no permission
        raise WorkspaceError(f"cannot write the report into {out}: {exc.strerror or exc}") from None


# --- Markdown ------------------------------------------------------------------------------------------


def markdown(doc: ReportDoc) -> str:
    lines = [f"# Research-cycle report: fleet {doc.fleet}", "", _heading_line(doc), ""]
    if doc.verdict is not None:
        lines += ["## Verdict", "", f"**{doc.verdict.sentence}**", "", doc.compared + ".", ""]
        lines += [doc.verdict.cycle_definition + ".", ""]
        lines += [f"- {label}: {d.sentence()}" for label, d in _differences(doc.verdict)]
        lines += ["", *_md_table(NUMBERS, _number_rows(doc.verdict)), "", doc.verdict.method, ""]
    lines += ["## Figures", ""]
    for fig in doc.figures:
        lines += [f"### {fig.title}", ""]
        lines += [f"![{fig.title}]({fig.name}.png)", "", fig.note, ""] if fig.png else [f"_Not drawn: {fig.note}._", ""]
    lines += ["## Chip-hours and cost by team, stage and pool", "", _window(doc), ""]
    lines += _md_table(["team", "stage", "pool", "attempts", "chip-hours", "cost"], _usage_rows(doc.usage))
    if doc.budgets:
        lines += ["", "## Budgets", ""]
        lines += _md_table(["team", "period", "spent", "budget", "state"], _budget_rows(doc.budgets))
    return "\n".join(lines) + "\n"


NUMBERS = ["metric", "before", "after", "change", "95% CI", "runs before/after", "runs needed", "detectable change"]
"""The verdict's numbers table: each metric in human units, with its interval and what the runs can see."""


def _number_rows(verdict: Verdict) -> list[list[str]]:
    rows = []
    for c in [verdict.cycle, *verdict.explain] if not verdict.refused else []:
        ci = f"{c.ci[0] * 100:+.0f}% to {c.ci[1] * 100:+.0f}%" if c.ci else "-"
        rows.append([
            c.metric, format_value(c.metric, c.before), format_value(c.metric, c.after),
            f"{c.change * 100:+.0f}%" if c.change is not None else "-", ci, f"{c.n_before}/{c.n_after}",
            str(c.needed) if c.needed is not None and not c.significant else "-",
            f"±{c.detectable * 100:.0f}%" if c.detectable is not None else "-",
        ])  # fmt: skip
    return rows


def _differences(verdict: Verdict) -> list[tuple[str, Difference]]:
    return [("confound", d) for d in verdict.confounds] + [("warning", d) for d in verdict.warnings]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["_None in this window._"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


# --- HTML ----------------------------------------------------------------------------------------------


def to_html(doc: ReportDoc, image_prefix: str = "") -> str:
    """The same report as one HTML page; images are `<image_prefix><name>.png`."""
    e = html.escape
    parts = [f"<h1>Research-cycle report: fleet {e(doc.fleet)}</h1>", f"<p>{e(_heading_line(doc))}</p>"]
    parts += figures_html(doc, image_prefix)
    parts += [f"<h2>Chip-hours and cost by team, stage and pool</h2><p>{e(_window(doc))}</p>"]
    parts.append(_html_table(["team", "stage", "pool", "attempts", "chip-hours", "cost"], _usage_rows(doc.usage)))
    if doc.budgets:
        parts += [
            "<h2>Budgets</h2>",
            _html_table(["team", "period", "spent", "budget", "state"], _budget_rows(doc.budgets)),
        ]
    body = "\n".join(parts)
    style = "body{font-family:sans-serif;max-width:60rem;margin:2rem auto}td,th{padding:.2rem .6rem;text-align:left}"
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>crossrail report: {e(doc.fleet)}'
        f"</title><style>{style}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def figures_html(doc: ReportDoc, image_prefix: str = "", image_query: str = "") -> list[str]:
    """The verdict and the figures as HTML fragments (the dashboard's report page shows these too); each image
    is `<image_prefix><name>.png<image_query>`."""
    e = html.escape
    parts = []
    if doc.verdict is not None:
        parts.append(f'<h2>Verdict</h2><p class="verdict"><strong>{e(doc.verdict.sentence)}</strong></p>')
        parts.append(f"<p>{e(doc.compared)}. {e(doc.verdict.cycle_definition)}.</p>")
        parts += [f'<p class="{label}">{label}: {e(d.sentence())}</p>' for label, d in _differences(doc.verdict)]
        parts.append(_html_table(NUMBERS, _number_rows(doc.verdict)))
        parts.append(f"<p>{e(doc.verdict.method)}</p>")
    parts.append("<h2>Figures</h2>")
    for fig in doc.figures:
        parts.append(f"<h3>{e(fig.title)}</h3>")
        if fig.png is not None:
            src = e(f"{image_prefix}{fig.name}.png{image_query}")
            parts.append(
                f'<figure><img src="{src}" alt="{e(fig.title)}"><figcaption>{e(fig.note)}</figcaption></figure>'
            )
        else:
            parts.append(f'<p class="missing">Not drawn: {e(fig.note)}.</p>')
    return parts


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "<p>None in this window.</p>"
    e = html.escape
    top = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{top}</tr></thead><tbody>{body}</tbody></table>"


# --- shared rows ---------------------------------------------------------------------------------------


def _heading_line(doc: ReportDoc) -> str:
    return f"{doc.runs} runs, as of {_date(doc.generated_at)}. Definitions: docs/metrics.md."


def _window(doc: ReportDoc) -> str:
    start = _date(doc.since) if doc.since is not None else "the first event"
    return f"Attempts from {start} to {_date(doc.until)}, clipped to the window; running ones count up to its end."


def _usage_rows(rows: Sequence[Usage]) -> list[list[str]]:
    return [[u.team, u.stage, u.pool, str(u.attempts), f"{u.chip_hours:,.2f}", f"{u.cost:,.2f}"] for u in rows]


def _budget_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    out = []
    for b in rows:
        period = f"{b['period']} from {_date(b['period_start'])}"
        out.append([b["team"], period, f"{b['spent']:,.2f}", f"{b['amount']:,.2f}", b["state"]])
    return out


def _date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")
