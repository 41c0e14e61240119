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
    """The newest running agent's row and whether its heartbeat is recent; `message` says it for a person."""
    running = store.agents(running=True)
    if not running:
        last = store.agents()
        seen = f"; the last one stopped {format_duration(now - last[0]['heartbeat_at'])} ago" if last else ""
        return {"alive": False, "agent": None, "seen_s": None, "message": f"no agent running{seen}"}
    row = max(running, key=lambda a: a["heartbeat_at"])
    seen_s = max(0.0, now - row["heartbeat_at"])
    agent = {k: row[k] for k in ("id", "host", "pid", "started_at", "heartbeat_at")}
    if seen_s > stale_s:
        return {"alive": False, "agent": agent, "seen_s": seen_s, "message": f"no agent seen for {_ago(seen_s)}"}
    where = f"{row['host']} pid {row['pid']}"
    return {"alive": True, "agent": agent, "seen_s": seen_s, "message": f"agent on {where}, seen {_ago(seen_s)} ago"}


def _ago(seconds: float) -> str:
    return format_duration(round(seconds) if seconds >= 1 else seconds)
