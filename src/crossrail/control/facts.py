"""The workspace's runs as metrics' per-run facts: its event log and every metric sample its runs reported."""

from __future__ import annotations

from crossrail.metrics import RunFacts, Sample, fold_runs
from crossrail.store import Store


def workspace_runs(store: Store, now: float) -> list[RunFacts]:
    """Every run in the store, folded from its events and samples as of `now`."""
    events = store.events()
    ids = sorted({e.run for e in events if e.run is not None})
    samples = [
        Sample(s["run_id"], s["attempt"], float(s["ts"]), str(s["name"]), float(s["value"]), s["step"])
        for rid in ids
        for s in store.metric_samples(rid)
    ]
    return fold_runs(events, samples, now=now)
