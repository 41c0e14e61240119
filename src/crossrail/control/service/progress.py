"""What `status`, `show` and the dashboard say about work in flight: each run's pool, step, loss and last
checkpoint, how far it has to go and when it gets there, what it cost so far, and whether an agent is alive
(its heartbeat row in the store's `agents` table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crossrail.core import EventType, format_duration
from crossrail.metrics.progress import Beat, finish_eta_s, step_of
from crossrail.store import RunRecord, Store

AGENT_STALE_S = 30.0  # three missed agent heartbeats (WatchConfig.heartbeat_s is 10 s)


def run_progress(
    store: Store, runs: Sequence[RunRecord], pools: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """By run id: the pool of its current attempt (or as `pools` says), its newest step and loss, and its newest
    usable checkpoint."""
    ids = [r.id for r in runs]
    if pools is None:
        pools = {a.run_id: a.pool for a in store.active_attempts()}
    losses = store.latest_samples(ids, "loss")
    newest = losses | store.latest_samples([i for i in ids if i not in losses])  # a run without loss: any metric
    checkpoints = store.latest_checkpoints(ids)
    out: dict[str, dict[str, Any]] = {}
    for rid in ids:
        loss, sample, ckpt = losses.get(rid), newest.get(rid), checkpoints.get(rid)
        out[rid] = {
            "pool": pools.get(rid),
            "step": (sample or {}).get("step"),
            "loss": None if loss is None else loss["value"],
            "last_checkpoint": None if ckpt is None else {"step": ckpt.step, "uri": ckpt.uri, "at": ckpt.committed_at},
        }
    return out


def run_finish(store: Store, runs: Sequence[RunRecord], now: float) -> dict[str, dict[str, Any]]:
    """By run id, for runs with an attempt: `steps_total`, the step its latest attempt's trainer trains to (its
    `started` report's `steps`; None when it reported none), and, while that attempt runs, `eta_s`: seconds
    until it gets there at its pace between its first and last heartbeat (metrics.progress.finish_eta_s)."""
    last = store.last_attempts(r.id for r in runs)
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        attempt = last.get(run.id)
        if attempt is None:
            continue
        running = attempt.ended_at is None
        # an ended attempt's heartbeats (thousands, for a long run) are not read: it has no ETA
        types = [str(EventType.REPORTED)] + ([str(EventType.HEARTBEAT)] if running else [])
        first: Beat | None = None
        newest: Beat | None = None
        total: int | None = None
        for e in store.events(run=run.id, types=types):
            if e.attempt != attempt.number:
                continue
            if e.type is EventType.REPORTED and e.data.get("name") == "started":
                data = e.data.get("data")
                total = step_of({"step": data.get("steps")}) if isinstance(data, dict) else None
            elif e.type is EventType.HEARTBEAT and (step := step_of(e.data)) is not None:
                first, newest = first or (e.ts, step), (e.ts, step)
        out[run.id] = {"steps_total": total, "eta_s": finish_eta_s(first, newest, total, now) if running else None}
    return out


def run_costs(store: Store, runs: Sequence[RunRecord], now: float) -> dict[str, float]:
    """By run id, for runs with an attempt: what its attempts cost up to `now`, in the fleet's currency, by the
    rule `crossrail usage` and budgets use (crossrail.metrics.usage: chips x time x the started price)."""
    from crossrail.control.budgets import USAGE_EVENTS
    from crossrail.metrics.usage import usage

    started = store.last_attempts(r.id for r in runs)
    types = [str(t) for t in USAGE_EVENTS]
    return {
        run.id: sum(row.cost for row in usage(store.events(run=run.id, types=types), now))
        for run in runs
        if run.id in started
    }


def agent_liveness(store: Store, now: float, stale_s: float = AGENT_STALE_S) -> dict[str, Any]:
    """The newest running agent's row (the leader's, where agents elect one) and whether its heartbeat is recent;
    `leader` and `standbys` where agents share a server store; `message` says it for a person."""
    running = store.agents(running=True)
    lease = store.leader()
    if lease.term == 0:  # never elected: one agent under the workspace's lock (SQLite)
        return _liveness(store, running, now, stale_s)
    leading = [a for a in running if a["id"] == lease.agent_id]
    out = _liveness(store, leading or running, now, stale_s)
    live = [a for a in running if now - a["heartbeat_at"] <= stale_s]
    standbys = [_agent(a) for a in live if a["id"] != lease.agent_id]
    leader = None
    if leading:
        leader = {**_agent(leading[0]), "term": lease.term}
    out |= {"leader": leader, "term": lease.term, "standbys": standbys}
    who = f"leader term {lease.term}" if leader else f"no leader (last term {lease.term})"
    out["message"] = f"{out['message']}; {who}, {len(standbys)} standby" + ("" if len(standbys) == 1 else "s")
    if not leading:
        out["alive"] = False
    return out


def _agent(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "host", "pid", "started_at", "heartbeat_at")}


def _liveness(store: Store, running: list[dict[str, Any]], now: float, stale_s: float) -> dict[str, Any]:
    if not running:
        last = store.agents()
        seen = f"; the last one stopped {format_duration(now - last[0]['heartbeat_at'])} ago" if last else ""
        return {"alive": False, "agent": None, "seen_s": None, "message": f"no agent running{seen}"}
    row = max(running, key=lambda a: a["heartbeat_at"])
    seen_s = max(0.0, now - row["heartbeat_at"])
    agent = _agent(row)
    if seen_s > stale_s:
        return {"alive": False, "agent": agent, "seen_s": seen_s, "message": f"no agent seen for {_ago(seen_s)}"}
    where = f"{row['host']} pid {row['pid']}"
    return {"alive": True, "agent": agent, "seen_s": seen_s, "message": f"agent on {where}, seen {_ago(seen_s)} ago"}


def _ago(seconds: float) -> str:
    return format_duration(round(seconds) if seconds >= 1 else seconds)
