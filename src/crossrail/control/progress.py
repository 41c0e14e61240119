"""What `status` and `show` say about work in flight: each run's pool, step, loss and last checkpoint, and
whether an agent is alive (its heartbeat row in the store's `agents` table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crossrail.core import format_duration
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
