"""Which runs in flight were placed on a fallback pool, and why: what `status` says beside the active runs."""

from __future__ import annotations

from collections.abc import Sequence

from crossrail.core import EventType
from crossrail.store import RunRecord, Store

FELL_BACK = "fell back after waiting"
"""How a placement's reason begins when the run took a pool other than the one it waited for (scheduling.placement:
its preferred accelerator's, or the estimates' pick, after `fallback_wait_s` in the queue)."""


def fallbacks(store: Store, runs: Sequence[RunRecord]) -> dict[str, str]:
    """By run id, for each of `runs` whose current attempt (a pipeline: any part's) was placed as a fallback: where
    it runs and why, from that attempt's `placed` event (`on h100: fell back after waiting 1m05s for a tpu pool`)."""
    ids = {r.id for r in runs}
    current = {(a.run_id, a.number) for a in store.active_attempts() if a.run_id in ids}
    out: dict[str, str] = {}
    for rid in sorted({rid for rid, _ in current}):
        said = []
        for e in store.events(run=rid, types=[str(EventType.PLACED)]):
            reason = str(e.data.get("reason") or "")
            if (rid, e.attempt) in current and FELL_BACK in reason:
                part = f"part {e.data['part']} " if e.data.get("part") else ""
                said.append(f"{part}on {e.data.get('pool')}: {reason[reason.index(FELL_BACK) :]}")
        if said:
            out[rid] = "; ".join(said)
    return out
