"""Rich renderings of the client's crossrail/v1 objects, for people at a terminal (primitives in output.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from crossrail.cli.output import console, err, secs, table, when
from crossrail.core import format_money

STATUS_ROWS = 20


def candidates(
    rows: list[dict[str, Any]], *, chosen: str | None, title: str = "candidate pools", currency: str = "USD"
) -> None:
    """Every candidate pool of one placement with each estimate term, best score first."""
    t = Table(title=title)
    for col in ("", "pool", "chip", "wait", "run", "speed from", "recovery", "result in", "cost", "score", "note"):
        t.add_column(col)
    for c in rows:
        t.add_row(
            "*" if c["pool"] == chosen else "",
            c["pool"],
            c["chip_type"],
            secs(c["wait_s"]),
            secs(c["run_s"]),
            c["speed_source"],
            secs(c["recovery_s"]),
            secs(c["total_s"]),
            format_money(c["cost"], currency),
            "-" if c["score"] is None else f"{c['score']:.4g}",
            c["note"] or "",
        )
    console.print(t)
    for c in rows:  # capacity terms (spot interruptions, provisioning wait), each with where it came from
        for term in c.get("terms") or []:
            console.print(f"  {c['pool']}: {term['term']} {term['value']} ({term['source']})", highlight=False)


def placements(rows: list[dict[str, Any]]) -> None:
    """A run's placement history: each first pick, move and admission with its reason."""
    t = Table(title="placements")
    for col in ("time", "event", "attempt", "pool", "from", "objective", "why"):
        t.add_column(col)
    for p in rows:
        attempt = "-" if p["attempt"] is None else str(p["attempt"])
        t.add_row(when(p["ts"]), p["type"], attempt, p["pool"] or "-", p["from"] or "-", p["objective"], p["reason"])
    console.print(t)
    if rows:
        candidates(rows[-1]["candidates"], chosen=rows[-1]["pool"], title="candidates at the latest placement")


def workspace(obj: dict[str, Any]) -> None:
    console.print(f"created workspace [bold]{obj['path']}[/] ({len(obj['files'])} files)")
    for f in obj["files"]:
        console.print(f"  {f}")
    console.print("next: crossrail validate .crossrail/experiments/*.yaml")


def validation(obj: dict[str, Any]) -> None:
    """One line per problem and per warning, never wrapped, so each can be read (and grepped) whole."""
    from crossrail.errors import Problem

    for w in obj.get("warnings", []):
        err.print(f"warning: {w}", markup=False, soft_wrap=True)
    if obj["valid"]:
        console.print(f"[green]valid[/]: {', '.join(obj['files'])}", soft_wrap=True)
        return
    by_file: dict[str, list[dict[str, Any]]] = {}
    for p in obj["problems"]:
        by_file.setdefault(p["file"], []).append(p)
    for file, problems in by_file.items():
        noun = "problem" if len(problems) == 1 else "problems"
        err.print(f"crossrail: {len(problems)} {noun} in {file}", markup=False, soft_wrap=True)
        for p in problems:
            problem = Problem.from_dict(p)
            err.print(f"  {problem.render()}", markup=False, soft_wrap=True)


def submitted(obj: dict[str, Any]) -> None:
    run = obj["run"]
    verb = "submitted" if obj["created"] else "already submitted (idempotency key)"
    console.print(f"{verb} [bold]{run['id']}[/] → queue {run['queue']} ({run['stage']}, {run['chips']} chips)")
    for w in obj.get("warnings", []):
        err.print(f"warning: {w}", markup=False, soft_wrap=True)


def status(obj: dict[str, Any]) -> None:
    console.print(status_view(obj))


def status_view(obj: dict[str, Any]) -> Group:
    """`status` as one renderable (printed once, or redrawn in place by `status --watch`)."""
    parts: list[Any] = [agent_line(obj.get("agent"))]
    t = Table(title=f"runs by stage — {obj['workspace']}")
    states = ["queued", "admitted", "running", "suspended", "succeeded", "failed", "cancelled"]
    t.add_column("stage")
    for s in states:
        t.add_column(s, justify="right")
    for row in obj["stages"]:
        t.add_row(row["stage"], *(str(row.get(s, 0)) for s in states))
    parts.append(t)
    if obj["active"]:
        a = Table(title="active runs")
        for col in ("run", "stage", "state", "pool", "step", "loss", "last checkpoint", "chips", "priority", "age"):
            a.add_column(col)
        for r in obj["active"][:STATUS_ROWS]:
            a.add_row(
                r["id"],
                r["stage"],
                r["state"],
                r.get("pool") or "-",
                *_progress(r),
                str(r["chips"]),
                r["priority"],
                secs(r["age_s"]),
            )
        parts.append(a)
        for r in obj["active"][:STATUS_ROWS]:
            if r.get("fallback"):  # not where it waited to run: say so, and why
                parts.append(Text(f"{r['id']} runs on a fallback pool, {r['fallback']}", style="yellow"))
        more = obj.get("active_total", len(obj["active"])) - min(len(obj["active"]), STATUS_ROWS)
        if more > 0:
            parts.append(f"... and {more} more active runs (`crossrail queue` lists every pending run)")
    else:
        parts.append("no active runs")
    if obj.get("recently_failed"):
        f = Table(title="recently failed")
        for col in ("run", "stage", "reason"):
            f.add_column(col)
        for r in obj["recently_failed"]:
            f.add_row(r["id"], r["stage"], r.get("reason") or "-")
        parts.append(f)
    return Group(*parts)


def agent_line(agent: dict[str, Any] | None) -> Text:
    """The agent's liveness, red when none is alive (queued runs then wait and running ones go unwatched)."""
    if agent is None:
        return Text("")
    return Text(agent["message"], style="green" if agent["alive"] else "bold red")


def _progress(r: dict[str, Any]) -> tuple[str, str, str]:
    """A run's step, latest loss and last committed checkpoint's step, '-' for what it has not reported."""
    ckpt = r.get("last_checkpoint")
    return (
        "-" if r.get("step") is None else str(r["step"]),
        "-" if r.get("loss") is None else f"{r['loss']:.4f}",
        "-" if ckpt is None else f"step {ckpt['step']}",
    )


def finished(obj: dict[str, Any]) -> None:
    """One line for a run `submit --wait` saw end: its state, pool, steps, how long it took and where to look."""
    r, attempts = obj["run"], obj["attempts"]
    started = [a["started_at"] for a in attempts if a.get("started_at") is not None]
    ended = [a["ended_at"] for a in attempts if a.get("ended_at") is not None]
    took = secs(max(ended) - min(started)) if started and ended else "never started"
    pool = r.get("pool") or (attempts[-1]["pool"] if attempts else None) or "no pool"
    step = "no step reported" if r.get("step") is None else f"step {r['step']}"
    tries = f", {len(attempts)} attempts" if len(attempts) > 1 else ""
    why = f" ({r['reason']})" if r.get("reason") and r["state"] != "succeeded" else ""
    look = f"crossrail show {r['id']}" if r["state"] == "succeeded" else f"crossrail logs {r['id']}"
    line = f"{r['id']} {r['state']} on {pool}: {step}, {took}{tries}{why}; more: {look}"
    console.print(line, markup=False, soft_wrap=True)


def _in(start: float | None) -> str:
    return "never (no pool can hold it)" if start is None else ("now" if start <= 0 else f"in {secs(start)}")


def parent_note(parent: dict[str, Any]) -> str:
    """What an unended parent is doing: waiting for its own parent, queued with an estimate, or running."""
    if parent.get("waiting_for_parent"):
        return f"itself waiting for {parent['waiting_for_parent']}"
    if parent["state"] == "queued":
        return f"est. start {_in(parent['estimated_start_in_s'])}"
    return str(parent["state"])


def _start(pending: dict[str, Any]) -> str:
    """A pending run's estimated start; a run waiting for its parent says so, with the parent's estimate."""
    if pending.get("held"):  # its team's budget holds it until the period ends
        return str(pending["held"])
    parent = pending.get("waiting_for_parent")
    if parent is None:
        source = pending.get("run_time_source") or ""
        said = f" ({source})" if source.startswith("measured from") else ""  # estimates that learned say so
        return _in(pending.get("estimated_start_in_s")) + said
    return f"waiting for parent {parent['run']} ({parent_note(parent)})"


def queues(obj: dict[str, Any]) -> None:
    for q in obj["queues"]:
        quota = ", ".join(f"{k}={v}" for k, v in q["quota"].items()) or "no quota"
        t = Table(title=f"queue {q['name']} ({q['stage']}; {quota})")
        for col in ("#", "run", "team", "priority", "chips", "waiting", "pool", "est. start"):
            t.add_column(col)
        for p in q["pending"]:
            t.add_row(
                str(p["position"]),
                p["id"],
                p["team"] or "-",
                p["priority"],
                str(p["chips"]),
                secs(p["waiting_s"]),
                p.get("planned_pool") or "-",
                _start(p),
            )
        if q["pending"]:
            console.print(t)
            after = q["pending"][-1]["position"]
            if q["pending_total"] > after:
                console.print(f"  ... {q['pending_total'] - after:,} more pending behind #{after} (--offset {after})")
        else:
            console.print(f"queue {q['name']} ({q['stage']}): empty")


def _lineage_value(key: str, value: Any) -> str:
    if key == "parts":  # a pipeline's parts, each on its own hardware
        return "; ".join(f"{n} on {h['pool']} ({h['chips']} x {h['chip_type']})" for n, h in value.items())
    if key == "environment" and isinstance(value, dict):  # what ran where no image did
        digest = value.get("distributions_digest")
        return f"Python {value.get('python')}, {value.get('distributions')} distributions {digest}"
    if key == "not_carried" and isinstance(value, list):
        return ", ".join(value) or "nothing: all carried"
    return "-" if value is None else str(value)


def run(obj: dict[str, Any]) -> None:
    r, lin = obj["run"], obj["lineage"]
    uid = f"uid {r['uid']}  " if r.get("uid") else ""  # none for a run from before uids
    console.print(
        f"[bold]{r['id']}[/]  {uid}{r['state']}  stage {r['stage']}  queue {r['queue']}  "
        f"{r['chips']} chips  priority {r['priority']}"
    )
    if r.get("reason"):
        console.print(f"reason: {r['reason']}", markup=False, soft_wrap=True)
    if "step" in r:
        step, loss, ckpt = _progress(r)
        console.print(f"pool {r.get('pool') or '-'}  step {step}  loss {loss}  last checkpoint {ckpt}", markup=False)
    if obj.get("agent"):
        console.print(agent_line(obj["agent"]))
    t = Table(title="lineage", show_header=False)
    t.add_column("field")
    t.add_column("value")
    for k, v in lin.items():
        t.add_row(k, _lineage_value(k, v))
    console.print(t)
    if obj["attempts"]:
        a = Table(title="attempts")
        parts = any(at.get("part") for at in obj["attempts"])  # a pipeline: which part each attempt ran
        for col in ("#", *(("part",) if parts else ()), "state", "pool", "chips", "started", "ended", "exit"):
            a.add_column(col)
        for at in obj["attempts"]:
            a.add_row(
                str(at["number"]),
                *((at.get("part") or "-",) if parts else ()),
                at["state"],
                at["pool"],
                str(at["chips"]),
                when(at["started_at"]),
                when(at["ended_at"]),
                "-" if at["exit_code"] is None else str(at["exit_code"]),
            )
        console.print(a)
    if obj.get("checkpoints"):
        c = Table(title="checkpoints")
        for col in ("step", "state", "attempt", "uri"):
            c.add_column(col)
        for ck in obj["checkpoints"]:
            state = ck.get("state") or "committed"
            if ck.get("skipped_reason"):
                state += f" ({ck['skipped_reason']})"
            c.add_row(str(ck["step"]), state, "-" if ck["attempt"] is None else str(ck["attempt"]), ck["uri"])
        console.print(c)
    if obj.get("placements"):
        placements(obj["placements"])
    events({"events": obj["events"]})


def events(obj: dict[str, Any]) -> None:
    t = Table(title="events")
    for col in ("seq", "time", "type", "run", "attempt", "data"):
        t.add_column(col)
    for e in obj["events"]:
        t.add_row(*_event_cells(e))
    console.print(t)


def event_line(e: dict[str, Any]) -> str:
    """One event on one line, the columns of `events` (what `events --follow` prints as events arrive)."""
    return "  ".join(_event_cells(e))


def _event_cells(e: dict[str, Any]) -> tuple[str, ...]:
    shown = {k: v for k, v in e["data"].items() if k not in ("candidates", "explanation")}  # see placements
    data = ", ".join(f"{k}={v}" for k, v in shown.items() if v is not None)
    attempt = "-" if e["attempt"] is None else str(e["attempt"])
    return (str(e["seq"]), when(e["ts"]), e["type"], e["run"] or "-", attempt, data)


def changed(obj: dict[str, Any]) -> None:
    r = obj["run"]
    console.print(f"{r['id']} is now {r['state']}")


def report(obj: dict[str, Any]) -> None:
    currency = obj.get("currency") or "USD"  # the fleet's, where the object names it
    t = Table(title="research-cycle metrics by stage × pool")
    cols = (
        "stage",
        "pool",
        "runs",
        "ok",
        "failed",
        "cancelled",
        "success",
        "queue p50",
        "queue p95",
        "run p50",
        "tokens/s p50",
        "recoveries",
        "chip-h",
        "goodput",
        "cost",
        "cost/effective run",
    )
    for c in cols:
        t.add_column(c, justify="left" if c in ("stage", "pool") else "right")
    for g in [*obj["groups"], obj["totals"]]:
        rate = g["success_rate"]
        cper = g["cost_per_effective_run"]
        t.add_row(
            g["stage"],
            g["pool"],
            str(g["runs"]),
            str(g["succeeded"]),
            str(g["failed"]),
            str(g["cancelled"]),
            "-" if rate is None else f"{rate:.0%}",
            secs(g["queue_time"]["p50"]),
            secs(g["queue_time"]["p95"]),
            secs(g["run_time"]["p50"]),
            "-" if g.get("tokens_per_second_p50") is None else f"{g['tokens_per_second_p50']:,.0f}",
            str(g["recoveries"]),
            f"{g['chip_hours']:.2f}",
            "-" if g.get("goodput") is None else f"{g['goodput']:.0%}",
            format_money(g["cost"], currency),
            format_money(cper, currency),
        )
    console.print(t)
    fleet = obj.get("fleet") or {}
    if fleet.get("utilization") is not None:
        since = datetime.fromtimestamp(fleet["capacity_since"], UTC).strftime("%Y-%m-%d %H:%M UTC")
        console.print(
            f"fleet utilization {fleet['utilization']:.0%} of {fleet['capacity_chip_hours']:,.1f} chip-h on offer"
            f" since {since}, when the fleet's capacity was first recorded"
        )
    pending = obj.get("pending") or {}
    if pending:
        console.print(
            "waiting now: " + ", ".join(f"{s} {d['count']} runs (p50 {secs(d['p50'])})" for s, d in pending.items())
        )


def tick(t: Any) -> None:
    if t.admitted or t.ended:
        console.print(f"admitted {t.admitted}, ended {t.ended}; now {t.running} running, {t.queued} queued")


class AgentTicks:
    """What a starting agent prints after its first pass: the attempts running before it started that it
    watches again (`re-adopted N attempts: ...`) and those that ended unwatched; then each pass (`tick`)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.before = [a for a in store.active_attempts() if a.state == "running"]  # launched by an earlier agent

    def __call__(self, t: Any) -> None:
        if self.before:
            still = {(a.run_id, a.number) for a in self.store.active_attempts()}
            kept = [a for a in self.before if (a.run_id, a.number) in still]
            if kept:
                named = ", ".join(f"{a.run_id} attempt {a.number} on {a.pool}" for a in kept)
                console.print(f"re-adopted {len(kept)} attempt{'' if len(kept) == 1 else 's'}: {named}", markup=False)
            gone = [f"{a.run_id} attempt {a.number}" for a in self.before if a not in kept]
            if gone:
                console.print(f"ended while no agent watched: {', '.join(gone)}", markup=False)
            self.before = []
        tick(t)


def logs(obj: dict[str, Any]) -> None:
    if not obj["attempts"]:  # a run that ended before any attempt (its parent left nothing to start from)
        why = f": {obj['reason']}" if obj.get("reason") else ""
        console.print(f"{obj['run']} is {obj.get('state')} and has no attempt{why}", markup=False, soft_wrap=True)
    for a in obj["attempts"]:
        attempt_rule(obj["run"], a)
        text = a["log"] or "(no output)"
        console.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")


def attempt_how(a: dict[str, Any]) -> str:
    """How an attempt stands or ended: its state, exit code and signal."""
    how = a["state"] if a["exit_code"] is None else f"{a['state']}, exit {a['exit_code']}"
    return how if a.get("signal") is None else f"{how}, signal {a['signal']}"


def attempt_rule(run: str, a: dict[str, Any]) -> None:
    """The rule above an attempt's log: run, attempt (and its pipeline part), pool and how it stands."""
    part = f" part {a['part']}" if a.get("part") else ""
    console.rule(f"{run} attempt {a['attempt']}{part} on {a['pool']} ({attempt_how(a)})")


def fleet(obj: dict[str, Any]) -> None:
    table("pools", obj["pools"])
    reservations(obj)


def reservations(obj: dict[str, Any]) -> None:
    rows = [r | {"start": when(r.get("start")), "end": when(r.get("end"))} for r in obj["reservations"]]
    table("reservations", rows)


def fleet_change(obj: dict[str, Any]) -> None:
    if not obj["changes"]:
        console.print("no change")
    for change in obj["changes"]:
        console.print(change)
